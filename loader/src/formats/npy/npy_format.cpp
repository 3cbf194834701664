// The npz and npy formats (dataset.hpp, npy.hpp, zip.hpp): numpy's archives and arrays, one
// sample per object, read by npy_open.cpp from their zip and .npy headers. gen writes npz as
// numpy's np.savez writes it (stored entries with numpy's ZIP64 extra fields, numpy's own .npy
// headers), so np.load reads it: array x, the sample's bytes as uint8 of shape (n,), and with a
// label array y, the class as an int64 scalar; npy as np.save does, array x alone. Each object is
// written as a stream (create, append, commit): a sample is never copied whole once more.
#include <fmt/format.h>

#include <array>
#include <vector>

#include "../builtin_formats.hpp"
#include "../crc32c.hpp"
#include "../gen_parts.hpp"
#include "../open_common.hpp"
#include "feedline/loader/gen.hpp"
#include "feedline/loader/manifest.hpp"
#include "feedline/loader/npy.hpp"
#include "feedline/loader/zip.hpp"

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

Result<void> npz_writable() {
  if (!crc_available()) {
    return fail(Error(Errc::kUnsupported, "built without ISA-L: writing npz needs its CRC-32")
                    .with_hint("rebuild with -DFEEDLINE_WITH_ISAL=ON, or write npy"));
  }
  return {};
}

GenEstimate npz_footprint(const GenConfig& c, double payload) {
  return {.data = static_cast<double>(c.samples) * (payload + 300 + (c.with_label ? 300 : 0))};
}

GenEstimate npy_footprint(const GenConfig& c, double payload) {
  return {.data = static_cast<double>(c.samples) * (payload + 128)};
}

constexpr std::string_view kNpzExtensions[] = {".npz"};
constexpr std::string_view kNpyExtensions[] = {".npy"};

}  // namespace

const FormatSpec kNpzFormat{
    .name = "npz",
    .description = "one np.savez archive per sample",
    .extensions = kNpzExtensions,
    .one_sample_per_object = true,
    .legacy_id = 4,
    .objects_noun = "npz objects",
    .object_noun = "npz archive",
    .no_samples_hint = "its archives hold no arrays",
    .open = open_npz_files,
    .gen = {.write = write_npz_files,
            .available = npz_writable,
            .footprint = npz_footprint,
            .labels = true,
            .refuses_samples_per_object = true},
};

const FormatSpec kNpyFormat{
    .name = "npy",
    .description = "one np.save array per sample",
    .extensions = kNpyExtensions,
    .one_sample_per_object = true,
    .legacy_id = 5,
    .objects_noun = "npy objects",
    .object_noun = "file",
    .no_samples_hint = "the shards hold no regular members",
    .open = open_npy_files,
    .gen = {.write = write_npy_files,
            .footprint = npy_footprint,
            .refuses_samples_per_object = true},
};

}  // namespace feedline::loader::detail
