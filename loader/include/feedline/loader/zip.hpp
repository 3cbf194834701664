// The zip container of .npz archives (numpy's np.savez): its directory read, its stored entries
// written.
//
// Why feedline parses zip itself: a dataset sample must be a byte range of its object, read with
// one ranged read straight into a batch slot, so the reader needs each entry's data offset, and
// the reads that find them must be batched over many files (one round trip each on an object
// store). libzip exposes no entry data offset; minizip's I/O model issues one synchronous read per
// field. What an npz needs is small: the End Of Central Directory record (with its ZIP64 locator
// and record), the central directory, and each entry's local header.
//
// Reading an archive of file_bytes:
//  1. find_zip_directory() over the file's last kZipTailBytes (or all of it when smaller): the
//     EOCD (the last signature whose comment fits the file), the ZIP64 EOCD through its locator
//     when a count, size or offset is saturated, and so where the central directory lies.
//  2. parse_zip_directory() over the central directory's bytes (most often inside that tail
//     already): one ZipEntry per entry, sizes and offsets from the ZIP64 extra field where the
//     32-bit ones are saturated, in the order of their data in the file.
//  3. zip_local_header_size() over the bytes at each entry's local header: where its data starts
//     (the local header's name and extra lengths may differ from the central directory's; numpy's
//     entries carry a ZIP64 extra field in their local header only).
// Every count, size and offset is checked against the file before anything is allocated or read:
// a count of 2^32 entries in a directory of 100 bytes, an entry past the directory, overlapping
// entries are kCorrupt. Encrypted entries and zip files spanning several disks are kUnsupported.
// Compression is the caller's concern (ZipEntry::method; feedline reads stored entries).
//
// Writing (feedline gen's npz): zip_local_header() and zip_directory() give the bytes numpy's
// zipfile writes for np.savez: stored entries, a ZIP64 extra field in every local header, ZIP64
// fields in the directory only where a value passes 2^31 - 1, a ZIP64 end record only where
// needed; every entry dated 1980-01-01 00:00 and mode 0600, as numpy's are.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/bytes.hpp"
#include "feedline/core/error.hpp"

namespace feedline::loader {

inline constexpr std::uint64_t kZipEocdBytes = 22;
// The EOCD and its comment (at most 65,535 bytes) lie in a file's last bytes.
inline constexpr std::uint64_t kZipTailBytes = 65535 + kZipEocdBytes;
inline constexpr std::uint64_t kZipLocalHeaderBytes = 30;
// A central directory larger than this is refused (an npz of a million arrays is not a sample).
inline constexpr std::uint64_t kMaxZipDirectoryBytes = std::uint64_t{64} << 20;
inline constexpr std::uint16_t kZipStored = 0;
inline constexpr std::uint16_t kZipDeflated = 8;

struct ZipDirectoryLocation {
  std::uint64_t offset = 0;   // of the central directory in the file
  std::uint64_t size = 0;     // its bytes
  std::uint64_t entries = 0;  // its entries
};

struct ZipEntry {
  std::string name;
  std::uint16_t method = kZipStored;  // 0 stored, 8 deflated, ...
  std::uint16_t flags = 0;
  std::uint32_t crc32 = 0;
  std::uint64_t compressed_size = 0;  // bytes of data in the file
  std::uint64_t size = 0;             // bytes once decompressed
  std::uint64_t local_header_offset = 0;
  // Where the next entry's local header (or the directory) starts: this entry's local header and
  // data must end by it. Set by parse_zip_directory().
  std::uint64_t limit = 0;
};

// Step 1. `tail` holds the file's last min(file_bytes, kZipTailBytes) bytes. kCorrupt naming
// `object`: no EOCD (not a zip file), a directory outside the file, a ZIP64 record missing or out
// of the tail; kUnsupported: several disks.
Result<ZipDirectoryLocation> find_zip_directory(ConstBytes tail, std::uint64_t file_bytes,
                                                std::string_view object);

// Step 2. `directory` holds the central directory's loc.size bytes. Entries come back sorted by
// local header offset; each must start before the directory, its data (at least a local header
// and compressed_size bytes) must fit before the next entry or the directory.
Result<std::vector<ZipEntry>> parse_zip_directory(ConstBytes directory,
                                                  const ZipDirectoryLocation& loc,
                                                  std::uint64_t file_bytes,
                                                  std::string_view object);

// Step 3. The size of the entry's local header (its data starts that many bytes after
// entry.local_header_offset). `local` holds the file's bytes from there (at least 30; the name is
// compared when they include it). kCorrupt: no local header signature, a name other than the
// directory's, data that would run past entry.limit.
Result<std::uint64_t> zip_local_header_size(ConstBytes local, const ZipEntry& entry,
                                            std::string_view object);

// The local header numpy writes for a stored entry of `size` bytes with CRC-32 `crc`.
std::string zip_local_header(std::string_view name, std::uint32_t crc, std::uint64_t size);
// The central directory and end records for `entries` (stored, written in this order, each with
// its local_header_offset), the directory starting at directory_offset.
std::string zip_directory(std::span<const ZipEntry> entries, std::uint64_t directory_offset);

}  // namespace feedline::loader
