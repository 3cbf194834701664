// What the pipeline's stages share (internal): the run's inputs and data path, the memory
// budget and recycled buffers, the queues between the stages, the batch pool, and how the run
// ends (stop, the first error, skipped samples, notes for the report). Each stage keeps its own
// counters; this is only what crosses between them.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "batch_pool.hpp"
#include "buffer_pool.hpp"
#include "feedline/loader/bounded_queue.hpp"
#include "feedline/loader/live.hpp"
#include "feedline/loader/loader.hpp"
#include "memory_budget.hpp"
#include "sizing.hpp"

namespace feedline::transports::cufile {
class CufileRuntime;
}

namespace feedline::loader::detail {

class DeviceSink;

struct MemberBytes {
  const std::byte* data = nullptr;
  std::uint64_t size = 0;
  ImageShape shape;  // a decoded image's
};

// Where a sample goes in its batch: the slot the storage stage laid out for it when it admitted
// the batch's first sample, and how its data path fills the slot. The bounce path lays out
// nothing: collate takes a buffer and copies each sample in.
struct SlotPlace {
  // How the sample fills its slot: the data path, as each sample carries it.
  enum class Fill : std::uint8_t {
    kNone,        // bounce: read into a sample buffer; collate copies it into the batch
    kRead,        // host direct: the read lands in the slot (the sample has no raw buffer)
    kReadDevice,  // device: the read lands in the slot of the buffer's GPU twin (cuFile)
    kDecode,      // decode in place: read into raw; decode writes the members into the slot
  };
  Fill fill = Fill::kNone;
  BatchBuffer* buffer = nullptr;  // the batch's buffer: every sample of the batch names it
  std::uint64_t offset = 0;       // the slot's
  // kRead, a sample of unknown size: the bytes of its slot (the size learned for such objects
  // when its batch was laid out).
  std::uint64_t room = 0;
  std::uint64_t slots_end = 0;  // where the batch's slots end
};

// A sample on its way through the pipeline.
struct InFlightSample {
  SampleSlot slot;
  AlignedBuffer raw;  // the sample's byte range as read
  // Bytes of raw before the sample's range: a read from storage that wants aligned reads
  // (O_DIRECT) starts at the aligned offset below the sample, so the device writes straight
  // into raw and nothing is bounced; the members are found past the head.
  std::uint64_t raw_head = 0;
  std::uint64_t raw_len = 0;  // bytes of the sample's range read (the head left out)
  AlignedBuffer decoded;      // zstd output (members point into raw or decoded)
  std::vector<MemberBytes> members;
  std::uint64_t reserved = 0;  // bytes reserved in the budget for this sample
  // Of reserved, the room for what the transform returns (ResultBytes takes it over then).
  std::uint64_t result_room = 0;
  std::uint64_t digest = 0;
  std::uint64_t decoded_bytes = 0;
  std::optional<Error> error;      // the sample failed (skipped with on_error = kSkip)
  SlotPlace place;                 // its slot in the batch, where its data path lays one out
  std::uint64_t copied_bytes = 0;  // decode in place: stored members decode copied into the slot
  // Read into its slot (kRead), a sample of unknown size whose object outgrew the slot: it was
  // read into raw instead, and collate copies it in after the batch's slots.
  bool spilled = false;
  TransformResult result;  // the user's transform's, for the batch

  // Its batch was laid out at admission: the batch buffer is place.buffer.
  bool laid_out() const noexcept { return place.buffer != nullptr; }
  bool on_device() const noexcept { return place.fill == SlotPlace::Fill::kReadDevice; }
  bool decodes_in_place() const noexcept { return place.fill == SlotPlace::Fill::kDecode; }
  // Where the batch's slots start (host or device memory); only meaningful when laid_out().
  const std::byte* slot_base() const noexcept {
    return on_device() ? static_cast<const std::byte*>(place.buffer->device())
                       : place.buffer->data();
  }
  std::byte* decode_target() const noexcept { return place.buffer->data() + place.offset; }
  // The sample's stored bytes as read: in its slot where the read landed there, else in raw.
  const std::byte* bytes() const noexcept {
    const bool in_slot =
        place.fill == SlotPlace::Fill::kRead || place.fill == SlotPlace::Fill::kReadDevice;
    return in_slot && !spilled ? slot_base() + place.offset : raw.data() + raw_head;
  }
};

class RunState {
 public:
  RunState(storage::Backend& backend, const Dataset& dataset, const LoaderConfig& config,
           const DataPathPlan& plan, PoolSizing sizing, std::shared_ptr<DeviceSink> sink,
           std::shared_ptr<const transports::cufile::CufileRuntime> cufile);
  ~RunState();
  RunState(const RunState&) = delete;
  RunState& operator=(const RunState&) = delete;

  storage::Backend& backend;
  const Dataset& dataset;
  const LoaderConfig& config;
  const DataPathPlan plan;
  const PoolSizing sizing;
  const std::shared_ptr<DeviceSink> sink;  // null without a device
  const std::shared_ptr<const transports::cufile::CufileRuntime> cufile;
  const bool copies;  // a device stage copies batches to the GPU (a sink, and reads not into device
                      // memory)

  MemoryBudget budget;
  // What the transform returned and batches still hold (shared with the results themselves).
  const std::shared_ptr<ResultBytes> results;
  BufferPool buffers;  // recycled read and decode buffers
  std::shared_ptr<BatchPool> pool;
  BoundedQueue<InFlightSample> reads;
  BoundedQueue<InFlightSample> decoded;
  BoundedQueue<Batch> batches;
  BoundedQueue<Batch> device_batches;            // copied to the device (with a device sink)
  std::atomic<std::uint64_t> collate_cursor{0};  // the lowest seq collate still needs
  std::atomic<std::uint64_t> pool_grown_bytes{0};
  std::atomic<std::uint64_t> skipped{0};
  // What live readers (Loader::live()) read of the stages' work as it happens.
  struct Live {
    LiveHistogram read_latency;  // the storage stage's reads
    std::atomic<std::uint64_t> reads{0};
    std::atomic<std::uint64_t> read_errors{0};
    std::atomic<std::uint64_t> storage_bytes{0};
    LiveCounters counters;  // the storage queues'
  } live;

  bool stopping() const noexcept { return stop_.load(std::memory_order_relaxed); }
  const std::atomic<bool>& stop_flag() const noexcept { return stop_; }
  // Ends the run: closes every queue (each stage's waits return) and sets the flag its loops
  // and planted costs check. Safe from any thread, any number of times.
  void stop();
  void stop_by_user() {
    by_user_ = true;
    stop();
  }
  bool stopped_by_user() const noexcept { return by_user_.load(); }
  // The first error ends the run.
  void fail(Error e);
  // A sample's error, met by collate in the order of delivery (on_error = kFail): the batches
  // before the sample reach the consumer first, then the error. Records it (as fail() does) and
  // stops what comes before collate; collate closes its output after its last whole batch, and
  // what is downstream drains.
  void fail_in_order(Error e);
  std::optional<Error> error() const;
  // A sample left out (on_error = kSkip).
  void skip(const Error& e);
  void note_path(std::string note);  // for the report's data path notes

  std::vector<std::string> skipped_examples() const;
  std::vector<std::string> path_notes() const;

 private:
  std::atomic<bool> stop_{false};
  std::atomic<bool> by_user_{false};
  mutable std::mutex mu_;
  std::optional<Error> error_;
  std::vector<std::string> skipped_examples_;
  std::vector<std::string> path_notes_;
};

}  // namespace feedline::loader::detail
