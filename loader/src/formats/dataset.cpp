// open_dataset(): list the objects under a root and resolve them into samples (dataset.hpp).
//
// This file lists, picks the format (the one asked for, or auto's choice among the registry's,
// format.hpp) and its objects, and checks manifests. The objects go, with the index listed beside
// each, to the format's opener (FormatSpec::open: files/, tar/, tfrecord/, npy/), which reads
// their headers through one IoQueue and fills the Dataset through one SampleBuilder
// (open_common.hpp); a files dataset's opener reads nothing.
//
// A listed root may hold manifests of `feedline gen` (manifest.hpp): one that says the generation
// is still in progress fails the open before anything else is read; a complete one is checked
// against what was found once the samples are resolved.
#include "feedline/loader/dataset.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "feedline/loader/format.hpp"
#include "feedline/loader/manifest.hpp"
#include "feedline/loader/tar_index.hpp"
#include "feedline/storage/url_pattern.hpp"
#include "open_common.hpp"

namespace feedline::loader {
namespace {

using detail::hidden;
using detail::SampleBuilder;

std::string shown(storage::Backend& backend, std::string_view key) {
  return backend.display_name(key);
}

// auto's choice, made: a registry without a fallback format (files) may have found none.
Result<void> claimed(DatasetFormat format, const FormatRegistry& formats, std::string_view root,
                     storage::Backend& backend) {
  if (!format.is_auto()) return {};
  return fail(Error(Errc::kNotFound,
                    fmt::format("no object under {} is of a dataset format this open knows ({})",
                                shown(backend, root), formats.names_text()))
                  .with_object(shown(backend, root))
                  .with_hint("set the dataset's format, or register one that claims these "
                             "objects"));
}

// What a string holds on the heap: nothing within its own buffer (15 characters, libstdc++), else
// its capacity and the terminator in malloc's 16-byte granules, with malloc's 8-byte header.
std::uint64_t heap_bytes(const std::string& s) {
  return s.capacity() > 15 ? (s.capacity() + 1 + 8 + 15) / 16 * 16 : 0;
}

// The memory the dataset's tables hold (Dataset::listing_bytes).
std::uint64_t held_bytes(const Dataset& ds) {
  std::uint64_t n = ds.objects.capacity() * sizeof(storage::ObjectInfo) +
                    ds.samples.capacity() * sizeof(Sample) + ds.members.capacity() * sizeof(Member);
  for (const auto& o : ds.objects) n += heap_bytes(o.key);
  for (const auto& s : ds.samples) n += heap_bytes(s.key);
  for (const auto& m : ds.members) n += heap_bytes(m.name);
  return n;
}

}  // namespace

std::vector<std::uint32_t> shard_starts(const Dataset& dataset) {
  std::vector<std::uint32_t> starts;
  for (std::size_t i = 0; i < dataset.samples.size(); ++i) {
    if (i == 0 || dataset.samples[i].object != dataset.samples[i - 1].object) {
      starts.push_back(static_cast<std::uint32_t>(i));
    }
  }
  return starts;
}

namespace {

// open_dataset(), its errors naming objects by key.
Result<Dataset> open_keys(storage::Backend& backend, std::string_view root,
                          const DatasetOptions& options) {
  Dataset ds;
  ds.root = std::string(root);
  const FormatRegistry& formats = options.formats ? *options.formats : builtin_formats();
  // kAuto: from the names (listed, or named by the pattern): the first of the registry's formats
  // that claims one (by its extensions), else its fallback (files).
  DatasetFormat format = options.format;
  auto resolve_format = [&format, &ds, &formats](auto&& names) {
    if (!format.is_auto()) return;
    std::vector<const FormatSpec*> seen;
    for (const auto& n : names) {
      const std::string_view name(n);
      if (name.ends_with(kTarIndexSuffix)) continue;
      for (const FormatSpec* f : formats.formats()) {
        if (f->names_object(name) && std::find(seen.begin(), seen.end(), f) == seen.end())
          seen.push_back(f);
      }
    }
    std::string kinds;  // in the order of precedence
    for (const FormatSpec* f : formats.formats()) {
      if (std::find(seen.begin(), seen.end(), f) == seen.end()) continue;
      if (kinds.empty()) format = DatasetFormat(*f);
      kinds += fmt::format("{}{}", kinds.empty() ? "" : ", ", f->name);
    }
    if (format.is_auto() && formats.fallback()) format = DatasetFormat(*formats.fallback());
    if (seen.size() > 1) {
      ds.notes.push_back(
          fmt::format("the dataset holds objects of several formats ({}): read as {} "
                      "(set the format to read another)",
                      kinds, format.name()));
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
    // (concurrent on network backends); tar and TFRecord indexes are used when every object has
    // one. A files dataset asks only for the sizes a listing gives: a web server without one
    // would answer a HEAD per object, each a round trip before its GET, so those objects are read
    // with their size unknown (storage::kUnknownSize) and learn it from their GET. The other
    // formats need their sizes (the index's check, the header scan's end, the zip directory at
    // the end): they keep the HEADs.
    FEEDLINE_ASSIGN_OR_RETURN(std::vector<std::string> keys, storage::expand_braces(root));
    const std::string_view head = root.substr(0, root.find('{'));
    const std::size_t slash = head.rfind('/');
    prefix =
        slash == std::string_view::npos ? std::string() : std::string(head.substr(0, slash + 1));
    resolve_format(keys);
    FEEDLINE_TRY(claimed(format, formats, root, backend));
    FEEDLINE_ASSIGN_OR_RETURN(listing, format.spec().reads_objects
                                           ? backend.stat_many(keys)
                                           : backend.stat_many_if_listed(keys));
    if (format.spec().indexed && options.use_index) {
      std::vector<std::string> idx_keys;
      for (const auto& k : keys) idx_keys.push_back(k + std::string(kTarIndexSuffix));
      if (auto idx = backend.stat_many(idx_keys)) {
        for (auto& o : *idx) listing.push_back(std::move(o));
      } else {
        ds.notes.emplace_back(format.spec().missing_index_note);
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
  // What the listing left out, each kind in one note naming the first: not regular objects
  // (local FIFOs, sockets, devices: opening a FIFO would block, a device has no size), links to
  // directories (not followed), links to nothing, directories that may not be read.
  {
    struct Kind {
      storage::LeftOut why;
      const char* what;
      const char* hint;
      std::vector<std::string> names;
    };
    Kind kinds[] = {
        {storage::LeftOut::kSpecialFile,
         "object(s) that are not regular files (FIFOs, sockets or devices)",
         "",
         {}},
        {storage::LeftOut::kLinkToDirectory,
         "symbolic link(s) to directories, not followed",
         " (links to directories are not followed, as find and tar do not: their files could "
         "list twice, or loop; open the link's target as a dataset of its own, or put the files "
         "themselves, or a bind mount, under the root)",
         {}},
        {storage::LeftOut::kDanglingLink,
         "symbolic link(s) to nothing (or a loop of links)",
         "",
         {}},
        {storage::LeftOut::kUnreadableDirectory,
         "directory(ies) this user may not read (permission denied)",
         " (their files are not in the dataset: check the directories' permissions)",
         {}},
    };
    std::erase_if(listing, [&](const storage::ObjectInfo& o) {
      if (o.left_out == storage::LeftOut::kNo) return false;
      if (detail::hidden(std::string_view(o.key).substr(std::min(prefix.size(), o.key.size())))) {
        return true;  // hidden, as every hidden object is: nothing to say
      }
      for (Kind& k : kinds) {
        if (k.why == o.left_out) k.names.push_back(shown(backend, o.key));
      }
      return true;
    });
    for (const Kind& k : kinds) {
      if (k.names.empty()) continue;
      ds.notes.push_back(
          fmt::format("left out {} {}: {}{}{}", k.names.size(), k.what,
                      fmt::join(k.names.begin(),
                                k.names.begin() + std::min<std::size_t>(k.names.size(), 3), ", "),
                      k.names.size() > 3 ? ", ..." : "", k.hint));
    }
    // Keys a server's listing gave outside the prefix (or with "." / ".." segments that would
    // make a request for another object): never read.
    std::vector<std::string> outside;
    std::erase_if(listing, [&](const storage::ObjectInfo& o) {
      if (o.outside) outside.push_back(shown(backend, o.key));
      return o.outside;
    });
    if (!outside.empty()) {
      ds.notes.push_back(fmt::format(
          "left out {} key(s) the listing gave outside {} (or with '.' or '..' segments, which "
          "would read another object): {}{}",
          outside.size(), shown(backend, prefix), outside.front(),
          outside.size() > 1 ? ", ..." : ""));
    }
  }
  if (format.is_auto()) {
    std::vector<std::string_view> names;
    for (const auto& o : listing) {
      const std::string_view rel =
          std::string_view(o.key).substr(std::min(prefix.size(), o.key.size()));
      if (!hidden(rel)) names.push_back(rel);
    }
    resolve_format(names);
    FEEDLINE_TRY(claimed(format, formats, root, backend));
  }
  ds.format = format;
  const FormatSpec& spec = format.spec();
  auto relative = [&](const storage::ObjectInfo& o) {
    return std::string_view(o.key).substr(std::min(prefix.size(), o.key.size()));
  };
  auto skipped = [&](std::string_view rel) {
    return hidden(rel) || rel.find(".feedline-tmp-") != std::string_view::npos;
  };

  // One queue for every read the open makes (manifests, indexes, probes, scans), made on first
  // use: a files dataset without a manifest reads nothing. Tar reads a shard at a time (its
  // probes, or its scan); the other formats batch small reads over many files.
  std::unique_ptr<storage::IoQueue> queue;
  auto get_queue = [&]() -> Result<storage::IoQueue*> {
    if (!queue) {
      const std::size_t depth = spec.open_depth ? spec.open_depth : detail::kOpenBatchDepth;
      FEEDLINE_ASSIGN_OR_RETURN(queue, backend.make_queue({.depth = static_cast<unsigned>(depth),
                                                           .single_thread = true}));
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
        detail::read_object(backend, *q, o, options.stop, kMaxManifestBytes, "a dataset manifest"));
    FEEDLINE_ASSIGN_OR_RETURN(DatasetManifest m,
                              parse_manifest(text, shown(backend, o.key), formats));
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
  {
    // The format's objects, found here (each with the index listed beside it), read by its opener.
    std::unordered_map<std::string_view, const storage::ObjectInfo*> indexes;
    std::vector<detail::FoundObject> found;
    bool any_named = false;
    for (storage::ObjectInfo& o : listing) {
      const std::string_view rel = relative(o);
      if (rel.empty() || skipped(rel)) continue;
      if (rel.ends_with(kTarIndexSuffix)) {
        indexes.emplace(o.key, &o);
        continue;
      }
      any_named = any_named || spec.names_object(rel);
      found.push_back({&o, rel, nullptr});
    }
    // A format that claims objects by name reads those alone, or every object when none is so
    // named where it allows that (TFRecord files need no extension: TensorFlow's own
    // "train-00000-of-01024"); one that claims none (files) reads every object.
    if (!spec.extensions.empty()) {
      if (!spec.any_object_when_none_named || any_named) {
        std::erase_if(found,
                      [&](const detail::FoundObject& f) { return !spec.names_object(f.rel); });
      }
      if (found.empty()) {
        const std::string what = spec.objects_noun.empty() ? fmt::format("{} objects", spec.name)
                                                           : std::string(spec.objects_noun);
        return fail(
            Error(Errc::kNotFound, fmt::format("no {} under {}", what, shown(backend, root)))
                .with_object(shown(backend, root))
                .with_hint(listing.empty()
                               ? std::string("check the path")
                               : fmt::format("no object ends in {}; {}", spec.extensions.front(),
                                             spec.no_objects_hint.empty()
                                                 ? fmt::format("set the dataset's format ({})",
                                                               formats.names_text())
                                                 : std::string(spec.no_objects_hint))));
      }
    }
    if (spec.indexed && options.use_index) {
      for (detail::FoundObject& f : found) {
        if (auto it = indexes.find(f.info->key + std::string(kTarIndexSuffix));
            it != indexes.end()) {
          f.index = it->second;
        }
      }
    }
    storage::IoQueue* q = nullptr;
    if (spec.reads_objects) {
      FEEDLINE_ASSIGN_OR_RETURN(q, get_queue());
    }
    detail::OpenContext ctx{backend,
                            q,
                            options,
                            ds,
                            builder,
                            skipped_objects,
                            [&backend](std::string_view key) { return shown(backend, key); },
                            std::max<std::uint64_t>(backend.caps().alignment, kPageAlign)};
    ds.objects.reserve(found.size());
    FEEDLINE_TRY(spec.open(ctx, found));
  }
  count_reads();

  for (const FoundManifest& f : manifests) {
    FEEDLINE_TRY(check_manifest(
        f.manifest, f.key, f.dir, f.root, skipped_objects, options.skip_bad_objects,
        [&backend](std::string_view key) { return shown(backend, key); }, ds));
  }

  if (ds.samples.empty()) {
    return fail(
        Error(Errc::kNotFound, fmt::format("no samples under {}", shown(backend, root)))
            .with_object(shown(backend, root))
            .with_hint(std::string(ds.objects.empty() ? "check the path, or run feedline gen first"
                                   : spec.no_samples_hint.empty() ? "its objects hold no samples"
                                                                  : spec.no_samples_hint)));
  }
  ds.total_bytes = 0;
  ds.max_sample_bytes = 0;
  for (const Sample& s : ds.samples) {
    if (s.length == storage::kUnknownSize) continue;  // counted by no total until read
    ds.total_bytes += s.length;
    ds.max_sample_bytes = std::max(ds.max_sample_bytes, s.length);
  }
  ds.listing_bytes = held_bytes(ds);
  return ds;
}

}  // namespace

std::uint64_t dataset_table_bytes(const Dataset& d) {
  // A string's heap block as glibc's malloc rounds it (none while it fits std::string's inline
  // buffer).
  auto heap = [](const std::string& s) -> std::uint64_t {
    return s.capacity() > 15 ? std::max<std::uint64_t>(32, align_up(s.capacity() + 1 + 8, 16)) : 0;
  };
  std::uint64_t bytes = d.samples.size() * sizeof(Sample) + d.members.size() * sizeof(Member) +
                        d.objects.size() * sizeof(storage::ObjectInfo);
  for (const Sample& s : d.samples) bytes += heap(s.key);
  for (const Member& m : d.members) bytes += heap(m.name);
  for (const storage::ObjectInfo& o : d.objects) bytes += heap(o.key);
  return bytes;
}

// open_keys() with its errors as the user reads them: objects named by their URL ("http://host/
// d/0.tar" for "/d/0.tar"), and a stop request (Ctrl-C) met anywhere in the open, a read
// cancelled under it included (whose error may name no object, only an offset), said one way:
// interrupted while opening what.
Result<Dataset> open_dataset(storage::Backend& backend, std::string_view root,
                             const DatasetOptions& options) {
  auto r = open_keys(backend, root, options);
  if (r) return r;
  Error e = std::move(r).error();
  backend.show_object(e);
  if (e.code() != Errc::kCancelled) return fail(std::move(e));
  const std::string dataset = shown(backend, root);
  return fail(
      Error(Errc::kCancelled, fmt::format("interrupted while opening the dataset {}", dataset))
          .with_object(e.object().empty() ? dataset : e.object()));
}
}  // namespace feedline::loader
