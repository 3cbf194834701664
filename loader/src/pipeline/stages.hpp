// The pipeline's stages (internal). Each is a class with a run(Worker&) body that a StageRunner
// starts on the stage's threads, and the counters only it touches (read for the report after
// its threads are joined).
//
//   StorageStage  reads of samples admitted in order, each landing where its data path says
//                 (storage_stage.cpp lists its parts: path, admission, issuer, completion,
//                 observer)
//   DecodeStage   tar members out of a sample's bytes, zstd frames, the digest
//   CollateStage  samples in order into batches (copied, or already in their slots)
//   DeviceStage   batches copied to the GPU on several streams, handed on in order
//   Consumer      next() on the caller's thread: the waits, AU, what was delivered
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "feedline/loader/sampler.hpp"
#include "run_state.hpp"
#include "stage.hpp"

namespace feedline::loader::detail {

class Admission;
class StoragePath;

class StorageStage {
 public:
  // threads: how many storage threads run run() (each with an IoQueue of its own and io_depth
  // split between them); they admit samples in sampler order from one shared admission.
  StorageStage(RunState& run, Sampler& sampler, unsigned threads);
  ~StorageStage();
  void run(Worker& w);

  // Read after the stage's threads were joined: summed over them (the limited times averaged).
  std::string engine;  // the queue's (QueueInfo::engine)
  storage::QueueStats io_stats;
  std::uint64_t window_limited_ns = 0;  // admission stopped by collate's window
  std::uint64_t budget_limited_ns = 0;  // ... by the memory budget
  std::uint64_t storage_bytes = 0;
  std::uint64_t decoded_inline = 0;  // samples whose digest the storage threads took (no decode)
  std::uint64_t poll_wait_ns = 0;    // summed over threads: in poll(), waiting for reads
  unsigned threads() const noexcept { return threads_; }

  // One thread's figures, merged into the above as it ends.
  struct ThreadFigures {
    std::uint64_t bytes_read = 0;
    std::uint64_t digested = 0;
    std::uint64_t poll_ns = 0;
    std::uint64_t window_ns = 0;
    std::uint64_t budget_ns = 0;
  };

 private:
  void end_thread(const storage::IoQueue* queue, const ThreadFigures& f);
  void merge_queue(const storage::IoQueue& queue);

  RunState& run_;
  const unsigned threads_;
  std::unique_ptr<StoragePath> path_;     // the run's data path (storage_path.hpp)
  std::unique_ptr<Admission> admission_;  // what the threads share (admission.hpp)
  std::atomic<unsigned> exited_{0};
  std::mutex merge_mu_;  // the threads' figures, merged as each ends
};

class DecodeStage {
 public:
  explicit DecodeStage(RunState& run) : run_(run) {}
  void run(Worker& w);

  // The user's transform, summed over the threads (read after they were joined).
  std::atomic<std::uint64_t> transformed{0};
  std::atomic<std::uint64_t> transform_errors{0};
  std::atomic<std::uint64_t> transform_ns{0};
  std::atomic<std::uint64_t> transform_cpu_ns{0};
  std::atomic<std::uint64_t> transform_lock_wait_ns{0};

 private:
  // Runs the transform on a decoded sample: its result, or the sample's error. `members` is the
  // calling thread's scratch list.
  void transform(InFlightSample& item, std::vector<TransformMember>& members);

  RunState& run_;
  std::atomic<unsigned> done_{0};  // the last decoder out closes the queue behind it
};

class CollateStage {
 public:
  explicit CollateStage(RunState& run) : run_(run) {}
  void run(Worker& w);

  std::uint64_t copied_bytes = 0;      // memcpy'd into batches (by collate, or by decode in place)
  std::uint64_t direct_delivered = 0;  // bytes that arrived in their slot
  std::uint64_t bounce_delivered = 0;  // bytes collate copied in

 private:
  RunState& run_;
};

class DeviceStage {
 public:
  explicit DeviceStage(RunState& run) : run_(run) {}
  void run(Worker& w);

 private:
  RunState& run_;
};

class Consumer {
 public:
  Consumer(RunState& run, Worker& worker, std::uint64_t batches_per_epoch)
      : run_(run), worker_(worker), batches_per_epoch_(batches_per_epoch) {}
  void start(std::uint64_t start_ns);
  Result<Batch> next();
  // next() waiting at most `timeout`: nullopt when no batch came (the next call's wait continues
  // the same wait for this batch, as one).
  std::optional<Result<Batch>> next_for(std::chrono::nanoseconds timeout);
  void record_compute(std::chrono::nanoseconds spent);
  // Ends the run at `end` (the consumer's clock and the queues are measured up to it); true the
  // first time.
  bool finish(std::uint64_t end);
  ConsumerReport report() const;
  // The same up to `end_ns` (a report mid-run).
  ConsumerReport report_until(std::uint64_t end_ns) const;
  std::uint64_t start_ns() const noexcept { return start_ns_; }
  std::uint64_t end_ns() const noexcept { return end_ns_; }
  bool finished() const noexcept { return finished_; }
  std::uint64_t digest() const noexcept { return digest_; }
  // Batches handed to the caller, those whose every sample was skipped too: the sampler's count
  // of what was delivered (Loader::resume_point()). From any thread.
  std::uint64_t handed() const noexcept { return handed_.load(std::memory_order_relaxed); }
  double copy_blocking_seconds() const noexcept {
    return static_cast<double>(copy_blocking_ns_) / 1e9;
  }
  // Its figures for a live reader, from any thread (LiveFigures' batches, waits, compute).
  void read_live(LiveFigures& f) const noexcept;

 private:
  RunState& run_;
  Worker& worker_;
  const std::uint64_t batches_per_epoch_;
  std::uint64_t start_ns_ = 0;
  std::uint64_t end_ns_ = 0;
  bool finished_ = false;
  bool consuming_ = false;  // next() was called: the CPU clock follows the iterating thread
  std::uint64_t samples_ = 0;
  std::uint64_t bytes_ = 0;
  std::uint64_t batches_ = 0;
  std::uint64_t digest_ = 0;
  Histogram wait_ns_;
  std::uint64_t wait_total_ns_ = 0;
  std::uint64_t first_wait_ns_ = 0;
  std::uint64_t waiting_since_ns_ = 0;  // a next_for() that timed out began the wait (0: none)
  std::uint64_t first_batch_ns_ = 0;
  std::uint64_t compute_total_ns_ = 0;
  std::uint64_t compute_after_first_ns_ = 0;
  std::uint64_t compute_steps_after_first_ = 0;
  std::uint64_t first_step_end_ns_ = 0;
  std::uint64_t copy_blocking_ns_ = 0;  // waiting while its batch's copy ran
  // Copies of the figures above for live readers (only this thread stores).
  std::atomic<std::uint64_t> live_end_ns_{0};  // end_ns_ once finished
  std::atomic<std::uint64_t> live_batches_{0};
  std::atomic<std::uint64_t> handed_{0};
  std::atomic<std::uint64_t> live_wait_ns_{0};
  std::atomic<std::uint64_t> live_compute_ns_{0};
  LiveHistogram live_wait_;
};

}  // namespace feedline::loader::detail
