// The emulated accelerator (MLPerf Storage's "computation_time" per batch).
#include <fmt/format.h>

#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>
#include <stop_token>

#include "feedline/core/units.hpp"
#include "feedline/loader/emulate.hpp"

namespace feedline::loader {

Result<ComputeModel> parse_compute_time(std::string_view text) {
  ComputeModel m;
  if (text.starts_with("normal:")) {
    const auto rest = text.substr(7);
    const auto colon = rest.find(':');
    if (colon == std::string_view::npos) {
      return fail(
          Errc::kInvalidArgument,
          fmt::format("compute time '{}': expected normal:MEAN:STDEV (e.g. normal:50ms:5ms)",
                      text));
    }
    FEEDLINE_ASSIGN_OR_RETURN(m.mean, parse_duration(rest.substr(0, colon)));
    FEEDLINE_ASSIGN_OR_RETURN(m.stdev, parse_duration(rest.substr(colon + 1)));
    return m;
  }
  FEEDLINE_ASSIGN_OR_RETURN(m.mean, parse_duration(text));
  return m;
}

PipelineReport run_emulated(Loader& loader, const ComputeModel& compute, std::stop_token stop,
                            std::atomic<std::uint64_t>* progress, EpochSync* sync) {
  std::mt19937_64 rng(compute.seed);
  std::normal_distribution<double> dist(static_cast<double>(compute.mean.count()),
                                        static_cast<double>(compute.stdev.count()));
  // A stop must end the run while the consumer waits for a batch (stop() closes the queues) and
  // while it "computes" (the step is a wait on the token, not a sleep).
  std::stop_callback on_stop(stop, [&loader] { loader.stop(); });
  std::mutex mu;
  std::condition_variable_any cv;
  std::chrono::steady_clock::duration synced{0};
  std::optional<Error> sync_error;
  // Waits with the other participants at the start of `epoch`; false ends the run.
  auto arrive = [&](std::uint32_t epoch) {
    if (!sync) return true;
    const auto t0 = std::chrono::steady_clock::now();
    auto r = sync->arrive(epoch, stop);
    synced += std::chrono::steady_clock::now() - t0;
    if (r) return true;
    if (r.error().code() != Errc::kCancelled) sync_error = r.error();
    loader.stop();
    return false;
  };
  std::uint32_t epoch = 0;
  bool running = arrive(0);
  while (running && !stop.stop_requested()) {
    auto batch = loader.next();
    if (!batch || batch->end()) break;  // an error stays in the report
    if (batch->epoch() != epoch) {
      epoch = batch->epoch();
      if (!arrive(epoch)) break;
    }
    // Every sample of the batch skipped (on_error = skip): nothing to compute on, no step.
    if (batch->samples().empty()) continue;
    if (progress) progress->fetch_add(batch->samples().size(), std::memory_order_relaxed);
    if (compute.mean.count() > 0) {
      const double ns = compute.stdev.count() > 0 ? std::max(0.0, dist(rng))
                                                  : static_cast<double>(compute.mean.count());
      const auto t0 = std::chrono::steady_clock::now();
      // The accelerator is busy; the host thread idles, as it would waiting on a CUDA stream.
      std::unique_lock lock(mu);
      cv.wait_for(lock, stop, std::chrono::nanoseconds(static_cast<std::int64_t>(ns)),
                  [] { return false; });
      loader.record_compute(std::chrono::steady_clock::now() - t0);
    } else {
      loader.record_compute(std::chrono::nanoseconds(0));
    }
  }
  PipelineReport report = loader.report();
  report.consumer.sync_seconds = std::chrono::duration<double>(synced).count();
  if (sync_error && !report.error) {
    report.error = std::move(sync_error);
    report.interrupted = false;
  }
  return report;
}

}  // namespace feedline::loader
