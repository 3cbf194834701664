// autotune() (tune.hpp): the model's optimum, then hill-climbing on measured throughput.
#include "feedline/loader/tune.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include "feedline/core/clock.hpp"
#include "feedline/loader/diagnose.hpp"

namespace feedline::loader {
namespace {

// A step's rate counts the batches after its first: fewer than this and the step runs longer.
constexpr std::uint64_t kMinStepBatches = 4;

LoaderConfig with(const LoaderConfig& base, const Knobs& k) {
  LoaderConfig c = base;
  c.io_depth = k.io_depth;
  c.decode_threads = k.decode_threads;
  c.prefetch_batches = k.prefetch_batches;
  c.sampler.epochs = 1u << 20;  // the run's time bounds it
  return c;
}

// What a setting costs: threads first (CPU), then reads in flight and buffers (memory).
std::tuple<unsigned, unsigned, unsigned> cost(const Knobs& k) {
  return {k.decode_threads, k.io_depth, k.prefetch_batches};
}

std::vector<unsigned> around(unsigned v, unsigned lo, unsigned hi) {
  std::vector<unsigned> out;
  for (unsigned x = std::max(lo, v / 4); x <= std::min(hi, v * 4) && x > 0; x *= 2)
    out.push_back(x);
  if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  return out;
}

}  // namespace

Result<TuneResult> autotune(storage::Backend& backend, const Dataset& dataset,
                            const LoaderConfig& config, const ComputeModel& compute,
                            const CapacityModel& model,
                            const std::function<Settings(const LoaderConfig&)>& settings,
                            const TuneOptions& options) {
  const std::uint64_t t0 = now_ns();
  TuneResult out;
  out.start = {config.io_depth, config.decode_threads, config.prefetch_batches};
  const unsigned max_threads = std::max(2u, 2 * options.cores);
  // The model's optimum: the most predicted samples/s; among those within 2% of it, the
  // cheapest.
  {
    std::vector<std::pair<Knobs, double>> grid;
    double best = 0;
    for (unsigned depth : around(config.io_depth, 1, kMaxIoDepth)) {
      for (unsigned threads = 1; threads <= max_threads; ++threads) {
        for (unsigned prefetch : around(config.prefetch_batches, 1, 32)) {
          const Knobs k{depth, threads, prefetch};
          const double p = model.predict(settings(with(config, k))).samples_per_second;
          grid.emplace_back(k, p);
          best = std::max(best, p);
        }
      }
    }
    out.model_optimum = out.start;
    bool found = false;
    for (const auto& [k, p] : grid) {
      if (p < 0.98 * best) continue;
      if (!found || cost(k) < cost(out.model_optimum)) {
        out.model_optimum = k;
        found = true;
      }
    }
  }
  std::map<std::tuple<unsigned, unsigned, unsigned>, double> measured;
  std::chrono::duration<double> step = options.step;
  // Measures k once (later asks are answered from the first run); 0 when out of steps.
  auto measure = [&](const Knobs& k) -> Result<double> {
    if (auto it = measured.find(cost(k)); it != measured.end()) return it->second;
    if (out.steps.size() >= options.max_steps) return 0.0;
    if (config.stop.stop_requested()) return fail(Errc::kCancelled, "interrupted: autotune");
    PipelineReport r;
    for (;;) {
      FEEDLINE_ASSIGN_OR_RETURN(auto loader, Loader::open(backend, dataset, with(config, k)));
      r = timed_run(*loader, compute, step, config.stop);
      if (r.error) return fail(*r.error);
      // Too few batches in a step to see the settings' rate (slow storage, large batches, a slow
      // machine): this step and the later ones run longer, up to 8x the step asked for.
      if (r.consumer.batches >= kMinStepBatches || r.interrupted || step >= 8 * options.step) break;
      step *= 2;
    }
    const double rate = steady_samples_per_second(r.consumer);
    measured[cost(k)] = rate;
    out.steps.push_back({k, model.predict(settings(with(config, k))).samples_per_second, rate});
    return rate;
  };
  FEEDLINE_ASSIGN_OR_RETURN(out.start_samples_per_second, measure(out.start));
  Knobs best = out.start;
  double best_rate = out.start_samples_per_second;
  FEEDLINE_ASSIGN_OR_RETURN(const double optimum_rate, measure(out.model_optimum));
  if (optimum_rate > best_rate * (1 + options.min_gain)) {
    best = out.model_optimum;
    best_rate = optimum_rate;
  }
  // Hill-climbing: each knob doubled, then halved, from the best so far.
  for (bool moved = true; moved && out.steps.size() < options.max_steps;) {
    moved = false;
    std::vector<Knobs> next;
    const Knobs b = best;
    next.push_back({std::min(b.io_depth * 2, kMaxIoDepth), b.decode_threads, b.prefetch_batches});
    next.push_back({b.io_depth, std::min(b.decode_threads * 2, max_threads), b.prefetch_batches});
    next.push_back({b.io_depth, b.decode_threads, std::min(b.prefetch_batches * 2, 32u)});
    next.push_back({std::max(1u, b.io_depth / 2), b.decode_threads, b.prefetch_batches});
    next.push_back({b.io_depth, std::max(1u, b.decode_threads / 2), b.prefetch_batches});
    next.push_back({b.io_depth, b.decode_threads, std::max(1u, b.prefetch_batches / 2)});
    for (const Knobs& k : next) {
      if (k == best) continue;
      FEEDLINE_ASSIGN_OR_RETURN(const double rate, measure(k));
      // A cheaper setting that does as well is better too (fewer threads, less memory).
      const bool gains = rate > best_rate * (1 + options.min_gain);
      const bool cheaper_as_good =
          cost(k) < cost(best) && rate >= best_rate * (1 - options.min_gain / 2);
      if (gains || cheaper_as_good) {
        best = k;
        best_rate = rate;
        moved = true;
        break;
      }
    }
  }
  out.tuned = best;
  out.tuned_samples_per_second = measured[cost(best)];
  out.seconds = static_cast<double>(now_ns() - t0) / 1e9;
  return out;
}

}  // namespace feedline::loader
