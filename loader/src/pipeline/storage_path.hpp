// The storage stage's data paths, one strategy type each (internal). plan_data_path()
// (data_path.hpp) decides which DataPath a run takes, and why; StoragePath::make() gives the
// storage stage the strategy for it. A strategy decides, for its path:
//  - admission: what a sample reserves in the memory budget, and whether its batch is laid out
//    when the batch's first sample is admitted (a batch buffer taken then, each sample given a
//    slot in it: admission.cpp does the layout, the strategy sizes the slots and fits the buffer);
//  - the reads: the I/O queue's options, the buffers registered with it, where each read lands;
//  - completion: whether the storage threads take each sample's digest as its read lands
//    (nothing to decode), and what the path learns from the reads (sizes of unknown objects).
//
//   strategy           DataPath                      reads land in              reserves
//   HostDirectPath     kHostDirect, kPinnedDirect    the host batch slot        nothing
//   DevicePath         kGpuDirect, kCufileCompat     the slot in the GPU twin   nothing
//   DecodeInPlacePath  kDecodeInPlace                a sample buffer; decode    the footprint
//                                                    writes into the slot
//   BouncePath         kBounce                       a sample buffer; collate   the footprint
//                                                    copies it into the batch
//
// Each sample carries its path as SlotPlace::Fill (run_state.hpp), so decode and collate know
// what to do with it without asking the plan. One strategy per stage, shared by its threads:
// the layout questions are asked under the admission lock; the rest is const, or atomic
// (HostDirectPath's learned slot size).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "feedline/storage/backend.hpp"
#include "feedline/storage/http_config.hpp"
#include "run_state.hpp"

namespace feedline::loader::detail {

// A read's byte range in its object (a strategy may widen it to the aligned cover).
struct ReadRange {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

class StoragePath {
 public:
  static std::unique_ptr<StoragePath> make(RunState& run);
  virtual ~StoragePath() = default;
  StoragePath(const StoragePath&) = delete;
  StoragePath& operator=(const StoragePath&) = delete;

  SlotPlace::Fill fill() const noexcept { return fill_; }
  bool lays_out_batches() const noexcept { return fill_ != SlotPlace::Fill::kNone; }
  bool reads_into_device() const noexcept { return fill_ == SlotPlace::Fill::kReadDevice; }
  // The storage threads take each sample's digest as its read lands and hand it straight to
  // collate (no decode stage).
  bool digests_inline() const noexcept { return digests_inline_; }

  // --- admission -------------------------------------------------------------------------------
  // What a sample of this footprint reserves in the budget at admission: the footprint, or 0
  // where its slot in the batch buffer (charged with the pool) holds it.
  virtual std::uint64_t reservation(std::uint64_t footprint) const noexcept { return footprint; }
  // Laying out a batch: the slot of a sample of unknown size (learned), then each sample's slot.
  virtual std::uint64_t learned_slot() const noexcept { return 0; }
  virtual std::uint64_t slot_bytes(const Sample& x, std::uint64_t learned) const;
  // Makes b hold `bytes` of slots before anything lands in it: the bytes it grew by.
  virtual Result<std::uint64_t> fit(BatchBuffer& b, std::uint64_t bytes) const;
  // The report's note the first time a batch buffer grew past its start-up size.
  virtual std::string growth_note(std::uint64_t learned) const;

  // --- reads (each storage thread, its own queue) ----------------------------------------------
  // The queue of a storage thread: its memory and reads, and its HTTP options (where the HTTP
  // queue's event loop runs).
  virtual void set_up_queue(storage::QueueOptions& qo, storage::HttpQueueOptions& http) const;
  // Registers the batch buffers with the thread's queue, where reads land in them; the first
  // thread notes how reads land (and the registration) for the report.
  virtual void register_buffers(storage::IoQueue& /*queue*/, bool /*first_thread*/,
                                unsigned /*threads*/) const {}
  // Where s's read lands: its slot, or a sample buffer (range may widen to the aligned cover,
  // s.raw_head then says by how much it starts earlier). An error (no memory for the buffer)
  // ends the run.
  virtual Result<MutableBytes> destination(InFlightSample& s, const Sample& smp,
                                           ReadRange& range) const = 0;

  // --- completion ------------------------------------------------------------------------------
  // A read of an object of unknown size landed: its size, and whether it outgrew its slot.
  virtual void saw_unknown(std::uint64_t /*size*/, bool /*spilled*/) noexcept {}
  // A storage thread ends (its queue drained), then the last of them.
  virtual void end_thread(const storage::IoQueue& /*queue*/, bool /*first_thread*/) const {}
  virtual void end_stage() const {}

 protected:
  StoragePath(RunState& run, SlotPlace::Fill fill, bool digests_inline)
      : run_(run), fill_(fill), digests_inline_(digests_inline) {}

  RunState& run_;

 private:
  const SlotPlace::Fill fill_;
  const bool digests_inline_;
};

}  // namespace feedline::loader::detail
