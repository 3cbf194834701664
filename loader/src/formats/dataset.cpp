// open_dataset(): list the objects under a root and resolve them into samples (dataset.hpp).
//
// Files: every object is one sample. Tar: every "*.tar" object is a shard; its members come from
// its index "*.tar.idx" when that is present and consistent with the shard, else from a scan of
// its headers (SequentialReader: 1 MiB chunks with readahead, never one read per header). Both
// paths feed the same SampleBuilder, which groups consecutive members sharing a key into one
// sample covering a single byte range.
#include "feedline/loader/dataset.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "feedline/loader/tar.hpp"
#include "feedline/loader/tar_index.hpp"
#include "feedline/storage/url_pattern.hpp"
#include "sequential_reader.hpp"

namespace feedline::loader {
namespace {

constexpr std::uint64_t kMaxIndexBytes = std::uint64_t{1} << 30;

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

// Reads a whole (small) object.
Result<std::string> read_object(storage::Backend& backend, storage::IoQueue& queue,
                                const storage::ObjectInfo& info) {
  if (info.size > kMaxIndexBytes) {
    return fail(Error(Errc::kResourceExhausted,
                      fmt::format("{} bytes is too large for an index", info.size))
                    .with_object(info.key));
  }
  FEEDLINE_ASSIGN_OR_RETURN(auto handle, backend.open_known(info));
  const std::uint64_t align = std::max<std::uint64_t>(backend.caps().alignment, kPageAlign);
  FEEDLINE_ASSIGN_OR_RETURN(AlignedBuffer buf,
                            AlignedBuffer::allocate(static_cast<std::size_t>(
                                align_up(std::max<std::uint64_t>(handle->size(), 1), align))));
  FEEDLINE_ASSIGN_OR_RETURN(std::uint64_t n, detail::read_sync(queue, *handle, 0, buf.span()));
  return std::string(reinterpret_cast<const char*>(buf.data()), static_cast<std::size_t>(n));
}

// Members of one shard from its index. Fails (for a note, then a scan) when the index is
// unreadable, corrupt or stale.
Result<void> members_from_index(storage::Backend& backend, storage::IoQueue& queue,
                                const storage::ObjectInfo& shard, const storage::ObjectInfo& idx,
                                std::uint32_t object, SampleBuilder& builder) {
  FEEDLINE_ASSIGN_OR_RETURN(std::string text, read_object(backend, queue, idx));
  FEEDLINE_ASSIGN_OR_RETURN(TarIndex index, parse_tar_index(text, idx.key));
  if (index.shard_bytes != shard.size) {
    return fail(Error(Errc::kCorrupt, fmt::format("stale index: written for a {}-byte shard, the "
                                                  "shard has {} bytes",
                                                  index.shard_bytes, shard.size))
                    .with_object(idx.key));
  }
  for (const TarIndexEntry& e : index.entries) {
    if (hidden(e.name)) continue;
    builder.add(object, e.name, e.data_offset, e.size, is_zstd(e.name) ? e.decoded_size : e.size);
  }
  return {};
}

// Members of one shard from its headers.
Result<void> members_from_scan(storage::Backend& backend, storage::IoQueue& queue,
                               const storage::ObjectInfo& shard, std::uint32_t object,
                               SampleBuilder& builder, std::vector<std::string>& notes) {
  FEEDLINE_ASSIGN_OR_RETURN(auto handle, backend.open_known(shard));
  const std::uint64_t align = std::max<std::uint64_t>(backend.caps().alignment, kPageAlign);
  const std::size_t chunk = static_cast<std::size_t>(
      std::max<std::uint64_t>(detail::SequentialReader::kDefaultChunk,
                              align_up(tar::kMaxExtendedHeader + 2 * align, align)));
  detail::SequentialReader source(queue, *handle, align, chunk);
  tar::Reader reader(
      shard.key, handle->size(),
      [&source](std::uint64_t offset, std::size_t length) { return source.read(offset, length); });
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
  }
  return "?";
}

Result<DatasetFormat> parse_format(std::string_view text) {
  if (text == "files") return DatasetFormat::kFiles;
  if (text == "tar") return DatasetFormat::kTar;
  return fail(Error(Errc::kInvalidArgument, fmt::format("unknown dataset format '{}'", text))
                  .with_hint("expected files or tar"));
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
  ds.format = options.format;
  ds.root = std::string(root);

  // Everything under root/ (recursively); a root naming one object is a dataset of that object.
  std::string prefix(root);
  if (!prefix.empty() && !prefix.ends_with('/')) prefix += '/';
  std::vector<storage::ObjectInfo> listing;
  std::optional<Error> list_error;
  if (storage::has_brace_pattern(root)) {
    // Objects named by brace notation (train-{000000..000127}.tar): no listing, one stat each
    // (concurrent on network backends); tar indexes are used when every shard has one.
    FEEDLINE_ASSIGN_OR_RETURN(std::vector<std::string> keys, storage::expand_braces(root));
    const std::string_view head = root.substr(0, root.find('{'));
    const std::size_t slash = head.rfind('/');
    prefix = slash == std::string_view::npos ? std::string() : std::string(head.substr(0, slash + 1));
    FEEDLINE_ASSIGN_OR_RETURN(listing, backend.stat_many(keys));
    if (options.format == DatasetFormat::kTar && options.use_index) {
      std::vector<std::string> idx_keys;
      for (const auto& k : keys) idx_keys.push_back(k + std::string(kTarIndexSuffix));
      if (auto idx = backend.stat_many(idx_keys)) {
        for (auto& o : *idx) listing.push_back(std::move(o));
      } else {
        ds.notes.push_back("not every shard has a .tar.idx index: reading the shards' headers instead");
      }
    }
  } else if (auto l = backend.list(prefix)) {
    listing = std::move(*l);
  } else if (l.error().code() == Errc::kUnsupported) {
    list_error = std::move(l).error();  // no listing (plain HTTP): the root may name one object
  } else if (l.error().code() != Errc::kNotFound) {
    return fail(std::move(l).error());
  }
  if (listing.empty() && !root.empty() && !root.ends_with('/') && !storage::has_brace_pattern(root)) {
    if (auto st = backend.stat(root)) {
      const std::size_t slash = root.rfind('/');
      prefix =
          slash == std::string_view::npos ? std::string() : std::string(root.substr(0, slash + 1));
      listing.push_back(std::move(*st));
    } else if (list_error && st.error().code() != Errc::kNotFound) {
      return fail(std::move(st).error());
    }
  }
  if (listing.empty() && list_error) return fail(std::move(*list_error));
  auto relative = [&](const storage::ObjectInfo& o) {
    return std::string_view(o.key).substr(std::min(prefix.size(), o.key.size()));
  };
  auto skipped = [&](std::string_view rel) {
    return hidden(rel) || rel.find(".feedline-tmp-") != std::string_view::npos;
  };

  SampleBuilder builder(ds);
  if (options.format == DatasetFormat::kFiles) {
    for (storage::ObjectInfo& o : listing) {
      const std::string_view rel = relative(o);
      if (rel.empty() || skipped(rel) || rel.ends_with(kTarIndexSuffix)) continue;
      const auto object = static_cast<std::uint32_t>(ds.objects.size());
      builder.add(object, rel, 0, o.size, is_zstd(rel) ? 0 : o.size);
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
    FEEDLINE_ASSIGN_OR_RETURN(auto queue, backend.make_queue({.depth = 2, .single_thread = true}));
    ds.objects.reserve(shards.size());
    bool all_indexed = true;
    for (const storage::ObjectInfo* shard : shards) {
      const auto object = static_cast<std::uint32_t>(ds.objects.size());
      ds.objects.push_back(*shard);
      const std::size_t members_before = ds.members.size(), samples_before = ds.samples.size();
      bool indexed = false;
      if (options.use_index) {
        const std::string idx_key = shard->key + std::string(kTarIndexSuffix);
        if (auto it = indexes.find(idx_key); it != indexes.end()) {
          auto r = members_from_index(backend, *queue, *shard, *it->second, object, builder);
          builder.close();
          if (r) {
            indexed = true;
          } else {
            // Undo what a half-read index added, then scan.
            ds.members.resize(members_before);
            ds.samples.resize(samples_before);
            ds.notes.push_back(fmt::format("ignored index {} ({}); scanned the shard instead",
                                           idx_key, r.error().what()));
          }
        }
      }
      if (!indexed) {
        auto scanned = members_from_scan(backend, *queue, *shard, object, builder, ds.notes);
        builder.close();
        if (!scanned) {
          if (!options.skip_bad_objects) return fail(std::move(scanned).error());
          // Keep the whole samples before the damage; drop the last one read when it has fewer
          // members than the shard's first sample (the damage cut it short), and say so.
          if (ds.samples.size() > samples_before &&
              ds.samples.back().member_count < ds.samples[samples_before].member_count) {
            ds.members.resize(ds.samples.back().first_member);
            ds.samples.pop_back();
          }
          ds.skipped.push_back(scanned.error().what());
          continue;
        }
      }
      all_indexed = all_indexed && indexed;
    }
    ds.indexed = all_indexed;
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
    ds.total_bytes += s.length;
    ds.max_sample_bytes = std::max(ds.max_sample_bytes, s.length);
  }
  return ds;
}

}  // namespace feedline::loader
