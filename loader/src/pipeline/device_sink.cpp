#include "device_sink.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "batch_pool.hpp"

namespace feedline::loader::detail {

namespace cu = transports::cuda;

Result<std::unique_ptr<DeviceSink>> DeviceSink::open(std::shared_ptr<const cu::CudaRuntime> cuda,
                                                     int device, unsigned streams, bool calibrate) {
  if (!cuda || !cuda->available()) {
    return fail(
        Error(Errc::kUnsupported, fmt::format("cuda:{} asked for, but there is no usable GPU: {}",
                                              device, cuda ? cuda->reason() : "CUDA not loaded"))
            .with_hint("leave {device} out (batches stay in host memory), or run on a machine with "
                       "a GPU"));
  }
  if (device < 0 || static_cast<std::size_t>(device) >= cuda->devices().size()) {
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("cuda:{} does not exist: this machine has {} CUDA device(s)",
                                  device, cuda->devices().size()))
                    .with_hint(fmt::format("use cuda:0 .. cuda:{}", cuda->devices().size() - 1)));
  }
  std::unique_ptr<DeviceSink> sink(new DeviceSink());
  sink->cuda_ = std::move(cuda);
  sink->device_ = device;
  const cu::CudaApi& a = sink->cuda_->api();
  FEEDLINE_TRY(sink->cuda_->check(a.SetDevice(device), "cudaSetDevice"));
  for (unsigned i = 0; i < std::max(1u, streams); ++i) {
    StreamSlot s;
    FEEDLINE_TRY(sink->cuda_->check(a.StreamCreateWithFlags(&s.stream, cu::kStreamNonBlocking),
                                    "cudaStreamCreateWithFlags"));
    sink->streams_.push_back(s);  // destroyed by ~DeviceSink from here on
    FEEDLINE_TRY(sink->cuda_->check(a.EventCreateWithFlags(&sink->streams_.back().start, 0),
                                    "cudaEventCreate"));
    FEEDLINE_TRY(sink->cuda_->check(a.EventCreateWithFlags(&sink->streams_.back().end, 0),
                                    "cudaEventCreate"));
  }
  if (calibrate) FEEDLINE_TRY(sink->calibrate());
  FEEDLINE_TRY(sink->cuda_->check(a.EventCreateWithFlags(&sink->origin_, 0), "cudaEventCreate"));
  FEEDLINE_TRY(sink->cuda_->check(a.EventRecord(sink->origin_, sink->streams_.front().stream),
                                  "cudaEventRecord"));
  FEEDLINE_TRY(sink->cuda_->check(a.EventSynchronize(sink->origin_), "cudaEventSynchronize"));
  return sink;
}

Result<void> DeviceSink::calibrate() {
  // 64 MiB pinned, best of 3: long enough for PCIe to reach its plateau.
  FEEDLINE_ASSIGN_OR_RETURN(peak_bytes_per_second,
                            cu::h2d_bandwidth(*cuda_, device_, 64ull << 20, 3, true));
  return {};
}

DeviceSink::~DeviceSink() {
  const cu::CudaApi& a = cuda_->api();
  for (auto& s : streams_) {
    if (s.stream) a.StreamSynchronize(s.stream);
    if (s.start) a.EventDestroy(s.start);
    if (s.end) a.EventDestroy(s.end);
    if (s.stream) a.StreamDestroy(s.stream);
  }
  if (origin_) a.EventDestroy(origin_);
}

void DeviceSink::pin(BatchBuffer& b) {
  if (b.host_.empty()) return;
  const auto rc =
      cuda_->api().HostRegister(b.host_.data(), b.host_.size(), cu::kHostRegisterPortable);
  if (rc == cu::kSuccess) {
    b.pinned_ = true;
    ++pinned_buffers;
  } else {
    std::lock_guard lock(pin_mu_);
    if (pin_failure_.empty()) pin_failure_ = cuda_->error(rc, "cudaHostRegister").message();
  }
}

void DeviceSink::unpin(const std::byte* host) {
  cuda_->api().HostUnregister(const_cast<std::byte*>(host));
}

Result<void> DeviceSink::allocate(BatchBuffer& b, std::uint64_t n) {
  const cu::CudaApi& a = cuda_->api();
  if (b.device_) a.Free(b.device_);
  b.device_ = nullptr;
  b.device_size_ = 0;
  const auto rc = a.Malloc(&b.device_, n);
  if (rc != cu::kSuccess) {
    b.device_ = nullptr;
    return fail(
        cuda_->error(rc, fmt::format("cudaMalloc of a {}-byte batch buffer", n))
            .with_hint("each prefetched batch holds its largest possible size in GPU memory: lower "
                       "{batch_size} or {prefetch}, or use {gpu_direct=off}"));
  }
  b.device_size_ = n;
  return {};
}

void DeviceSink::release(BatchBuffer& b) {
  if (b.pinned_) unpin(b.host_.data());
  b.pinned_ = false;
  if (b.device_) cuda_->api().Free(b.device_);
  b.device_ = nullptr;
  b.device_size_ = 0;
}

Result<DeviceSink::Ticket> DeviceSink::copy(BatchBuffer& b, std::uint64_t n) {
  const cu::CudaApi& a = cuda_->api();
  if (b.device_size_ < b.host_.size()) {
    if (b.device_) a.Free(b.device_);
    b.device_ = nullptr;
    b.device_size_ = 0;
    FEEDLINE_TRY(cuda_->check(a.Malloc(&b.device_, b.host_.size()), "cudaMalloc"));
    b.device_size_ = b.host_.size();
  }
  Ticket t;
  t.stream = next_;
  t.bytes = n;
  next_ = (next_ + 1) % static_cast<unsigned>(streams_.size());
  StreamSlot& s = streams_[t.stream];
  FEEDLINE_TRY(cuda_->check(a.EventRecord(s.start, s.stream), "cudaEventRecord"));
  FEEDLINE_TRY(
      cuda_->check(a.MemcpyAsync(b.device_, b.host_.data(), n, cu::kMemcpyHostToDevice, s.stream),
                   "cudaMemcpyAsync"));
  FEEDLINE_TRY(cuda_->check(a.EventRecord(s.end, s.stream), "cudaEventRecord"));
  return t;
}

Result<void> DeviceSink::wait(const Ticket& t) {
  const cu::CudaApi& a = cuda_->api();
  StreamSlot& s = streams_[t.stream];
  const auto t0 = std::chrono::steady_clock::now();
  FEEDLINE_TRY(cuda_->check(a.EventSynchronize(s.end), "cudaEventSynchronize (H2D copy)"));
  wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Copies are waited for in issue order, which is the order the copy engine runs them, so the
  // union of their intervals grows at the end.
  float begin_ms = 0;
  float end_ms = 0;
  if (a.EventElapsedTime(&begin_ms, origin_, s.start) == cu::kSuccess &&
      a.EventElapsedTime(&end_ms, origin_, s.end) == cu::kSuccess) {
    const double from = std::max(static_cast<double>(begin_ms), covered_until_ms_);
    if (end_ms > from) gpu_seconds += (end_ms - from) / 1e3;
    covered_until_ms_ = std::max(covered_until_ms_, static_cast<double>(end_ms));
  }
  ++copies;
  bytes += t.bytes;
  return {};
}

}  // namespace feedline::loader::detail
