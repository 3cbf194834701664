// The files format: every object under the root is one sample of one member, the object itself
// (dataset.hpp); gen writes one object per sample, "<key>.bin" (".jpg" for images, ".zst" added
// when compressed).
//
// The smallest format, and the one to copy for a new one (docs/DATASETS.md, "Adding a dataset
// format"): its opener, its writer and its FormatSpec, registered in ../registry.cpp.
#include "../builtin_formats.hpp"
#include "../gen_parts.hpp"
#include "../open_common.hpp"
#include "feedline/loader/codec.hpp"
#include "feedline/loader/gen.hpp"
#include "feedline/loader/manifest.hpp"
#include "feedline/loader/tar_index.hpp"

namespace feedline::loader::detail {
namespace {

// One sample per object, in listing order: nothing is read. An object whose size the listing did
// not give (a brace pattern over a web server without a listing) is a sample of unknown length,
// learned when it is read (storage::kUnknownSize).
Result<void> open_files(OpenContext& ctx, std::span<const FoundObject> files) {
  for (const FoundObject& f : files) {
    const auto object = static_cast<std::uint32_t>(ctx.ds.objects.size());
    const std::uint64_t size = f.info->size;
    const bool unknown = size == storage::kUnknownSize;
    ctx.builder.add(object, f.rel, 0, size, is_zstd(f.rel) || unknown ? 0 : size);
    ctx.builder.close();
    ctx.ds.objects.push_back(std::move(*f.info));  // f.rel is not used past here
  }
  return {};
}

Result<void> write_files(storage::Backend& backend, std::string_view root, const GenConfig& c,
                         const GenHooks& hooks, GenSummary& sum) {
  SampleParts parts;
  Compressor compressor;
  for (std::uint64_t i = 0; i < c.samples; ++i) {
    FEEDLINE_ASSIGN_OR_RETURN(ConstBytes stored, draw_stored(c, i, hooks, parts, compressor, sum));
    FEEDLINE_TRY(write_object(backend, join_key(root, generated_object_name(c, i)), stored, hooks));
    ++sum.objects;
    sum.bytes_stored += stored.size();
    if (hooks.progress) hooks.progress(sum.samples);
  }
  return {};
}

// "000123.bin", "000123.jpg.zst": the payload's own extension.
std::string object_name(const GenConfig& c, std::uint64_t i) {
  return sample_key(i, c.samples) + payload_extension(c);
}

}  // namespace

const FormatSpec kFilesFormat{
    .name = "files",
    .description = "one sample per file",
    .reads_objects = false,
    .open_depth = kTarIndexProbes,  // a manifest's read, at most
    .one_sample_per_object = true,
    .legacy_id = 0,
    .objects_noun = "files",
    .object_noun = "file",
    .no_samples_hint = "the shards hold no regular members",
    .open = open_files,
    .gen = {.write = write_files, .object_name = object_name, .compresses = true, .images = true},
};

}  // namespace feedline::loader::detail
