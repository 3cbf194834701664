// The collate stage: pulls decoded samples as they come into a reorder map and builds batches
// in seq order. On the bounce path it takes a free batch buffer at each batch's first sample and
// copies every sample in; on the direct and decode-in-place paths the storage stage already
// took the buffer and the samples are in their slots: collate only records where. It releases
// each sample's budget reservation and moves collate's cursor, which opens storage's window.
// The releases go out together, before collate waits (for samples, or for room for a batch):
// a storage thread held by the window wakes on each release, and one per sample was a futex
// wake and a context switch per 4 KiB file (28k of them for 100k samples).
// CollateStage::run is the loop (samples into the reorder ring, then in seq order into the
// batch); BatchFill is the batch being filled, whichever way each sample goes in.
#include <algorithm>
#include <bit>
#include <optional>
#include <utility>
#include <vector>

#include "stage_work.hpp"
#include "stages.hpp"

namespace feedline::loader::detail {
namespace {

// The samples that arrived ahead of the one collate needs next, by seq: a ring of slots as wide
// as storage's window (it admits no sample `window` or more past collate's cursor), so nothing
// is allocated per sample (a std::map was a node per sample). A sample further ahead than the
// ring is wide, which the window rules out, widens it.
class Reorder {
 public:
  explicit Reorder(std::size_t window) : slots_(std::bit_ceil(std::max<std::size_t>(window, 8))) {}
  void put(InFlightSample&& s, std::uint64_t next_seq) {
    if (s.slot.seq - next_seq >= slots_.size()) widen(s.slot.seq - next_seq + 1);
    slots_[s.slot.seq & (slots_.size() - 1)].emplace(std::move(s));
  }
  // The sample `seq` if it has arrived (the caller takes it out with take()).
  InFlightSample* find(std::uint64_t seq) {
    auto& slot = slots_[seq & (slots_.size() - 1)];
    return slot && slot->slot.seq == seq ? &*slot : nullptr;
  }
  InFlightSample take(std::uint64_t seq) {
    auto& slot = slots_[seq & (slots_.size() - 1)];
    InFlightSample s = std::move(*slot);
    slot.reset();
    return s;
  }

 private:
  void widen(std::uint64_t span) {
    std::vector<std::optional<InFlightSample>> wider(std::bit_ceil(static_cast<std::size_t>(span)));
    for (auto& slot : slots_) {
      if (slot) wider[slot->slot.seq & (wider.size() - 1)] = std::move(slot);
    }
    slots_ = std::move(wider);
  }

  std::vector<std::optional<InFlightSample>> slots_;
};

// The batch collate fills: its buffer (taken here on the bounce path, laid out by the storage
// stage otherwise), its samples and members so far, the reservations taken in and not yet given
// back, and the samples that outgrew their slot.
class BatchFill {
 public:
  BatchFill(RunState& run, CollateStage& stage, Worker& w)
      : run_(run), stage_(stage), w_(w), device_only_(reads_into_device(run.plan.path)) {}
  bool open() const noexcept { return batch_.has_value(); }
  // A batch begins at s: false when the run is over (no buffer came back).
  bool start(const InFlightSample& s);
  // s into the batch (or skipped with its error): false when the run failed.
  bool add(InFlightSample& s);
  // s's error ends the run here (on_error = fail): every batch before it is out.
  void fail_in_order(InFlightSample& s);
  // The batch is complete: out to the device stage or the consumer. False when the run is over.
  bool finish();
  // The reservations of the samples taken in, given back together.
  void release() {
    if (unreleased_ > 0) run_.budget.release(std::exchange(unreleased_, 0));
  }
  // The run ends with the batch unfinished.
  void abandon() {
    for (Spill& sp : spills_) unreleased_ += sp.s.reserved;
    release();
  }

 private:
  // A direct batch's sample that outgrew its slot (an object of unknown size: unknown_size.hpp),
  // with its place in samples(): copied in after the batch's slots at its last sample, when
  // every read into the buffer has landed (growing it may move it).
  struct Spill {
    InFlightSample s;
    std::size_t index;
  };
  void append(const BatchSample& bs, InFlightSample& s);
  void add_spilled(InFlightSample& s);
  void place(InFlightSample& s);
  bool copy_in(InFlightSample& s);
  bool copy_spills();

  RunState& run_;
  CollateStage& stage_;
  Worker& w_;
  const bool device_only_;
  BatchBuffer* buffer_ = nullptr;
  std::optional<Batch> batch_;
  std::uint64_t used_ = 0;
  std::uint64_t unreleased_ = 0;  // reservations of samples taken in, not yet given back
  std::uint64_t batch_t0_ = 0;    // when the batch being laid out began (for the trace)
  std::vector<Spill> spills_;
  std::uint64_t slots_end_ = 0;
};

bool BatchFill::start(const InFlightSample& s) {
  if (s.laid_out()) {
    buffer_ = s.place.buffer;  // the storage stage took it from the pool for this batch
  } else {
    release();
    auto b = w_.take(run_.pool->free());  // waiting for the consumer to hand back a buffer
    if (!b) return false;
    buffer_ = *b;
  }
  batch_.emplace(BatchAccess::make(run_.pool, buffer_, s.slot.epoch, s.slot.batch, device_only_));
  batch_t0_ = w_.lane() ? now_ns() : 0;
  used_ = 0;
  slots_end_ = s.laid_out() ? s.place.slots_end : 0;
  return true;
}

bool BatchFill::add(InFlightSample& s) {
  if (s.error) {
    run_.skip(*s.error);
  } else if (s.spilled) {
    add_spilled(s);
  } else if (s.laid_out()) {
    place(s);
  } else if (!copy_in(s)) {
    return false;
  }
  run_.buffers.put(std::move(s.raw));
  run_.buffers.put(std::move(s.decoded));
  unreleased_ += s.reserved;
  return true;
}

void BatchFill::append(const BatchSample& bs, InFlightSample& s) {
  BatchAccess::samples(*batch_).push_back(bs);
  BatchAccess::add(*batch_, s.digest, s.decoded_bytes);
  if (run_.config.transform) BatchAccess::results(*batch_).push_back(std::move(s.result));
  w_.count(1, s.decoded_bytes);
}

// Its place in the batch's order now; its bytes and members at the batch's end.
void BatchFill::add_spilled(InFlightSample& s) {
  std::vector<BatchMember>& members = BatchAccess::members(*batch_);
  BatchSample held;
  held.first_member = static_cast<std::uint32_t>(members.size());
  members.resize(members.size() + s.members.size());
  append(held, s);
  spills_.push_back({std::move(s), BatchAccess::samples(*batch_).size() - 1});
  s.reserved = 0;  // given back once copied in
}

void BatchFill::place(InFlightSample& s) {
  const BatchSample bs = place_in_batch(run_.dataset, s, BatchAccess::members(*batch_));
  used_ = std::max(used_, bs.offset + bs.size);
  stage_.direct_delivered += s.decoded_bytes;
  stage_.copied_bytes += s.copied_bytes;  // stored members decode copied into the slot
  append(bs, s);
}

bool BatchFill::copy_in(InFlightSample& s) {
  auto grown = ensure_room(*buffer_, used_, s, run_.sink.get(), &stage_.copied_bytes);
  if (!grown) {
    run_.fail(std::move(grown).error());
    return false;
  }
  run_.pool_grown_bytes += *grown;
  const BatchSample bs =
      copy_into_batch(run_.dataset, s, *buffer_, used_, BatchAccess::members(*batch_));
  stage_.copied_bytes += s.decoded_bytes;
  stage_.bounce_delivered += s.decoded_bytes;
  append(bs, s);
  return true;
}

bool BatchFill::copy_spills() {
  std::uint64_t end = slots_end_;
  std::vector<BatchMember> copied;
  for (Spill& sp : spills_) {
    auto grown = ensure_room(*buffer_, end, sp.s, run_.sink.get(), &stage_.copied_bytes);
    if (!grown) {
      run_.fail(std::move(grown).error());
      return false;
    }
    run_.pool_grown_bytes += *grown;
    copied.clear();
    BatchSample bs = copy_into_batch(run_.dataset, sp.s, *buffer_, end, copied);
    BatchSample& held = BatchAccess::samples(*batch_)[sp.index];
    bs.first_member = held.first_member;
    std::copy(copied.begin(), copied.end(),
              BatchAccess::members(*batch_).begin() + held.first_member);
    held = bs;
    stage_.copied_bytes += sp.s.decoded_bytes;
    stage_.bounce_delivered += sp.s.decoded_bytes;
    run_.buffers.put(std::move(sp.s.raw));
    run_.buffers.put(std::move(sp.s.decoded));
    unreleased_ += std::exchange(sp.s.reserved, 0);
  }
  spills_.clear();
  return true;
}

// The batch it was in is not delivered.
void BatchFill::fail_in_order(InFlightSample& s) {
  unreleased_ += std::exchange(s.reserved, 0);
  run_.buffers.put(std::move(s.raw));
  run_.buffers.put(std::move(s.decoded));
  for (Spill& sp : spills_) unreleased_ += std::exchange(sp.s.reserved, 0);
  spills_.clear();
  run_.fail_in_order(std::move(*s.error));
}

bool BatchFill::finish() {
  if (!spills_.empty() && !copy_spills()) return false;
  spin_for(run_.config.diagnostics.collate_cost, run_.stop_flag());
  Batch out = std::move(*batch_);
  batch_.reset();
  release();
  if (TraceLane* lane = w_.lane()) {
    lane->span("collate", "collate batch", batch_t0_, now_ns(),
               static_cast<double>(out.samples().size()));
  }
  return w_.push(run_.batches, out);
}

}  // namespace

void CollateStage::run(Worker& w) {
  Reorder reorder(run_.sizing.window);
  BatchFill fill(run_, *this, w);
  std::vector<InFlightSample> arrived;
  std::uint64_t next_seq = 0;
  bool open = true;
  while (open) {
    while (!reorder.find(next_seq)) {
      fill.release();
      arrived.clear();
      if (!w.pop_some(run_.decoded, arrived, 64)) {
        open = false;
        break;
      }
      for (InFlightSample& item : arrived) reorder.put(std::move(item), next_seq);
    }
    if (!open) break;
    InFlightSample s = reorder.take(next_seq);
    if ((s.slot.slot == 0 || !fill.open()) && !fill.start(s)) break;
    if (s.error && run_.config.on_error == OnError::kFail) {
      fill.fail_in_order(s);  // every batch before this sample's is out: now its error
      break;
    }
    const bool last = s.slot.slot + 1 == s.slot.batch_len;
    if (!fill.add(s)) break;
    ++next_seq;
    run_.collate_cursor.store(next_seq, std::memory_order_release);
    if (last && !fill.finish()) break;
  }
  fill.abandon();
  run_.batches.close();
}

}  // namespace feedline::loader::detail
