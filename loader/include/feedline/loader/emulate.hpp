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

// Runs the whole pipeline with an emulated accelerator until the end or until stop is requested
// (then within about a second, mid-step included: an emulated step is a wait, not a sleep).
// progress (may be null) counts delivered samples for a live display. The report carries the
// run's error, if any.
PipelineReport run_emulated(Loader& loader, const ComputeModel& compute, std::stop_token stop,
                            std::atomic<std::uint64_t>* progress);

}  // namespace feedline::loader
