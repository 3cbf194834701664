// The tar shard index: member offsets written beside a shard so readers need not scan it.
//
// `feedline gen` writes "X.tar.idx" next to every shard "X.tar"; open_dataset() uses it when it
// is present and consistent with the shard, and scans the headers otherwise. Any tool may write
// one. The format is text, one record per line, every line ending in '\n':
//
//   feedline-tar-index 1
//   shard-bytes 2099200 members 32
//   0 512 65536 65536 000000.bin
//   66048 66560 3 3 000000.cls
//   ...
//
// Line 1: the magic and the format version (this build reads version 1).
// Line 2: the size of the shard in bytes when the index was written (a reader compares it with
//         the shard's size: a mismatch means the index is stale), and the number of member lines.
// Then one line per regular member, in archive order, five fields separated by single spaces:
//   header offset (the member's first header block, extended headers included; a multiple of 512)
//   data offset   (first byte of the member's data; a multiple of 512, after the header)
//   stored size   (bytes of data in the archive)
//   decoded size  (bytes after decompression of a ".zst" member; the stored size otherwise;
//                  0 if unknown)
//   name          (the rest of the line; may contain spaces, not '\n' or NUL)
// Directories and other non-regular members are not listed. Members must not overlap and must
// lie within the shard; a file that breaks any rule is rejected as corrupt.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/error.hpp"

namespace feedline::loader {

inline constexpr std::string_view kTarIndexMagic = "feedline-tar-index";
inline constexpr int kTarIndexVersion = 1;
inline constexpr std::string_view kTarIndexSuffix = ".idx";  // "X.tar" -> "X.tar.idx"

struct TarIndexEntry {
  std::string name;
  std::uint64_t header_offset = 0;
  std::uint64_t data_offset = 0;
  std::uint64_t size = 0;
  std::uint64_t decoded_size = 0;
};

struct TarIndex {
  std::uint64_t shard_bytes = 0;
  std::vector<TarIndexEntry> entries;
};

// Renders an index. Fails (kInvalidArgument) on an entry the format cannot hold (a name with
// '\n' or NUL, or empty) or one that breaks the rules above.
Result<std::string> format_tar_index(const TarIndex& index);

// Parses and validates an index; object_name names it in errors (kCorrupt, with the line's byte
// offset; kUnsupported for another version).
Result<TarIndex> parse_tar_index(std::string_view text, std::string_view object_name);

}  // namespace feedline::loader
