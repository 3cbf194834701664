// The tar format (dataset.hpp): WebDataset-style shards, read by tar_open.cpp from their indexes
// (tar_index.hpp) or headers; gen writes "shard-NNNNNN.tar" of samples_per_shard samples, each
// "<key>.bin[.zst]" (".jpg" for images) and, with labels, "<key>.cls", with an index beside each.
#include "../builtin_formats.hpp"
#include "../gen_parts.hpp"
#include "../open_common.hpp"
#include "feedline/loader/codec.hpp"
#include "feedline/loader/gen.hpp"
#include "feedline/loader/manifest.hpp"
#include "feedline/loader/tar.hpp"
#include "feedline/loader/tar_index.hpp"

namespace feedline::loader::detail {
namespace {

Result<void> write_tar_shards(storage::Backend& backend, std::string_view root, const GenConfig& c,
                              const GenHooks& hooks, GenSummary& sum) {
  const std::uint64_t shards = generated_objects(c);
  SampleParts parts;
  Compressor compressor;
  const std::string bin_ext = payload_extension(c);
  TarIndex index;
  std::string member;
  for (std::uint64_t s = 0; s < shards; ++s) {
    const std::string shard_key = join_key(root, generated_object_name(c, s));
    FEEDLINE_ASSIGN_OR_RETURN(auto writer, create_object(backend, shard_key, hooks));
    tar::Writer tw(*writer, shard_key);
    index.entries.clear();
    const std::uint64_t first = s * c.samples_per_shard;
    const std::uint64_t last = std::min(c.samples, first + c.samples_per_shard);
    for (std::uint64_t i = first; i < last; ++i) {
      FEEDLINE_ASSIGN_OR_RETURN(ConstBytes stored,
                                draw_stored(c, i, hooks, parts, compressor, sum));
      const std::string key = sample_key(i, c.samples);
      member = key;
      member += bin_ext;
      FEEDLINE_ASSIGN_OR_RETURN(tar::Placement p, tw.add(member, stored));
      index.entries.push_back({member, p.header_offset, p.data_offset, p.size, parts.raw.size()});
      if (c.with_label) {
        member = key;
        member += ".cls";
        FEEDLINE_ASSIGN_OR_RETURN(tar::Placement pl, tw.add(member, as_bytes(parts.label)));
        index.entries.push_back({member, pl.header_offset, pl.data_offset, pl.size, pl.size});
        account_member(as_bytes(parts.label), sum);
      }
      if (hooks.progress) hooks.progress(sum.samples);
    }
    FEEDLINE_TRY(tw.finish());
    FEEDLINE_TRY(writer->commit());
    ++sum.objects;
    sum.bytes_stored += tw.offset();
    index.shard_bytes = tw.offset();
    FEEDLINE_ASSIGN_OR_RETURN(std::string text, format_tar_index(index));
    FEEDLINE_TRY(backend.write(shard_key + std::string(kTarIndexSuffix), as_bytes(text)));
    ++sum.index_objects;
  }
  return {};
}

GenEstimate tar_footprint(const GenConfig& c, double payload) {
  // A header and half a block of padding per member; the label, a header and its block.
  const double samples = static_cast<double>(c.samples);
  const double sample = 512 + payload + 256 + (c.with_label ? 1024 : 0);
  return {.data = samples * sample,
          .per_object = 1024,                                       // the end-of-archive marker
          .indexes = samples * (c.with_label ? 2 : 1) * 40 + 100};  // ~40 bytes a member line
}

constexpr std::string_view kExtensions[] = {".tar"};

}  // namespace

const FormatSpec kTarFormat{
    .name = "tar",
    .description = "WebDataset shards",
    .extensions = kExtensions,
    .indexed = true,
    .missing_index_note =
        "not every shard has a .tar.idx index: reading the shards' headers instead",
    .open_depth = kTarIndexProbes,  // a shard at a time: its index's probes, or its scan
    .legacy_id = 1,
    .objects_noun = "tar shards",
    .object_noun = "tar shard",
    .no_objects_hint = "for one sample per file use {format=files}",
    .no_samples_hint = "the shards hold no regular members",
    .open = open_tar_shards,
    .gen = {.write = write_tar_shards,
            .footprint = tar_footprint,
            .labels = true,
            .compresses = true,
            .images = true},
};

}  // namespace feedline::loader::detail
