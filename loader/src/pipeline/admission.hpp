// The storage stage's admission (internal): which sample a storage thread reads next. Samples
// are admitted strictly in sampler order, from one Admission the stage's threads share (a mutex
// held only to pick the next sample and its slot, never over an open or a read). A sample is
// admitted when
//  - it lies within the window ahead of collate (seq < collate's cursor + window);
//  - on a path that lays out batches (StoragePath::lays_out_batches), its batch has a buffer:
//    at the batch's first sample a free batch buffer is taken without blocking (reads in flight
//    must be polled), the rest of the batch is pulled from the sampler, and each sample gets
//    its slot, the path sizing them and fitting the buffer (grown before anything lands in it);
//  - the memory budget holds what the path reserves for it (StoragePath::reservation), and room
//    for what the transform returns.
// A sample too large for the budget is not read: it comes back with its error, to be delivered
// in order. LimitTimer times why admission stopped (the window, or the budget): the verdict uses
// it to tell "storage is slow" from "storage is held back".
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

#include "feedline/loader/sampler.hpp"
#include "run_state.hpp"
#include "stage.hpp"
#include "storage_path.hpp"

namespace feedline::loader::detail {

// Why admission stopped: collate's window (downstream is slow) or the memory budget.
enum class AdmissionLimit { kNone, kWindow, kBudget };

// Times each AdmissionLimit into its counter (one storage thread's).
class LimitTimer {
 public:
  LimitTimer(std::uint64_t& window_ns, std::uint64_t& budget_ns)
      : window_ns_(window_ns), budget_ns_(budget_ns) {}
  void set(AdmissionLimit l);

 private:
  std::uint64_t& window_ns_;
  std::uint64_t& budget_ns_;
  AdmissionLimit limit_ = AdmissionLimit::kNone;
  std::uint64_t since_ = now_ns();
};

class Admission {
 public:
  Admission(RunState& run, Sampler& sampler, StoragePath& path);

  // What next() decided for the calling thread.
  struct Admitted {
    enum Kind { kRead, kDeliver, kLimited, kEnd, kFailed } kind = kEnd;
    InFlightSample sample;  // kRead: to read; kDeliver: an error to hand on as it is
    AdmissionLimit why = AdmissionLimit::kNone;  // kLimited
  };
  // The next sample the calling thread may read (w: its waits, for the free batch buffer).
  Admitted next(Worker& w);
  // The limit a thread that stopped admitting for `why` is held back by: the window counts as
  // "held back by downstream" only while most of it has already been read (fewer than half its
  // samples in flight); otherwise storage is still working on it.
  AdmissionLimit held_back(AdmissionLimit why) const noexcept;

  // Over every thread's queue: what is in flight (io_max_bytes bounds the bytes).
  std::atomic<std::uint64_t> bytes_in_flight{0};
  std::atomic<std::size_t> reads_in_flight{0};

 private:
  // The current batch's layout: its buffer, and each sample's slot in it.
  struct Layout {
    BatchBuffer* buffer = nullptr;
    std::uint64_t batch = ~std::uint64_t{0};  // the batch laid out
    std::vector<std::uint64_t> offsets;       // by slot
    std::uint64_t learned = 0;  // the slot of each sample of unknown size in that batch
    std::uint64_t end = 0;      // where that batch's slots end
    bool noted_growth = false;
  };
  std::optional<SampleSlot> next_slot();
  // A new batch at `first`: its buffer taken and its slots laid out. kRead to go on; kLimited or
  // kFailed otherwise.
  Admitted::Kind lay_out(Worker& w, const SampleSlot& first);
  SlotPlace place_of(const SampleSlot& s, const Sample& smp) const;
  // The error of a sample the budget cannot admit (on_error = skip), or nullopt.
  std::optional<Error> too_large(const SampleSlot& s) const;
  // Reserves s's budget (its path's reservation and the transform's room): false when it does
  // not fit yet.
  bool reserve(InFlightSample& s);

  RunState& run_;
  Sampler& sampler_;
  StoragePath& path_;
  std::mutex mu_;
  // The sampler's next sample (and, where batches are laid out, the rest of its batch, pulled
  // at the batch's first sample to lay out its slots).
  std::optional<SampleSlot> pending_;
  std::deque<SampleSlot> ahead_;
  Layout layout_;
  bool failed_ = false;  // the run failed while admitting: every thread stops
};

}  // namespace feedline::loader::detail
