// TFRecord framing and the tfrecord2idx index (see tfrecord.hpp). The CRCs come from ISA-L
// through crc32c.hpp.
#include "feedline/loader/tfrecord.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>

#include "../crc32c.hpp"

namespace feedline::loader {
namespace {

std::uint64_t load_le64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint64_t>(p[i]);
  return v;
}

std::uint32_t load_le32(const std::byte* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint32_t>(p[i]);
  return v;
}

void store_le(std::uint64_t v, int bytes, std::vector<std::byte>& out) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xFF));
}

std::uint32_t masked_crc(ConstBytes data) { return tfrecord_mask(detail::crc32c(data)); }

Error record_error(std::string message, std::uint64_t offset, std::string_view object) {
  return Error(Errc::kCorrupt, std::move(message))
      .with_object(std::string(object))
      .with_offset(offset)
      .with_hint(
          "a damaged or cut-short TFRecord file: on_error = skip leaves its bad records out");
}

// The length field at p, its CRC checked.
Result<std::uint64_t> checked_length(const std::byte* p, std::uint64_t offset,
                                     std::string_view object) {
  const std::uint32_t stored = load_le32(p + 8);
  const std::uint32_t computed = masked_crc(ConstBytes(p, 8));
  if (stored != computed) {
    return fail(record_error(
        fmt::format(
            "TFRecord record at offset {}: the CRC32C of its length field is wrong "
            "(stored {:#010x}, computed {:#010x}): a damaged record, or not a TFRecord file",
            offset, stored, computed),
        offset, object));
  }
  return load_le64(p);
}

}  // namespace

bool tfrecord_available() noexcept { return detail::crc_available(); }

Error tfrecord_unavailable() {
  return Error(Errc::kUnsupported, "built without ISA-L: TFRecord CRC32C needs it")
      .with_hint(
          "install libisal-dev and rebuild with -DFEEDLINE_WITH_ISAL=ON, or use another "
          "format");
}

Result<void> append_tfrecord(ConstBytes data, std::vector<std::byte>& out) {
  if (!tfrecord_available()) return fail(tfrecord_unavailable());
  const std::size_t start = out.size();
  out.reserve(start + data.size() + kTfRecordFramingBytes);
  store_le(data.size(), 8, out);
  store_le(masked_crc(ConstBytes(out.data() + start, 8)), 4, out);
  out.insert(out.end(), data.begin(), data.end());
  store_le(masked_crc(data), 4, out);
  return {};
}

Result<std::uint64_t> parse_tfrecord_header(ConstBytes header, std::uint64_t offset,
                                            std::uint64_t file_bytes, std::string_view object) {
  if (!tfrecord_available()) return fail(tfrecord_unavailable());
  if (header.size() < kTfRecordHeaderBytes || offset > file_bytes ||
      file_bytes - offset < kTfRecordHeaderBytes) {
    return fail(record_error(
        fmt::format("the file ends inside a TFRecord record header at offset {} (truncated?)",
                    offset),
        offset, object));
  }
  FEEDLINE_ASSIGN_OR_RETURN(std::uint64_t n, checked_length(header.data(), offset, object));
  const std::uint64_t room = file_bytes - offset - kTfRecordHeaderBytes;  // >= 0: checked above
  if (room < kTfRecordFooterBytes || n > room - kTfRecordFooterBytes) {
    return fail(record_error(
        fmt::format("TFRecord record at offset {} holds {} bytes of data, but the file ends {} "
                    "bytes after its header (truncated?)",
                    offset, n, room),
        offset, object));
  }
  return n;
}

Result<void> check_tfrecord(ConstBytes record, std::uint64_t data_bytes, std::uint64_t offset,
                            std::string_view object) {
  if (!tfrecord_available()) return fail(tfrecord_unavailable());
  if (record.size() < kTfRecordFramingBytes ||
      record.size() - kTfRecordFramingBytes != data_bytes) {
    return fail(Error(Errc::kInternal,
                      fmt::format("TFRecord record at offset {}: {} bytes handed to the check for "
                                  "{} bytes of data",
                                  offset, record.size(), data_bytes))
                    .with_object(std::string(object)));
  }
  FEEDLINE_ASSIGN_OR_RETURN(std::uint64_t n, checked_length(record.data(), offset, object));
  if (n != data_bytes) {
    return fail(record_error(
        fmt::format("TFRecord record at offset {}: its length field says {} bytes, the file's "
                    "index or scan found {} (the file changed since it was opened, or its "
                    ".idx is stale)",
                    offset, n, data_bytes),
        offset, object));
  }
  const ConstBytes data = record.subspan(kTfRecordHeaderBytes, data_bytes);
  const std::uint32_t stored = load_le32(record.data() + kTfRecordHeaderBytes + data_bytes);
  const std::uint32_t computed = masked_crc(data);
  if (stored != computed) {
    return fail(record_error(
        fmt::format("TFRecord record at offset {}: data CRC32C mismatch (stored {:#010x}, "
                    "computed {:#010x} over its {} bytes): the record's data is damaged",
                    offset, stored, computed, data_bytes),
        offset, object));
  }
  return {};
}

std::string format_tfrecord_index(std::span<const TfRecordIndexEntry> entries) {
  std::string out;
  out.reserve(entries.size() * 20);
  for (const TfRecordIndexEntry& e : entries) {
    fmt::format_to(std::back_inserter(out), "{} {}\n", e.offset, e.length);
  }
  return out;
}

Result<std::vector<TfRecordIndexEntry>> parse_tfrecord_index(std::string_view text,
                                                             std::uint64_t file_bytes,
                                                             std::string_view object) {
  std::size_t pos = 0;
  auto bad = [&](std::string_view why) {
    return fail(
        Error(Errc::kCorrupt, fmt::format("corrupt TFRecord index: {} (line at byte {})", why, pos))
            .with_object(std::string(object))
            .with_offset(pos)
            .with_hint("delete the .idx file; feedline scans the file's records without "
                       "it"));
  };
  auto number = [](std::string_view s, std::uint64_t& out) {
    if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return false;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size();
  };
  std::vector<TfRecordIndexEntry> entries;
  // A line takes at least 5 bytes ("0 16\n"): never reserve more than the text could hold.
  entries.reserve(text.size() / 5 + 1);
  std::uint64_t next = 0;  // where the next record must start
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();  // a last line without its newline
    const std::string_view line = text.substr(pos, nl - pos);
    const std::size_t sp = line.find(' ');
    TfRecordIndexEntry e;
    if (sp == std::string_view::npos || !number(line.substr(0, sp), e.offset) ||
        !number(line.substr(sp + 1), e.length)) {
      return bad("expected 'OFFSET LENGTH'");
    }
    if (e.offset != next) {
      return bad(fmt::format("record {} starts at {}, expected {} (where the one before ends)",
                             entries.size(), e.offset, next));
    }
    if (e.length < kTfRecordFramingBytes) {
      return bad(fmt::format("record {} is {} bytes long, less than a record's 16 bytes of framing",
                             entries.size(), e.length));
    }
    if (e.length > file_bytes || e.offset > file_bytes - e.length) {
      return bad(fmt::format("record {} ends past the file's {} bytes (stale index?)",
                             entries.size(), file_bytes));
    }
    next = e.offset + e.length;
    entries.push_back(e);
    pos = nl == text.size() ? nl : nl + 1;
  }
  if (next != file_bytes) {
    return bad(fmt::format("its records end at byte {}, the file has {} bytes (stale index?)", next,
                           file_bytes));
  }
  return entries;
}

Result<void> check_tfrecord_index_probe(const TfRecordIndexEntry& entry, ConstBytes header,
                                        std::uint64_t file_bytes, std::string_view file) {
  auto n = parse_tfrecord_header(header, entry.offset, file_bytes, file);
  if (!n) {
    if (n.error().code() == Errc::kUnsupported) return fail(std::move(n).error());
    return fail(Error(Errc::kCorrupt, fmt::format("stale index: no valid record header at offset "
                                                  "{} ({})",
                                                  entry.offset, n.error().message()))
                    .with_object(std::string(file))
                    .with_offset(entry.offset));
  }
  if (*n + kTfRecordFramingBytes != entry.length) {
    return fail(Error(Errc::kCorrupt,
                      fmt::format("stale index: the record at offset {} is {} bytes long, the "
                                  "index says {}",
                                  entry.offset, *n + kTfRecordFramingBytes, entry.length))
                    .with_object(std::string(file))
                    .with_offset(entry.offset));
  }
  return {};
}

}  // namespace feedline::loader
