#include "batch_pool.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "device_sink.hpp"

namespace feedline::loader::detail {

namespace {
constexpr std::uint64_t kHugePage = std::uint64_t{2} << 20;

// A batch buffer of 2 MiB or more starts on a 2 MiB boundary and asks for 2 MiB pages (where
// the kernel has them: transparent_hugepage "madvise" or "always"). Locking it then faults in a
// page per 2 MiB, not 512.
Result<AlignedBuffer> allocate_host(std::uint64_t size) {
  if (size < kHugePage) return AlignedBuffer::allocate(std::max<std::uint64_t>(size, kPageAlign));
  auto b = AlignedBuffer::allocate(size, kHugePage);
  if (b) ::madvise(b->data(), align_up(b->size(), kPageAlign), MADV_HUGEPAGE);
  return b;
}
}  // namespace

Result<std::unique_ptr<BatchBuffer>> BatchBuffer::allocate(std::uint64_t size, bool lock_memory) {
  std::unique_ptr<BatchBuffer> b(new BatchBuffer());
  FEEDLINE_ASSIGN_OR_RETURN(b->host_, allocate_host(size));
  b->lock_memory_ = lock_memory;
  b->lock();
  return b;
}

BatchBuffer::~BatchBuffer() {
  if (locked_) ::munlock(host_.data(), host_.size());
}

void BatchBuffer::lock() noexcept {
  locked_ = lock_memory_ && !host_.empty() && ::mlock(host_.data(), host_.size()) == 0;
}

Result<std::uint64_t> BatchBuffer::replace(std::uint64_t capacity, std::uint64_t keep,
                                           DeviceSink* sink) {
  const std::uint64_t old = host_.size();
  FEEDLINE_ASSIGN_OR_RETURN(AlignedBuffer bigger, AlignedBuffer::allocate(capacity));
  if (keep > 0) std::memcpy(bigger.data(), host_.data(), keep);  // an empty buffer has no data()
  if (locked_) ::munlock(host_.data(), host_.size());
  if (pinned_ && sink) sink->unpin(host_.data());
  pinned_ = false;
  host_ = std::move(bigger);
  lock();
  if (sink) sink->pin(*this);
  return capacity - old;
}

Result<std::uint64_t> BatchBuffer::grow_keeping(std::uint64_t need, std::uint64_t used,
                                                DeviceSink* sink, std::uint64_t* copied) {
  if (need <= host_.size()) return std::uint64_t{0};
  // Rare after the first batches: a larger buffer with the batch so far copied over.
  const std::uint64_t capacity = align_up(std::max(need, host_.size() * 3 / 2), kPageAlign);
  FEEDLINE_ASSIGN_OR_RETURN(std::uint64_t grew, replace(capacity, used, sink));
  if (copied) *copied += used;
  return grew;
}

Result<std::uint64_t> BatchBuffer::grow_empty(std::uint64_t need, DeviceSink* sink) {
  if (need <= host_.size()) return std::uint64_t{0};
  return replace(align_up(std::max(need, host_.size() * 5 / 4), kPageAlign), 0, sink);
}

BatchPool::BatchPool(std::size_t capacity, bool accounting, std::shared_ptr<DeviceSink> sink)
    : free_("batch-pool", capacity, accounting), sink_(std::move(sink)) {
  buffers_.reserve(capacity);
}

BatchPool::~BatchPool() {
  if (sink_) {
    for (auto& b : buffers_) sink_->release(*b);
  }
}

void BatchPool::add(std::unique_ptr<BatchBuffer> b) {
  BatchBuffer* raw = b.get();
  buffers_.push_back(std::move(b));
  (void)free_.push(raw);
}

Batch BatchAccess::make(std::shared_ptr<BatchPool> pool, BatchBuffer* buffer, std::uint32_t epoch,
                        std::uint64_t index, bool device_only) {
  Batch b;
  b.pool_ = std::move(pool);
  b.buffer_ = buffer;
  b.epoch_ = epoch;
  b.index_ = index;
  b.on_device_ = b.device_only_ = device_only;
  return b;
}

}  // namespace feedline::loader::detail

namespace feedline::loader {

using detail::BatchBuffer;

Batch::Batch(Batch&& o) noexcept
    : pool_(std::move(o.pool_)),
      buffer_(std::exchange(o.buffer_, nullptr)),
      epoch_(o.epoch_),
      index_(o.index_),
      samples_(std::move(o.samples_)),
      members_(std::move(o.members_)),
      results_(std::move(o.results_)),
      digest_(o.digest_),
      bytes_(o.bytes_),
      on_device_(o.on_device_),
      device_only_(o.device_only_),
      with_caller_(std::exchange(o.with_caller_, false)),
      copy_wait_from_ns_(o.copy_wait_from_ns_),
      copy_done_ns_(o.copy_done_ns_) {}

Batch& Batch::operator=(Batch&& o) noexcept {
  if (this != &o) {
    release();
    pool_ = std::move(o.pool_);
    buffer_ = std::exchange(o.buffer_, nullptr);
    epoch_ = o.epoch_;
    index_ = o.index_;
    samples_ = std::move(o.samples_);
    members_ = std::move(o.members_);
    results_ = std::move(o.results_);
    digest_ = o.digest_;
    bytes_ = o.bytes_;
    on_device_ = o.on_device_;
    device_only_ = o.device_only_;
    with_caller_ = std::exchange(o.with_caller_, false);
    copy_wait_from_ns_ = o.copy_wait_from_ns_;
    copy_done_ns_ = o.copy_done_ns_;
  }
  return *this;
}

Batch::~Batch() { release(); }

void Batch::release() noexcept {
  if (pool_ && buffer_) pool_->give_back(buffer_, with_caller_);
  buffer_ = nullptr;
  with_caller_ = false;
  pool_.reset();
}

std::uint64_t Batch::extent() const noexcept {
  std::uint64_t end = 0;
  for (const auto& s : samples_) end = std::max(end, s.offset + s.size);
  return end;
}

ConstBytes Batch::data() const noexcept {
  if (!buffer_ || device_only_) return {};
  return ConstBytes(buffer_->data(), extent());
}

const void* Batch::device_data() const noexcept {
  return on_device_ && buffer_ ? buffer_->device() : nullptr;
}

}  // namespace feedline::loader
