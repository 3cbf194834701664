// One storage thread's reads (internal): its read slots (io_depth / threads of them, each a
// ReadOp and the sample it reads), and the ReadIssuer that fills them. The issuer takes samples
// from the stage's Admission while a slot is free and the stage's bytes in flight are under
// io_max_bytes, opens each sample's object (HandleCache), asks the data path where its read
// lands (StoragePath::destination) and submits the reads to the thread's I/O queue. The
// completions come back to ReadCompletion (read_completion.hpp), which gives the slots back.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "admission.hpp"
#include "stage_work.hpp"
#include "storage_path.hpp"
#include "unknown_size.hpp"

namespace feedline::loader::detail {

struct ReadSlot {
  storage::ReadOp op;
  InFlightSample sample;
  std::unique_ptr<storage::ObjectHandle> own_handle;  // when handles are not cached
};

// A storage thread's read slots, what the queue completed in its last poll, and what is in
// flight (the thread's bytes, and the stage's counts in its Admission).
class ReadSlots final : public storage::ReadCompletion {
 public:
  ReadSlots(unsigned depth, Admission& admission);
  ReadSlots(const ReadSlots&) = delete;
  ReadSlots& operator=(const ReadSlots&) = delete;
  bool any_free() const noexcept { return !free_.empty(); }
  ReadSlot* take() noexcept;
  void give_back(ReadSlot* slot) noexcept;
  // A read submitted, and one that completed: counted in and out of what is in flight.
  void count_in(const storage::ReadOp& op) noexcept;
  void count_out(const storage::ReadOp& op) noexcept;
  // The thread's bytes in flight, taken out of the stage's as the thread ends.
  void forget_in_flight() noexcept;

  // The reads the last poll completed (clear() before each poll).
  std::vector<ReadSlot*>& completed() noexcept { return completed_; }
  void on_read_complete(storage::ReadOp& op) noexcept override {
    completed_.push_back(static_cast<ReadSlot*>(op.user));
  }

 private:
  Admission& admission_;
  std::vector<ReadSlot> slots_;
  std::vector<ReadSlot*> free_;
  std::vector<ReadSlot*> completed_;
  std::uint64_t bytes_in_flight_ = 0;  // this thread's
};

class ReadIssuer {
 public:
  // threads: the stage's storage threads.
  ReadIssuer(RunState& run, const StoragePath& path, Admission& admission, ReadSlots& slots,
             storage::IoQueue& queue, HandleCache& handles, unsigned threads);

  // What one round of admission ended on.
  struct Round {
    bool ended = false;                          // the admission has nothing more for anyone
    bool stop = false;                           // the run is over (failed, or downstream closed)
    AdmissionLimit why = AdmissionLimit::kNone;  // held back by the window or the budget
    bool limited = false;
  };
  // Admits samples and prepares their reads while a slot is free and the stage's bytes in flight
  // allow. A sample admitted with its error, or whose object does not open, goes on to decode
  // as it is (collate meets its error in delivery order).
  Round issue(Worker& w);
  // Submits what issue() prepared and has not submitted yet.
  void flush();

 private:
  enum class Outcome { kRead, kDelivered, kStop };
  Outcome start_read(Worker& w, InFlightSample&& s);
  // Hands a finished (or failed) sample to decode; false when the run is over.
  bool deliver(Worker& w, InFlightSample&& s) { return w.push(run_.reads, s); }

  RunState& run_;
  const StoragePath& path_;
  Admission& admission_;
  ReadSlots& slots_;
  storage::IoQueue& queue_;
  HandleCache& handles_;
  // Reads of samples of unknown size get a larger buffer here when their object outgrows the
  // guess.
  GrowUnknown grow_unknown_;
  const bool submit_each_;
  std::vector<storage::ReadOp*> batch_;
};

}  // namespace feedline::loader::detail
