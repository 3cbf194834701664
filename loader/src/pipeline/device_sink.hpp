// The device sink: copies finished batches from pinned host buffers into GPU memory.
//
// Each pool BatchBuffer gets a twin device buffer of the same capacity (allocated on first use,
// grown with it) and is page-locked with cudaHostRegister, so copies are true DMA from the pool
// (AlignedBuffer memory stays 4 KiB-aligned and mlock'd as before; registering it avoids a second
// pool type). copy() issues cudaMemcpyAsync on the next of `streams` non-blocking streams,
// bracketed by two timing events; wait() synchronises the end event and adds the GPU-side copy
// time (the union of copy intervals, measured from an origin event). The pipeline's device thread
// keeps up to `streams` copies in flight, so copies overlap each other, IO and decode.
//
// All CUDA calls go through the CudaRuntime's table (a fake one in tests). Thread-safety: pin(),
// copy() and wait() are called from the pipeline's threads one at a time per buffer; stats are
// read after the threads are joined. Lifetime: destroy the sink after every BatchBuffer it pinned
// was released with release() (the batch pool does this in its destructor, and keeps the sink
// alive until then).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "feedline/core/error.hpp"
#include "feedline/transports/cuda.hpp"

namespace feedline::loader::detail {

class BatchBuffer;

class DeviceSink {
 public:
  static Result<std::unique_ptr<DeviceSink>> open(
      std::shared_ptr<const transports::cuda::CudaRuntime> cuda, int device, unsigned streams,
      bool calibrate);
  ~DeviceSink();
  DeviceSink(const DeviceSink&) = delete;
  DeviceSink& operator=(const DeviceSink&) = delete;

  // Page-locks b's host memory (a failure is recorded, not fatal: copies then run from pageable
  // memory). Call again after the buffer was reallocated (unpin() the old memory first).
  void pin(BatchBuffer& b);
  void unpin(const std::byte* host);
  // Gives b a device twin of `bytes` (for reads straight into GPU memory; b is not pinned).
  Result<void> allocate(BatchBuffer& b, std::uint64_t bytes);
  // Frees b's device twin and unpins it.
  void release(BatchBuffer& b);

  struct Ticket {
    unsigned stream = 0;
    std::uint64_t bytes = 0;
  };
  // Starts copying the first `bytes` of b to its device twin (allocated or grown first).
  Result<Ticket> copy(BatchBuffer& b, std::uint64_t bytes);
  // Waits for a copy started by copy(); tickets must be waited for in the order issued.
  Result<void> wait(const Ticket& t);

  unsigned streams() const noexcept { return static_cast<unsigned>(streams_.size()); }
  int device() const noexcept { return device_; }
  const transports::cuda::CudaRuntime& cuda() const noexcept { return *cuda_; }

  // For the report.
  std::uint64_t copies = 0;
  std::uint64_t bytes = 0;
  // GPU-side time during which at least one copy ran: the union of the event-timed copy intervals
  // (copies on different streams queue for the same copy engine, so summing their durations
  // would count the queueing too).
  double gpu_seconds = 0;
  double wait_seconds = 0;  // host time blocked in wait()
  double peak_bytes_per_second = 0;
  // pin() may run on the storage thread (direct path) or collate's (bounce path).
  std::atomic<std::uint64_t> pinned_buffers{0};
  std::string pin_failure() const {
    std::lock_guard lock(pin_mu_);
    return pin_failure_;
  }

 private:
  DeviceSink() = default;
  Result<void> calibrate();

  std::shared_ptr<const transports::cuda::CudaRuntime> cuda_;
  int device_ = 0;
  struct StreamSlot {
    transports::cuda::Stream stream = nullptr;
    transports::cuda::Event start = nullptr;
    transports::cuda::Event end = nullptr;
  };
  std::vector<StreamSlot> streams_;
  unsigned next_ = 0;
  transports::cuda::Event origin_ = nullptr;  // recorded once at open: the zero of copy times
  double covered_until_ms_ = 0;
  mutable std::mutex pin_mu_;
  std::string pin_failure_;  // the first cudaHostRegister failure, if any
};

}  // namespace feedline::loader::detail
