// open_dataset(): list the objects under a root and resolve them into samples (dataset.hpp).
//
// Files: every object is one sample. Tar: every "*.tar" object is a shard; its members come from
// its index "*.tar.idx" when that is intact (version 2, its checksum right) and agrees with the
// shard (its size, and the headers of a few probed members, read in one batch: tar_index.hpp),
// else from a scan of its headers (SequentialReader: 1 MiB chunks with readahead, never one read
// per header). Both paths feed the same SampleBuilder, which groups consecutive members sharing a
// key into one sample covering a single byte range.
//
// A listed root may hold manifests of `feedline gen` (manifest.hpp): one that says the generation
// is still in progress fails the open before anything else is read; a complete one is checked
// against what was found once the samples are resolved.
#include "feedline/loader/dataset.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <unordered_map>

#include "feedline/loader/manifest.hpp"
#include "feedline/loader/tar.hpp"
#include "feedline/loader/tar_index.hpp"
#include "feedline/storage/url_pattern.hpp"
#include "sequential_reader.hpp"

namespace feedline::loader {
namespace {

constexpr std::uint64_t kMaxIndexBytes = std::uint64_t{1} << 30;
// Shards whose ignored index gets a note of its own; the rest are counted in one more line.
constexpr std::size_t kMaxIndexNotes = 5;
constexpr auto kPollSlice = std::chrono::milliseconds(100);

// The key of a member or file name: the path up to the first '.' of its last component.
std::string_view key_of(std::string_view name) {
  const std::size_t slash = name.rfind('/');
  const std::size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  const std::size_t dot = name.find('.', base);
  return dot == std::string_view::npos ? name : name.substr(0, dot);
}

// Hidden: some path component starts with '.' ("./x" and "../x" components do not count).
bool hidden(std::string_view rel) {
  std::size_t start = 0;
  while (start < rel.size()) {
    std::size_t slash = rel.find('/', start);
    if (slash == std::string_view::npos) slash = rel.size();
    const std::string_view part = rel.substr(start, slash - start);
    if (part.starts_with('.') && part != "." && part != "..") return true;
    start = slash + 1;
  }
  return false;
}

bool is_zstd(std::string_view name) { return name.ends_with(".zst"); }

// Groups members into samples as they arrive in storage order. Appends to the dataset's vectors;
// keys and names are copied once (short ones fit in std::string's inline buffer).
class SampleBuilder {
 public:
  explicit SampleBuilder(Dataset& ds) : ds_(ds) {}

  // A regular member of object `object` with its data at [data_offset, data_offset + size).
  void add(std::uint32_t object, std::string_view name, std::uint64_t data_offset,
           std::uint64_t size, std::uint64_t decoded_size) {
    const std::string_view key = key_of(name);
    if (!open_ || object != cur_.object || key != cur_.key) {
      close();
      cur_.object = object;
      cur_.offset = data_offset;
      cur_.length = 0;
      cur_.first_member = static_cast<std::uint32_t>(ds_.members.size());
      cur_.member_count = 0;
      cur_.key.assign(key);
      open_ = true;
    }
    Member& m = ds_.members.emplace_back();
    m.name.assign(name);
    m.offset = data_offset - cur_.offset;
    m.size = size;
    m.zstd = is_zstd(name);
    m.decoded_size = decoded_size;
    ++cur_.member_count;
    cur_.length = data_offset + size - cur_.offset;
  }

  void close() {
    if (!open_) return;
    ds_.samples.push_back(cur_);
    open_ = false;
  }

 private:
  Dataset& ds_;
  Sample cur_;
  bool open_ = false;
};

std::string shown(storage::Backend& backend, std::string_view key) {
  return backend.display_name(key);
}

// Reads a whole (small) object: an index or a manifest of at most max_bytes.
Result<std::string> read_object(storage::Backend& backend, storage::IoQueue& queue,
                                const storage::ObjectInfo& info, const std::stop_token& stop,
                                std::uint64_t max_bytes = kMaxIndexBytes,
                                std::string_view what = "an index") {
  if (info.size > max_bytes) {
    return fail(Error(Errc::kResourceExhausted,
                      fmt::format("{} bytes is too large for {}", info.size, what))
                    .with_object(info.key));
  }
  FEEDLINE_ASSIGN_OR_RETURN(auto handle, backend.open_known(info));
  const std::uint64_t align = std::max<std::uint64_t>(backend.caps().alignment, kPageAlign);
  FEEDLINE_ASSIGN_OR_RETURN(AlignedBuffer buf,
                            AlignedBuffer::allocate(static_cast<std::size_t>(
                                align_up(std::max<std::uint64_t>(handle->size(), 1), align))));
  FEEDLINE_ASSIGN_OR_RETURN(std::uint64_t n,
                            detail::read_sync(queue, *handle, 0, buf.span(), stop));
  return std::string(reinterpret_cast<const char*>(buf.data()), static_cast<std::size_t>(n));
}

// Counts down the completions of a batch of reads.
struct Countdown final : storage::ReadCompletion {
  std::size_t left = 0;
  void on_read_complete(storage::ReadOp&) noexcept override { --left; }
};

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
    queue.poll(1, kPollSlice);
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
  FEEDLINE_ASSIGN_OR_RETURN(std::string text, read_object(backend, queue, idx, stop));
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
    builder.add(object, e.name, e.data_offset, e.size, is_zstd(e.name) ? e.decoded_size : e.size);
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

Error cancelled(std::string_view what) {
  return Error(Errc::kCancelled, fmt::format("stopped while opening the dataset ({})", what));
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
      [&source, &stop](std::uint64_t offset, std::size_t length) -> Result<ConstBytes> {
        if (stop.stop_requested()) return fail(cancelled("scanning a shard's headers"));
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
                      .with_hint("recreate the shard without --sparse"));
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

std::string_view format_name(DatasetFormat f) noexcept {
  switch (f) {
    case DatasetFormat::kFiles:
      return "files";
    case DatasetFormat::kTar:
      return "tar";
    case DatasetFormat::kAuto:
      return "auto";
  }
  return "?";
}

Result<DatasetFormat> parse_format(std::string_view text) {
  if (text == "files") return DatasetFormat::kFiles;
  if (text == "tar") return DatasetFormat::kTar;
  if (text == "auto") return DatasetFormat::kAuto;
  return fail(Error(Errc::kInvalidArgument, fmt::format("unknown dataset format '{}'", text))
                  .with_hint("expected files or tar, or auto to choose from what is there"));
}

std::vector<std::uint32_t> shard_starts(const Dataset& dataset) {
  std::vector<std::uint32_t> starts;
  for (std::size_t i = 0; i < dataset.samples.size(); ++i) {
    if (i == 0 || dataset.samples[i].object != dataset.samples[i - 1].object) {
      starts.push_back(static_cast<std::uint32_t>(i));
    }
  }
  return starts;
}

Result<Dataset> open_dataset(storage::Backend& backend, std::string_view root,
                             const DatasetOptions& options) {
  Dataset ds;
  ds.root = std::string(root);
  // kAuto: tar when any name (listed, or named by the pattern) is a .tar shard.
  DatasetFormat format = options.format;
  auto resolve_format = [&format](auto&& names) {
    if (format != DatasetFormat::kAuto) return;
    format = DatasetFormat::kFiles;
    for (const auto& n : names) {
      if (std::string_view(n).ends_with(".tar")) format = DatasetFormat::kTar;
    }
  };

  // Everything under root/ (recursively); a root naming one object is a dataset of that object.
  std::string prefix(root);
  if (!prefix.empty() && !prefix.ends_with('/')) prefix += '/';
  std::vector<storage::ObjectInfo> listing;
  std::optional<Error> list_error;
  bool listed = false;  // the objects came from listing a directory or prefix
  if (storage::has_brace_pattern(root)) {
    // Objects named by brace notation (train-{000000..000127}.tar): no listing, one stat each
    // (concurrent on network backends); tar indexes are used when every shard has one. A files
    // dataset asks only for the sizes a listing gives: a web server without one would answer a
    // HEAD per object, each a round trip before its GET, so those objects are read with their
    // size unknown (storage::kUnknownSize) and learn it from their GET. Tar shards need their
    // sizes (the index's check, the header scan's end): they keep the HEADs.
    FEEDLINE_ASSIGN_OR_RETURN(std::vector<std::string> keys, storage::expand_braces(root));
    const std::string_view head = root.substr(0, root.find('{'));
    const std::size_t slash = head.rfind('/');
    prefix =
        slash == std::string_view::npos ? std::string() : std::string(head.substr(0, slash + 1));
    resolve_format(keys);
    FEEDLINE_ASSIGN_OR_RETURN(listing, format == DatasetFormat::kTar
                                           ? backend.stat_many(keys)
                                           : backend.stat_many_if_listed(keys));
    if (format == DatasetFormat::kTar && options.use_index) {
      std::vector<std::string> idx_keys;
      for (const auto& k : keys) idx_keys.push_back(k + std::string(kTarIndexSuffix));
      if (auto idx = backend.stat_many(idx_keys)) {
        for (auto& o : *idx) listing.push_back(std::move(o));
      } else {
        ds.notes.push_back(
            "not every shard has a .tar.idx index: reading the shards' headers instead");
      }
    }
  } else if (auto l = backend.list(prefix)) {
    listing = std::move(*l);
    listed = true;
  } else if (l.error().code() == Errc::kUnsupported) {
    list_error = std::move(l).error();  // no listing (plain HTTP): the root may name one object
  } else if (l.error().code() != Errc::kNotFound) {
    return fail(std::move(l).error());
  }
  if (listing.empty() && !root.empty() && !root.ends_with('/') &&
      !storage::has_brace_pattern(root)) {
    if (auto st = backend.stat(root)) {
      const std::size_t slash = root.rfind('/');
      prefix =
          slash == std::string_view::npos ? std::string() : std::string(root.substr(0, slash + 1));
      listing.push_back(std::move(*st));
      listed = false;
    } else if (st.error().code() != Errc::kNotFound &&
               (list_error || st.error().code() != Errc::kIsDirectory)) {
      return fail(std::move(st).error());  // a FIFO or device named as the root, a server's no
    }
  }
  if (listing.empty() && list_error) return fail(std::move(*list_error));
  // Not regular objects (local FIFOs, sockets, devices): opening a FIFO would block, a device has
  // no size. Left out, and said so.
  {
    std::vector<std::string> special;
    std::erase_if(listing, [&](const storage::ObjectInfo& o) {
      if (o.special) special.push_back(shown(backend, o.key));
      return o.special;
    });
    if (!special.empty()) {
      ds.notes.push_back(fmt::format(
          "left out {} object(s) that are not regular files (FIFOs, sockets or devices): "
          "{}{}",
          special.size(), special.front(), special.size() > 1 ? ", ..." : ""));
    }
  }
  if (format == DatasetFormat::kAuto) {
    std::vector<std::string_view> names;
    for (const auto& o : listing) {
      const std::string_view rel =
          std::string_view(o.key).substr(std::min(prefix.size(), o.key.size()));
      if (!hidden(rel)) names.push_back(rel);
    }
    resolve_format(names);
  }
  ds.format = format;
  auto relative = [&](const storage::ObjectInfo& o) {
    return std::string_view(o.key).substr(std::min(prefix.size(), o.key.size()));
  };
  auto skipped = [&](std::string_view rel) {
    return hidden(rel) || rel.find(".feedline-tmp-") != std::string_view::npos;
  };

  // One queue for every read the open makes (manifests, indexes, probes, scans), made on first
  // use: a files dataset without a manifest reads nothing.
  std::unique_ptr<storage::IoQueue> queue;
  auto get_queue = [&]() -> Result<storage::IoQueue*> {
    if (!queue) {
      FEEDLINE_ASSIGN_OR_RETURN(
          queue, backend.make_queue(
                     {.depth = static_cast<unsigned>(kTarIndexProbes), .single_thread = true}));
    }
    return queue.get();
  };
  auto count_reads = [&] {
    if (!queue) return;
    ds.open_reads = queue->stats().ops;
    ds.open_bytes = queue->stats().bytes;
  };

  // Manifests of feedline gen: an unfinished generation fails the open here, before anything
  // else is read; complete ones are checked once the samples are resolved.
  struct FoundManifest {
    std::string key, dir;
    bool root = false;
    DatasetManifest manifest;
  };
  std::vector<FoundManifest> manifests;
  for (const storage::ObjectInfo& o : listing) {
    if (!listed) break;  // one object, or objects named by a brace pattern: they name themselves
    const std::string_view rel = relative(o);
    if (!rel.ends_with(kManifestName)) continue;
    const std::string_view dir = rel.substr(0, rel.size() - kManifestName.size());
    if (!(dir.empty() || dir.ends_with('/')) || hidden(dir)) continue;
    FEEDLINE_ASSIGN_OR_RETURN(storage::IoQueue * q, get_queue());
    FEEDLINE_ASSIGN_OR_RETURN(
        std::string text,
        read_object(backend, *q, o, options.stop, kMaxManifestBytes, "a dataset manifest"));
    FEEDLINE_ASSIGN_OR_RETURN(DatasetManifest m, parse_manifest(text, shown(backend, o.key)));
    const std::string dataset =
        dir.empty() ? shown(backend, root)
                    : shown(backend, prefix + std::string(dir.substr(0, dir.size() - 1)));
    if (!m.complete) {
      return fail(Error(Errc::kCorrupt,
                        fmt::format("{} is incomplete: feedline gen did not finish writing it "
                                    "(interrupted, or a write failed: its manifest says "
                                    "'state in-progress')",
                                    dataset))
                      .with_object(shown(backend, o.key))
                      .with_hint(fmt::format(
                          "re-run the same feedline gen to finish it, with the settings "
                          "recorded in {}, or delete {} to use the objects that are there",
                          kManifestName, kManifestName)));
    }
    manifests.push_back({o.key, prefix + std::string(dir), dir.empty(), std::move(m)});
  }

  SampleBuilder builder(ds);
  std::vector<bool> skipped_objects;  // by index in ds.objects: left out under skip_bad_objects
  if (format == DatasetFormat::kFiles) {
    for (storage::ObjectInfo& o : listing) {
      const std::string_view rel = relative(o);
      if (rel.empty() || skipped(rel) || rel.ends_with(kTarIndexSuffix)) continue;
      const auto object = static_cast<std::uint32_t>(ds.objects.size());
      // Size unknown: the sample's length and its member's size are kUnknownSize until read.
      const bool unknown = o.size == storage::kUnknownSize;
      builder.add(object, rel, 0, o.size, is_zstd(rel) || unknown ? 0 : o.size);
      builder.close();
      ds.objects.push_back(std::move(o));
    }
  } else {
    std::unordered_map<std::string_view, const storage::ObjectInfo*> indexes;
    std::vector<const storage::ObjectInfo*> shards;
    for (const storage::ObjectInfo& o : listing) {
      const std::string_view rel = relative(o);
      if (rel.empty() || skipped(rel)) continue;
      if (rel.ends_with(".tar")) shards.push_back(&o);
      if (rel.ends_with(".tar.idx")) indexes.emplace(o.key, &o);
    }
    if (shards.empty()) {
      return fail(
          Error(Errc::kNotFound, fmt::format("no tar shards under {}", shown(backend, root)))
              .with_object(shown(backend, root))
              .with_hint(listing.empty() ? "check the path"
                                         : "no object ends in .tar; for one sample per file "
                                           "use --format files"));
    }
    FEEDLINE_ASSIGN_OR_RETURN(storage::IoQueue * q, get_queue());
    storage::IoQueue& queue_ref = *q;
    ds.objects.reserve(shards.size());
    skipped_objects.assign(shards.size(), false);
    bool all_indexed = true;
    std::vector<std::string> ignored_indexes, old_indexes;
    for (const storage::ObjectInfo* shard : shards) {
      if (options.stop.stop_requested())
        return fail(cancelled("reading the shards' indexes and headers"));
      const auto object = static_cast<std::uint32_t>(ds.objects.size());
      ds.objects.push_back(*shard);
      const std::size_t members_before = ds.members.size(), samples_before = ds.samples.size();
      bool indexed = false;
      if (options.use_index) {
        const std::string idx_key = shard->key + std::string(kTarIndexSuffix);
        if (auto it = indexes.find(idx_key); it != indexes.end()) {
          auto r = members_from_index(backend, queue_ref, *shard, *it->second, object, builder,
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
              ignored_indexes.push_back(
                  fmt::format("ignored index {} ({}); scanned the shard instead",
                              shown(backend, idx_key), r.error().what()));
            } else if (*r == IndexUse::kOldFormat) {
              old_indexes.push_back(shown(backend, idx_key));
            }
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
  }
  count_reads();

  for (const FoundManifest& f : manifests) {
    FEEDLINE_TRY(check_manifest(
        f.manifest, f.key, f.dir, f.root, skipped_objects, options.skip_bad_objects,
        [&backend](std::string_view key) { return shown(backend, key); }, ds));
  }

  if (ds.samples.empty()) {
    return fail(Error(Errc::kNotFound, fmt::format("no samples under {}", shown(backend, root)))
                    .with_object(shown(backend, root))
                    .with_hint(ds.objects.empty() ? "check the path, or run feedline gen first"
                                                  : "the shards hold no regular members"));
  }
  ds.total_bytes = 0;
  ds.max_sample_bytes = 0;
  for (const Sample& s : ds.samples) {
    if (s.length == storage::kUnknownSize) continue;  // counted by no total until read
    ds.total_bytes += s.length;
    ds.max_sample_bytes = std::max(ds.max_sample_bytes, s.length);
  }
  return ds;
}

}  // namespace feedline::loader
