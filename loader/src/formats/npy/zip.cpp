// The zip directory reader and the stored-entry writer of npz archives (see zip.hpp for why this
// is hand-written and what it checks).
#include "feedline/loader/zip.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace feedline::loader {
namespace {

constexpr std::uint32_t kLocalSig = 0x04034b50;
constexpr std::uint32_t kCentralSig = 0x02014b50;
constexpr std::uint32_t kEocdSig = 0x06054b50;
constexpr std::uint32_t kEocd64Sig = 0x06064b50;
constexpr std::uint32_t kLocatorSig = 0x07064b50;
constexpr std::uint64_t kCentralBytes = 46;
constexpr std::uint64_t kEocd64Bytes = 56;
constexpr std::uint64_t kLocatorBytes = 20;
constexpr std::uint16_t kZip64ExtraId = 0x0001;
constexpr std::uint16_t kEncrypted = 0x0001;
// Python's zipfile (so numpy) switches to ZIP64 fields above these.
constexpr std::uint64_t kZip64Limit = (std::uint64_t{1} << 31) - 1;
constexpr std::uint64_t kFileCountLimit = 0xFFFF;
constexpr std::uint16_t kDosDate1980 = (0 << 9) | (1 << 5) | 1;  // 1980-01-01
constexpr std::uint32_t kMode0600 = 0600u << 16;                 // unix mode in external attributes

std::uint64_t le(ConstBytes b, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint64_t>(b[at + i]);
  return v;
}

void put(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

Error corrupt(std::string_view object, std::string why) {
  return Error(Errc::kCorrupt, fmt::format("not a readable npz (zip) archive: {}", why))
      .with_object(std::string(object));
}

}  // namespace

Result<ZipDirectoryLocation> find_zip_directory(ConstBytes tail, std::uint64_t file_bytes,
                                                std::string_view object) {
  if (tail.size() > file_bytes) {
    return fail(
        Error(Errc::kInternal, "zip tail larger than its file").with_object(std::string(object)));
  }
  if (tail.size() < kZipEocdBytes) {
    return fail(corrupt(object, fmt::format("{} bytes, too small for a zip file", file_bytes)));
  }
  const std::uint64_t tail_at = file_bytes - tail.size();
  // The last EOCD signature whose comment fits in the file.
  std::size_t pos = tail.size() - kZipEocdBytes;
  for (;; --pos) {
    if (le(tail, pos, 4) == kEocdSig && pos + kZipEocdBytes + le(tail, pos + 20, 2) <= tail.size())
      break;
    if (pos == 0) {
      return fail(corrupt(object,
                          "no end of central directory record in its last 64 KiB (not a "
                          "zip file, or cut short)"));
    }
  }
  const std::uint64_t disk = le(tail, pos + 4, 2), cd_disk = le(tail, pos + 6, 2);
  const std::uint64_t disk_entries = le(tail, pos + 8, 2);
  ZipDirectoryLocation loc{le(tail, pos + 16, 4), le(tail, pos + 12, 4), le(tail, pos + 10, 2)};
  std::uint64_t records_at = tail_at + pos;  // where the end records start: the directory ends by
  const bool locator = pos >= kLocatorBytes && le(tail, pos - kLocatorBytes, 4) == kLocatorSig;
  if (locator) {
    const std::size_t lp = pos - kLocatorBytes;
    const std::uint64_t rec = le(tail, lp + 8, 8);
    if (le(tail, lp + 4, 4) != 0 || le(tail, lp + 16, 4) > 1) {
      return fail(Error(Errc::kUnsupported, "a zip archive spread over several disks")
                      .with_object(std::string(object)));
    }
    if (rec < tail_at || rec > tail_at + lp || tail_at + lp - rec < kEocd64Bytes) {
      return fail(corrupt(
          object, fmt::format("its ZIP64 end record at offset {} is not where its locator says "
                              "(or not in the file's last 64 KiB)",
                              rec)));
    }
    const auto rp = static_cast<std::size_t>(rec - tail_at);
    if (le(tail, rp, 4) != kEocd64Sig) {
      return fail(corrupt(object, fmt::format("no ZIP64 end record at offset {}", rec)));
    }
    if (le(tail, rp + 16, 4) != 0 || le(tail, rp + 20, 4) != 0 ||
        le(tail, rp + 24, 8) != le(tail, rp + 32, 8)) {
      return fail(Error(Errc::kUnsupported, "a zip archive spread over several disks")
                      .with_object(std::string(object)));
    }
    loc.entries = le(tail, rp + 32, 8);
    loc.size = le(tail, rp + 40, 8);
    loc.offset = le(tail, rp + 48, 8);
    records_at = rec;
  } else {
    if (loc.entries == 0xFFFF || loc.size == 0xFFFFFFFF || loc.offset == 0xFFFFFFFF) {
      return fail(corrupt(object, "its end record points to a ZIP64 record that is not there"));
    }
    if (disk != 0 || cd_disk != 0 || disk_entries != loc.entries) {
      return fail(Error(Errc::kUnsupported, "a zip archive spread over several disks")
                      .with_object(std::string(object)));
    }
  }
  if (loc.offset > records_at || loc.size > records_at - loc.offset) {
    return fail(corrupt(object, fmt::format("its central directory ({} bytes at offset {}) runs "
                                            "past its end records at offset {}",
                                            loc.size, loc.offset, records_at)));
  }
  if (loc.entries > loc.size / kCentralBytes) {
    return fail(corrupt(object, fmt::format("{} entries cannot fit in a central directory of {} "
                                            "bytes",
                                            loc.entries, loc.size)));
  }
  if (loc.size > kMaxZipDirectoryBytes) {
    return fail(Error(Errc::kUnsupported,
                      fmt::format("a central directory of {} bytes ({} entries): more than the {} "
                                  "MiB an npz sample's directory may take",
                                  loc.size, loc.entries, kMaxZipDirectoryBytes >> 20))
                    .with_object(std::string(object)));
  }
  return loc;
}

Result<std::vector<ZipEntry>> parse_zip_directory(ConstBytes d, const ZipDirectoryLocation& loc,
                                                  std::uint64_t file_bytes,
                                                  std::string_view object) {
  if (d.size() != loc.size || loc.offset > file_bytes || loc.size > file_bytes - loc.offset) {
    return fail(corrupt(object, "its central directory was cut short"));
  }
  std::vector<ZipEntry> entries;
  entries.reserve(static_cast<std::size_t>(std::min(loc.entries, loc.size / kCentralBytes)));
  std::size_t pos = 0;
  for (std::uint64_t i = 0; i < loc.entries; ++i) {
    auto bad = [&](std::string why) {
      return fail(corrupt(object, fmt::format("central directory entry {} (at offset {}): {}", i,
                                              loc.offset + pos, why)));
    };
    if (d.size() - pos < kCentralBytes) return bad("cut short");
    if (le(d, pos, 4) != kCentralSig) return bad("no entry signature");
    ZipEntry e;
    e.flags = static_cast<std::uint16_t>(le(d, pos + 8, 2));
    e.method = static_cast<std::uint16_t>(le(d, pos + 10, 2));
    e.crc32 = static_cast<std::uint32_t>(le(d, pos + 16, 4));
    e.compressed_size = le(d, pos + 20, 4);
    e.size = le(d, pos + 24, 4);
    const std::size_t nlen = le(d, pos + 28, 2), xlen = le(d, pos + 30, 2),
                      clen = le(d, pos + 32, 2);
    std::uint64_t disk = le(d, pos + 34, 2);
    e.local_header_offset = le(d, pos + 42, 4);
    if (d.size() - pos - kCentralBytes < nlen + xlen + clen) return bad("cut short");
    e.name.assign(reinterpret_cast<const char*>(d.data() + pos + kCentralBytes), nlen);
    // The ZIP64 extra field holds, in this order, each 32-bit value that is saturated.
    const std::size_t xstart = pos + kCentralBytes + nlen;
    bool zip64 = false;
    for (std::size_t x = 0; x + 4 <= xlen;) {
      const std::uint64_t id = le(d, xstart + x, 2), len = le(d, xstart + x + 2, 2);
      if (x + 4 + len > xlen) return bad("an extra field runs past its extra data");
      if (id == kZip64ExtraId) {
        zip64 = true;
        std::size_t at = xstart + x + 4, left = len;
        auto take = [&](std::uint64_t& field, std::uint64_t saturated, int bytes) {
          if (field != saturated) return true;
          if (left < static_cast<std::size_t>(bytes)) return false;
          field = le(d, at, bytes);
          at += bytes;
          left -= bytes;
          return true;
        };
        if (!take(e.size, 0xFFFFFFFF, 8) || !take(e.compressed_size, 0xFFFFFFFF, 8) ||
            !take(e.local_header_offset, 0xFFFFFFFF, 8) || !take(disk, 0xFFFF, 4)) {
          return bad("its ZIP64 extra field lacks a value its saturated fields call for");
        }
      }
      x += 4 + len;
    }
    // Saturated without a ZIP64 field: only true values of 2^32 - 1 could be meant, and no writer
    // stores those without one.
    if (!zip64 && (e.size == 0xFFFFFFFF || e.compressed_size == 0xFFFFFFFF ||
                   e.local_header_offset == 0xFFFFFFFF)) {
      return bad("a saturated size or offset without a ZIP64 extra field");
    }
    if (disk != 0) {
      return fail(Error(Errc::kUnsupported, "a zip archive spread over several disks")
                      .with_object(std::string(object)));
    }
    if (e.flags & kEncrypted) {
      return fail(Error(Errc::kUnsupported, fmt::format("entry '{}' is encrypted", e.name))
                      .with_object(std::string(object)));
    }
    if (e.local_header_offset >= loc.offset) {
      return bad(fmt::format("entry '{}' starts at offset {}, inside or past the directory", e.name,
                             e.local_header_offset));
    }
    entries.push_back(std::move(e));
    pos += kCentralBytes + nlen + xlen + clen;
  }
  std::sort(entries.begin(), entries.end(), [](const ZipEntry& a, const ZipEntry& b) {
    return a.local_header_offset < b.local_header_offset;
  });
  for (std::size_t i = 0; i < entries.size(); ++i) {
    ZipEntry& e = entries[i];
    e.limit = i + 1 < entries.size() ? entries[i + 1].local_header_offset : loc.offset;
    if (e.limit - e.local_header_offset < kZipLocalHeaderBytes ||
        e.compressed_size > e.limit - e.local_header_offset - kZipLocalHeaderBytes) {
      return fail(
          corrupt(object, fmt::format("entry '{}' ({} bytes at offset {}) overlaps the next "
                                      "entry or the directory at offset {}",
                                      e.name, e.compressed_size, e.local_header_offset, e.limit)));
    }
  }
  return entries;
}

Result<std::uint64_t> zip_local_header_size(ConstBytes local, const ZipEntry& e,
                                            std::string_view object) {
  auto bad = [&](std::string why) {
    return fail(corrupt(
        object, fmt::format("entry '{}' at offset {}: {}", e.name, e.local_header_offset, why)));
  };
  if (local.size() < kZipLocalHeaderBytes) return bad("the file ends inside its local header");
  if (le(local, 0, 4) != kLocalSig) return bad("no local header signature");
  const std::uint64_t nlen = le(local, 26, 2), xlen = le(local, 28, 2);
  const std::uint64_t size = kZipLocalHeaderBytes + nlen + xlen;
  if (local.size() >= kZipLocalHeaderBytes + nlen &&
      std::string_view(reinterpret_cast<const char*>(local.data() + kZipLocalHeaderBytes), nlen) !=
          e.name) {
    return bad("its local header names another entry");
  }
  if (e.limit < e.local_header_offset || e.limit - e.local_header_offset < size ||
      e.compressed_size > e.limit - e.local_header_offset - size) {
    return bad(
        fmt::format("its data ({} bytes after a {}-byte local header) runs into the next "
                    "entry or the directory at offset {}",
                    e.compressed_size, size, e.limit));
  }
  return size;
}

std::string zip_local_header(std::string_view name, std::uint32_t crc, std::uint64_t size) {
  const bool big = size > kZip64Limit;
  std::string out;
  put(out, kLocalSig, 4);
  put(out, big ? 45 : 20, 2);  // version needed to extract: 4.5 for ZIP64 values
  put(out, 0, 2);              // flags
  put(out, kZipStored, 2);
  put(out, 0, 2);  // time 00:00:00
  put(out, kDosDate1980, 2);
  put(out, crc, 4);
  put(out, big ? 0xFFFFFFFF : size, 4);  // compressed size
  put(out, big ? 0xFFFFFFFF : size, 4);  // size
  put(out, name.size(), 2);
  put(out, 20, 2);  // numpy's force_zip64: a ZIP64 extra field in every local header
  out += name;
  put(out, kZip64ExtraId, 2);
  put(out, 16, 2);
  put(out, size, 8);
  put(out, size, 8);
  return out;
}

std::string zip_directory(std::span<const ZipEntry> entries, std::uint64_t directory_offset) {
  std::string out;
  for (const ZipEntry& e : entries) {
    std::string extra;
    const bool big = e.size > kZip64Limit, far = e.local_header_offset > kZip64Limit;
    if (big) {
      put(extra, e.size, 8);
      put(extra, e.size, 8);
    }
    if (far) put(extra, e.local_header_offset, 8);
    const int version = extra.empty() ? 20 : 45;
    if (!extra.empty()) {
      std::string field;
      put(field, kZip64ExtraId, 2);
      put(field, extra.size(), 2);
      extra = field + extra;
    }
    put(out, kCentralSig, 4);
    put(out, (3 << 8) | version, 2);  // made by: unix
    put(out, version, 2);
    put(out, 0, 2);  // flags
    put(out, kZipStored, 2);
    put(out, 0, 2);
    put(out, kDosDate1980, 2);
    put(out, e.crc32, 4);
    put(out, big ? 0xFFFFFFFF : e.size, 4);
    put(out, big ? 0xFFFFFFFF : e.size, 4);
    put(out, e.name.size(), 2);
    put(out, extra.size(), 2);
    put(out, 0, 2);  // comment
    put(out, 0, 2);  // disk
    put(out, 0, 2);  // internal attributes
    put(out, kMode0600, 4);
    put(out, far ? 0xFFFFFFFF : e.local_header_offset, 4);
    out += e.name;
    out += extra;
  }
  const std::uint64_t count = entries.size(), size = out.size();
  if (count > kFileCountLimit || size > kZip64Limit || directory_offset > kZip64Limit) {
    const std::uint64_t record = directory_offset + size;
    put(out, kEocd64Sig, 4);
    put(out, kEocd64Bytes - 12, 8);
    put(out, 45, 2);
    put(out, 45, 2);
    put(out, 0, 4);
    put(out, 0, 4);
    put(out, count, 8);
    put(out, count, 8);
    put(out, size, 8);
    put(out, directory_offset, 8);
    put(out, kLocatorSig, 4);
    put(out, 0, 4);
    put(out, record, 8);
    put(out, 1, 4);
  }
  put(out, kEocdSig, 4);
  put(out, 0, 2);
  put(out, 0, 2);
  put(out, std::min(count, kFileCountLimit), 2);
  put(out, std::min(count, kFileCountLimit), 2);
  put(out, std::min<std::uint64_t>(size, 0xFFFFFFFF), 4);
  put(out, std::min<std::uint64_t>(directory_offset, 0xFFFFFFFF), 4);
  put(out, 0, 2);
  return out;
}

}  // namespace feedline::loader
