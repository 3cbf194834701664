// The emulated accelerator (MLPerf Storage's "computation_time" per batch).
#include <fmt/format.h>

#include <random>
#include <thread>

#include "feedline/core/units.hpp"
#include "feedline/loader/loader.hpp"

namespace feedline::loader {

Result<ComputeModel> parse_compute_time(std::string_view text) {
  ComputeModel m;
  if (text.starts_with("normal:")) {
    const auto rest = text.substr(7);
    const auto colon = rest.find(':');
    if (colon == std::string_view::npos) {
      return fail(Errc::kInvalidArgument,
                  fmt::format("compute time '{}': expected normal:MEAN:STDEV (e.g. normal:50ms:5ms)", text));
    }
    FEEDLINE_ASSIGN_OR_RETURN(m.mean, parse_duration(rest.substr(0, colon)));
    FEEDLINE_ASSIGN_OR_RETURN(m.stdev, parse_duration(rest.substr(colon + 1)));
    return m;
  }
  FEEDLINE_ASSIGN_OR_RETURN(m.mean, parse_duration(text));
  return m;
}

PipelineReport run_emulated(Loader& loader, const ComputeModel& compute,
                            const std::atomic<bool>* stop, std::atomic<std::uint64_t>* progress) {
  std::mt19937_64 rng(compute.seed);
  std::normal_distribution<double> dist(static_cast<double>(compute.mean.count()),
                                        static_cast<double>(compute.stdev.count()));
  // A stop watcher: a Ctrl-C must end a run even while the consumer waits for a batch.
  std::jthread watcher;
  if (stop) {
    watcher = std::jthread([&loader, stop](std::stop_token st) {
      while (!st.stop_requested()) {
        if (stop->load(std::memory_order_relaxed)) {
          loader.stop();
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
  }
  for (;;) {
    auto batch = loader.next();
    if (!batch || !*batch) break;
    if (progress) progress->fetch_add((*batch)->samples().size(), std::memory_order_relaxed);
    if (compute.mean.count() > 0) {
      const double ns = compute.stdev.count() > 0 ? std::max(0.0, dist(rng))
                                                  : static_cast<double>(compute.mean.count());
      const auto t0 = std::chrono::steady_clock::now();
      // The accelerator is busy; the host thread idles, as it would waiting on a CUDA stream.
      std::this_thread::sleep_for(std::chrono::nanoseconds(static_cast<std::int64_t>(ns)));
      loader.record_compute(std::chrono::steady_clock::now() - t0);
    } else {
      loader.record_compute(std::chrono::nanoseconds(0));
    }
  }
  if (watcher.joinable()) {
    watcher.request_stop();
    watcher.join();
  }
  return loader.report();
}

}  // namespace feedline::loader
