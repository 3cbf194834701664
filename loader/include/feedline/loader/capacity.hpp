// A capacity model of the pipeline (Plumber's idea, fed by DS-Analyzer's controlled runs): what
// each stage can deliver as a function of its resources, built only from what feedline measured
// on the user's own dataset and settings (diagnose.hpp), predicting samples/s and AU for the
// settings that ran and for what-ifs (more decode threads, a deeper queue, faster or slower
// storage, more cores, another compute time, several accelerators).
//
// The stages and what bounds each (rates in samples/s; N accelerators each run a pipeline):
//  - storage: reads in flight over read latency (Little's law), capped by the storage's bandwidth
//    where a controlled run saw it saturate (or a throttle set it), and, for reads whose cost is
//    the host's CPU (local page-cache copies), by the storage threads' CPU per sample. Reads in
//    flight are the least of the IO depth, the read-ahead window (batch buffers x batch) and what
//    the memory budget holds; the caller computes those for each setting (Concurrency).
//  - decode: its threads (at most the cores) over its CPU per sample;
//  - collate: one thread per accelerator over its CPU per sample;
//  - consumer: batch size over the compute time per step;
//  - the cores: all the stages' CPU per sample together cannot exceed the cores.
// The pipeline delivers the least of them; the stage that sets it is the limit. AU is the
// pipeline's rate over the consumer's (at most the AU the consumer reached when it was the limit).
//
// Efficiency: a pipeline reaches its slowest stage's capacity only so far (hand-offs, a core
// shared by threads). The model measures that on the settings that ran: achieved / predicted for
// the stage that limited them, and applies it wherever that stage limits again; a stage the run
// did not see limiting is predicted at its measured capacity. Pure functions of the inputs: unit
// tested on recorded measurements (no timing).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "feedline/loader/report.hpp"

namespace feedline::loader {

// What the controlled runs measured, per sample unless said otherwise.
struct Measurements {
  double read_bytes_per_sample = 0;  // bytes read from storage per sample
  double reads_per_sample = 1;       // storage reads per sample (coalesced tar members: < 1)
  // Storage: the latency of a read where the storage was not the bottleneck (the controlled run
  // at a low depth), and the most it gave when saturated: 0 when no run saturated it (its
  // bandwidth is then at least storage_bytes_per_second_seen, and only a throttle bounds it).
  double read_latency_seconds = 0;
  double storage_bytes_per_second_max = 0;
  double storage_bytes_per_second_seen = 0;
  // CPU seconds per sample of each stage's own work (storage: the requests, and for local
  // page-cache reads the kernel's copy; decode: members, zstd, digest, a planted cost).
  double storage_cpu_seconds = 0;
  double decode_cpu_seconds = 0;
  double collate_cpu_seconds = 0;
  double consumer_cpu_seconds = 0;
  // Each storage thread's reads cost the host its CPU (page-cache copies): each thread then
  // delivers at most 1 / storage_cpu_seconds samples/s.
  bool storage_cpu_bound = false;
  // The AU the consumer reached where it was the limit (its own overhead per step); 1 if unseen.
  double consumer_au_ceiling = 1;
  // How much faster the storage read the same samples in storage order than shuffled, at the
  // same depth (1: not measured, or no faster): neighbouring tar members share a read, and a
  // rotational disk seeks less.
  double storage_order_speedup = 1;
  // Storage alone at the run's depth, in the run's order (samples/s): what another order's
  // storage alone is set against.
  double storage_alone_samples_per_second = 0;
};

// How many reads may be in flight for one accelerator's pipeline: the least of these.
struct Concurrency {
  double io_depth = 0;
  double window_reads = 0;  // the read-ahead window: samples ahead of collate x reads per sample
  double memory_reads = 0;  // reads the memory budget holds beside the batch pool (0: unbounded)
};

// Settings a prediction is for: the run's own, or a what-if's.
struct Settings {
  unsigned accelerators = 1;
  unsigned decode_threads = 2;   // the host's (shared out over the accelerators)
  unsigned storage_threads = 1;  // each accelerator's
  unsigned cores = 1;            // the host's usable cores
  unsigned batch_size = 1;
  double compute_seconds = 0;           // per step (0: no accelerator: pulled as fast as it comes)
  double storage_bytes_per_second = 0;  // a cap on the storage's bandwidth (0: as measured)
  double added_latency_seconds = 0;     // added to every read
  // How much faster storage serves the what-if's read order than the run's (storage alone in
  // each, measured): reads in storage order on a seek-bound disk, shards shuffled instead of
  // samples. 1: the run's own order.
  double order_speedup = 1;
  Concurrency concurrency;  // each accelerator's
};

struct StageCapacity {
  StageId stage = StageId::kStorage;
  double samples_per_second = 0;  // what the stage can deliver (infinity: unbounded)
  std::string bound;              // what bounds it: "bandwidth", "latency", "cpu", ...
  // For a latency-bound storage, what holds its reads in flight: "io depth", "read-ahead
  // window", "memory budget" (a full queue keeps its depth; a window is emptied and refilled a
  // batch at a time, so the two reach their caps differently: calibrated apart).
  std::string held_by;
};

struct Prediction {
  double samples_per_second = 0;  // the whole host's
  std::optional<double> au;       // with a compute time
  StageId limit = StageId::kConsumer;
  std::string held_by;       // the limiting storage's reads in flight, where latency bounds it
  std::string bound;         // what bounds the limiting stage ("reads in flight over latency", ...)
  bool cores_limit = false;  // the cores, shared by the stages, are what limits
  std::vector<StageCapacity> stages;
};

class CapacityModel {
 public:
  // measured: the controlled runs; ran: the settings of the run that measured the pipeline's
  // rate, achieved_samples_per_second (calibrates the model's efficiency on its limit).
  CapacityModel(Measurements measured, Settings ran, double achieved_samples_per_second);

  Prediction predict(const Settings& s) const;
  // The prediction for the settings that ran (calibrated against what they achieved).
  const Prediction& as_run() const noexcept { return as_run_; }
  const Measurements& measurements() const noexcept { return m_; }
  // achieved / predicted on the limit the run hit, applied where that limit binds again.
  double efficiency() const noexcept { return efficiency_; }
  // Where the run was latency-bound: the share of its window's reads it kept in flight on
  // average (solved so that the storage's closed loop gives what the run achieved), applied
  // to what-ifs whose reads the same thing holds, instead of efficiency() as a factor on the
  // rate: a window that fills twice as far does not read twice as fast where the storage
  // nears its bandwidth. 1 where the run was not latency-bound.
  double window_fill() const noexcept { return fill_; }

 private:
  Prediction raw(const Settings& s) const;  // before calibration

  Measurements m_;
  Settings ran_;
  Prediction as_run_;
  double efficiency_ = 1;
  double fill_ = 1;          // window_fill()
  std::string fill_holder_;  // what held the run's reads in flight, where fill_ was solved
  StageId calibrated_stage_ = StageId::kConsumer;
  bool calibrated_cores_ = false;
  std::string calibrated_bound_;
};

}  // namespace feedline::loader
