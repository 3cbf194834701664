// Opening a TFRecord dataset (tfrecord.hpp): each file's records from its index, when the index
// fits the file and its probed headers agree, else from a scan of the record headers.
//
// Files go in groups of kOpenBatchDepth: the group's indexes are read in one batch, then the probes
// of every index that parsed in another, so a dataset of many small files (cosmoflow: one record
// per file) costs two round trips per group, not two per file. A scan reads one header per record
// through SequentialReader (1 MiB chunks with readahead while records are small; past large
// records it jumps without reading their data).
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>

#include "../open_common.hpp"
#include "../sequential_reader.hpp"
#include "feedline/loader/tar_index.hpp"
#include "feedline/loader/tfrecord.hpp"

namespace feedline::loader::detail {
namespace {

struct FileState {
  std::unique_ptr<storage::ObjectHandle> handle;
  std::vector<TfRecordIndexEntry> records;  // from the index, or as far as the scan got
  bool indexed = false;
  std::optional<Error> error;  // the file cannot be read (all of it, or past records)
};

// The file's key: its path without ".tfrecord" / ".tfrecords".
std::string_view file_key(std::string_view rel) {
  for (const std::string_view ext :
       {std::string_view(".tfrecords"), std::string_view(".tfrecord")}) {
    if (rel.ends_with(ext) && rel.size() > ext.size())
      return rel.substr(0, rel.size() - ext.size());
  }
  return rel;
}

// Every record header of the file, in order, into records (those before a failure stay there).
Result<void> scan(OpenContext& ctx, const FoundObject& f, const storage::ObjectHandle& handle,
                  std::vector<TfRecordIndexEntry>& records) {
  const std::uint64_t size = handle.size();
  const std::string name = ctx.shown(f.info->key);
  SequentialReader source(*ctx.queue, handle, ctx.align, SequentialReader::kDefaultChunk,
                          ctx.options.stop);
  for (std::uint64_t offset = 0; offset < size;) {
    if (ctx.options.stop.stop_requested()) {
      return fail(cancelled("scanning TFRecord headers").with_object(name));
    }
    FEEDLINE_ASSIGN_OR_RETURN(ConstBytes header,
                              source.read(offset, static_cast<std::size_t>(kTfRecordHeaderBytes)));
    FEEDLINE_ASSIGN_OR_RETURN(std::uint64_t n, parse_tfrecord_header(header, offset, size, name));
    records.push_back({offset, n + kTfRecordFramingBytes});
    offset += n + kTfRecordFramingBytes;
  }
  return {};
}

// Reads and checks the indexes of a group's files: those that fit their file and pass the
// probes set records and indexed; the others add a line to `ignored`.
Result<void> use_indexes(OpenContext& ctx, std::span<const FoundObject> files,
                         std::span<FileState> states, std::vector<std::string>& ignored) {
  std::vector<std::size_t> with;  // positions in the group with an index to read
  std::vector<std::unique_ptr<storage::ObjectHandle>> idx_handles;
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (!files[i].index || states[i].error) continue;
    if (files[i].index->size > kMaxIndexBytes) {
      ignored.push_back(
          fmt::format("ignored index {} ({} bytes, too large for an index); "
                      "scanned the file instead",
                      ctx.shown(files[i].index->key), files[i].index->size));
      continue;
    }
    auto h = ctx.backend.open_known(*files[i].index);
    if (!h) {
      ignored.push_back(fmt::format("ignored index {} ({}); scanned the file instead",
                                    ctx.shown(files[i].index->key), h.error().what()));
      continue;
    }
    with.push_back(i);
    idx_handles.push_back(std::move(*h));
  }
  std::vector<RangeRead> reads(with.size());
  for (std::size_t k = 0; k < with.size(); ++k) {
    reads[k].object = idx_handles[k].get();
    reads[k].length = idx_handles[k]->size();
  }
  FEEDLINE_TRY(read_ranges(*ctx.queue, ctx.align, reads, ctx.options.stop));

  // The indexes that parse, and the probes of each, in one batch.
  struct Probe {
    std::size_t file;  // position in the group
    std::size_t record;
  };
  std::vector<Probe> probes;
  std::vector<std::size_t> parsed;
  for (std::size_t k = 0; k < with.size(); ++k) {
    const std::size_t i = with[k];
    const std::string idx_name = ctx.shown(files[i].index->key);
    Result<std::vector<TfRecordIndexEntry>> entries =
        reads[k].bytes ? parse_tfrecord_index(
                             std::string_view(reinterpret_cast<const char*>(reads[k].bytes->data()),
                                              reads[k].bytes->size()),
                             states[i].handle->size(), idx_name)
                       : Result<std::vector<TfRecordIndexEntry>>(fail(reads[k].bytes.error()));
    if (entries && reads[k].bytes->size() != reads[k].length) {
      entries = fail(Error(Errc::kCorrupt, "the index shrank while it was read"));
    }
    if (!entries) {
      ignored.push_back(fmt::format("ignored index {} ({}); scanned the file instead", idx_name,
                                    entries.error().message()));
      continue;
    }
    states[i].records = std::move(*entries);
    parsed.push_back(i);
    for (const std::size_t r : tar_index_probes(states[i].records.size())) probes.push_back({i, r});
  }
  std::vector<RangeRead> probe_reads(probes.size());
  for (std::size_t p = 0; p < probes.size(); ++p) {
    probe_reads[p].object = states[probes[p].file].handle.get();
    probe_reads[p].offset = states[probes[p].file].records[probes[p].record].offset;
    probe_reads[p].length = kTfRecordHeaderBytes;
  }
  FEEDLINE_TRY(read_ranges(*ctx.queue, ctx.align, probe_reads, ctx.options.stop));
  std::vector<std::optional<Error>> stale(files.size());
  for (std::size_t p = 0; p < probes.size(); ++p) {
    FileState& st = states[probes[p].file];
    if (stale[probes[p].file]) continue;
    const RangeRead& r = probe_reads[p];
    Result<void> ok = r.bytes ? check_tfrecord_index_probe(
                                    st.records[probes[p].record], *r.bytes, st.handle->size(),
                                    ctx.shown(files[probes[p].file].info->key))
                              : Result<void>(fail(r.bytes.error()));
    if (!ok) {
      if (ok.error().code() == Errc::kUnsupported) return fail(std::move(ok).error());
      stale[probes[p].file] = std::move(ok).error();
    }
  }
  for (const std::size_t i : parsed) {
    if (stale[i]) {
      ignored.push_back(fmt::format("ignored index {} ({}); scanned the file instead",
                                    ctx.shown(files[i].index->key), stale[i]->message()));
      states[i].records.clear();
    } else {
      states[i].indexed = true;
    }
  }
  return {};
}

// The group's samples, objects in order; a file that failed is the open's error, or skipped.
Result<void> emit(OpenContext& ctx, std::span<const FoundObject> files,
                  std::span<FileState> states) {
  std::vector<SampleBuilder::MemberSpec> member(1);
  member[0].check = MemberCheck::kTfRecordCrc;
  for (std::size_t i = 0; i < files.size(); ++i) {
    FileState& st = states[i];
    if (st.error && (!ctx.options.skip_bad_objects || st.error->code() == Errc::kCancelled)) {
      return fail(std::move(*st.error));
    }
    const auto object = static_cast<std::uint32_t>(ctx.ds.objects.size());
    ctx.ds.objects.push_back(*files[i].info);
    ctx.skipped_objects.resize(ctx.ds.objects.size(), false);
    const std::string_view key = file_key(files[i].rel);
    const std::size_t width = std::max<std::size_t>(
        6, fmt::formatted_size("{}", st.records.empty() ? 0 : st.records.size() - 1));
    std::string sample_key;
    for (std::size_t r = 0; r < st.records.size(); ++r) {
      const TfRecordIndexEntry& e = st.records[r];
      sample_key.clear();
      fmt::format_to(std::back_inserter(sample_key), "{}/{:0{}}", key, r, width);
      member[0].name = sample_key + ".tfrecord";
      member[0].offset = e.offset + kTfRecordHeaderBytes;
      member[0].size = e.length - kTfRecordFramingBytes;
      ctx.builder.add_sample(object, sample_key, e.offset, e.length, member);
    }
    if (st.error) {  // skipped, its whole records before the damage kept
      ctx.ds.skipped.push_back(st.error->what());
      ctx.skipped_objects[object] = true;
    }
  }
  return {};
}

}  // namespace

Result<void> open_tfrecord_files(OpenContext& ctx, std::span<const FoundObject> files) {
  if (!tfrecord_available()) {
    return fail(tfrecord_unavailable().with_object(ctx.shown(ctx.ds.root)));
  }
  std::vector<std::string> ignored;
  std::size_t unindexed = 0;
  bool all_indexed = true;
  for (std::size_t start = 0; start < files.size(); start += kOpenBatchDepth) {
    if (ctx.options.stop.stop_requested()) return fail(cancelled("reading TFRecord indexes"));
    const std::span<const FoundObject> group =
        files.subspan(start, std::min(kOpenBatchDepth, files.size() - start));
    std::vector<FileState> states(group.size());
    for (std::size_t i = 0; i < group.size(); ++i) {
      auto h = ctx.backend.open_known(*group[i].info);
      if (h) {
        states[i].handle = std::move(*h);
      } else {
        states[i].error = std::move(h).error();
      }
    }
    FEEDLINE_TRY(use_indexes(ctx, group, states, ignored));
    for (std::size_t i = 0; i < group.size(); ++i) {
      FileState& st = states[i];
      if (st.error || st.indexed) continue;
      if (!group[i].index) ++unindexed;
      auto r = scan(ctx, group[i], *st.handle, st.records);
      if (!r) st.error = std::move(r).error();
    }
    for (const FileState& st : states) all_indexed = all_indexed && st.indexed;
    FEEDLINE_TRY(emit(ctx, group, states));
  }
  ctx.ds.indexed = all_indexed;
  for (std::size_t i = 0; i < ignored.size() && i < kMaxIndexNotes; ++i) {
    ctx.ds.notes.push_back(ignored[i]);
  }
  if (ignored.size() > kMaxIndexNotes) {
    ctx.ds.notes.push_back(
        fmt::format("... and the indexes of {} more TFRecord files were ignored "
                    "the same way (their records were scanned)",
                    ignored.size() - kMaxIndexNotes));
  }
  if (unindexed > 0 && ctx.options.use_index) {
    ctx.ds.notes.push_back(fmt::format(
        "{} of {} TFRecord files have no index (X.tfrecord.idx) beside them: scanned their "
        "records' headers (feedline gen writes indexes, as DALI's tfrecord2idx does)",
        unindexed, files.size()));
  }
  return {};
}

}  // namespace feedline::loader::detail
