// The batch pool: the buffers batches are built in, and the queue of free ones.
//
// A BatchBuffer is 4 KiB-aligned host memory, mlock'd where allowed, page-locked for the device
// sink when there is one, and with reads into GPU memory a device twin. It owns those states:
// growing it (grow_keeping / grow_empty) unlocks, unpins, replaces, relocks and repins in one
// place.
//
// The pool is shared (std::shared_ptr) by the pipeline and by every Batch handed out, so a Batch
// that outlives its Loader still points at valid memory: the last owner frees the buffers, after
// releasing their device twins and pins through the sink the pool keeps alive. Lifetime of a
// buffer: free (in free()) -> taken by collate or the storage stage for one batch -> in a Batch
// -> given back when the Batch dies (or kept, when the pipeline has closed the queue).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "feedline/core/bytes.hpp"
#include "feedline/core/error.hpp"
#include "feedline/loader/bounded_queue.hpp"
#include "feedline/loader/loader.hpp"

namespace feedline::loader::detail {

class DeviceSink;

class BatchBuffer {
 public:
  // A buffer of `size` bytes (at least one page), locked with mlock when lock_memory (a refusal,
  // RLIMIT_MEMLOCK, leaves it unlocked: it still works).
  static Result<std::unique_ptr<BatchBuffer>> allocate(std::uint64_t size, bool lock_memory);
  ~BatchBuffer();
  BatchBuffer(const BatchBuffer&) = delete;
  BatchBuffer& operator=(const BatchBuffer&) = delete;

  std::byte* data() noexcept { return host_.data(); }
  const std::byte* data() const noexcept { return host_.data(); }
  std::uint64_t size() const noexcept { return host_.size(); }
  MutableBytes span() noexcept { return host_.span(); }
  // Touches every page (a measurement should not time first-touch page faults).
  void prefault() noexcept { host_.prefault(host_.size()); }
  bool locked() const noexcept { return locked_; }
  bool pinned() const noexcept { return pinned_; }
  void* device() const noexcept { return device_; }
  std::uint64_t device_size() const noexcept { return device_size_; }

  // Makes room for `need` bytes keeping the first `used` (collate packing a batch): grows by at
  // least half. Returns the bytes it grew by (0: it had room). The used bytes copied over are
  // added to *copied.
  Result<std::uint64_t> grow_keeping(std::uint64_t need, std::uint64_t used, DeviceSink* sink,
                                     std::uint64_t* copied);
  // Makes room for `need` bytes in a buffer whose contents do not matter (the direct path lays
  // out a batch before anything lands in it): grows by at least a quarter.
  Result<std::uint64_t> grow_empty(std::uint64_t need, DeviceSink* sink);

 private:
  friend class DeviceSink;  // pins it, gives it a device twin
  BatchBuffer() = default;
  Result<std::uint64_t> replace(std::uint64_t capacity, std::uint64_t keep, DeviceSink* sink);
  void lock() noexcept;

  AlignedBuffer host_;
  bool lock_memory_ = false;
  bool locked_ = false;
  bool pinned_ = false;     // cudaHostRegister'd by the device sink
  void* device_ = nullptr;  // the device sink's twin in GPU memory
  std::uint64_t device_size_ = 0;
};

class BatchPool {
 public:
  // capacity: the most buffers the pool will hold (its free queue's capacity).
  BatchPool(std::size_t capacity, bool accounting, std::shared_ptr<DeviceSink> sink);
  ~BatchPool();
  BatchPool(const BatchPool&) = delete;
  BatchPool& operator=(const BatchPool&) = delete;

  // Takes ownership of b and puts it in the free queue.
  void add(std::unique_ptr<BatchBuffer> b);
  // Free buffers: the "batch-pool" queue (its stall accounting shows the consumer holding them).
  BoundedQueue<BatchBuffer*>& free() noexcept { return free_; }
  // A Batch hands its buffer back (once the queue is closed the buffer just stays owned here).
  void give_back(BatchBuffer* b, bool from_caller) noexcept {
    if (from_caller) with_caller_.fetch_sub(1, std::memory_order_relaxed);
    (void)free_.push(b);
    std::lock_guard lock(hook_mu_);
    if (on_give_back_) on_give_back_();
  }
  // Called after each buffer comes back (the storage stage, waiting for one to lay out the next
  // batch in, wakes at once instead of at its wait's 1-2 ms timeout, two batches' time at 64 KiB
  // files: a Python loop hands a batch back only when it drops it).
  // Cleared (nullptr) before what it reaches goes: a Batch may outlive its Loader.
  void on_give_back(std::function<void()> f) noexcept {
    std::lock_guard lock(hook_mu_);
    on_give_back_ = std::move(f);
  }
  // Buffers in batches next() handed out and the caller still holds: when that is every one,
  // nothing can make the next batch (Consumer::next says so instead of waiting forever).
  void handed_to_caller() noexcept { with_caller_.fetch_add(1, std::memory_order_relaxed); }
  std::size_t with_caller() const noexcept { return with_caller_.load(std::memory_order_relaxed); }
  const std::vector<std::unique_ptr<BatchBuffer>>& buffers() const noexcept { return buffers_; }
  DeviceSink* sink() const noexcept { return sink_.get(); }
  const std::shared_ptr<DeviceSink>& shared_sink() const noexcept { return sink_; }

 private:
  std::vector<std::unique_ptr<BatchBuffer>> buffers_;
  BoundedQueue<BatchBuffer*> free_;
  std::atomic<std::size_t> with_caller_{0};
  std::mutex hook_mu_;
  std::function<void()> on_give_back_;
  std::shared_ptr<DeviceSink> sink_;  // released after the buffers (see ~BatchPool)
};

// The pipeline's side of a Batch: building one, filling it, reading its copy timestamps.
struct BatchAccess {
  static Batch make(std::shared_ptr<BatchPool> pool, BatchBuffer* buffer, std::uint32_t epoch,
                    std::uint64_t index, bool device_only);
  static BatchBuffer* buffer(const Batch& b) noexcept { return b.buffer_; }
  // next() hands b to the caller: its buffer counts as the caller's until b dies.
  static void hand_to_caller(Batch& b) noexcept {
    if (!b.pool_ || !b.buffer_ || b.with_caller_) return;
    b.with_caller_ = true;
    b.pool_->handed_to_caller();
  }
  static std::vector<BatchSample>& samples(Batch& b) noexcept { return b.samples_; }
  static std::vector<BatchMember>& members(Batch& b) noexcept { return b.members_; }
  static void add(Batch& b, std::uint64_t digest, std::uint64_t bytes) noexcept {
    b.digest_ += digest;
    b.bytes_ += bytes;
  }
  static std::vector<TransformResult>& results(Batch& b) noexcept { return b.results_; }
  // The device stage: the batch is in GPU memory, and its copy was waited for in [from, done].
  static void on_device(Batch& b, std::uint64_t from_ns, std::uint64_t done_ns) noexcept {
    b.on_device_ = true;
    b.copy_wait_from_ns_ = from_ns;
    b.copy_done_ns_ = done_ns;
  }
  static std::uint64_t copy_wait_from_ns(const Batch& b) noexcept { return b.copy_wait_from_ns_; }
  static std::uint64_t copy_done_ns(const Batch& b) noexcept { return b.copy_done_ns_; }
};

}  // namespace feedline::loader::detail
