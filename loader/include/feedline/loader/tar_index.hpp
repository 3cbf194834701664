// The tar shard index: member offsets written beside a shard so readers need not scan it.
//
// `feedline gen` writes "X.tar.idx" next to every shard "X.tar"; open_dataset() uses it when it
// is intact and proves that it belongs to the shard, and scans the headers otherwise. Any tool
// may write one. The format is text, one record per line, every line ending in '\n':
//
//   feedline-tar-index 2
//   shard-bytes 2099200 members 32
//   0 512 65536 65536 000000.bin
//   66048 66560 3 3 000000.cls
//   ...
//   checksum 5f0e3b1c9a7d2e48
//
// Line 1: the magic and the format version (this build writes 2 and reads 1 and 2).
// Line 2: the size of the shard in bytes when the index was written (a reader compares it with
//         the shard's size: a mismatch means the index is stale), and the number of member lines.
// Then one line per regular member, in archive order, five fields separated by single spaces:
//   header offset (the member's first header block, extended headers included; a multiple of 512)
//   data offset   (first byte of the member's data; a multiple of 512, after the header)
//   stored size   (bytes of data in the archive)
//   decoded size  (bytes after decompression of a ".zst" member; the stored size otherwise;
//                  0 if unknown)
//   name          (the rest of the line; may contain spaces, not '\n' or NUL)
// Last line (version 2): "checksum " and 16 lowercase hex digits, the XXH3-64 (seed 0) of every
//         byte of the file before this line. Any edit, a truncation or text appended is caught.
// Directories and other non-regular members are not listed. Members must not overlap and must
// lie within the shard; a file that breaks any rule is rejected as corrupt.
//
// Proving that an index belongs to its shard. The checksum shows the index is the one its writer
// wrote, not that it was written for this shard: an index copied from another shard of the same
// size passes it. So a reader also checks the index against the shard, cheaply: it reads the
// header blocks of a few members (tar_index_probes(): the first, the last and up to six spread
// evenly between), all in one batch of reads, and each must parse as one regular tar member with
// the name, data offset and size the index gives (check_tar_index_probe()). Nothing else is
// stored: the member layout is the fingerprint. A mismatch anywhere means the index is stale and
// the shard is scanned (with a note). A version 1 index has no checksum and so cannot show it is
// intact: readers scan the shard and say so (regenerate the dataset, or delete the .idx files).
//
// What the probes cannot see (a member between two probes renamed, resized or moved while every
// probed header stayed where it was, or an index edited by hand and its checksum recomputed),
// the read of each member does: a member listed by an index is read with its header blocks
// (dataset.hpp: MemberCheck::kTarHeader), and check_tar_member_header() compares them with the
// index's entry before the member is delivered. A mismatch is a data error naming the shard, the
// member and the offset; no member is ever delivered on the index's word alone. Decoded sizes of
// ".zst" members are covered by the checksum, and the decode stage refuses a frame whose size
// disagrees with the index.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/bytes.hpp"
#include "feedline/core/error.hpp"

namespace feedline::loader {

inline constexpr std::string_view kTarIndexMagic = "feedline-tar-index";
inline constexpr int kTarIndexVersion = 2;         // the version written
inline constexpr std::size_t kTarIndexProbes = 8;  // members a reader checks against the shard
inline constexpr std::string_view kTarIndexSuffix = ".idx";  // "X.tar" -> "X.tar.idx"

struct TarIndexEntry {
  std::string name;
  std::uint64_t header_offset = 0;
  std::uint64_t data_offset = 0;
  std::uint64_t size = 0;
  std::uint64_t decoded_size = 0;
};

struct TarIndex {
  int version = kTarIndexVersion;  // as parsed (1 or 2); format_tar_index() always writes 2
  std::uint64_t shard_bytes = 0;
  std::vector<TarIndexEntry> entries;
};

// Renders an index in the current version, checksum included. Fails (kInvalidArgument) on an
// entry the format cannot hold (a name with '\n' or NUL, or empty) or one that breaks the rules
// above.
Result<std::string> format_tar_index(const TarIndex& index);

// Parses and validates an index of version 1 or 2 (TarIndex::version says which: only a version
// 2 index is known to be intact); object_name names it in errors (kCorrupt, with the line's byte
// offset: a bad checksum, a truncation, a broken rule; kUnsupported for another version).
Result<TarIndex> parse_tar_index(std::string_view text, std::string_view object_name);

// The members (positions in TarIndex::entries, ascending, no repeats) whose headers a reader
// compares with the shard: all of them up to kTarIndexProbes, else the first, the last and
// kTarIndexProbes - 2 spread evenly between. A pure function of the count, so every reader of an
// index probes the same members.
std::vector<std::size_t> tar_index_probes(std::size_t members);

// The most bytes a member's header region (data_offset - header_offset) can span: a GNU long name,
// a long link name and a pax header of tar::kMaxExtendedHeader each, and the main header.
inline constexpr std::uint64_t kMaxTarHeaderRegion = 3 * (512 * 1024 + 512) + 512;

// Compares a probed member with the shard: `region` holds the shard's bytes from the member's
// header offset to at least its data offset. They agree when the bytes parse as one regular
// member (extended headers included) whose name, data offset and size are the index's. Fails
// with kCorrupt saying how they differ; shard_name names the shard in the message.
Result<void> check_tar_index_probe(const TarIndexEntry& entry, std::uint64_t shard_bytes,
                                   ConstBytes region, std::string_view shard_name);

// Compares a member read through an index with its header, as it is read: `region` holds the
// shard's bytes from `region_offset` up to the member's data (exclusive): its header blocks,
// after any hidden or non-regular members between it and the previous member of its sample.
// They agree when the last entry there is one regular member whose data starts right after the
// region, named `name`, of `size` bytes. Fails with kCorrupt naming the shard (shard_name), the
// member and the offset of its header, and saying how they differ.
Result<void> check_tar_member_header(ConstBytes region, std::uint64_t region_offset,
                                     std::string_view name, std::uint64_t size,
                                     std::string_view shard_name);

}  // namespace feedline::loader
