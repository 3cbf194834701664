// The pipeline's threads and queues (internal to the loader; the public face is loader.hpp).
//
//   storage thread --reads--> decode threads --decoded--> collate thread --batches--> next()
//                                                              ^ batch-pool (free buffers)
//
// Flow control, and why it cannot deadlock:
//  1. The storage thread admits samples strictly in sampler order. Admission reserves the
//     sample's footprint (stored bytes + decoded bytes for zstd members) in the memory budget and
//     requires seq < collate's cursor + window, window = max((prefetch_batches + 2) x batch_size,
//     2 x io_depth).
//  2. Decode threads take reads in completion order and never wait for memory (the reservation
//     was made at admission; a zstd frame bigger than estimated is force()d and reported).
//  3. Collate pulls decoded samples as they come into a reorder map, copies them into the batch
//     buffer in seq order, and releases each sample's reservation. It waits only for the next
//     seq (which was admitted first, so it is read and decoded without needing more memory) or
//     for a free batch buffer (which the consumer returns).
// So the lowest outstanding sample can always make progress, and everything held is bounded by
// the budget (samples) plus the batch pool.
//  4. The direct path (samples that need no decode): the storage thread takes a batch buffer from
//     the pool at each batch's first sample, without blocking (it must keep polling reads in
//     flight), lays out every slot of the batch and reads each sample into its slot; collate
//     only records offsets. Every earlier batch already has its buffer and all its samples
//     admitted, so it completes and the consumer hands its buffer back: no wait is circular.
//     With reads into GPU memory (cuFile), the slots are in the buffer's device twin, sized for
//     the largest batch at start-up (registered with cuFile, never reallocated); the host
//     buffer holds nothing and there is no H2D copy (no device thread).
//     Decode in place (samples that need decoding, decoded sizes known from the index) takes
//     the batch buffer the same way and lays out each sample's decoded slot; reads go to sample
//     buffers as on the bounce path and decode writes into the slot, so the same argument holds.
//  5. The device sink (a device thread between collate and the consumer) keeps at most one copy
//     per stream in flight and waits for the oldest; a batch's buffer returns to the pool only
//     when the consumer drops the batch, after its copy finished.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <stop_token>
#include <mutex>
#include <thread>
#include <vector>

#include "feedline/loader/bounded_queue.hpp"
#include "feedline/loader/loader.hpp"
#include "buffer_pool.hpp"
#include "device_sink.hpp"
#include "memory_budget.hpp"

namespace feedline::loader {

class BatchBuffer {
 public:
  AlignedBuffer buffer;
  bool locked = false;
  bool pinned = false;           // cudaHostRegister'd by the device sink
  void* device = nullptr;        // the device sink's twin in GPU memory
  std::uint64_t device_size = 0;
};

namespace detail {

struct MemberBytes {
  const std::byte* data = nullptr;
  std::uint64_t size = 0;
};

// A sample on its way through the pipeline.
struct InFlightSample {
  SampleSlot slot;
  AlignedBuffer raw;          // the sample's byte range as read
  std::uint64_t raw_len = 0;  // bytes read
  AlignedBuffer decoded;      // zstd output (members point into raw or decoded)
  std::vector<MemberBytes> members;
  std::uint64_t reserved = 0;  // bytes reserved in the budget for this sample
  std::uint64_t digest = 0;
  std::uint64_t decoded_bytes = 0;
  std::optional<Error> error;  // the sample failed (skipped with on_error = kSkip)
  // Direct path: the bytes were read straight into this batch buffer at this offset (raw is
  // empty). Every sample of a direct batch names the same buffer.
  BatchBuffer* direct_buffer = nullptr;
  std::uint64_t direct_offset = 0;
  bool on_device = false;  // ... in the buffer's GPU twin (cuFile): bytes() is a device address
  // Decode in place: the read is in raw as usual; decode writes the members into the slot at
  // direct_offset of direct_buffer (laid out from the index's decoded sizes).
  bool decode_in_place = false;
  std::uint64_t copied_bytes = 0;  // decode in place: stored members decode copied into the slot
  // Where the batch's slots start (host or device memory); only meaningful with direct_buffer.
  const std::byte* slot_base() const noexcept {
    return on_device ? static_cast<const std::byte*>(direct_buffer->device) : direct_buffer->buffer.data();
  }
  std::byte* decode_target() const noexcept { return direct_buffer->buffer.data() + direct_offset; }
  // The sample's stored bytes as read.
  const std::byte* bytes() const noexcept {
    return direct_buffer && !decode_in_place ? slot_base() + direct_offset : raw.data();
  }
};

}  // namespace detail

class Pipeline {
 public:
  Pipeline(storage::Backend& backend, const Dataset& dataset, LoaderConfig config, Sampler sampler);
  ~Pipeline();

  Result<void> start();
  Result<std::optional<Batch>> next();
  void record_compute(std::chrono::nanoseconds spent);
  void stop();
  void stop_by_user() {
    stop_requested_by_user_ = true;
    stop();
  }
  PipelineReport report();
  void release(BatchBuffer* buffer);

 private:
  void storage_loop();
  void decode_loop(unsigned index);
  void collate_loop();
  void device_loop();
  void fail_run(Error e);
  bool stopping() const noexcept { return stop_.load(std::memory_order_relaxed); }
  std::uint64_t footprint(const Sample& s) const;
  // With config_.max_sample_bytes: the size by which s is too large (stored, or decoded as the
  // index says), else 0. Such samples get footprint kOversized.
  std::uint64_t oversized(const Sample& s) const;
  Error larger_than_max(std::size_t index, std::uint64_t size) const;
  static constexpr std::uint64_t kOversized = ~std::uint64_t{0};
  std::vector<std::uint64_t> footprints_;  // footprint() of every sample, computed once in start()
  void shutdown();
  void finish_run(std::uint64_t end);

  storage::Backend& backend_;
  const Dataset& dataset_;
  const LoaderConfig config_;
  Sampler sampler_;
  detail::MemoryBudget budget_;
  detail::BufferPool buffers_;  // recycled read and decode buffers
  std::uint64_t window_ = 0;
  std::uint64_t batch_samples_ = 1;  // the largest batch: batch_size, at most one epoch of this rank
  std::uint64_t sample_limit_ = ~std::uint64_t{0};  // larger samples are skipped (on_error = skip)
  std::uint64_t decode_limit_ = 0;  // zstd frames of a sample may declare at most this (decode_sample)

  BoundedQueue<detail::InFlightSample> reads_;
  BoundedQueue<detail::InFlightSample> decoded_;
  BoundedQueue<BatchBuffer*> free_buffers_;
  BoundedQueue<Batch> batches_;
  BoundedQueue<Batch> device_batches_;  // copied to the device (with a device sink)
  std::vector<std::unique_ptr<BatchBuffer>> pool_;
  std::uint64_t pool_bytes_ = 0;
  std::atomic<std::uint64_t> pool_grown_bytes_{0};

  // The data path (decided in start()) and its accounting.
  DataPathPlan plan_;
  bool direct_ = false;
  bool device_reads_ = false;  // direct reads land in GPU memory (cuFile)
  bool decode_in_place_ = false;  // decode writes samples into their batch slot (plan_.decode_in_place)
  bool copies_ = false;        // the device thread copies batches to the GPU (a sink, no device reads)
  std::shared_ptr<const transports::cufile::CufileRuntime> cufile_;
  std::unique_ptr<detail::DeviceSink> sink_;
  std::uint64_t collate_copied_bytes_ = 0;  // collate thread: bytes memcpy'd into batches
  std::uint64_t direct_delivered_ = 0;      // collate thread: bytes that arrived in place
  std::uint64_t bounce_delivered_ = 0;      // collate thread: bytes that were copied in
  std::uint64_t copy_blocking_ns_ = 0;      // consumer: waiting while its batch's copy ran
  std::vector<std::string> path_notes_;     // guarded by error_mu_

  std::atomic<bool> stop_{false};
  std::atomic<bool> stop_requested_by_user_{false};
  std::atomic<unsigned> decoders_done_{0};
  std::atomic<std::uint64_t> collate_cursor_{0};  // lowest seq collate still needs
  std::mutex error_mu_;
  std::optional<Error> error_;
  std::atomic<std::uint64_t> skipped_{0};
  std::vector<std::string> skipped_examples_;  // guarded by error_mu_

  // Per-thread clocks (each touched only by its thread until joined).
  WorkerClock storage_clock_;
  std::vector<WorkerClock> decode_clocks_;
  WorkerClock collate_clock_;
  WorkerClock device_clock_;
  WorkerClock consumer_clock_;
  storage::QueueStats io_stats_;
  std::uint64_t window_limited_ns_ = 0;  // storage thread: admission stopped by collate's window
  std::uint64_t budget_limited_ns_ = 0;  // ... by the memory budget
  std::uint64_t storage_bytes_ = 0;

  std::vector<std::jthread> threads_;
  bool joined_ = false;

  // Consumer side (the thread calling next()).
  std::uint64_t start_ns_ = 0;
  std::uint64_t end_ns_ = 0;
  std::uint64_t delivered_samples_ = 0;
  std::uint64_t delivered_bytes_ = 0;
  std::uint64_t delivered_batches_ = 0;
  std::uint64_t digest_ = 0;
  Histogram wait_ns_;
  std::uint64_t wait_total_ns_ = 0;
  std::uint64_t first_wait_ns_ = 0;
  std::uint64_t first_batch_ns_ = 0;
  std::uint64_t compute_total_ns_ = 0;
  std::uint64_t compute_after_first_ns_ = 0;
  std::uint64_t compute_steps_after_first_ = 0;
  std::uint64_t first_step_end_ns_ = 0;
  bool finished_ = false;
  std::vector<QueueReport> end_queues_;  // measured at the end of the run
  // config_.stop requested (Ctrl-C): stop_by_user(), from the thread that requested it. Last
  // member: destroyed first, before anything it could touch.
  std::unique_ptr<std::stop_callback<std::function<void()>>> on_stop_;
};

// Picks the bottleneck from a finished report (verdict.cpp).
Verdict diagnose(const PipelineReport& r, const LoaderConfig& config);

}  // namespace feedline::loader
