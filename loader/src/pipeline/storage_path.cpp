// The four data-path strategies of the storage stage (storage_path.hpp): two that read into the
// batch slot (host, device), two that read into a sample buffer (decode in place, bounce).
#include "storage_path.hpp"

#include <fmt/format.h>

#include <vector>

#include "feedline/core/units.hpp"
#include "feedline/storage/device_reads.hpp"
#include "stage_work.hpp"
#include "unknown_size.hpp"

namespace feedline::loader::detail {
namespace {

using Fill = SlotPlace::Fill;

// Nothing between the read and collate but the digest: no planted decode cost, no transform.
bool nothing_but_digest(const LoaderConfig& config) {
  return !config.transform && config.diagnostics.decode_cost == std::chrono::nanoseconds(0);
}

// Reads land straight in their batch slot: nothing is reserved per sample (the slot is charged
// with the pool), and the pool's buffers become the queue's registered buffers.
class SlotReadPath : public StoragePath {
 public:
  std::uint64_t reservation(std::uint64_t /*footprint*/) const noexcept override { return 0; }

  void set_up_queue(storage::QueueOptions& /*qo*/, storage::HttpQueueOptions& http) const override {
    // No buffers to allocate here: an HTTP queue's event loop runs in this thread's poll().
    http.caller_mostly_polls = true;
  }

  // The pool's buffers become the queue's registered (io_uring fixed) buffers: O_DIRECT reads
  // then DMA into the batch slot without per-read page pinning. With reads into GPU memory, the
  // device twins are registered with cuFile instead.
  void register_buffers(storage::IoQueue& queue, bool first_thread,
                        unsigned threads) const override {
    std::vector<MutableBytes> regions;
    for (const auto& b : run_.pool->buffers()) regions.push_back(region(*b));
    auto reg = queue.register_buffers(regions);
    if (!first_thread) return;
    run_.note_path(landing_note(regions));
    run_.note_path(reg ? fmt::format("{} batch buffers registered with the I/O queue{}",
                                     regions.size(),
                                     threads > 1 ? fmt::format(" (each of {})", threads) : "")
                       : fmt::format("batch buffers not registered with the I/O queue: {}",
                                     reg.error().message()));
  }

  // The slot, laid out at admission. A sample of unknown size: its slot may hold less than the
  // read's guess (the queue gives a larger object a buffer of its own: GrowUnknown).
  Result<MutableBytes> destination(InFlightSample& s, const Sample& smp,
                                   ReadRange& /*range*/) const override {
    return MutableBytes(const_cast<std::byte*>(s.bytes()),
                        size_unknown(smp)
                            ? s.place.room
                            : align_up(std::max<std::uint64_t>(smp.length, 1), kPageAlign));
  }

 protected:
  using StoragePath::StoragePath;
  virtual MutableBytes region(BatchBuffer& b) const = 0;
  virtual std::string landing_note(const std::vector<MutableBytes>& regions) const = 0;
};

// kHostDirect, kPinnedDirect: reads land in their 4 KiB-aligned slot of the host batch buffer.
// Objects of unknown size get a slot of the size learned from those read (unknown_size.hpp);
// nothing is decoded, so the storage threads take the digests.
class HostDirectPath final : public SlotReadPath {
 public:
  explicit HostDirectPath(RunState& run)
      : SlotReadPath(run, Fill::kRead, nothing_but_digest(run.config)),
        unknown_sizes_(has_unknown_sizes(run.dataset)),
        sizer_(size_guess(run.config)) {}

  std::uint64_t learned_slot() const noexcept override { return sizer_.slot(); }
  std::uint64_t slot_bytes(const Sample& x, std::uint64_t learned) const override {
    return size_unknown(x) ? learned : align_up(std::max<std::uint64_t>(x.length, 1), kPageAlign);
  }
  std::string growth_note(std::uint64_t learned) const override {
    return unknown_sizes_
               ? fmt::format(
                     "batch buffers grew past their start-up size for slots of {} per "
                     "object of unknown size (learned from the objects read)",
                     format_bytes(static_cast<double>(learned)))
               : "a batch buffer grew past its start-up size (no longer a registered buffer): "
                 "raise {memory_budget} to size every buffer for the largest batch";
  }

  void register_buffers(storage::IoQueue& queue, bool first_thread,
                        unsigned threads) const override {
    SlotReadPath::register_buffers(queue, first_thread, threads);
    if (first_thread && unknown_sizes_) {
      run_.note_path(
          "objects of unknown size (no listing) are read into batch slots of a size learned from "
          "those read (their largest, at most twice their mean); a larger one moves to a buffer "
          "of its own as its answer's headers give its size, in the same GET");
    }
  }

  void saw_unknown(std::uint64_t size, bool spilled) noexcept override {
    sizer_.saw(size);
    if (spilled) spilled_.fetch_add(1, std::memory_order_relaxed);
  }
  void end_stage() const override {
    if (!unknown_sizes_ || sizer_.count() == 0) return;
    run_.note_path(fmt::format(
        "objects of unknown size: slots of {} (learned); {} of {} outgrew theirs and were "
        "copied in after the batch's slots",
        format_bytes(static_cast<double>(sizer_.slot())), spilled_.load(std::memory_order_relaxed),
        sizer_.count()));
  }

 private:
  MutableBytes region(BatchBuffer& b) const override { return b.span(); }
  std::string landing_note(const std::vector<MutableBytes>& /*regions*/) const override {
    const storage::BackendCaps caps = run_.backend.caps();
    return caps.alignment >= kPageAlign ? "O_DIRECT reads land in 4 KiB-aligned batch slots"
           : caps.networked ? "each answer's body lands in its batch slot (one copy, out of the "
                              "transport's receive buffer)"
                            : "buffered reads: the kernel copies from its page cache into the "
                              "batch slot ({direct} makes it DMA)";
  }

  const bool unknown_sizes_;
  // The slot of an object of unknown size, learned from every thread's reads, and how many
  // outgrew theirs.
  SlotSizer sizer_;
  std::atomic<std::uint64_t> spilled_{0};
};

// kGpuDirect, kCufileCompat: cuFile reads into the slot of the batch buffer's GPU twin, which is
// never regrown (registered with cuFile; start() sizes it for the largest batch). Nothing on
// the host can hash the bytes: decode only describes the members (describe_on_device).
class DevicePath final : public SlotReadPath {
 public:
  explicit DevicePath(RunState& run) : SlotReadPath(run, Fill::kReadDevice, false) {}

  std::uint64_t slot_bytes(const Sample& x, std::uint64_t /*learned*/) const override {
    return align_up(std::max<std::uint64_t>(x.length, 1), kPageAlign);
  }
  Result<std::uint64_t> fit(BatchBuffer& b, std::uint64_t bytes) const override {
    return fits_device_twin(b, bytes);
  }
  void set_up_queue(storage::QueueOptions& qo, storage::HttpQueueOptions& http) const override {
    SlotReadPath::set_up_queue(qo, http);
    qo.memory = storage::QueueMemory::kDevice;
    qo.device_reads = storage::make_device_reads(run_.cufile);
  }
  // How cuFile was driven (batch API or threads, handles registered) and any fallback, as run.
  void end_thread(const storage::IoQueue& queue, bool first_thread) const override {
    if (!first_thread) return;
    const auto info = queue.info();
    run_.note_path(fmt::format("cuFile engine: {}", fmt::join(info.features, ", ")));
    for (const auto& n : info.notes) run_.note_path(n);
  }

 private:
  MutableBytes region(BatchBuffer& b) const override {
    return MutableBytes(static_cast<std::byte*>(b.device()), b.device_size());
  }
  std::string landing_note(const std::vector<MutableBytes>& regions) const override {
    return fmt::format("cuFile reads into 4 KiB-aligned slots of {} GPU batch buffers of {} bytes",
                       regions.size(), regions.front().size());
  }
};

// Reads go to a sample buffer of their own, which the sample's budget reservation holds.
class BufferReadPath : public StoragePath {
 public:
  // Storage that reads only aligned ranges (O_DIRECT) gets the aligned cover of the sample into
  // the sample's buffer, not a bounce buffer of its own to copy out of: 146 MB npz arrays at
  // unaligned offsets had cost a fresh buffer's page faults and a copy each.
  Result<MutableBytes> destination(InFlightSample& s, const Sample& smp,
                                   ReadRange& range) const override {
    if (align_ > 1 && !size_unknown(smp)) {
      s.raw_head = range.offset % align_;
      range.offset -= s.raw_head;
      range.length = align_up(s.raw_head + range.length, align_);
    }
    FEEDLINE_ASSIGN_OR_RETURN(s.raw, run_.buffers.get(range.length));
    return s.raw.span();
  }

 protected:
  BufferReadPath(RunState& run, Fill fill, bool digests_inline)
      : StoragePath(run, fill, digests_inline), align_(run.backend.caps().alignment) {}

 private:
  const std::uint64_t align_;
};

// kDecodeInPlace: decode writes each sample into its slot, laid out from the decoded sizes the
// index (or a fixed-size decoder) gives before anything is read.
class DecodeInPlacePath final : public BufferReadPath {
 public:
  explicit DecodeInPlacePath(RunState& run) : BufferReadPath(run, Fill::kDecode, false) {}
  std::uint64_t slot_bytes(const Sample& x, std::uint64_t /*learned*/) const override {
    return align_up(decoded_slot_bytes(run_.dataset, run_.plan.decode, x), kMemberAlign);
  }
};

// kBounce: no layout; collate takes a free batch buffer and copies each sample in. Objects of one
// sample each that nothing decodes (HTTP objects of unknown size: their slot cannot be laid out
// before they are read) have their digest taken by the storage threads.
class BouncePath final : public BufferReadPath {
 public:
  explicit BouncePath(RunState& run)
      : BufferReadPath(run, Fill::kNone,
                       nothing_but_digest(run.config) && one_sample_per_object(run.dataset) &&
                           !run.plan.decode.any()) {}
  void set_up_queue(storage::QueueOptions& /*qo*/, storage::HttpQueueOptions& http) const override {
    // The thread has nothing to do but take digests: an HTTP queue's event loop runs in poll().
    http.caller_mostly_polls = digests_inline();
  }
};

}  // namespace

std::unique_ptr<StoragePath> StoragePath::make(RunState& run) {
  switch (run.plan.path) {
    case DataPath::kHostDirect:
    case DataPath::kPinnedDirect:
      return std::make_unique<HostDirectPath>(run);
    case DataPath::kGpuDirect:
    case DataPath::kCufileCompat:
      return std::make_unique<DevicePath>(run);
    case DataPath::kDecodeInPlace:
      return std::make_unique<DecodeInPlacePath>(run);
    case DataPath::kBounce:
      break;
  }
  return std::make_unique<BouncePath>(run);
}

std::uint64_t StoragePath::slot_bytes(const Sample& /*x*/, std::uint64_t /*learned*/) const {
  return 0;  // a path that lays out no batches is never asked
}

Result<std::uint64_t> StoragePath::fit(BatchBuffer& b, std::uint64_t bytes) const {
  return b.grow_empty(bytes, run_.sink.get());
}

std::string StoragePath::growth_note(std::uint64_t /*learned*/) const {
  return "a batch buffer grew past its start-up size: raise {memory_budget} to size every buffer "
         "for the largest batch";
}

void StoragePath::set_up_queue(storage::QueueOptions& /*qo*/,
                               storage::HttpQueueOptions& http) const {
  http.caller_mostly_polls = false;
}

}  // namespace feedline::loader::detail
