// Autotune (tf.data's AUTOTUNE, checked by measurement): the IO depth, decode threads and
// prefetch (the read-ahead window: batch buffers) for a run, under its CPU and memory budgets.
//
// It starts where the capacity model (capacity.hpp) predicts the most samples/s for the least
// resources, among depths, thread counts and prefetch depths around the run's own, then
// hill-climbs on measured throughput: each knob doubled and halved in turn, a short timed run
// each, moving while a step gains more than `min_gain`, at most `max_steps` runs. The starting
// settings are measured too, so the gain is achieved against achieved.
#pragma once

#include <chrono>
#include <functional>
#include <stop_token>
#include <vector>

#include "feedline/core/error.hpp"
#include "feedline/loader/capacity.hpp"
#include "feedline/loader/dataset.hpp"
#include "feedline/loader/emulate.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/storage/backend.hpp"

namespace feedline::loader {

struct Knobs {
  unsigned io_depth = 64;
  unsigned decode_threads = 2;
  unsigned prefetch_batches = 2;
  bool operator==(const Knobs&) const = default;
};

struct TuneStep {
  Knobs knobs;
  double predicted_samples_per_second = 0;
  double achieved_samples_per_second = 0;
};

struct TuneOptions {
  std::chrono::duration<double> step{3.0};  // each measured run
  unsigned max_steps = 10;                  // measured runs, the starting settings' included
  double min_gain = 0.03;                   // a step must beat the best so far by this much
  unsigned cores = 1;                       // the CPU budget: decode threads up to 2x this
};

struct TuneResult {
  Knobs start;  // the run's own
  Knobs model_optimum;
  Knobs tuned;
  double start_samples_per_second = 0;  // measured
  double tuned_samples_per_second = 0;  // measured
  std::vector<TuneStep> steps;          // every measured run, in order
  double seconds = 0;                   // the whole search
};

// settings: the model's view of a config (diagnose.hpp's settings_of, with the run's world).
Result<TuneResult> autotune(storage::Backend& backend, const Dataset& dataset,
                            const LoaderConfig& config, const ComputeModel& compute,
                            const CapacityModel& model,
                            const std::function<Settings(const LoaderConfig&)>& settings,
                            const TuneOptions& options);

}  // namespace feedline::loader
