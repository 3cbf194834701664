// The emulated accelerator of MLPerf Storage: pulls batches and holds each for a compute time
// drawn from a distribution, then reports AU. A diagnosis tool, not part of a training job.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stop_token>
#include <string_view>

#include "feedline/core/error.hpp"
#include "feedline/loader/loader.hpp"

namespace feedline::loader {

// compute == 0 means "no consumer": pull as fast as possible.
struct ComputeModel {
  std::chrono::nanoseconds mean{0};
  std::chrono::nanoseconds stdev{0};  // normal distribution, clamped at 0
  std::uint64_t seed = 1;
};
Result<ComputeModel> parse_compute_time(std::string_view text);  // "50ms", "normal:50ms:5ms"

// Where the ranks of a job start each epoch together, as MLPerf Storage's ranks do (DLIO puts a
// barrier between epochs): the emulated accelerator arrives before it takes the run's first batch
// (epoch 0: the ranks start together) and before it computes on the first batch of each later
// epoch. An implementation waits for every participant (an MPI job's ranks, a host's
// accelerators) and returns an error that ends the run: a participant that failed (naming it),
// or kCancelled once stop is requested (within about a second). Called from the consumer's
// thread; the time it takes is in the run's wall time, as DLIO's barrier is in its epochs.
class EpochSync {
 public:
  virtual ~EpochSync() = default;
  virtual Result<void> arrive(std::uint32_t epoch, std::stop_token stop) = 0;
};

// Runs the whole pipeline with an emulated accelerator until the end or until stop is requested
// (then within about a second, mid-step included: an emulated step is a wait, not a sleep).
// progress (may be null) counts delivered samples for a live display. With sync (may be null)
// the run starts each epoch together with the other participants (EpochSync); the time spent
// there is ConsumerReport::sync_seconds, and a failed arrival ends the run with its error. The
// report carries the run's error, if any.
PipelineReport run_emulated(Loader& loader, const ComputeModel& compute, std::stop_token stop,
                            std::atomic<std::uint64_t>* progress, EpochSync* sync = nullptr);

}  // namespace feedline::loader
