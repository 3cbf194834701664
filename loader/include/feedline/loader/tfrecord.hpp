// TFRecord files: records framed as TensorFlow writes them, and the index beside each file.
//
// A TFRecord file is a sequence of records, nothing else (no file header, no footer). A record is
//
//   u64 little-endian   length of the data, n
//   u32 little-endian   masked CRC32C of those 8 length bytes
//   n bytes             the data (for TensorFlow, usually a serialized tf.train.Example)
//   u32 little-endian   masked CRC32C of the data
//
// where mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (mod 2^32), and CRC32C is the standard
// Castagnoli CRC (python3-crc32c's crc32c.crc32c()). Only uncompressed files are read
// (TensorFlow's GZIP/ZLIB record options compress the whole file: no record could be read alone).
//
// In a dataset (dataset.hpp) each record is one sample: its byte range is the whole framed record
// (n + 16 bytes), its one member the data at offset 12. Both CRCs are checked whenever a record is
// read (check_tfrecord(), called by the decode step on every data path); the length's CRC also
// when the file is opened (the header scan, or the index probes).
//
// The index, "X.tfrecord.idx" beside "X.tfrecord": the text format of NVIDIA DALI's tfrecord2idx,
// so DALI reads ours and we read DALI's. One line per record, in file order:
//
//   OFFSET LENGTH\n
//
// OFFSET is where the record starts, LENGTH the whole framed record (n + 16), both decimal. The
// index carries no size or checksum of its own: a reader uses it only when it fits the file
// (parse_tfrecord_index(): the records follow each other from offset 0 to the file's last byte)
// and a few records' headers, read in one batch (tar_index_probes() picks which: the first, the
// last and up to six between), carry the lengths it gives with a right CRC
// (check_tfrecord_index_probe()). Anything else, and the file is scanned instead, with a note. A
// stale index that passes the probes (a record between two probes resized, the file's size kept)
// is still caught when that record is read: its length field or its CRC disagrees.
//
// Functions that compute a CRC need ISA-L (tfrecord_available()); without it they fail with
// tfrecord_unavailable().
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/bytes.hpp"
#include "feedline/core/error.hpp"

namespace feedline::loader {

inline constexpr std::uint64_t kTfRecordHeaderBytes = 12;  // length + its CRC
inline constexpr std::uint64_t kTfRecordFooterBytes = 4;   // the data's CRC
inline constexpr std::uint64_t kTfRecordFramingBytes = kTfRecordHeaderBytes + kTfRecordFooterBytes;
inline constexpr std::string_view kTfRecordIndexSuffix =
    ".idx";  // "X.tfrecord" -> "X.tfrecord.idx"

// True when this build can check and write TFRecord CRCs (it has ISA-L).
bool tfrecord_available() noexcept;
// kUnsupported: "built without ISA-L: TFRecord CRC32C needs it", with what to do.
Error tfrecord_unavailable();

// TensorFlow's mask of a CRC32C (stored CRCs are masked: a CRC of data holding CRCs stays strong).
constexpr std::uint32_t tfrecord_mask(std::uint32_t crc) noexcept {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// Appends the framed record of `data` (header, data, footer) to out.
Result<void> append_tfrecord(ConstBytes data, std::vector<std::byte>& out);

// The data length a record header gives, once its CRC is checked and the record is found to fit
// in a file of file_bytes. `header` holds the bytes at `offset` (fewer than 12 only where the file
// ends). kCorrupt naming `object` and `offset`: a bad length CRC, a record running past the
// file's end, a header cut short.
Result<std::uint64_t> parse_tfrecord_header(ConstBytes header, std::uint64_t offset,
                                            std::uint64_t file_bytes, std::string_view object);

// Checks a framed record as read (`record`: its header, data and footer): the length field is
// `data_bytes` (what the open found), and both CRCs are right. kCorrupt naming `object` and the
// record's `offset` otherwise.
Result<void> check_tfrecord(ConstBytes record, std::uint64_t data_bytes, std::uint64_t offset,
                            std::string_view object);

struct TfRecordIndexEntry {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;  // the whole framed record
  bool operator==(const TfRecordIndexEntry&) const = default;
};

// Renders entries in tfrecord2idx's format.
std::string format_tfrecord_index(std::span<const TfRecordIndexEntry> entries);

// Parses an index and checks that it fits a file of file_bytes: every line "OFFSET LENGTH" (the
// last newline may be missing), the first record at 0, each next one where the previous ends,
// each at least 16 bytes, the last ending at file_bytes. kCorrupt naming `object` (the index)
// with the line's byte offset otherwise. Never allocates more than the text could describe.
Result<std::vector<TfRecordIndexEntry>> parse_tfrecord_index(std::string_view text,
                                                             std::uint64_t file_bytes,
                                                             std::string_view object);

// Compares a probed record with its index entry: `header` holds the file's bytes at
// entry.offset (at least 12 of them, unless the file ends), which must be a record header with a
// right CRC giving the length the entry implies. kCorrupt ("stale index") naming `file` and the
// offset otherwise.
Result<void> check_tfrecord_index_probe(const TfRecordIndexEntry& entry, ConstBytes header,
                                        std::uint64_t file_bytes, std::string_view file);

}  // namespace feedline::loader
