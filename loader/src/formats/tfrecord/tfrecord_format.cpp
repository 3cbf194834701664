// The tfrecord format (dataset.hpp, tfrecord.hpp): TensorFlow's record files, read by
// tfrecord_open.cpp from their DALI-style indexes or record headers; gen writes
// "shard-NNNNNN.tfrecord" of samples_per_shard records each, a record's data the sample's bytes
// (no label), with its index "shard-NNNNNN.tfrecord.idx" beside it.
#include <fmt/format.h>

#include <vector>

#include "../builtin_formats.hpp"
#include "../crc32c.hpp"
#include "../gen_parts.hpp"
#include "../open_common.hpp"
#include "feedline/loader/gen.hpp"
#include "feedline/loader/manifest.hpp"
#include "feedline/loader/tfrecord.hpp"

namespace feedline::loader::detail {
namespace {

Result<void> write_tfrecord_files(storage::Backend& backend, std::string_view root,
                                  const GenConfig& c, const GenHooks& hooks, GenSummary& sum) {
  const std::uint64_t files = generated_objects(c);
  SampleParts parts;
  std::vector<std::byte> record;
  std::vector<TfRecordIndexEntry> index;
  for (std::uint64_t f = 0; f < files; ++f) {
    const std::string key = join_key(root, generated_object_name(c, f));
    FEEDLINE_ASSIGN_OR_RETURN(auto writer, create_object(backend, key, hooks));
    index.clear();
    std::uint64_t offset = 0;
    const std::uint64_t first = f * c.samples_per_shard;
    const std::uint64_t last = std::min(c.samples, first + c.samples_per_shard);
    for (std::uint64_t i = first; i < last; ++i) {
      FEEDLINE_TRY(draw_sample(c, i, hooks, parts, sum));
      // The framing around the data, the data itself written from where it was drawn (a GiB
      // record is not copied once more, and its write stops between chunks).
      record.clear();
      FEEDLINE_TRY(append_tfrecord({}, record));  // the layout; length and CRCs set below
      const std::uint64_t n = parts.raw.size();
      for (int b = 0; b < 8; ++b) record[b] = static_cast<std::byte>((n >> (8 * b)) & 0xFF);
      const auto store_crc = [&](std::size_t at, std::uint32_t crc) {
        for (int b = 0; b < 4; ++b)
          record[at + b] = static_cast<std::byte>((crc >> (8 * b)) & 0xFF);
      };
      store_crc(8, tfrecord_mask(crc32c(ConstBytes(record.data(), 8))));
      store_crc(12, tfrecord_mask(crc32c(parts.raw)));
      FEEDLINE_TRY(writer->append(ConstBytes(record.data(), kTfRecordHeaderBytes)));
      FEEDLINE_TRY(writer->append(parts.raw));
      FEEDLINE_TRY(
          writer->append(ConstBytes(record.data() + kTfRecordHeaderBytes, kTfRecordFooterBytes)));
      index.push_back({offset, n + kTfRecordFramingBytes});
      offset += n + kTfRecordFramingBytes;
      if (hooks.progress) hooks.progress(sum.samples);
    }
    FEEDLINE_TRY(writer->commit());
    ++sum.objects;
    sum.bytes_stored += offset;
    const std::string text = format_tfrecord_index(index);
    FEEDLINE_TRY(backend.write(key + std::string(kTfRecordIndexSuffix), as_bytes(text)));
    ++sum.index_objects;
  }
  return {};
}

Result<void> tfrecord_writable() {
  if (!tfrecord_available()) return fail(tfrecord_unavailable());
  return {};
}

GenEstimate tfrecord_footprint(const GenConfig& c, double payload) {
  const double samples = static_cast<double>(c.samples);
  return {.data = samples * (payload + 16), .indexes = samples * 16};
}

constexpr std::string_view kExtensions[] = {".tfrecord", ".tfrecords"};

}  // namespace

const FormatSpec kTfRecordFormat{
    .name = "tfrecord",
    .description = "TFRecord files with DALI indexes",
    .extensions = kExtensions,
    .any_object_when_none_named = true,
    .indexed = true,
    .missing_index_note =
        "not every file has a .tfrecord.idx index: reading the records' headers instead",
    .legacy_id = 3,
    .objects_noun = "tfrecord objects",
    .object_noun = "TFRecord file",
    .no_samples_hint = "its files hold no records",
    .open = open_tfrecord_files,
    .gen = {.write = write_tfrecord_files,
            .available = tfrecord_writable,
            .footprint = tfrecord_footprint},
};

}  // namespace feedline::loader::detail
