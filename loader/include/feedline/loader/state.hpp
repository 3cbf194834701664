// Checkpoints: where a job stands, as a JSON document a checkpoint file can hold, so that a new
// Loader (in another process, on any rank and any number of ranks) delivers exactly the batches
// the run had not delivered yet. The Python package's Loader.state_dict() and Loader(state=) are
// this document; a C++ program does the same (loader/examples/checkpoint.cpp):
//
//   // saving, on the thread that calls next():
//   std::string text = format_loader_state(
//       loader_state(url, dataset, config.sampler, loader->resume_point()));
//   // resuming, before Loader::open() with the same settings:
//   auto state = parse_loader_state(text);                  // Result<LoaderState>
//   if (!state) return state.error();
//   if (auto ok = resume_from(*state, dataset, url, config.sampler); !ok) return ok.error();
//
//   {"format": "feedline.loader_state", "version": 2, "url": ..., "num_samples": N,
//    "dataset": "0123456789abcdef", "batch_size": B, "epochs": E, "seed": S, "shuffle": bool,
//    "shard_shuffle": K, "drop_last": bool, "rank": r, "world_size": w,
//    "epoch": e, "progress": [{"world_size": w0, "batches": b0}, ...]}
//
// rank and world_size say who saved it (any rank's state serves every rank); epoch and progress
// are the sampler's ResumePoint (sampler.hpp). "dataset" is the listing's fingerprint
// (listing_fingerprint(), 16 hex digits): the progress counts batches of sample indices, which
// mean the same samples only on the same listing, so a state resumes only on a dataset with the
// same fingerprint (another dataset of the same size, or shards whose contents were swapped, would
// duplicate some samples and lose others). Version 1 states (before the fingerprint) are refused:
// nothing says which dataset they were saved on; the message says to start their epoch afresh.
//
// The document comes from outside (a user's checkpoint), so the parse trusts none of it: every
// field is checked for type and range, and a refusal names the field. Messages name the settings
// by LoaderConfig's fields (batch_size, seed, ...).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "feedline/core/error.hpp"
#include "feedline/loader/dataset.hpp"
#include "feedline/loader/sampler.hpp"

namespace feedline::loader {

inline constexpr std::string_view kLoaderStateFormat = "feedline.loader_state";
inline constexpr int kLoaderStateVersion = 2;
// At most this many earlier runs in one epoch (the sampler's own bound).
inline constexpr std::size_t kLoaderStateMaxRuns = 64;

struct LoaderState {
  std::string url;
  std::uint64_t num_samples = 0;
  std::uint64_t dataset_fingerprint = 0;  // listing_fingerprint()
  std::uint32_t batch_size = 1;
  std::uint32_t epochs = 1;
  std::uint64_t seed = 0;
  bool shuffle = true;
  std::uint32_t shard_shuffle = 0;
  bool drop_last = false;
  std::uint32_t rank = 0;
  std::uint32_t world_size = 1;
  ResumePoint resume;
  bool operator==(const LoaderState&) const = default;
};

// The state of a run with sampler settings `c` over `num_samples` samples of `url` (a listing
// whose fingerprint is `fingerprint`), standing at `where`.
LoaderState loader_state(std::string url, std::uint64_t num_samples, std::uint64_t fingerprint,
                         const SamplerConfig& c, ResumePoint where);
// The same for a run over `dataset` (where: Loader::resume_point()).
LoaderState loader_state(std::string url, const Dataset& dataset, const SamplerConfig& c,
                         ResumePoint where);

// The document's text (one line). A url that is not UTF-8 is written with U+FFFD for its bad
// bytes.
std::string format_loader_state(const LoaderState& s);

// kInvalidArgument for anything but a document format_loader_state() could have written (its
// message starts "state: " and names the field; its object is "state"); keys it does not know
// are ignored.
Result<LoaderState> parse_loader_state(std::string_view text);

// Why a run with settings `c` cannot resume from `s` (a setting that differs, named as
// LoaderConfig's field), or nullopt. The rank and world size may differ: the rest is split over
// the new ranks.
std::optional<std::string> loader_state_mismatch(const LoaderState& s, const SamplerConfig& c);

// Why `s` cannot resume on `dataset` (opened at `url`): another sample count, or another listing
// (the fingerprint differs: objects renamed, resized, replaced or with their contents swapped),
// or nullopt.
std::optional<std::string> loader_state_dataset_mismatch(const LoaderState& s,
                                                         const Dataset& dataset,
                                                         std::string_view url);

// Both checks, then c.resume = s.resume: a Loader opened with `c` on `dataset` delivers exactly
// what the run that saved `s` had not. kInvalidArgument with the first check's message.
Result<void> resume_from(const LoaderState& s, const Dataset& dataset, std::string_view url,
                         SamplerConfig& c);

}  // namespace feedline::loader
