// Dataset formats: what open_dataset() reads and `feedline gen` writes, each registered once.
//
// A FormatSpec is one format's whole entry: its name (--format NAME, Python's format=NAME, the
// manifest's "format" line, the report's "format" key) and description (gen's --help), how auto
// detection and the listing recognise its objects, the opener that resolves its objects into
// samples, gen's writer and what gen may ask of it, and its words in messages. A FormatRegistry
// is the list of formats an open knows (DatasetOptions::formats), in the order auto prefers them;
// the CLI and the Python module take the names, the parse of a name and the help text from it.
//
// The built-in formats (builtin_formats(): files, tar, tfrecord, npz, npy) live one folder each
// under loader/src/formats/ (files/, tar/, tfrecord/, npy/ for npz and npy), each folder ending in
// a NAME_format.cpp that defines its FormatSpec, and are registered by one line each in
// loader/src/formats/registry.cpp. A new format is a new folder and one more line there (docs/
// DATASETS.md, "Adding a dataset format"). The opener and the writer are written against the
// formats module's private kit (loader/src/formats/open_common.hpp: the SampleBuilder, batched
// reads; gen_parts.hpp: the generator's samples, stoppable writes), as the built-in ones are.
//
// Nothing registers itself: a registry holds what add() was given. A FormatSpec is plain constant
// data (names, flags, function pointers), defined once with static storage duration, as the
// built-in ones are: registries, DatasetFormat handles, options and datasets point at it, so it
// must outlive them all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/error.hpp"
#include "feedline/loader/dataset.hpp"
#include "feedline/storage/backend.hpp"

namespace feedline::loader {

struct GenConfig;
struct GenHooks;
struct GenSummary;

namespace detail {
struct OpenContext;  // open_common.hpp
struct FoundObject;
}  // namespace detail

// What a format's data objects take in storage besides their samples' payload bytes, for gen's
// estimate of a dataset's footprint (estimate_footprint(), gen.hpp): bytes over the whole dataset.
struct GenEstimate {
  double data = 0;        // the data objects: payloads with their headers and framing
  double per_object = 0;  // added to each data object (a tar shard's end-of-archive marker)
  double indexes = 0;     // the indexes beside the objects (FormatSpec::indexed)
};

struct FormatSpec {
  // ---- names
  // "tar": lower-case letters, digits, '-' or '_' (not "auto"). The one spelling everywhere: the
  // --format option, Python's format=, the manifest, the report, messages.
  std::string_view name = {};
  // What it is, for gen's --help ("WebDataset shards": "tar (WebDataset shards)").
  std::string_view description = {};

  // ---- finding its objects
  // Its data objects' names end in one of these (".tar"): auto detection picks the first format
  // of the registry (files aside) that claims a listed name, and an open in this format reads
  // only the objects that end so. Empty: every object is one of its objects (files), and auto
  // falls back to it when no other format claims a name.
  std::span<const std::string_view> extensions = {};
  // When no listed object ends in one of the extensions, every object is one (TFRecord files
  // need no extension: TensorFlow's own "train-00000-of-01024").
  bool any_object_when_none_named = false;
  // The opener reads the objects (headers, indexes): the open stats every object named by a brace
  // pattern for its size and makes the read queue (OpenContext::queue). False: the listing alone
  // says what the samples are (files), and a web server's objects may keep an unknown size.
  bool reads_objects = true;
  // An index "X.idx" may lie beside each object X (tar_index.hpp, tfrecord.hpp): listed with the
  // objects and handed to the opener (FoundObject::index) unless DatasetOptions::use_index is off;
  // gen writes one beside each object.
  bool indexed = false;
  // The note of an open by brace pattern where not every object has an index beside it.
  std::string_view missing_index_note = {};
  // Reads the open keeps in flight (manifests, indexes, headers); 0: 64, for batches of small
  // reads over many objects.
  unsigned open_depth = 0;
  // Every object holds one sample (files, npz, npy): gen writes one object per sample (else
  // GenConfig::samples_per_shard in each), and shard shuffling has nothing to shuffle.
  bool one_sample_per_object = false;
  // For the listing fingerprint (listing_fingerprint(), digest.hpp; saved loader states record
  // it): the number the built-in formats had before the registry, so that their saved states
  // resume; -1 for the others, whose name is hashed instead.
  int legacy_id = -1;

  // ---- its words in messages
  std::string_view objects_noun = {};  // "tar shards": "no tar shards under ROOT"
  std::string_view object_noun = {};   // "tar shard": "its manifest lists 4 tar shards"
  // The hint after "no object ends in .tar; " (empty: one that names the registry's formats).
  std::string_view no_objects_hint = {};
  // The hint when none of its objects held a sample (empty: a generic one).
  std::string_view no_samples_hint = {};

  // ---- reading
  // Appends ctx.ds.objects (in the order given) and their samples, through ctx.builder. A
  // damaged object fails the open, or with options.skip_bad_objects is recorded in ds.skipped.
  // Required.
  Result<void> (*open)(detail::OpenContext& ctx,
                       std::span<const detail::FoundObject> objects) = nullptr;

  // ---- writing (`feedline gen`, generate_dataset())
  struct Gen {
    // Writes the data objects (and their indexes) under root, accounted in sum, in the layout
    // generated_object_name() gives (manifest.hpp). Null: gen does not write this format.
    Result<void> (*write)(storage::Backend& backend, std::string_view root, const GenConfig& c,
                          const GenHooks& hooks, GenSummary& sum) = nullptr;
    // Null, or the "built without X" error when this build cannot write it (validate()).
    Result<void> (*available)() = nullptr;
    // Its footprint for a mean payload of `payload` bytes a sample; null: the payloads alone.
    GenEstimate (*footprint)(const GenConfig& c, double payload) = nullptr;
    // The name of data object i relative to the root; null: "shard-" + the object's number +
    // extensions[0] with several samples per object ("shard-000003.tar"), else the sample's key
    // + extensions[0] ("000123.npz"). Keys and numbers as sample_key() writes them.
    std::string (*object_name)(const GenConfig& c, std::uint64_t i) = nullptr;
    unsigned members = 1;     // members of each sample as gen writes it, its label aside
    bool labels = false;      // GenConfig::with_label adds a label member (tar: .cls; npz: y)
    bool compresses = false;  // GenConfig::compress applies (else it must be none)
    bool images = false;      // GenConfig::image applies (else it must be none)
    // gen's --samples-per-file other than 1 is a usage error (the CLI's check; npz, npy).
    bool refuses_samples_per_object = false;
  };
  Gen gen;

  // True when `name` ends in one of the extensions.
  bool names_object(std::string_view object_name) const noexcept {
    for (const std::string_view ext : extensions) {
      if (object_name.ends_with(ext)) return true;
    }
    return false;
  }
};

class FormatRegistry {
 public:
  // Adds a format after those there (auto prefers earlier ones); one of a name already there
  // replaces it in its place. kInvalidArgument for a name that is empty, "auto", longer than 32
  // or not lower-case letters, digits, '-' and '_'; an extension that is not '.' and 1-16
  // letters, digits or dots; or no opener.
  Result<void> add(const FormatSpec& spec);

  // The format of this name, or null.
  const FormatSpec* find(std::string_view name) const noexcept;
  // A format's name, or "auto" (DatasetFormat::kAuto); kInvalidArgument naming the text, with
  // the names it could be, otherwise.
  Result<DatasetFormat> parse(std::string_view text) const;
  // In the order added.
  std::span<const FormatSpec* const> formats() const noexcept { return formats_; }
  // What auto falls back to when no format claims a listed name: the first with no extensions
  // (files); null when there is none.
  const FormatSpec* fallback() const noexcept;

  // "files, tar, tfrecord, npz or npy": every name (those gen writes, with writable).
  std::string names_text(bool writable = false) const;
  // The help of an option that picks the format to read: "files, tar, tfrecord, npz, npy, or
  // auto (from the objects' extensions)".
  std::string help() const;
  // The help of gen's option: "files (one sample per file), tar (WebDataset shards), ... or npy
  // (one np.save array per sample)".
  std::string gen_help() const;

 private:
  std::vector<const FormatSpec*> formats_;
};

// files, tar, tfrecord, npz and npy, in that order (auto prefers tar, then tfrecord, npz, npy;
// else files). Immutable; copy it to add formats of one's own.
const FormatRegistry& builtin_formats() noexcept;

}  // namespace feedline::loader
