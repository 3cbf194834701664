// The pipeline (internal; the public face is loader.hpp): a composition of stages.
//
//   storage stage --reads--> decode stage --decoded--> collate stage --batches--> [device] -->
//   next()
//                                                           ^ batch pool (free buffers)
//
// run_state.hpp is what the stages share, stages.hpp the stages, stage.hpp the runner that gives
// each stage its threads and stall accounting, sizing.hpp the pool and window, batch_pool.hpp
// the buffers a Batch keeps alive, report_builder.cpp the report. The storage stage is several
// parts (its data path as a strategy, admission, read issuer, completion, poll observer):
// storage_stage.cpp lists them.
//
// Flow control, and why it cannot deadlock:
//  1. The storage stage admits samples strictly in sampler order. Admission reserves the
//     sample's footprint (stored bytes + decoded bytes for zstd members) in the memory budget and
//     requires seq < collate's cursor + window, window = max(batch buffers x batch size,
//     2 x io_depth).
//  2. Decode threads take reads in completion order and never wait for memory (the reservation
//     was made at admission; a zstd frame bigger than estimated is force()d and reported).
//  3. Collate pulls decoded samples as they come into a reorder map, copies them into the batch
//     buffer in seq order, and releases each sample's reservation. It waits only for the next
//     seq (which was admitted first, so it is read and decoded without needing more memory) or
//     for a free batch buffer (which the consumer returns).
// So the lowest outstanding sample can always make progress, and everything held is bounded by
// the budget (samples) plus the batch pool.
//  With a transform, what it returns is held in the budget from its return until the last Batch
//  holding it dies (ResultBytes). Samples of later batches than the one collate fills need room
//  for a result as large as the largest so far (and wait for the first to be known); those of
//  the batch collate fills wait for results to be freed only while a finished batch is queued
//  for the consumer (taking it frees the caller's older ones). With none queued, the results
//  held are freed only through this batch (the caller keeps its last batch until next()
//  returns), so they are left out of its admission: results exceed the budget by that batch's
//  and the caller's at most.
//  4. The direct path (samples that need no decode): the storage stage takes a batch buffer from
//     the pool at each batch's first sample, without blocking (it must keep polling reads in
//     flight), lays out every slot of the batch and reads each sample into its slot; collate
//     only records offsets. Every earlier batch already has its buffer and all its samples
//     admitted, so it completes and the consumer hands its buffer back: no wait is circular.
//     With reads into GPU memory (cuFile), the slots are in the buffer's device twin, sized for
//     the largest batch at start-up (registered with cuFile, never reallocated); the host
//     buffer holds nothing and there is no H2D copy (no device stage).
//     Decode in place (samples that need decoding, decoded sizes known from the index) takes
//     the batch buffer the same way and lays out each sample's decoded slot; reads go to sample
//     buffers as on the bounce path and decode writes into the slot, so the same argument holds.
//  5. The device stage (between collate and the consumer) keeps at most one copy per stream in
//     flight and waits for the oldest; a batch's buffer returns to the pool only when the
//     consumer drops the batch, after its copy finished.
// Two batch buffers are enough for all of it (sizing.hpp): one being filled, one with the
// consumer.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <stop_token>

#include "feedline/loader/loader.hpp"
#include "run_state.hpp"
#include "stage.hpp"
#include "stages.hpp"

namespace feedline::loader {

class Pipeline {
 public:
  Pipeline(storage::Backend& backend, const Dataset& dataset, LoaderConfig config, Sampler sampler);
  ~Pipeline();

  Result<void> start();
  Result<Batch> next() { return consumer_->next(); }
  std::optional<Result<Batch>> next_for(std::chrono::nanoseconds timeout) {
    return consumer_->next_for(timeout);
  }
  void record_compute(std::chrono::nanoseconds spent) { consumer_->record_compute(spent); }
  void stop_by_user() {
    if (run_) run_->stop_by_user();
  }
  PipelineReport report();
  // The report so far, the run going on (Loader::snapshot()).
  PipelineReport snapshot();
  // From any thread (Loader::live()).
  LiveFigures live() const;
  // From any thread (Loader::resume_point()).
  ResumePoint resume_point() const;
  // Set when the run starts, never changed: from any thread.
  const Sampler& sampler() const noexcept { return sampler_; }
  const std::vector<std::shared_ptr<LiveWatch>>& watchers() const noexcept {
    return config_.watchers;
  }
  // One of a host's accelerators (LoaderConfig::loaders_sharing_backend), as rank().
  bool shares_host() const noexcept { return config_.loaders_sharing_backend > 1; }
  unsigned rank() const noexcept { return config_.sampler.rank; }

 private:
  // start()'s steps.
  Result<std::uint64_t> held_for_tables() const;
  Result<void> open_run();
  void make_stages();
  void start_stages();
  void finish_run(std::uint64_t end);

  storage::Backend& backend_;
  const Dataset& dataset_;
  LoaderConfig config_;  // as given, but storage_threads resolved by start()
  Sampler sampler_;
  std::unique_ptr<detail::RunState> run_;
  std::unique_ptr<detail::StorageStage> storage_;
  std::unique_ptr<detail::DecodeStage> decode_;
  std::unique_ptr<detail::CollateStage> collate_;
  std::unique_ptr<detail::DeviceStage> device_;
  // Runners: the stages' threads and clocks (the consumer's is driven by next()).
  std::unique_ptr<detail::StageRunner> storage_runner_, decode_runner_, collate_runner_,
      device_runner_, consumer_runner_;
  std::unique_ptr<detail::Consumer> consumer_;
  std::vector<QueueReport> end_queues_;  // measured at the end of the run
  bool joined_ = false;
  // config_.stop requested (Ctrl-C): stop_by_user(), from the thread that requested it. Last
  // member: destroyed first, before anything it could touch.
  std::optional<std::stop_callback<std::function<void()>>> on_stop_;
};

namespace detail {
// The report of a finished run (report_builder.cpp).
struct RunParts {
  const RunState& run;
  const Consumer& consumer;
  const StorageStage& storage;
  const DecodeStage& decode;
  const CollateStage& collate;
  std::vector<StageReport> stages;
  std::vector<QueueReport> queues;
};
PipelineReport build_report(const RunParts& parts);
// The user transform's part of a report, from the decode stage's counters (stage reports in r).
void add_transform_report(PipelineReport& r, const RunState& run, const DecodeStage& decode);
}  // namespace detail

// Picks the bottleneck from a finished report (verdict.cpp).
Verdict diagnose(const PipelineReport& r, const LoaderConfig& config);

}  // namespace feedline::loader
