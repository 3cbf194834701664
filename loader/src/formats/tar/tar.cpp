// tar reading and writing; see tar.hpp for the formats understood and why this is hand-written.
//
// Header block layout (POSIX ustar; old GNU differs only past offset 345):
//   name 0/100  mode 100/8  uid 108/8  gid 116/8  size 124/12  mtime 136/12  chksum 148/8
//   typeflag 156  linkname 157/100  magic 257/6  version 263/2  uname 265/32  gname 297/32
//   devmajor 329/8  devminor 337/8  prefix 345/155
// Old GNU sparse ('S'): isextended at 482; each extension block has its isextended flag at 504.
#include "feedline/loader/tar.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace feedline::loader::tar {
namespace {

constexpr std::size_t kNameOff = 0, kNameLen = 100;
constexpr std::size_t kModeOff = 100, kUidOff = 108, kGidOff = 116, kIdLen = 8;
constexpr std::size_t kSizeOff = 124, kSizeLen = 12;
constexpr std::size_t kMtimeOff = 136, kMtimeLen = 12;
constexpr std::size_t kChksumOff = 148, kChksumLen = 8;
constexpr std::size_t kTypeOff = 156;
constexpr std::size_t kLinkOff = 157, kLinkLen = 100;
constexpr std::size_t kMagicOff = 257, kVersionOff = 263;
constexpr std::size_t kDevMajorOff = 329, kDevMinorOff = 337;
constexpr std::size_t kPrefixOff = 345, kPrefixLen = 155;
constexpr std::size_t kGnuSparseExtOff = 482;        // 'S' main header: more sparse blocks follow
constexpr std::size_t kSparseBlockExtOff = 504;      // sparse extension block: more follow
constexpr std::uint64_t kMaxOctal11 = 077777777777;  // largest size an 11-digit field holds

constexpr std::uint64_t pad_to_block(std::uint64_t n) noexcept { return align_up(n, kBlockSize); }

std::string_view field(const unsigned char* h, std::size_t off, std::size_t len) {
  const char* p = reinterpret_cast<const char*>(h + off);
  const void* nul = std::memchr(p, 0, len);
  return {p, nul ? static_cast<std::size_t>(static_cast<const char*>(nul) - p) : len};
}

// A numeric header field: octal digits (leading spaces allowed, ended by space or NUL; an empty
// field is 0) or GNU base-256 (first byte's high bit set; 0xff starts a negative number).
std::optional<std::uint64_t> parse_numeric(const unsigned char* f, std::size_t n) {
  if (f[0] & 0x80) {
    if (f[0] == 0xff) return std::nullopt;
    std::uint64_t v = f[0] & 0x7f;
    for (std::size_t i = 1; i < n; ++i) {
      if (v >> 56) return std::nullopt;
      v = (v << 8) | f[i];
    }
    return v;
  }
  std::size_t i = 0;
  while (i < n && f[i] == ' ') ++i;
  std::uint64_t v = 0;
  for (; i < n && f[i] != ' ' && f[i] != 0; ++i) {
    if (f[i] < '0' || f[i] > '7' || (v >> 60)) return std::nullopt;
    v = v * 8 + (f[i] - '0');
  }
  for (; i < n; ++i) {  // only terminators may follow the digits
    if (f[i] != ' ' && f[i] != 0) return std::nullopt;
  }
  return v;
}

bool all_zero(const unsigned char* p, std::size_t n) {
  return std::all_of(p, p + n, [](unsigned char c) { return c == 0; });
}

}  // namespace

std::string_view entry_type_name(EntryType type) noexcept {
  switch (type) {
    case EntryType::kRegular:
      return "regular file";
    case EntryType::kDirectory:
      return "directory";
    case EntryType::kSymlink:
      return "symlink";
    case EntryType::kHardLink:
      return "hard link";
    case EntryType::kCharDevice:
      return "character device";
    case EntryType::kBlockDevice:
      return "block device";
    case EntryType::kFifo:
      return "fifo";
    case EntryType::kSparse:
      return "sparse file";
    case EntryType::kOther:
      return "other";
  }
  return "other";
}

ReadFn memory_reader(ConstBytes archive) {
  return [archive](std::uint64_t offset, std::size_t length) -> Result<ConstBytes> {
    if (offset >= archive.size()) return ConstBytes{};
    const std::size_t at = static_cast<std::size_t>(offset);
    return archive.subspan(at, std::min(length, archive.size() - at));
  };
}

// ---- Reader ---------------------------------------------------------------------------------

Reader::Reader(std::string object, std::uint64_t object_size, ReadFn read)
    : object_(std::move(object)), object_size_(object_size), read_(std::move(read)) {}

Error Reader::corrupt(std::uint64_t offset, std::string message) const {
  return Error(Errc::kCorrupt, std::move(message)).with_object(object_).with_offset(offset);
}

Error Reader::truncated(std::uint64_t offset, std::uint64_t need, std::uint64_t have,
                        std::string_view what) const {
  return corrupt(offset,
                 fmt::format("truncated tar: {} at offset {} needs {} bytes, object ends at {}",
                             what, offset, need, have))
      .with_hint("the archive was cut short; recreate or re-copy it");
}

Result<ConstBytes> Reader::read_exact(std::uint64_t offset, std::uint64_t length,
                                      std::string_view what) {
  if (offset > object_size_ || object_size_ - offset < length) {
    return fail(truncated(offset, length, object_size_, what));
  }
  FEEDLINE_ASSIGN_OR_RETURN(ConstBytes got, read_(offset, static_cast<std::size_t>(length)));
  if (got.size() < length) return fail(truncated(offset, length, offset + got.size(), what));
  return got.first(static_cast<std::size_t>(length));
}

Result<void> Reader::read_block(std::uint64_t offset, std::string_view what) {
  FEEDLINE_ASSIGN_OR_RETURN(ConstBytes b, read_exact(offset, kBlockSize, what));
  std::memcpy(header_.data(), b.data(), kBlockSize);
  return {};
}

Result<bool> Reader::next(Entry& out) {
  if (error_) return fail(*error_);
  if (end_ != End::kNotYet) return false;
  auto r = next_impl(out);
  if (!r) error_ = r.error();
  return r;
}

Result<void> Reader::parse_pax(std::uint64_t offset, ConstBytes records, bool global) {
  Overrides& into = global ? global_ : local_;
  const std::string_view text(reinterpret_cast<const char*>(records.data()), records.size());
  std::size_t pos = 0;
  while (pos < text.size()) {
    if (text[pos] == '\0') break;  // some writers pad the record area with NULs
    auto bad = [&](std::string_view why) {
      return fail(corrupt(offset + pos, fmt::format("corrupt tar: bad pax record at offset {}: {}",
                                                    offset + pos, why)));
    };
    std::uint64_t len = 0;
    std::size_t p = pos;
    while (p < text.size() && text[p] >= '0' && text[p] <= '9' && len < kMaxExtendedHeader) {
      len = len * 10 + static_cast<std::uint64_t>(text[p] - '0');
      ++p;
    }
    if (p == pos || p >= text.size() || text[p] != ' ') return bad("no length");
    if (len <= p - pos + 1 || len > text.size() - pos) return bad("length out of range");
    if (text[pos + len - 1] != '\n') return bad("record does not end in a newline");
    const std::string_view body = text.substr(p + 1, pos + len - 1 - (p + 1));
    const std::size_t eq = body.find('=');
    if (eq == std::string_view::npos) return bad("no '=' in the record");
    const std::string_view key = body.substr(0, eq), value = body.substr(eq + 1);
    if (key == "path") {
      into.has_path = !value.empty();
      into.path.assign(value);
    } else if (key == "linkpath") {
      into.has_linkpath = !value.empty();
      into.linkpath.assign(value);
    } else if (key == "size") {
      std::uint64_t v = 0;
      for (char c : value) {
        if (c < '0' || c > '9' || v > kMaxMemberSize / 10) return bad("size is not a number");
        v = v * 10 + static_cast<std::uint64_t>(c - '0');
      }
      if (v > kMaxMemberSize) return bad("size too large");
      into.has_size = !value.empty();
      into.size = v;
    } else if (key.starts_with("GNU.sparse.")) {
      into.sparse = true;
    }
    pos += static_cast<std::size_t>(len);
  }
  return {};
}

Result<bool> Reader::next_impl(Entry& out) {
  std::uint64_t start = offset_;  // the entry's first header block
  bool pending = false;           // extended headers seen that await their entry
  for (;;) {
    if (offset_ >= object_size_) {
      if (pending) {
        return fail(corrupt(start, fmt::format("truncated tar: extended header at offset {} is not "
                                               "followed by a member, object ends at {}",
                                               start, object_size_)));
      }
      end_ = End::kEofNoMarker;
      offset_ = object_size_;
      return false;
    }
    FEEDLINE_TRY(read_block(offset_, "header"));
    const unsigned char* h = header_.data();

    if (all_zero(h, kBlockSize)) {
      if (pending) {
        return fail(corrupt(offset_, fmt::format("corrupt tar: extended header at offset {} is "
                                                 "followed by a zero block at offset {}",
                                                 start, offset_)));
      }
      const std::uint64_t second = offset_ + kBlockSize;
      if (second >= object_size_) {
        end_ = End::kZeroBlockThenEof;
      } else if (object_size_ - second < kBlockSize) {
        end_ = End::kLoneZeroBlock;
      } else {
        FEEDLINE_ASSIGN_OR_RETURN(ConstBytes b, read_exact(second, kBlockSize, "header"));
        end_ = all_zero(reinterpret_cast<const unsigned char*>(b.data()), kBlockSize)
                   ? End::kTwoZeroBlocks
                   : End::kLoneZeroBlock;
      }
      return false;
    }

    // Checksum: the sum of the header bytes with the checksum field read as eight spaces.
    const auto stored = parse_numeric(h + kChksumOff, kChksumLen);
    std::uint64_t usum = 8 * std::uint64_t{' '};
    std::int64_t ssum = 8 * std::int64_t{' '};
    for (std::size_t i = 0; i < kBlockSize; ++i) {
      if (i >= kChksumOff && i < kChksumOff + kChksumLen) continue;
      usum += h[i];
      ssum += static_cast<signed char>(h[i]);
    }
    if (!stored || (*stored != usum && static_cast<std::int64_t>(*stored) != ssum)) {
      const std::string detail = stored
                                     ? fmt::format("stored {}, computed {}", *stored, usum)
                                     : fmt::format("unreadable checksum field, computed {}", usum);
      if (offset_ == 0) {
        return fail(
            corrupt(0,
                    fmt::format("not a tar archive: bad header checksum at offset 0 ({})", detail))
                .with_hint("is this object a tar file?"));
      }
      return fail(corrupt(offset_, fmt::format("corrupt tar: bad header checksum at offset {} ({})",
                                               offset_, detail))
                      .with_hint("the archive is damaged or not a tar file"));
    }

    const char typeflag = static_cast<char>(h[kTypeOff]);
    const auto size_field = parse_numeric(h + kSizeOff, kSizeLen);
    if (!size_field || *size_field > kMaxMemberSize) {
      return fail(corrupt(
          offset_, fmt::format("corrupt tar: bad size field in the header at offset {}", offset_)));
    }

    // Extended headers: read their data, remember what they say, go on to the next block.
    if (typeflag == 'L' || typeflag == 'K' || typeflag == 'x' || typeflag == 'g') {
      const std::string_view what = typeflag == 'L'   ? "GNU long name"
                                    : typeflag == 'K' ? "GNU long link name"
                                                      : "pax extended header";
      if (*size_field > kMaxExtendedHeader) {
        return fail(corrupt(offset_, fmt::format("corrupt tar: {} at offset {} is {} bytes, more "
                                                 "than the {} feedline accepts",
                                                 what, offset_, *size_field, kMaxExtendedHeader)));
      }
      if (typeflag != 'g' && !pending) start = offset_;
      const std::uint64_t data_at = offset_ + kBlockSize;
      FEEDLINE_ASSIGN_OR_RETURN(ConstBytes data, read_exact(data_at, *size_field, what));
      if (typeflag == 'L' || typeflag == 'K') {
        const std::string_view s(reinterpret_cast<const char*>(data.data()), data.size());
        std::string& dst = typeflag == 'L' ? long_name_ : long_link_;
        dst.assign(s.substr(0, s.find('\0')));
        (typeflag == 'L' ? has_long_name_ : has_long_link_) = true;
      } else {
        FEEDLINE_TRY(parse_pax(data_at, data, typeflag == 'g'));
      }
      offset_ = data_at + pad_to_block(*size_field);
      if (typeflag == 'g') {
        if (!pending) start = offset_;
      } else {
        pending = true;
      }
      continue;
    }

    // A member header.
    out.header_offset = start;
    out.typeflag = typeflag;
    if (local_.has_path) {
      out.name.assign(local_.path);
    } else if (has_long_name_) {
      out.name.assign(long_name_);
    } else if (global_.has_path) {
      out.name.assign(global_.path);
    } else {
      out.name.clear();
      const std::string_view prefix = field(h, kPrefixOff, kPrefixLen);
      if (std::memcmp(h + kMagicOff, "ustar\0", 6) == 0 && !prefix.empty()) {
        out.name.append(prefix);
        out.name.push_back('/');
      }
      out.name.append(field(h, kNameOff, kNameLen));
    }
    if (local_.has_linkpath) {
      out.link_name.assign(local_.linkpath);
    } else if (has_long_link_) {
      out.link_name.assign(long_link_);
    } else if (global_.has_linkpath) {
      out.link_name.assign(global_.linkpath);
    } else {
      out.link_name.assign(field(h, kLinkOff, kLinkLen));
    }
    std::uint64_t size = local_.has_size    ? local_.size
                         : global_.has_size ? global_.size
                                            : *size_field;
    const bool sparse = local_.sparse || global_.sparse;
    local_.clear();
    has_long_name_ = has_long_link_ = false;

    bool has_data = true;  // tarfile's rule: links, directories, devices and fifos have none
    switch (typeflag) {
      case '0':
      case '\0':
      case '7':
        out.type = out.name.ends_with('/') ? EntryType::kDirectory
                   : sparse                ? EntryType::kSparse
                                           : EntryType::kRegular;
        if (out.type == EntryType::kDirectory) has_data = false;
        break;
      case '1':
        out.type = EntryType::kHardLink;
        has_data = false;
        break;
      case '2':
        out.type = EntryType::kSymlink;
        has_data = false;
        break;
      case '3':
        out.type = EntryType::kCharDevice;
        has_data = false;
        break;
      case '4':
        out.type = EntryType::kBlockDevice;
        has_data = false;
        break;
      case '5':
        out.type = EntryType::kDirectory;
        has_data = false;
        break;
      case '6':
        out.type = EntryType::kFifo;
        has_data = false;
        break;
      case 'D':
        out.type = EntryType::kDirectory;
        break;  // GNU dumpdir: a listing as data
      case 'S':
        out.type = EntryType::kSparse;
        break;
      default:
        out.type = EntryType::kOther;
        break;
    }
    if (!has_data) size = 0;

    std::uint64_t data_at = offset_ + kBlockSize;
    if (typeflag == 'S' && h[kGnuSparseExtOff] != 0) {  // old GNU sparse: extension blocks
      for (;;) {
        FEEDLINE_ASSIGN_OR_RETURN(ConstBytes b, read_exact(data_at, kBlockSize, "sparse header"));
        data_at += kBlockSize;
        if (std::to_integer<unsigned>(b[kSparseBlockExtOff]) == 0) break;
      }
    }
    out.data_offset = data_at;
    out.size = size;
    if (data_at > object_size_ || object_size_ - data_at < size) {
      return fail(
          corrupt(out.header_offset,
                  fmt::format("truncated tar: member '{}' at offset {} has {} bytes of data "
                              "from offset {}, object ends at {}",
                              out.name, out.header_offset, size, data_at, object_size_))
              .with_hint("the archive was cut short; recreate or re-copy it"));
    }
    offset_ = data_at + pad_to_block(size);
    return true;
  }
}

Result<std::vector<Entry>> list_entries(ConstBytes archive, std::string_view object_name) {
  Reader reader(std::string(object_name), archive.size(), memory_reader(archive));
  std::vector<Entry> out;
  Entry e;
  for (;;) {
    FEEDLINE_ASSIGN_OR_RETURN(bool more, reader.next(e));
    if (!more) return out;
    out.push_back(e);
  }
}

// ---- Writer ---------------------------------------------------------------------------------

namespace {

constexpr std::size_t kStageBytes = 64 * 1024;

using Block = std::array<unsigned char, kBlockSize>;

void put_str(Block& h, std::size_t off, std::size_t len, std::string_view s) {
  std::memcpy(h.data() + off, s.data(), std::min(len, s.size()));
}

// len-1 zero-padded octal digits and a NUL; the value must fit.
void put_octal(Block& h, std::size_t off, std::size_t len, std::uint64_t v) {
  for (std::size_t i = len - 1; i-- > 0;) {
    h[off + i] = static_cast<unsigned char>('0' + (v & 7));
    v >>= 3;
  }
  h[off + len - 1] = 0;
}

void put_base256(Block& h, std::size_t off, std::size_t len, std::uint64_t v) {
  for (std::size_t i = len; i-- > 1;) {
    h[off + i] = static_cast<unsigned char>(v & 0xff);
    v >>= 8;
  }
  h[off] = 0x80;
}

Block make_header(std::string_view name, std::uint64_t size, char typeflag) {
  Block h{};
  put_str(h, kNameOff, kNameLen, name);
  put_octal(h, kModeOff, kIdLen, 0644);
  put_octal(h, kUidOff, kIdLen, 0);
  put_octal(h, kGidOff, kIdLen, 0);
  if (size <= kMaxOctal11) {
    put_octal(h, kSizeOff, kSizeLen, size);
  } else {
    put_base256(h, kSizeOff, kSizeLen, size);
  }
  put_octal(h, kMtimeOff, kMtimeLen, 0);
  h[kTypeOff] = static_cast<unsigned char>(typeflag);
  std::memcpy(h.data() + kMagicOff, "ustar\0", 6);
  std::memcpy(h.data() + kVersionOff, "00", 2);
  put_octal(h, kDevMajorOff, kIdLen, 0);
  put_octal(h, kDevMinorOff, kIdLen, 0);
  std::memset(h.data() + kChksumOff, ' ', kChksumLen);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  put_octal(h, kChksumOff, 7, sum);  // six digits and a NUL; the eighth byte stays a space
  return h;
}

// "LEN key=value\n", where LEN counts the whole record including its own digits.
void append_pax_record(std::string& out, std::string_view key, std::string_view value) {
  const std::size_t body = key.size() + value.size() + 3;  // ' ', '=', '\n'
  std::size_t len = body + 1;
  while (body + fmt::formatted_size("{}", len) != len) len = body + fmt::formatted_size("{}", len);
  fmt::format_to(std::back_inserter(out), "{} {}={}\n", len, key, value);
}

ConstBytes as_bytes(const Block& b) { return std::as_bytes(std::span(b)); }

}  // namespace

Writer::Writer(storage::ObjectWriter& out, std::string object_name)
    : out_(out), object_(std::move(object_name)) {
  staged_.reserve(kStageBytes + kBlockSize);
}

Result<void> Writer::flush() {
  if (staged_.empty()) return {};
  auto r = out_.append(staged_);
  staged_.clear();
  return r;
}

Result<void> Writer::stage(ConstBytes bytes) {
  staged_.insert(staged_.end(), bytes.begin(), bytes.end());
  offset_ += bytes.size();
  if (staged_.size() >= kStageBytes) return flush();
  return {};
}

Result<void> Writer::stage_zeros(std::size_t n) {
  staged_.resize(staged_.size() + n, std::byte{0});
  offset_ += n;
  if (staged_.size() >= kStageBytes) return flush();
  return {};
}

Result<Placement> Writer::add(std::string_view name, ConstBytes data) {
  if (finished_) {
    return fail(Error(Errc::kInternal, "tar writer: add() after finish()").with_object(object_));
  }
  if (name.empty() || name.find('\0') != std::string_view::npos) {
    return fail(
        Error(Errc::kInvalidArgument, "tar member names must be non-empty and contain no NUL")
            .with_object(object_));
  }
  Placement p;
  p.header_offset = offset_;
  p.size = data.size();
  const bool long_name = name.size() > kNameLen;
  const bool big = data.size() > kMaxOctal11;
  if (long_name || big) {
    std::string records;
    if (long_name) append_pax_record(records, "path", name);
    if (big) append_pax_record(records, "size", fmt::format("{}", data.size()));
    FEEDLINE_TRY(stage(as_bytes(make_header("././@PaxHeader", records.size(), 'x'))));
    FEEDLINE_TRY(stage(std::as_bytes(std::span(records))));
    FEEDLINE_TRY(stage_zeros(pad_to_block(records.size()) - records.size()));
  }
  FEEDLINE_TRY(stage(as_bytes(make_header(name.substr(0, kNameLen), data.size(), '0'))));
  p.data_offset = offset_;
  if (data.size() >= kStageBytes) {
    FEEDLINE_TRY(flush());
    FEEDLINE_TRY(out_.append(data));
    offset_ += data.size();
  } else {
    FEEDLINE_TRY(stage(data));
  }
  FEEDLINE_TRY(stage_zeros(pad_to_block(data.size()) - data.size()));
  return p;
}

Result<void> Writer::finish() {
  if (finished_) return {};
  FEEDLINE_TRY(stage_zeros(2 * kBlockSize));
  finished_ = true;
  return flush();
}

}  // namespace feedline::loader::tar
