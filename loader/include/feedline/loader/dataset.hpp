// Datasets: what the pipeline reads, resolved to byte ranges of storage objects.
//
// Five formats are built in (format.hpp registers them, one folder each under
// loader/src/formats/; a registry of one's own may add more, DatasetOptions::formats):
//  - files: one sample per object (file). A name ending in ".zst" is a zstd frame to decompress.
//    The sample key is the object key relative to the dataset root, without the extension(s).
//  - tar: WebDataset-style shards. A sample is the run of consecutive regular members whose
//    names share a key (the path up to the first '.' of the last path component), e.g.
//    "000123.bin" + "000123.cls". Members ending in ".zst" are zstd frames. Directories and other
//    non-regular members are ignored. A shard "X.tar" may have an index "X.tar.idx" beside it,
//    written by `feedline gen`, which saves scanning the headers; readers work without one, and
//    use one only when it shows that it belongs to the shard (tar_index.hpp).
//  - tfrecord: TensorFlow's record files (tfrecord.hpp): the objects named "*.tfrecord" or
//    "*.tfrecords" (every object when none is so named: TensorFlow's own "train-00000-of-01024").
//    Each record is a sample of one member, the record's data: key "<file>/<record>" (the file's
//    path without its extension, the record's number in the file zero-padded to six digits:
//    "train-000003/000017"), member name the key + ".tfrecord". The sample's range is the whole
//    framed record (12-byte header, data, 4-byte CRC); the member lies at offset 12 and carries
//    MemberCheck::kTfRecordCrc: both CRCs are checked before it is delivered. "X.tfrecord.idx"
//    beside a file (DALI's tfrecord2idx format, written by gen) saves scanning its headers.
//  - npz: numpy archives (np.savez; zip.hpp, npy.hpp), one sample per "*.npz" object, key its path
//    without ".npz". Its members are its arrays' bytes (C order, no .npy header), in file order,
//    named "<key>.<array>" ("000123.x" for x.npy). Only stored (uncompressed) entries are read.
//  - npy: one sample per "*.npy" object (np.save), key its path without ".npy", one member (named
//    as the file) holding the array's bytes; the sample's range is just those bytes.
//
// A dataset written by `feedline gen` carries a manifest, ROOT/.feedline-dataset (manifest.hpp):
// a dataset whose generation was interrupted, or that lost objects since, fails to open, naming
// the manifest.
//
// Hidden objects and members (a path component starting with '.'), "*.idx" files and unfinished
// writes ("*.feedline-tmp-*") are never samples. A root that names a single object (one shard,
// one file) is a dataset of that object.
//
// A Sample names a single contiguous byte range of one object that covers all its members (in a
// tar shard the members of one sample are adjacent), so the IO stage issues one read per sample
// and the decode stage cuts members out of that range. In a tar shard the range runs from the
// first member's data to the last member's data end; the tar headers between members lie inside
// it and are skipped by the member offsets (so do an npz archive's zip and .npy headers between
// its arrays). A shard opened through its index starts each sample's range at its first
// member's header instead (MemberCheck::kTarHeader), so every member is read with its header.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/error.hpp"
#include "feedline/storage/backend.hpp"

namespace feedline::loader {

struct FormatSpec;     // format.hpp
class FormatRegistry;  // format.hpp

// A dataset format: a handle to a registered FormatSpec (format.hpp), or auto. Copied freely,
// compared by name.
//
// kAuto (DatasetOptions only): decided from the names the one listing the open makes (or the
// pattern) gives, by the extensions the registry's formats claim: with the built-in formats, tar
// for ".tar" shards, tfrecord for ".tfrecord"/".tfrecords" files, npz for ".npz", npy for ".npy"
// (the first of these in that order when several are there, with a note), else files.
class DatasetFormat {
 public:
  constexpr DatasetFormat() noexcept = default;  // auto
  constexpr explicit DatasetFormat(const FormatSpec& spec) noexcept : spec_(&spec) {}

  // Auto, and the built-in formats (builtin_formats()). Other formats are reached by name
  // (FormatRegistry::parse) or from their spec.
  static const DatasetFormat kAuto, kFiles, kTar, kTfRecord, kNpz, kNpy;

  bool is_auto() const noexcept { return spec_ == nullptr; }
  // The format's entry; not for auto.
  const FormatSpec& spec() const noexcept { return *spec_; }
  std::string_view name() const noexcept;  // "tar", "auto"
  friend bool operator==(const DatasetFormat& a, const DatasetFormat& b) noexcept {
    return a.spec_ == b.spec_ || a.name() == b.name();
  }

 private:
  const FormatSpec* spec_ = nullptr;
};
std::string_view format_name(DatasetFormat f) noexcept;  // f.name()
// A built-in format's name, or "auto" (builtin_formats().parse()).
Result<DatasetFormat> parse_format(std::string_view text);

// What the decode step checks in a member's bytes before it delivers them, beyond their size.
enum class MemberCheck : std::uint8_t {
  kNone,
  // The data of a TFRecord record: its 12-byte header (length and the length's masked CRC32C)
  // lies just before the member in the sample's range, the data's masked CRC32C just after.
  // Both CRCs and the length are checked (check_tfrecord(), tfrecord.hpp) on every data path; a
  // sample holding such a member is never read straight into GPU memory, where the host could
  // not check it.
  kTfRecordCrc,
  // A tar member the open took from the shard's index (tar_index.hpp) rather than from the
  // shard's headers: its header blocks (extended headers included) lie in the sample's range
  // before its data, from the end of the previous member's padded data (or the range's start,
  // for the sample's first member: its range begins at that member's header). They must name
  // the member and give its size as the index does (check_tar_member_header()), so an index
  // that does not belong to its shard never delivers other bytes than the shard's member.
  kTarHeader,
};

struct Member {
  // The tar member's name as stored in the shard, or the file's path relative to the dataset
  // root: e.g. "000123.bin.zst"; for the other formats as above ("train-000003/000017.tfrecord",
  // "000123.x").
  std::string name;
  std::uint64_t offset = 0;  // from the start of the sample's byte range
  std::uint64_t size = 0;    // stored bytes
  // Decoded size when known without reading (uncompressed members, or from the index: a zstd
  // member's decompressed size); 0 = unknown. Which decoders a member takes is the decode
  // plan's (decoder.hpp), from its extensions.
  std::uint64_t decoded_size = 0;
  MemberCheck check = MemberCheck::kNone;
};

struct Sample {
  std::uint32_t object = 0;  // index into Dataset::objects
  std::uint64_t offset = 0;  // byte range in the object covering every member
  // storage::kUnknownSize (and so its one member's size): a file whose object's size the open
  // did not ask for (a brace list over a web server without a listing); learned when it is read.
  std::uint64_t length = 0;
  std::uint32_t first_member = 0;  // range in Dataset::members
  std::uint32_t member_count = 0;
  std::string key;
};

struct Dataset {
  DatasetFormat format = DatasetFormat::kFiles;  // as resolved (never kAuto)
  std::string root;                              // key prefix the dataset was opened at
  std::vector<storage::ObjectInfo> objects;      // files, tar shards, TFRecord files, archives
  std::vector<Sample> samples;                   // in storage order (the unshuffled order)
  std::vector<Member> members;
  std::uint64_t total_bytes = 0;       // sum of sample lengths (those known)
  std::uint64_t max_sample_bytes = 0;  // largest sample length (of those known)
  bool indexed = false;                // every tar shard or TFRecord file had an index
  std::vector<std::string> skipped;    // objects left out with skip_bad_objects, and why
  // Things the user should know that did not stop the open, one line each: an index that was
  // stale, corrupt or of the old format (the shard or file was scanned instead), a shard without
  // an end-of-archive marker, TFRecord files without an index.
  std::vector<std::string> notes;
  // The manifest `feedline gen` left at the root (manifest.hpp), when there is one: its key, and
  // the digest gen recorded when the dataset is exactly what gen wrote (the digest one epoch over
  // every sample delivers; absent when objects were added, replaced or cut since, or no manifest).
  std::string manifest;
  std::optional<std::uint64_t> manifest_digest;
  // Reads made while opening (indexes, the probes that check them, header scans, manifests) and
  // their bytes: an indexed tar or TFRecord dataset costs a few per file, a scanned one about its
  // whole size; npz costs two or three small reads per archive, npy one per file (their headers),
  // each batched over many files.
  std::uint64_t open_reads = 0;
  std::uint64_t open_bytes = 0;
  // The memory these tables hold for the run (objects, samples and members, their names
  // included): outside the memory budget, which bounds the bytes of samples in flight. A listing
  // of millions of small objects holds hundreds of MB here (a network listing stops with an error
  // past 1 GiB of keys).
  std::uint64_t listing_bytes = 0;

  std::span<const Member> members_of(const Sample& s) const {
    return {members.data() + s.first_member, s.member_count};
  }
};

struct DatasetOptions {
  DatasetFormat format = DatasetFormat::kAuto;
  // The formats auto chooses from and a manifest's format is looked up in: null for
  // builtin_formats() (format.hpp). Borrowed for the call.
  const FormatRegistry* formats = nullptr;
  bool use_index = true;  // read X.tar.idx and X.tfrecord.idx where present
  // A shard, file or archive that cannot be read (not a tar, truncated, a TFRecord header whose
  // CRC is wrong, an npz of compressed or unsupported arrays, unreadable) is left out and recorded
  // in Dataset::skipped instead of failing the whole dataset (on_error = skip); its whole samples
  // before the damage are kept where the format allows (tar, tfrecord).
  bool skip_bad_objects = false;
  // Checked before each shard and each header read of a scan: the open stops with kCancelled
  // (a scan of many large shards over the network takes long); reads in flight are cancelled.
  std::stop_token stop = {};
};

// Lists the objects under root (a directory or key prefix) and resolves samples: for tar shards
// and TFRecord files from the index or by reading the headers through the backend, for npz and
// npy from their zip and .npy headers. Objects that are not regular
// (FIFOs, sockets, devices in a local directory) are left out with a note; a root naming one is
// an error. Errors name the object and offset
// (a truncated tar, a non-tar object in a tar dataset, an empty dataset).
// The memory the dataset's tables hold (samples, members, objects and their names, as open_dataset
// left them): about 130 bytes a sample of one member with a short name, more with long names.
// A loader counts it against its memory budget (LoaderConfig::memory_budget), as it holds the
// table for the whole run.
std::uint64_t dataset_table_bytes(const Dataset& dataset);

// Where each object's samples start in Dataset::samples (which lists them object by object, in
// storage order): SamplerConfig::shard_starts.
std::vector<std::uint32_t> shard_starts(const Dataset& dataset);

Result<Dataset> open_dataset(storage::Backend& backend, std::string_view root,
                             const DatasetOptions& options);

}  // namespace feedline::loader
