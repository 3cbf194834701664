// Opening a tar dataset (dataset.hpp, tar_index.hpp): each shard's members from its index
// "*.tar.idx" when that is intact (version 2, its checksum right) and agrees with the shard (its
// size, and the headers of a few probed members, read in one batch), else from a scan of its
// headers (SequentialReader: 1 MiB chunks with readahead, never one read per header). Both paths
// feed the same SampleBuilder, which groups consecutive members sharing a key into one sample
// covering a single byte range; from an index, that range starts at the first member's header,
// and every member carries MemberCheck::kTarHeader (its header is compared with the index entry
// as it is read: the probes here see 8 members, that sees each one delivered). Shards are read
// one at a time.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "../open_common.hpp"
#include "../sequential_reader.hpp"
#include "feedline/loader/tar.hpp"
#include "feedline/loader/tar_index.hpp"

namespace feedline::loader::detail {
namespace {

// Reads a whole (small) object: an index.
Result<std::string> read_index(storage::Backend& backend, storage::IoQueue& queue,
                               const storage::ObjectInfo& info, const std::stop_token& stop) {
  return read_object(backend, queue, info, stop, kMaxIndexBytes, "an index");
}

// Compares an index with its shard (tar_index.hpp): the header regions of the probed members,
// read in one batch (one round trip on network backends), must be the members the index lists.
Result<void> probe_shard(storage::Backend& backend, storage::IoQueue& queue,
                         const storage::ObjectInfo& shard, const TarIndex& index,
                         const std::stop_token& stop) {
  const std::vector<std::size_t> probes = tar_index_probes(index.entries.size());
  FEEDLINE_ASSIGN_OR_RETURN(auto handle, backend.open_known(shard));
  // Header offsets are multiples of 512: a probe reads just its header region (one block, as a
  // rule), more only where the backend needs larger alignment (O_DIRECT).
  const std::uint64_t align = std::max<std::uint64_t>(backend.caps().alignment, tar::kBlockSize);
  struct Probe {
    AlignedBuffer buf;
    std::uint64_t start = 0;  // shard offset of buf[0]
    storage::ReadOp op;
  };
  std::vector<Probe> reads(probes.size());
  std::vector<storage::ReadOp*> ops;
  Countdown done;
  for (std::size_t i = 0; i < probes.size(); ++i) {
    const TarIndexEntry& e = index.entries[probes[i]];
    if (e.data_offset - e.header_offset > kMaxTarHeaderRegion) {  // refused without reading
      return check_tar_index_probe(e, shard.size, {}, shard.key);
    }
    Probe& r = reads[i];
    r.start = align_down(e.header_offset, align);
    const std::uint64_t end = align_up(e.data_offset, align);
    FEEDLINE_ASSIGN_OR_RETURN(r.buf,
                              AlignedBuffer::allocate(static_cast<std::size_t>(end - r.start)));
    r.op.object = handle.get();
    r.op.offset = r.start;
    r.op.length = end - r.start;
    r.op.dst = r.buf.span();
    r.op.done = &done;
    ops.push_back(&r.op);
  }
  done.left = ops.size();
  queue.submit(ops);
  for (bool cancelled = false; done.left > 0;) {
    if (!cancelled && stop.stop_requested()) {
      queue.cancel();  // every op still completes, with kCancelled or what it read
      cancelled = true;
    }
    queue.poll(1, kOpenPollSlice);
  }
  for (std::size_t i = 0; i < probes.size(); ++i) {
    const TarIndexEntry& e = index.entries[probes[i]];
    const Probe& r = reads[i];
    if (!r.op.result) return fail(r.op.result.error());
    const std::uint64_t got = *r.op.result, skip = e.header_offset - r.start;
    const ConstBytes region = got > skip ? ConstBytes(r.buf.span())
                                               .subspan(static_cast<std::size_t>(skip),
                                                        static_cast<std::size_t>(got - skip))
                                         : ConstBytes{};
    FEEDLINE_TRY(check_tar_index_probe(e, shard.size, region, shard.key));
  }
  return {};
}

enum class IndexUse : std::uint8_t {
  kUsed,
  kOldFormat,  // version 1: no checksum, so it cannot show that it is intact; the shard is scanned
  kEmpty,      // lists no members: nothing to probe, so the shard is scanned
};

// Members of one shard from its index, once the index has shown it belongs to the shard. Fails
// (for a note, then a scan) when the index is unreadable, corrupt, stale or not the shard's.
Result<IndexUse> members_from_index(storage::Backend& backend, storage::IoQueue& queue,
                                    const storage::ObjectInfo& shard,
                                    const storage::ObjectInfo& idx, std::uint32_t object,
                                    SampleBuilder& builder, const std::stop_token& stop) {
  FEEDLINE_ASSIGN_OR_RETURN(std::string text, read_index(backend, queue, idx, stop));
  FEEDLINE_ASSIGN_OR_RETURN(TarIndex index, parse_tar_index(text, idx.key));
  if (index.version < 2) return IndexUse::kOldFormat;
  if (index.shard_bytes != shard.size) {
    return fail(Error(Errc::kCorrupt, fmt::format("stale index: written for a {}-byte shard, the "
                                                  "shard has {} bytes",
                                                  index.shard_bytes, shard.size))
                    .with_object(idx.key));
  }
  if (index.entries.empty()) return IndexUse::kEmpty;
  FEEDLINE_TRY(probe_shard(backend, queue, shard, index, stop));
  for (const TarIndexEntry& e : index.entries) {
    if (hidden(e.name)) continue;
    // Read with its header, which the decode step compares with this entry (kTarHeader): the
    // probes above saw a few members, this sees every one delivered.
    builder.add(object, e.name, e.data_offset, e.size, is_zstd(e.name) ? e.decoded_size : e.size,
                e.header_offset);
  }
  return IndexUse::kUsed;
}

// The notes for indexes that were not used: one per shard up to kMaxIndexNotes, then a count;
// one for all the old-format ones.
void note_ignored_indexes(const std::vector<std::string>& ignored,
                          const std::vector<std::string>& old_format,
                          std::vector<std::string>& notes) {
  for (std::size_t i = 0; i < ignored.size() && i < kMaxIndexNotes; ++i)
    notes.push_back(ignored[i]);
  if (ignored.size() > kMaxIndexNotes) {
    notes.push_back(
        fmt::format("... and the indexes of {} more shards were ignored the same way (their shards "
                    "were scanned)",
                    ignored.size() - kMaxIndexNotes));
  }
  if (old_format.size() == 1) {
    notes.push_back(fmt::format(
        "index {} is in the old format 1, which cannot show that it belongs to its shard: "
        "scanned the shard instead (regenerate the dataset with feedline gen, or "
        "delete the .idx file)",
        old_format.front()));
  } else if (old_format.size() > 1) {
    notes.push_back(fmt::format(
        "{} indexes ({}, ...) are in the old format 1, which cannot show that they belong "
        "to their shards: scanned the shards instead (regenerate the dataset with "
        "feedline gen, or delete the .idx files)",
        old_format.size(), old_format.front()));
  }
}

// Members of one shard from its headers.
Result<void> members_from_scan(storage::Backend& backend, storage::IoQueue& queue,
                               const storage::ObjectInfo& shard, std::uint32_t object,
                               SampleBuilder& builder, std::vector<std::string>& notes,
                               const std::stop_token& stop) {
  FEEDLINE_ASSIGN_OR_RETURN(auto handle, backend.open_known(shard));
  const std::uint64_t align = std::max<std::uint64_t>(backend.caps().alignment, kPageAlign);
  const std::size_t chunk = static_cast<std::size_t>(
      std::max<std::uint64_t>(detail::SequentialReader::kDefaultChunk,
                              align_up(tar::kMaxExtendedHeader + 2 * align, align)));
  detail::SequentialReader source(queue, *handle, align, chunk, stop);
  tar::Reader reader(
      shard.key, handle->size(),
      [&source, &stop, &shard](std::uint64_t offset, std::size_t length) -> Result<ConstBytes> {
        if (stop.stop_requested()) {
          return fail(cancelled("scanning a shard's headers").with_object(shard.key));
        }
        return source.read(offset, length);
      });
  tar::Entry e;
  std::uint64_t regular = 0;
  for (;;) {
    FEEDLINE_ASSIGN_OR_RETURN(bool more, reader.next(e));
    if (!more) break;
    if (e.type == tar::EntryType::kSparse) {
      return fail(Error(Errc::kUnsupported, fmt::format("member '{}' is a GNU sparse file", e.name))
                      .with_object(shard.key)
                      .with_offset(e.header_offset)
                      .with_hint("recreate the shard without GNU tar's --sparse"));
    }
    if (!e.regular()) continue;  // directories, links, devices, fifos: not data
    if (hidden(e.name)) continue;
    builder.add(object, e.name, e.data_offset, e.size, is_zstd(e.name) ? 0 : e.size);
    ++regular;
  }
  if (reader.end() == tar::End::kEofNoMarker && regular > 0) {
    notes.push_back(
        fmt::format("{}: no end-of-archive marker at offset {}; the shard may be "
                    "truncated at a member boundary",
                    shard.key, reader.end_offset()));
  } else if (reader.end() == tar::End::kLoneZeroBlock) {
    notes.push_back(
        fmt::format("{}: a lone zero block at offset {} ends the archive; anything "
                    "after it is ignored",
                    shard.key, reader.end_offset()));
  }
  return {};
}

}  // namespace

Result<void> open_tar_shards(OpenContext& ctx, std::span<const FoundObject> shards) {
  storage::Backend& backend = ctx.backend;
  storage::IoQueue& queue_ref = *ctx.queue;
  const DatasetOptions& options = ctx.options;
  Dataset& ds = ctx.ds;
  SampleBuilder& builder = ctx.builder;
  std::vector<bool>& skipped_objects = ctx.skipped_objects;
  bool all_indexed = true;
  std::vector<std::string> ignored_indexes, old_indexes;
  for (const FoundObject& found : shards) {
    const storage::ObjectInfo* shard = found.info;
    if (options.stop.stop_requested())
      return fail(cancelled("reading the shards' indexes and headers"));
    const auto object = static_cast<std::uint32_t>(ds.objects.size());
    ds.objects.push_back(*shard);
    skipped_objects.resize(ds.objects.size(), false);
    const std::size_t members_before = ds.members.size(), samples_before = ds.samples.size();
    bool indexed = false;
    if (found.index) {
      const std::string& idx_key = found.index->key;
      auto r = members_from_index(backend, queue_ref, *shard, *found.index, object, builder,
                                  options.stop);
      builder.close();
      if (!r && r.error().code() == Errc::kCancelled) return fail(std::move(r).error());
      if (r && *r == IndexUse::kUsed) {
        indexed = true;
      } else {
        // Undo what a half-read index added, then scan.
        ds.members.resize(members_before);
        ds.samples.resize(samples_before);
        if (!r) {
          ignored_indexes.push_back(fmt::format("ignored index {} ({}); scanned the shard instead",
                                                ctx.shown(idx_key), r.error().what()));
        } else if (*r == IndexUse::kOldFormat) {
          old_indexes.push_back(ctx.shown(idx_key));
        }
      }
    }
    if (!indexed) {
      auto scanned =
          members_from_scan(backend, queue_ref, *shard, object, builder, ds.notes, options.stop);
      builder.close();
      if (!scanned) {
        if (!options.skip_bad_objects || scanned.error().code() == Errc::kCancelled) {
          return fail(std::move(scanned).error());
        }
        // Keep the whole samples before the damage; drop the last one read when it has fewer
        // members than the shard's first sample (the damage cut it short), and say so.
        if (ds.samples.size() > samples_before &&
            ds.samples.back().member_count < ds.samples[samples_before].member_count) {
          ds.members.resize(ds.samples.back().first_member);
          ds.samples.pop_back();
        }
        ds.skipped.push_back(scanned.error().what());
        skipped_objects[object] = true;
        all_indexed = false;
        continue;
      }
    }
    all_indexed = all_indexed && indexed;
  }
  ds.indexed = all_indexed;
  note_ignored_indexes(ignored_indexes, old_indexes, ds.notes);
  return {};
}

}  // namespace feedline::loader::detail
