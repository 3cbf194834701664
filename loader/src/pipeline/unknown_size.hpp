// Samples of unknown size: the objects of a brace list over a web server without a listing (a
// CDN, nginx without autoindex). The dataset open asks no HEAD per object
// (storage::Backend::stat_many_if_listed), so such a sample's length, and its one member's size,
// are storage::kUnknownSize until it is read. What the storage stage needs for them is here:
//
//  - the read's destination: a guess (size_guess: --max-sample-size when set, else 1 MiB; at
//    most what io_depth reads in flight can hold in half the memory budget). Fixed, not learned
//    from the objects seen so far: the budget reserves a sample's footprint at admission
//    (sizing.cpp) before its object is read, the recycled buffers are kept by size (one size
//    class for every read: no fresh allocation once the pool is warm), and a buffer's pages are
//    only touched as far as the bytes read (1 MiB of address space for a 64 KiB object costs
//    64 KiB of memory). An object larger than the guess costs one more GET for the rest, and only
//    its own;
//  - the ReadOp: the guess as its length (its handle's size says the object's is unknown); the
//    queue (IoQueue::unknown_sizes(): HTTP's; storage/unknown_size_reads.hpp) reads the first
//    guess bytes, learns the size from the answer and, for a larger object, gets a buffer that
//    holds it from GrowUnknown, the queue's growth (which charges the budget for it and refuses
//    an object larger than --max-sample-size or the budget allows), then reads the rest. The op
//    completes once, with the object's size, so the stage's own part stays two lines;
//  - the completion: finish_unknown_size() gives back the part of the reservation the object did
//    not need.
//
// On the direct path (nothing to decode: data_path.cpp) such a sample is read straight into its
// batch slot like any other, though its size is not known when the batch is laid out:
//  - the slot: SlotSizer's size, learned from the objects read so far (their largest, at most
//    twice their mean; 64 KiB until the first completes). Slots a sample does not fill leave a
//    gap in the batch (BatchSample::offset says where each starts, as for 4 KiB-aligned slots);
//  - the read: the guess is still the most its first GET asks for, so an object larger than its
//    slot costs no second request: as soon as the answer's headers say its size, GrowUnknown
//    gives it a buffer of its own (InFlightSample::spilled) and the body lands there;
//  - collate copies such a sample in after the batch's slots, once every read of the batch has
//    landed (the batch buffer may have to grow, and move, for it). Before, every object of
//    unknown size was read into a sample buffer and copied: ~7% of the CPU of 64 KiB objects.
#pragma once

#include <atomic>
#include <cstdint>

#include "feedline/loader/dataset.hpp"
#include "feedline/storage/backend.hpp"
#include "feedline/storage/unknown_size_reads.hpp"
#include "run_state.hpp"

namespace feedline::loader::detail {

inline constexpr std::uint64_t kDefaultSizeGuess = std::uint64_t{1} << 20;
// Batch buffers are sized from the average sample; one of unknown size counts as this much
// (small samples are the common case; batch buffers grow on demand for larger ones).
inline constexpr std::uint64_t kUnknownSizeBatchEstimate = std::uint64_t{64} << 10;

inline bool size_unknown(const Sample& s) noexcept { return s.length == storage::kUnknownSize; }
// The dataset's first sample of unknown size, or null.
const Sample* first_unknown_size(const Dataset& dataset) noexcept;
inline bool has_unknown_sizes(const Dataset& dataset) noexcept {
  return first_unknown_size(dataset) != nullptr;
}

// The slot a sample of unknown size gets in a batch laid out on the direct path: the largest
// object of unknown size read so far, at most twice their mean (a rare large one is spilled, not
// made the size of every slot), at most the guess (the budget's bound), at least 4 KiB, a
// multiple of 4 KiB; 64 KiB (at most the guess) until one is read. Storage threads call saw()
// as reads complete and slot() when they lay out a batch.
class SlotSizer {
 public:
  explicit SlotSizer(std::uint64_t guess) noexcept : guess_(guess) {}
  std::uint64_t slot() const noexcept;
  void saw(std::uint64_t size) noexcept;
  std::uint64_t count() const noexcept { return count_.load(std::memory_order_relaxed); }

 private:
  const std::uint64_t guess_;
  std::atomic<std::uint64_t> count_{0};
  std::atomic<std::uint64_t> total_{0};
  std::atomic<std::uint64_t> largest_{0};
};

// The destination of the first read of a sample of unknown size: config.max_sample_bytes when
// set, else kDefaultSizeGuess; at most memory_budget / (2 x io_depth), at least 4 KiB; a multiple
// of 4 KiB.
std::uint64_t size_guess(const LoaderConfig& config) noexcept;

// The bytes a read of s allocates and asks for: s.length, or size_guess() for a sample of
// unknown size.
inline std::uint64_t read_length(const Sample& s, const LoaderConfig& config) noexcept {
  return size_unknown(s) ? size_guess(config) : s.length;
}

// A member's stored bytes in the sample as read: m.size, or for a sample of unknown size (one
// member, from offset 0) the bytes read.
inline std::uint64_t stored_size(const Member& m, const InFlightSample& s) noexcept {
  return m.size == storage::kUnknownSize ? (s.raw_len > m.offset ? s.raw_len - m.offset : 0)
                                         : m.size;
}

// The growth (UnknownSizeReads::set_growth) of one storage thread's queue, for its reads of
// unknown size (it runs in that thread's poll()).
// sample_of finds the InFlightSample an op reads into (through ReadOp::user). A larger object
// gets a buffer from run.buffers holding the bytes already read, the sample's raw buffer becomes
// it (a sample read into its batch slot is then spilled), and the budget is charged for the
// difference (MemoryBudget::force: a read in flight cannot
// wait; it shows as overshoot). Refused, naming the object: more than --max-sample-size
// (kInvalidArgument), or more than a sample may hold in the budget (kResourceExhausted).
class GrowUnknown final : public storage::ReadGrowth {
 public:
  using SampleOf = InFlightSample& (*)(storage::ReadOp& op);
  GrowUnknown(RunState& run, SampleOf sample_of) : run_(run), sample_of_(sample_of) {}
  Result<MutableBytes> grow(storage::ReadOp& op, std::uint64_t size,
                            std::uint64_t filled) noexcept override;

 private:
  RunState& run_;
  SampleOf sample_of_;
};

// The length a completed read of sample smp must have: smp.length, or for a sample of unknown
// size what was read (the object's size: the queue read all of it).
inline std::uint64_t expected_length(const Sample& smp, const storage::ReadOp& op) noexcept {
  return size_unknown(smp) && op.result ? *op.result : smp.length;
}

// A read of a sample of unknown size completed with `size` bytes (its object's size): gives back
// what its reservation holds beyond the pages those bytes take. A size over --max-sample-size
// (GrowUnknown refuses those, so only as a safeguard) sets s.error naming the object.
void finish_unknown_size(RunState& run, const Sample& smp, std::uint64_t size, InFlightSample& s);

}  // namespace feedline::loader::detail
