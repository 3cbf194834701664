// feedline gen's TFRecord, npz and npy writers (gen.hpp for the layouts).
//
// TFRecord: files of samples_per_shard records each, a record's data the sample's bytes, and an
// index beside each file (tfrecord.hpp). npz: one archive per sample, written as numpy's np.savez
// writes it (zip.hpp: stored entries with numpy's ZIP64 extra fields, numpy's own .npy headers),
// so np.load reads it: array x, the sample's bytes as uint8 of shape (n,), and with a label array
// y, the class as an int64 scalar. npy: one np.save file per sample, array x alone. Each object is
// written as a stream (create, append, commit): a sample is never copied whole once more.
#include <fmt/format.h>

#include <array>
#include <cstring>

#include "crc32c.hpp"
#include "feedline/loader/manifest.hpp"
#include "feedline/loader/npy.hpp"
#include "feedline/loader/tfrecord.hpp"
#include "feedline/loader/zip.hpp"
#include "gen_parts.hpp"

namespace feedline::loader::detail {
namespace {

// One array of an npz or npy: its .npy header and its bytes.
struct Array {
  std::string name;  // the zip entry's name: "x.npy"
  std::string header;
  ConstBytes data;
  std::uint64_t size() const { return header.size() + data.size(); }
};

Array x_array(const SampleParts& parts) {
  const std::uint64_t n = parts.raw.size();
  return {"x.npy", format_npy_header("|u1", std::span(&n, 1)), parts.raw};
}

}  // namespace

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

Result<void> write_npz_files(storage::Backend& backend, std::string_view root, const GenConfig& c,
                             const GenHooks& hooks, GenSummary& sum) {
  if (!crc_available()) {
    return fail(Error(Errc::kUnsupported, "built without ISA-L: writing npz needs its CRC-32")
                    .with_hint("rebuild with -DFEEDLINE_WITH_ISAL=ON, or write npy"));
  }
  SampleParts parts;
  std::array<std::byte, 8> label{};
  std::vector<ZipEntry> entries;
  for (std::uint64_t i = 0; i < c.samples; ++i) {
    FEEDLINE_TRY(draw_sample(c, i, hooks, parts, sum));
    std::vector<Array> arrays{x_array(parts)};
    if (c.with_label) {
      for (std::size_t b = 0; b < 8; ++b) {
        label[b] = static_cast<std::byte>((parts.label_value >> (8 * b)) & 0xFF);  // '<i8'
      }
      arrays.push_back({"y.npy", format_npy_header("<i8", {}), label});
      account_member(label, sum);
    }
    const std::string key = join_key(root, generated_object_name(c, i));
    FEEDLINE_ASSIGN_OR_RETURN(auto writer, create_object(backend, key, hooks));
    entries.clear();
    std::uint64_t offset = 0;
    for (const Array& a : arrays) {
      ZipEntry& e = entries.emplace_back();
      e.name = a.name;
      e.size = e.compressed_size = a.size();
      e.local_header_offset = offset;
      e.crc32 = crc32_ieee(a.data, crc32_ieee(as_bytes(a.header)));
      const std::string local = zip_local_header(e.name, e.crc32, e.size);
      FEEDLINE_TRY(writer->append(as_bytes(local)));
      FEEDLINE_TRY(writer->append(as_bytes(a.header)));
      FEEDLINE_TRY(writer->append(a.data));
      offset += local.size() + a.size();
    }
    const std::string directory = zip_directory(entries, offset);
    FEEDLINE_TRY(writer->append(as_bytes(directory)));
    FEEDLINE_TRY(writer->commit());
    ++sum.objects;
    sum.bytes_stored += offset + directory.size();
    if (hooks.progress) hooks.progress(sum.samples);
  }
  return {};
}

Result<void> write_npy_files(storage::Backend& backend, std::string_view root, const GenConfig& c,
                             const GenHooks& hooks, GenSummary& sum) {
  SampleParts parts;
  for (std::uint64_t i = 0; i < c.samples; ++i) {
    FEEDLINE_TRY(draw_sample(c, i, hooks, parts, sum));
    const Array x = x_array(parts);
    FEEDLINE_ASSIGN_OR_RETURN(
        auto writer, create_object(backend, join_key(root, generated_object_name(c, i)), hooks));
    FEEDLINE_TRY(writer->append(as_bytes(x.header)));
    FEEDLINE_TRY(writer->append(x.data));
    FEEDLINE_TRY(writer->commit());
    ++sum.objects;
    sum.bytes_stored += x.size();
    if (hooks.progress) hooks.progress(sum.samples);
  }
  return {};
}

}  // namespace feedline::loader::detail
