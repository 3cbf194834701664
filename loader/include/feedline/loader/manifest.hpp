// The dataset manifest: how a dataset written by `feedline gen` proves it is complete.
//
// generate_dataset() writes ROOT/.feedline-dataset twice: FIRST, before any data object, saying
// "state in-progress"; LAST, after every object and index, saying "state complete" with what it
// wrote. Each write replaces the whole object, so on every backend (file: written aside and
// renamed into place; mem; an object store: one PUT) the last write decides and nothing has to
// be deleted: a generation that stopped half-way (Ctrl-C, a full disk, a crash, a failed write)
// leaves "in-progress" behind. The name is hidden, so it is never a sample.
//
// The format is text, "key value" lines, each ending in '\n':
//
//   feedline-dataset 1
//   state complete                 (or in-progress)
//   format tar                     what generate_dataset() was asked to write (GenConfig) ...
//   samples 37
//   samples-per-shard 10           (samples per tar shard or TFRecord file)
//   label true
//   sample-size lognormal:20480:8192
//   max-sample-size 1073741824
//   compress none
//   compressibility 0.5
//   classes 1000
//   seed 42
//   objects 4                      ... the data objects (files, or shards) it writes ...
//   members 74                     ... and, once complete, what it wrote (GenSummary)
//   index-objects 4
//   bytes-stored 812544
//   bytes-decoded 767123
//   digest 1234567890123
//
// Line 1: the magic and the version (this build writes and reads 1). The other lines may come in
// any order; keys this build does not know are ignored (a later version may add some); a key
// given twice, a missing one or a bad value makes the manifest corrupt.
//
// What open_dataset() does with it, when the root is a directory or prefix (not one object, not a
// brace pattern, which name their objects themselves):
//  - a manifest anywhere in the dataset saying in-progress: kCorrupt naming it ("feedline gen was
//    interrupted"; re-run the same gen to finish, or delete the manifest to use what is there);
//  - a complete one, when the dataset is opened in the format it was written in: every data
//    object it lists must be there (kCorrupt naming the dataset, what the manifest says and what
//    was found), and each object (tar shard, TFRecord file, npz archive) must hold all the samples
//    and members gen put in it (kCorrupt naming it; a note with skip_bad_objects, where damaged
//    objects are expected). Objects added since are not its concern;
//  - Dataset::manifest names the root's manifest, and Dataset::manifest_digest is set to the
//    digest gen wrote when the dataset is exactly what gen wrote (same objects, same byte count,
//    every sample and member found): what one epoch over the whole dataset must deliver.
// Datasets without a manifest (other tools, older feedline versions) open as before.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/error.hpp"
#include "feedline/loader/dataset.hpp"
#include "feedline/loader/format.hpp"
#include "feedline/loader/gen.hpp"

namespace feedline::loader {

inline constexpr std::string_view kManifestName = ".feedline-dataset";
inline constexpr std::string_view kManifestMagic = "feedline-dataset";
inline constexpr int kManifestVersion = 1;
// A manifest is a few hundred bytes; anything larger than this is not one.
inline constexpr std::uint64_t kMaxManifestBytes = 64 * 1024;

struct DatasetManifest {
  bool complete = false;
  GenConfig config;    // what generate_dataset() was asked to write
  GenSummary summary;  // complete: what it wrote; in progress: only `objects` (what it will write)
};

std::string format_manifest(const DatasetManifest& manifest);
// kCorrupt naming object_name (with the line's byte offset) for text that breaks the format, or
// whose format is not one of `formats`; kUnsupported for another version.
Result<DatasetManifest> parse_manifest(std::string_view text, std::string_view object_name,
                                       const FormatRegistry& formats = builtin_formats());

// The data objects a config writes: how many, the name of the i-th relative to the root
// ("shard-000003.tar", "shard-000003.tfrecord", "000123.bin.zst", "000123.npz"), and the samples
// it holds (files, npz, npy: 1).
std::uint64_t generated_objects(const GenConfig& config);
std::string generated_object_name(const GenConfig& config, std::uint64_t i);
std::uint64_t generated_samples_in(const GenConfig& config, std::uint64_t i);

// Checks an opened dataset against a complete manifest (see above). manifest_key is the
// manifest's key, dir the key prefix it covers (its directory, ending in '/', or empty);
// skipped_objects[i] is true for objects of ds left out under skip_bad_objects (already reported).
// Sets ds.manifest and ds.manifest_digest for the manifest at the dataset's root (root_manifest).
// shown renders a key for messages (Backend::display_name).
Result<void> check_manifest(const DatasetManifest& manifest, std::string_view manifest_key,
                            std::string_view dir, bool root_manifest,
                            const std::vector<bool>& skipped_objects, bool skip_bad_objects,
                            const std::function<std::string(std::string_view)>& shown, Dataset& ds);

}  // namespace feedline::loader
