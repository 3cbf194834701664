// N emulated accelerators on one host, as N ranks of MLPerf Storage on one host would run: N
// loaders over one backend, accelerator i reading shard rank * N + i of world_size * N with its
// own batches and its own emulated compute (emulate.hpp) on a consumer thread of its own. What
// the host has once is split between them: the decode threads and the memory budget the config
// gives are the host's, shared out evenly (each at least one thread); the cores each loader
// spreads its storage threads over are the usable cores shared out the same way. Reads in
// flight, batch size and prefetch are each accelerator's own, as each rank's reader has them.
//
// The run ends when every accelerator has finished; an error on one stops the others (the
// report names the accelerator), and a stop request ends them all within about a second.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stop_token>
#include <vector>

#include "feedline/core/error.hpp"
#include "feedline/loader/emulate.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/loader/report.hpp"

namespace feedline::loader {

inline constexpr unsigned kMaxAccelerators = 1024;

// How the host's resources were shared out.
struct AcceleratorSplit {
  unsigned accelerators = 1;
  unsigned cores = 1;                // usable on this host
  unsigned decode_threads = 0;       // the host's, asked
  unsigned decode_threads_each = 0;  // each accelerator's
  unsigned cores_each = 0;           // each accelerator's storage threads spread over these
  std::uint64_t memory_budget = 0;   // the host's
  std::uint64_t memory_budget_each = 0;
};

// The split run_accelerators() makes of `host` for n accelerators (n >= 1).
AcceleratorSplit split_host(const LoaderConfig& host, unsigned n);

struct HostReport {
  AcceleratorSplit split;
  std::vector<PipelineReport> accelerators;  // accelerator i's own report (its rank: i of N)
  std::vector<unsigned> ranks;               // each accelerator's sampler rank
  // The whole host: samples and bytes summed, the wall from the first batch asked to the last
  // delivered, the rates over that wall.
  std::uint64_t samples = 0;
  std::uint64_t bytes = 0;
  std::uint64_t batches = 0;
  double wall_seconds = 0;
  double samples_per_second = 0;
  double bytes_per_second = 0;
  // AU over the accelerators that measured it (au_steps > 0): min, mean, max. au_measured is
  // false when none did (runs of one step).
  bool au_measured = false;
  double au_min = 0, au_mean = 0, au_max = 0;
  std::size_t au_min_accelerator = 0;  // the accelerator with the lowest AU
  // Sum (mod 2^64) of the accelerators' digests: adds up to the dataset's over whole epochs.
  std::uint64_t digest = 0;
  bool digest_computed = true;
  std::uint64_t skipped = 0;
  // The straggler: the accelerator with the fewest samples/s, against the median of them all
  // (straggler_ratio = its rate / the median; 1 for a single accelerator).
  std::size_t straggler = 0;
  double median_samples_per_second = 0;
  double straggler_ratio = 1;
  // The longest any accelerator waited at epoch barriers for the rest of a job (with sync).
  double sync_seconds = 0;
  // The host as a whole: the stage most accelerators name, and whether a shared resource (the
  // storage every accelerator reads, the host's cores) is what saturated.
  Verdict verdict;
  std::optional<Error> error;  // the first accelerator's failure, naming it
  bool interrupted = false;
};

// Opens n loaders over backend and dataset with the host's config split by split_host(), runs
// each with an emulated accelerator and gathers their reports. An invalid config, or an
// accelerator that cannot open, is an error before anything runs. progress (may be null) counts
// the samples delivered over all accelerators. With sync (may be null: this host alone) the host
// starts each epoch together with the rest of a job: its accelerators meet at the epoch, the last
// to arrive waits on sync for the other hosts' (an MPI job's ranks), and all of them go on
// together (emulate.hpp's EpochSync). With run_for > 0 the run ends that long after every
// loader is open (a trial of `bench accelerators`: opening n loaders, their buffers allocated
// and registered, can take seconds that are no part of the run), not an interruption.
Result<HostReport> run_accelerators(storage::Backend& backend, const Dataset& dataset,
                                    const LoaderConfig& host, unsigned n,
                                    const ComputeModel& compute, std::stop_token stop,
                                    std::atomic<std::uint64_t>* progress, EpochSync* sync = nullptr,
                                    std::chrono::nanoseconds run_for = {});

// What a trial of N accelerators can measure. MLPerf Storage (DLIO) runs each accelerator
// floor(samples / (batch x accelerators)) full steps an epoch and never counts a short batch;
// an emulated step costs its full compute time whatever the batch holds, so short batches would
// lift AU (and hide the storage) for no samples. A trial therefore drops each epoch's short batch
// (drop_last) and is only run where every accelerator gets at least kMinFullStepsPerEpoch full
// steps an epoch: one step an epoch would make every step an epoch's first (in a job, each behind
// an epoch barrier), which is no training's steady state.
inline constexpr std::uint64_t kMinFullStepsPerEpoch = 2;

// The full batches of batch_size each of n accelerators on each of world_size ranks gets per
// epoch of `samples` samples (the sampler's equal split: every one gets samples / (world x n)).
std::uint64_t full_steps_per_epoch(std::uint64_t samples, std::uint32_t batch_size,
                                   std::uint64_t world_size, unsigned n) noexcept;
// The most accelerators per rank of which each gets at least min_steps full steps an epoch (0:
// not even one), and the samples a dataset needs for n of them to.
unsigned most_accelerators_measurable(std::uint64_t samples, std::uint32_t batch_size,
                                      std::uint64_t world_size,
                                      std::uint64_t min_steps = kMinFullStepsPerEpoch) noexcept;
std::uint64_t samples_needed(unsigned n, std::uint32_t batch_size, std::uint64_t world_size,
                             std::uint64_t min_steps = kMinFullStepsPerEpoch) noexcept;

// The search of `bench accelerators` for the most accelerators a storage feeds at the AU
// target (MLPerf Storage's question): N doubles from 1 while trials pass, then bisects between
// the last pass and the first failure; at most max_accelerators. Each trial's outcome is given
// to record(); next() says what to try, until it says nothing.
class AcceleratorSearch {
 public:
  explicit AcceleratorSearch(unsigned max_accelerators) noexcept
      : max_(max_accelerators < 1 ? 1 : max_accelerators) {}
  // The N to try next; nullopt when the answer is known.
  std::optional<unsigned> next() const noexcept;
  void record(unsigned n, bool passed) noexcept;
  // The largest N that passed (0: not even one accelerator).
  unsigned answer() const noexcept { return passed_; }
  // The smallest N that failed (answer() + 1 once the search is over), nullopt where every N
  // tried passed up to max_accelerators (the answer is then at least that).
  std::optional<unsigned> first_failure() const noexcept { return failed_; }
  bool capped() const noexcept { return !failed_ && passed_ >= max_; }

 private:
  unsigned max_;
  unsigned passed_ = 0;
  std::optional<unsigned> failed_;
};

// The host verdict of reports that already ran (run_accelerators() fills HostReport::verdict
// with it): exposed to be tested on planted reports.
Verdict host_verdict(const std::vector<PipelineReport>& accelerators, const AcceleratorSplit& split,
                     double wall_seconds);

}  // namespace feedline::loader
