// Opening npz and npy datasets (npy.hpp, zip.hpp): each archive's zip directory and each array's
// .npy header, read in batches over many files.
//
// npz, for a group of kOpenBatchDepth archives: one batch of tail reads (the last 64 KiB: the end
// records and, as a rule, the central directory), a batch for the directories that lie further
// back, one batch of reads at each array's local header (kHeadBytes: the local header, its name and
// extra field, and the .npy header, as a rule), and a last batch for .npy headers that did not fit.
// So 168 unet3d archives cost 3 rounds of reads (plus 1 for odd archives), not ~500 serial reads.
// npy, for a group: one batch of reads of each file's first kHeadBytes, one more for longer
// headers.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>

#include "../open_common.hpp"
#include "feedline/loader/npy.hpp"
#include "feedline/loader/zip.hpp"

namespace feedline::loader::detail {
namespace {

constexpr std::uint64_t kHeadBytes = 4096;
// Arrays whose headers are read in one batch (each read takes a buffer of kHeadBytes or two).
constexpr std::size_t kHeadBatch = 256;

std::string array_label(std::string_view array) { return fmt::format("array '{}'", array); }

// An object's samples in the making, or why it cannot be read.
struct ObjectState {
  std::unique_ptr<storage::ObjectHandle> handle;
  std::vector<SampleBuilder::MemberSpec> members;  // in file order
  std::optional<Error> error;
};

// An array whose .npy header is still to be parsed: where it starts, how far its bytes may go.
struct PendingArray {
  std::size_t object = 0;         // position in the group
  std::string name;               // member name
  std::string label;              // "array 'x'"
  std::uint64_t data_offset = 0;  // of the .npy (its header) in the object
  std::uint64_t bytes = 0;        // of the .npy in all: header and array
};

// Checks the .npy header in `head` (the object's bytes from p.data_offset) and adds its member;
// false when `head` does not hold the whole header (read more).
Result<bool> add_array(const PendingArray& p, ConstBytes head, ObjectState& st,
                       std::string_view object) {
  auto with_object = [&](Error e) { return fail(std::move(e).with_object(std::string(object))); };
  const auto size = npy_header_size(head, p.label);
  if (!size) {
    if (head.size() < kNpyPreludeV2 && head.size() < p.bytes) return false;
    return with_object(size.error());
  }
  if (*size > p.bytes) {
    return with_object(
        Error(Errc::kCorrupt, fmt::format("{}: its .npy header ({} bytes) runs past its {} bytes "
                                          "(truncated?)",
                                          p.label, *size, p.bytes))
            .with_offset(p.data_offset));
  }
  if (head.size() < *size) return false;
  auto h = parse_npy_header(head, p.label);
  if (!h) return with_object(std::move(h).error());
  const std::uint64_t have = p.bytes - h->header_bytes;
  if (h->data_bytes != have) {
    return with_object(
        Error(Errc::kCorrupt,
              h->data_bytes > have
                  ? fmt::format("{}: cut short: its shape {} of '{}' makes {} bytes, only {} "
                                "follow its header (truncated?)",
                                p.label, fmt::join(h->shape, "x"), h->descr, h->data_bytes, have)
                  : fmt::format("{}: {} bytes follow its header, its shape {} of '{}' makes {}",
                                p.label, have, fmt::join(h->shape, "x"), h->descr, h->data_bytes))
            .with_offset(p.data_offset + h->header_bytes));
  }
  st.members.push_back(
      {p.name, p.data_offset + h->header_bytes, h->data_bytes, MemberCheck::kNone});
  return true;
}

// Parses the .npy headers of `pending`: from `first` (each one's first bytes, as read), and for
// those that did not hold the whole header, from one more batch of reads.
Result<void> parse_arrays(OpenContext& ctx, std::span<const FoundObject> files,
                          std::span<ObjectState> states, std::span<const PendingArray> pending,
                          std::span<const ConstBytes> first) {
  std::vector<std::size_t> more;
  for (std::size_t k = 0; k < pending.size(); ++k) {
    ObjectState& st = states[pending[k].object];
    if (st.error) continue;
    auto done = add_array(pending[k], first[k], st, ctx.shown(files[pending[k].object].info->key));
    if (!done) {
      st.error = std::move(done).error();
    } else if (!*done) {
      more.push_back(k);
    }
  }
  std::vector<RangeRead> reads(more.size());
  for (std::size_t j = 0; j < more.size(); ++j) {
    const PendingArray& p = pending[more[j]];
    reads[j].object = states[p.object].handle.get();
    reads[j].offset = p.data_offset;
    reads[j].length = std::min(p.bytes, kMaxNpyHeaderBytes + kNpyPreludeV2);
  }
  FEEDLINE_TRY(read_ranges(*ctx.queue, ctx.align, reads, ctx.options.stop));
  for (std::size_t j = 0; j < more.size(); ++j) {
    const PendingArray& p = pending[more[j]];
    ObjectState& st = states[p.object];
    if (st.error) continue;
    if (!reads[j].bytes) {
      st.error = reads[j].bytes.error();
      continue;
    }
    auto done = add_array(p, *reads[j].bytes, st, ctx.shown(files[p.object].info->key));
    if (!done) {
      st.error = std::move(done).error();
    } else if (!*done) {
      st.error = Error(Errc::kCorrupt, fmt::format("{}: the file ends inside its .npy header "
                                                   "(truncated?)",
                                                   p.label))
                     .with_object(ctx.shown(files[p.object].info->key))
                     .with_offset(p.data_offset);
    }
  }
  return {};
}

// The group's samples, objects in order; an object that failed is the open's error, or skipped.
Result<void> emit(OpenContext& ctx, std::span<const FoundObject> files,
                  std::span<ObjectState> states, std::string_view ext,
                  std::vector<std::string>& empty) {
  for (std::size_t i = 0; i < files.size(); ++i) {
    ObjectState& st = states[i];
    if (st.error && (!ctx.options.skip_bad_objects || st.error->code() == Errc::kCancelled)) {
      return fail(std::move(*st.error));
    }
    const auto object = static_cast<std::uint32_t>(ctx.ds.objects.size());
    ctx.ds.objects.push_back(*files[i].info);
    ctx.skipped_objects.resize(ctx.ds.objects.size(), false);
    if (st.error) {
      ctx.ds.skipped.push_back(st.error->what());
      ctx.skipped_objects[object] = true;
      continue;
    }
    if (st.members.empty()) {
      empty.push_back(ctx.shown(files[i].info->key));
      continue;
    }
    const std::string_view rel = files[i].rel;
    const std::string_view key = rel.ends_with(ext) ? rel.substr(0, rel.size() - ext.size()) : rel;
    // In file order (an array whose .npy header took a second read was added after later ones).
    std::sort(st.members.begin(), st.members.end(),
              [](const auto& a, const auto& b) { return a.offset < b.offset; });
    const std::uint64_t begin = st.members.front().offset;
    const std::uint64_t end = st.members.back().offset + st.members.back().size;
    ctx.builder.add_sample(object, key, begin, end - begin, st.members);
  }
  return {};
}

void note_empty(OpenContext& ctx, const std::vector<std::string>& empty) {
  if (empty.empty()) return;
  ctx.ds.notes.push_back(fmt::format("left out {} archive(s) holding no arrays: {}{}", empty.size(),
                                     empty.front(), empty.size() > 1 ? ", ..." : ""));
}

// Opens the group's objects; a failure is that object's error.
void open_handles(OpenContext& ctx, std::span<const FoundObject> files,
                  std::span<ObjectState> states) {
  for (std::size_t i = 0; i < files.size(); ++i) {
    auto h = ctx.backend.open_known(*files[i].info);
    if (h) {
      states[i].handle = std::move(*h);
    } else {
      states[i].error = std::move(h).error();
    }
  }
}

// The entries of an archive's directory that are arrays feedline reads; a compressed or non-.npy
// entry is the archive's error.
Result<std::vector<ZipEntry>> array_entries(std::vector<ZipEntry> entries, std::string_view file) {
  std::erase_if(entries, [](const ZipEntry& e) {
    return e.name.ends_with('/') && e.compressed_size == 0;  // a directory
  });
  for (const ZipEntry& e : entries) {
    const std::string_view array =
        std::string_view(e.name).substr(0, e.name.size() - (e.name.ends_with(".npy") ? 4 : 0));
    if (e.method == kZipDeflated) {
      return fail(
          Error(Errc::kUnsupported, fmt::format("compressed npz is not supported: {} is deflated "
                                                "(np.savez_compressed)",
                                                array_label(array)))
              .with_object(std::string(file))
              .with_offset(e.local_header_offset)
              .with_hint("save the arrays with np.savez: feedline reads each array's "
                         "bytes straight from storage into its batch slot"));
    }
    if (e.method != kZipStored) {
      return fail(Error(Errc::kUnsupported,
                        fmt::format("{} is compressed (zip method {}): only stored arrays are read",
                                    array_label(array), e.method))
                      .with_object(std::string(file))
                      .with_offset(e.local_header_offset)
                      .with_hint("save the arrays with np.savez"));
    }
    if (!e.name.ends_with(".npy")) {
      return fail(
          Error(Errc::kUnsupported,
                fmt::format("entry '{}' is not an .npy array: an npz holds arrays only", e.name))
              .with_object(std::string(file))
              .with_offset(e.local_header_offset));
    }
    if (e.compressed_size != e.size) {
      return fail(
          Error(Errc::kCorrupt, fmt::format("{} is stored but its directory gives {} stored and {} "
                                            "decoded bytes",
                                            array_label(array), e.compressed_size, e.size))
              .with_object(std::string(file))
              .with_offset(e.local_header_offset));
    }
  }
  return entries;
}

Result<void> open_npz_group(OpenContext& ctx, std::span<const FoundObject> files,
                            std::span<ObjectState> states) {
  open_handles(ctx, files, states);
  // 1. The tails: end records and, as a rule, the directory.
  std::vector<RangeRead> tails(files.size());
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (states[i].error) continue;
    const std::uint64_t size = states[i].handle->size();
    tails[i].object = states[i].handle.get();
    tails[i].length = std::min(size, kZipTailBytes);
    tails[i].offset = size - tails[i].length;
  }
  std::erase_if(tails, [](const RangeRead& r) { return r.object == nullptr; });
  // (tails is in group order without the failed objects: walk both together)
  FEEDLINE_TRY(read_ranges(*ctx.queue, ctx.align, tails, ctx.options.stop));
  std::vector<std::vector<ZipEntry>> entries(files.size());
  std::vector<ZipDirectoryLocation> locs(files.size());
  std::vector<std::size_t> far;  // objects whose directory lies before their tail
  for (std::size_t i = 0, t = 0; i < files.size(); ++i) {
    ObjectState& st = states[i];
    if (st.error) continue;
    const RangeRead& tail = tails[t++];
    const std::string name = ctx.shown(files[i].info->key);
    if (!tail.bytes) {
      st.error = tail.bytes.error();
      continue;
    }
    if (tail.bytes->size() != tail.length) {
      st.error = Error(Errc::kCorrupt, "the archive shrank while it was opened").with_object(name);
      continue;
    }
    auto loc = find_zip_directory(*tail.bytes, st.handle->size(), name);
    if (!loc) {
      st.error = std::move(loc).error();
      continue;
    }
    locs[i] = *loc;
    if (loc->offset < tail.offset) {
      far.push_back(i);
      continue;
    }
    auto dir =
        parse_zip_directory(tail.bytes->subspan(static_cast<std::size_t>(loc->offset - tail.offset),
                                                static_cast<std::size_t>(loc->size)),
                            *loc, st.handle->size(), name);
    if (!dir) {
      st.error = std::move(dir).error();
      continue;
    }
    entries[i] = std::move(*dir);
  }
  // 2. Directories further back.
  std::vector<RangeRead> dirs(far.size());
  for (std::size_t j = 0; j < far.size(); ++j) {
    dirs[j].object = states[far[j]].handle.get();
    dirs[j].offset = locs[far[j]].offset;
    dirs[j].length = locs[far[j]].size;
  }
  FEEDLINE_TRY(read_ranges(*ctx.queue, ctx.align, dirs, ctx.options.stop));
  for (std::size_t j = 0; j < far.size(); ++j) {
    ObjectState& st = states[far[j]];
    const std::string name = ctx.shown(files[far[j]].info->key);
    if (!dirs[j].bytes) {
      st.error = dirs[j].bytes.error();
      continue;
    }
    auto dir = parse_zip_directory(*dirs[j].bytes, locs[far[j]], st.handle->size(), name);
    if (!dir) {
      st.error = std::move(dir).error();
      continue;
    }
    entries[far[j]] = std::move(*dir);
  }
  // 3. Each array's local header and .npy header, kHeadBatch arrays at a time: an archive of
  // 100,000 arrays took a 4-8 KiB buffer for each at once (900 MB); now the open holds at most
  // kHeadBatch buffers, and per array only its entry and member.
  std::vector<const ZipEntry*> arrays;  // in group order
  std::vector<std::size_t> array_object;
  for (std::size_t i = 0; i < files.size(); ++i) {
    ObjectState& st = states[i];
    if (st.error) continue;
    auto listed = array_entries(std::move(entries[i]), ctx.shown(files[i].info->key));
    if (!listed) {
      st.error = std::move(listed).error();
      continue;
    }
    entries[i] = std::move(*listed);
    st.members.reserve(entries[i].size());
    for (const ZipEntry& e : entries[i]) {
      arrays.push_back(&e);
      array_object.push_back(i);
    }
  }
  std::vector<PendingArray> pending;
  std::vector<RangeRead> heads;
  std::vector<ConstBytes> first;
  for (std::size_t from = 0; from < arrays.size(); from += kHeadBatch) {
    const std::size_t n = std::min(kHeadBatch, arrays.size() - from);
    pending.assign(n, PendingArray{});
    heads = std::vector<RangeRead>(n);
    for (std::size_t k = 0; k < n; ++k) {
      const ZipEntry& e = *arrays[from + k];
      pending[k].object = array_object[from + k];
      if (states[pending[k].object].error) continue;  // nothing to read: read_ranges skips it
      heads[k].object = states[pending[k].object].handle.get();
      heads[k].offset = e.local_header_offset;
      heads[k].length = std::min(kHeadBytes, e.limit - e.local_header_offset);
    }
    std::erase_if(heads, [](const RangeRead& r) { return r.object == nullptr; });
    FEEDLINE_TRY(read_ranges(*ctx.queue, ctx.align, heads, ctx.options.stop));
    first.assign(n, ConstBytes{});
    for (std::size_t k = 0, h = 0; k < n; ++k) {
      PendingArray& p = pending[k];
      ObjectState& st = states[p.object];
      if (st.error) continue;
      const RangeRead& head = heads[h++];
      const ZipEntry& e = *arrays[from + k];
      const std::string_view rel = files[p.object].rel;
      const std::string_view key = rel.ends_with(".npz") ? rel.substr(0, rel.size() - 4) : rel;
      const std::string_view array = std::string_view(e.name).substr(0, e.name.size() - 4);
      p.name = fmt::format("{}.{}", key, array);
      p.label = array_label(array);
      p.bytes = e.compressed_size;
      if (!head.bytes) {
        st.error = head.bytes.error();
        continue;
      }
      auto local = zip_local_header_size(*head.bytes, e, ctx.shown(files[p.object].info->key));
      if (!local) {
        st.error = std::move(local).error();
        continue;
      }
      p.data_offset = e.local_header_offset + *local;
      if (head.bytes->size() > *local) first[k] = head.bytes->subspan(*local);
    }
    FEEDLINE_TRY(parse_arrays(ctx, files, states, pending, first));
  }
  return {};
}

Result<void> open_npy_group(OpenContext& ctx, std::span<const FoundObject> files,
                            std::span<ObjectState> states) {
  open_handles(ctx, files, states);
  std::vector<PendingArray> pending;
  std::vector<RangeRead> heads;
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (states[i].error) continue;
    PendingArray& p = pending.emplace_back();
    p.object = i;
    p.name = std::string(files[i].rel);
    p.label = array_label(files[i].rel);
    p.data_offset = 0;
    p.bytes = states[i].handle->size();
    RangeRead& r = heads.emplace_back();
    r.object = states[i].handle.get();
    r.length = std::min(kHeadBytes, p.bytes);
  }
  FEEDLINE_TRY(read_ranges(*ctx.queue, ctx.align, heads, ctx.options.stop));
  std::vector<ConstBytes> first(heads.size());
  for (std::size_t k = 0; k < heads.size(); ++k) {
    if (heads[k].bytes) {
      first[k] = *heads[k].bytes;
    } else {
      states[pending[k].object].error = heads[k].bytes.error();
    }
  }
  return parse_arrays(ctx, files, states, pending, first);
}

template <class OpenGroup>
Result<void> open_in_groups(OpenContext& ctx, std::span<const FoundObject> files,
                            std::string_view ext, OpenGroup&& open_group) {
  std::vector<std::string> empty;
  for (std::size_t start = 0; start < files.size(); start += kOpenBatchDepth) {
    if (ctx.options.stop.stop_requested()) return fail(cancelled("reading array headers"));
    const auto group = files.subspan(start, std::min(kOpenBatchDepth, files.size() - start));
    std::vector<ObjectState> states(group.size());
    FEEDLINE_TRY(open_group(ctx, group, std::span<ObjectState>(states)));
    FEEDLINE_TRY(emit(ctx, group, states, ext, empty));
  }
  note_empty(ctx, empty);
  return {};
}

}  // namespace

Result<void> open_npz_files(OpenContext& ctx, std::span<const FoundObject> files) {
  return open_in_groups(ctx, files, ".npz", open_npz_group);
}

Result<void> open_npy_files(OpenContext& ctx, std::span<const FoundObject> files) {
  return open_in_groups(ctx, files, ".npy", open_npy_group);
}

}  // namespace feedline::loader::detail
