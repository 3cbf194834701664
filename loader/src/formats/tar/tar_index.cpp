// The tar shard index format (see tar_index.hpp): rendering, parsing and validation, and the
// comparison of probed members with the shard's headers.
#include "feedline/loader/tar_index.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <optional>

#include "feedline/core/bytes.hpp"
#include "feedline/loader/digest.hpp"
#include "feedline/loader/tar.hpp"

namespace feedline::loader {
namespace {

constexpr std::uint64_t kBlock = 512;
constexpr std::string_view kChecksumKey = "checksum ";
constexpr std::size_t kChecksumDigits = 16;
static_assert(kMaxTarHeaderRegion ==
              3 * (tar::kMaxExtendedHeader + tar::kBlockSize) + tar::kBlockSize);

std::uint64_t checksum_of(std::string_view text) {
  return member_hash(std::as_bytes(std::span(text.data(), text.size())));
}

// Exactly 16 lowercase hex digits.
bool parse_hex64(std::string_view text, std::uint64_t& out) {
  if (text.size() != kChecksumDigits) return false;
  if (!std::all_of(text.begin(), text.end(),
                   [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); })) {
    return false;
  }
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out, 16);
  return ec == std::errc() && p == text.data() + text.size();
}

// Why an entry breaks the format's rules, or nothing. prev_end is where the previous member's
// padded data ends (0 for the first).
std::optional<std::string> check_entry(const TarIndexEntry& e, std::uint64_t prev_end,
                                       std::uint64_t shard_bytes) {
  if (e.name.empty()) return "empty member name";
  if (e.name.find_first_of(std::string_view("\n\0", 2)) != std::string::npos) {
    return "member name contains a newline or NUL";
  }
  if (e.header_offset % kBlock != 0 || e.data_offset % kBlock != 0) {
    return "offsets must be multiples of 512";
  }
  if (e.header_offset < prev_end) return "member overlaps the previous one";
  if (e.data_offset < e.header_offset || e.data_offset - e.header_offset < kBlock) {
    return "data offset is not after the header";
  }
  if (e.data_offset > shard_bytes || shard_bytes - e.data_offset < e.size) {
    return fmt::format("member data ends past the shard's {} bytes", shard_bytes);
  }
  return std::nullopt;
}

std::uint64_t padded_end(const TarIndexEntry& e) {
  return align_up(e.data_offset + e.size, kBlock);
}

// Splits off the next space-separated decimal number.
bool take_number(std::string_view& line, std::uint64_t& out) {
  const char* end = line.data() + line.size();
  auto [p, ec] = std::from_chars(line.data(), end, out);
  if (ec != std::errc() || p == line.data()) return false;
  if (p != end) {
    if (*p != ' ') return false;
    ++p;
  }
  line = std::string_view(p, static_cast<std::size_t>(end - p));
  return true;
}

}  // namespace

Result<std::string> format_tar_index(const TarIndex& index) {
  std::string out;
  out.reserve(64 + index.entries.size() * 48);
  fmt::format_to(std::back_inserter(out), "{} {}\nshard-bytes {} members {}\n", kTarIndexMagic,
                 kTarIndexVersion, index.shard_bytes, index.entries.size());
  std::uint64_t prev_end = 0;
  for (const TarIndexEntry& e : index.entries) {
    if (auto why = check_entry(e, prev_end, index.shard_bytes)) {
      return fail(
          Error(Errc::kInvalidArgument, fmt::format("cannot index member '{}': {}", e.name, *why)));
    }
    prev_end = padded_end(e);
    fmt::format_to(std::back_inserter(out), "{} {} {} {} {}\n", e.header_offset, e.data_offset,
                   e.size, e.decoded_size, e.name);
  }
  fmt::format_to(std::back_inserter(out), "{}{:016x}\n", kChecksumKey, checksum_of(out));
  return out;
}

Result<TarIndex> parse_tar_index(std::string_view text, std::string_view object_name) {
  std::size_t pos = 0;  // start of the current line
  auto bad = [&](std::string_view why) {
    return fail(
        Error(Errc::kCorrupt, fmt::format("corrupt tar index: {} (line at byte {})", why, pos))
            .with_object(std::string(object_name))
            .with_offset(pos)
            .with_hint("delete the .idx file; feedline scans the shard without it"));
  };
  // Returns the next line without its '\n', or nothing when no complete line is left.
  auto next_line = [&](std::string_view& line) {
    const std::size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) return false;
    line = text.substr(pos, nl - pos);
    return true;
  };
  auto advance = [&](std::string_view line) { pos += line.size() + 1; };

  std::string_view line;
  if (!next_line(line)) return bad("no header line");
  if (!line.starts_with(kTarIndexMagic) || line.size() <= kTarIndexMagic.size() ||
      line[kTarIndexMagic.size()] != ' ') {
    return bad(fmt::format("not a feedline tar index (expected '{} {}')", kTarIndexMagic,
                           kTarIndexVersion));
  }
  std::string_view version = line.substr(kTarIndexMagic.size() + 1);
  std::uint64_t v = 0;
  if (!take_number(version, v) || !version.empty()) return bad("bad version number");
  if (v != 1 && v != 2) {
    return fail(
        Error(Errc::kUnsupported,
              fmt::format("tar index version {} is not supported (this build reads 1 and 2)", v))
            .with_object(std::string(object_name))
            .with_hint("delete the .idx file; feedline scans the shard without it"));
  }
  advance(line);

  TarIndex index;
  index.version = static_cast<int>(v);
  std::uint64_t members = 0;
  if (!next_line(line)) return bad("no shard line");
  {
    std::string_view rest = line;
    if (!rest.starts_with("shard-bytes ")) return bad("expected 'shard-bytes N members M'");
    rest.remove_prefix(12);
    if (!take_number(rest, index.shard_bytes) || !rest.starts_with("members ")) {
      return bad("expected 'shard-bytes N members M'");
    }
    rest.remove_prefix(8);
    if (!take_number(rest, members) || !rest.empty())
      return bad("expected 'shard-bytes N members M'");
  }
  advance(line);
  // Each member line takes at least 10 bytes: never reserve more than the text could hold.
  index.entries.reserve(
      static_cast<std::size_t>(std::min<std::uint64_t>(members, text.size() / 10)));

  std::uint64_t prev_end = 0;
  for (std::uint64_t i = 0; i < members; ++i) {
    if (!next_line(line)) {
      return bad(fmt::format("ends after {} of {} member lines (truncated?)", i, members));
    }
    TarIndexEntry e;
    std::string_view rest = line;
    if (!take_number(rest, e.header_offset) || !take_number(rest, e.data_offset) ||
        !take_number(rest, e.size) || !take_number(rest, e.decoded_size)) {
      return bad("expected 'HEADER_OFFSET DATA_OFFSET SIZE DECODED_SIZE NAME'");
    }
    e.name.assign(rest);
    if (auto why = check_entry(e, prev_end, index.shard_bytes)) return bad(*why);
    prev_end = padded_end(e);
    index.entries.push_back(std::move(e));
    advance(line);
  }
  if (index.version >= 2) {
    const std::size_t body = pos;
    if (!next_line(line)) return bad("no checksum line (truncated?)");
    std::uint64_t want = 0;
    if (!line.starts_with(kChecksumKey) || !parse_hex64(line.substr(kChecksumKey.size()), want)) {
      return bad("expected 'checksum' and 16 hex digits after the member lines");
    }
    const std::uint64_t got = checksum_of(text.substr(0, body));
    if (got != want) {
      return bad(
          fmt::format("checksum mismatch: the file says {:016x}, its text hashes to {:016x} "
                      "(edited or damaged)",
                      want, got));
    }
    advance(line);
  }
  if (pos != text.size()) return bad("unexpected text after the last line");
  return index;
}

std::vector<std::size_t> tar_index_probes(std::size_t members) {
  std::vector<std::size_t> out;
  if (members <= kTarIndexProbes) {
    for (std::size_t i = 0; i < members; ++i) out.push_back(i);
    return out;
  }
  // floor(k * last / n) for k = 0 .. n, n = kTarIndexProbes - 1: the first, the last, and evenly
  // between; distinct because last >= n. Computed as q*k + r*k/n (last = q*n + r): no overflow.
  const std::size_t n = kTarIndexProbes - 1, last = members - 1, q = last / n, r = last % n;
  for (std::size_t k = 0; k <= n; ++k) out.push_back(q * k + r * k / n);
  return out;
}

Result<void> check_tar_index_probe(const TarIndexEntry& entry, std::uint64_t shard_bytes,
                                   ConstBytes region, std::string_view shard_name) {
  auto differ = [&](std::string why) {
    return fail(
        Error(Errc::kCorrupt,
              fmt::format("stale index: its entry for member '{}' disagrees with the shard: {}",
                          entry.name, why))
            .with_object(std::string(shard_name))
            .with_offset(entry.header_offset));
  };
  if (entry.data_offset < entry.header_offset ||
      entry.data_offset - entry.header_offset > kMaxTarHeaderRegion) {
    return differ(fmt::format("its header region of {} bytes is larger than any tar header",
                              entry.data_offset - entry.header_offset));
  }
  if (entry.header_offset > shard_bytes) return differ("its header lies past the shard's end");
  // The reader sees the shard from the member's header on: offset 0 here is header_offset there.
  tar::Reader reader(std::string(shard_name), shard_bytes - entry.header_offset,
                     tar::memory_reader(region));
  tar::Entry e;
  auto more = reader.next(e);
  if (!more) return differ(fmt::format("no member header there ({})", more.error().message()));
  if (!*more) return differ("the shard's headers end there");
  if (!e.regular()) {
    return differ(
        fmt::format("the shard has a {} '{}' there", tar::entry_type_name(e.type), e.name));
  }
  if (e.name != entry.name) return differ(fmt::format("the shard names it '{}'", e.name));
  if (e.data_offset + entry.header_offset != entry.data_offset) {
    return differ(fmt::format("its data starts at offset {}, the index says {}",
                              e.data_offset + entry.header_offset, entry.data_offset));
  }
  if (e.size != entry.size) {
    return differ(
        fmt::format("the shard's header gives {} bytes, the index {}", e.size, entry.size));
  }
  return {};
}

Result<void> check_tar_member_header(ConstBytes region, std::uint64_t region_offset,
                                     std::string_view name, std::uint64_t size,
                                     std::string_view shard_name) {
  auto differ = [&](std::uint64_t at, std::string why) {
    return fail(Error(Errc::kCorrupt,
                      fmt::format("the shard's index does not belong to it: its entry for member "
                                  "'{}' disagrees with the shard's header: {}",
                                  name, why))
                    .with_object(std::string(shard_name))
                    .with_offset(region_offset + at)
                    .with_hint("the index was edited or the shard changed since it was written: "
                               "delete the .idx file (feedline scans the shard without it), or "
                               "regenerate the dataset"));
  };
  // The reader sees the shard from region_offset on; the member's data follows the region, of
  // whatever size its header gives (compared below, not refused as a truncation).
  tar::Reader reader(std::string(shard_name), region.size() + tar::kMaxMemberSize,
                     tar::memory_reader(region));
  tar::Entry e;
  for (;;) {
    auto more = reader.next(e);
    if (!more) {
      return differ(0, fmt::format("no member header there ({})", more.error().message()));
    }
    if (!*more) return differ(reader.end_offset(), "the shard's headers end there");
    if (e.data_offset >= region.size()) break;
    // A hidden or non-regular member between two members of one sample: its data lies in the
    // region too.
  }
  if (e.data_offset != region.size()) {
    return differ(
        e.header_offset,
        fmt::format("the shard's member there, '{}', has its data at offset {}, the "
                    "index puts it at {}",
                    e.name, region_offset + e.data_offset, region_offset + region.size()));
  }
  if (!e.regular()) {
    return differ(e.header_offset, fmt::format("the shard has a {} '{}' there",
                                               tar::entry_type_name(e.type), e.name));
  }
  if (e.name != name)
    return differ(e.header_offset, fmt::format("the shard names it '{}'", e.name));
  if (e.size != size) {
    return differ(e.header_offset,
                  fmt::format("the shard's header gives {} bytes, the index {}", e.size, size));
  }
  return {};
}

}  // namespace feedline::loader
