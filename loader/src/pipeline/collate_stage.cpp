// The collate stage: pulls decoded samples as they come into a reorder map and builds batches
// in seq order. On the bounce path it takes a free batch buffer at each batch's first sample and
// copies every sample in; on the direct and decode-in-place paths the storage stage already
// took the buffer and the samples are in their slots: collate only records where. It releases
// each sample's budget reservation and moves collate's cursor, which opens storage's window.
// The releases go out together, before collate waits (for samples, or for room for a batch):
// a storage thread held by the window wakes on each release, and one per sample was a futex
// wake and a context switch per 4 KiB file (28k of them for 100k samples).
#include <algorithm>
#include <bit>
#include <utility>

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

}  // namespace

void CollateStage::run(Worker& w) {
  const Dataset& dataset = run_.dataset;
  const bool device_only = reads_into_device(run_.plan.path);
  Reorder reorder(run_.sizing.window);
  std::vector<InFlightSample> arrived;
  std::uint64_t next_seq = 0;
  BatchBuffer* buffer = nullptr;
  std::optional<Batch> batch;
  std::uint64_t used = 0;
  std::uint64_t unreleased = 0;  // reservations of samples taken in, not yet given back
  std::uint64_t batch_t0 = 0;    // when the batch being laid out began (for the trace)
  // A direct batch's samples that outgrew their slot (objects of unknown size: unknown_size.hpp),
  // each with its place in samples(): copied in after the batch's slots at its last sample, when
  // every read into the buffer has landed (growing it may move it).
  struct Spill {
    InFlightSample s;
    std::size_t index;
  };
  std::vector<Spill> spills;
  std::uint64_t slots_end = 0;
  auto copy_spills = [&]() -> bool {
    std::uint64_t end = slots_end;
    std::vector<BatchMember> copied;
    for (Spill& sp : spills) {
      auto grown = ensure_room(*buffer, end, sp.s, run_.sink.get(), &copied_bytes);
      if (!grown) {
        run_.fail(std::move(grown).error());
        return false;
      }
      run_.pool_grown_bytes += *grown;
      copied.clear();
      BatchSample bs = copy_into_batch(dataset, sp.s, *buffer, end, copied);
      BatchSample& held = BatchAccess::samples(*batch)[sp.index];
      bs.first_member = held.first_member;
      std::copy(copied.begin(), copied.end(),
                BatchAccess::members(*batch).begin() + held.first_member);
      held = bs;
      copied_bytes += sp.s.decoded_bytes;
      bounce_delivered += sp.s.decoded_bytes;
      run_.buffers.put(std::move(sp.s.raw));
      run_.buffers.put(std::move(sp.s.decoded));
      unreleased += std::exchange(sp.s.reserved, 0);
    }
    spills.clear();
    return true;
  };
  auto release = [&] {
    if (unreleased > 0) run_.budget.release(std::exchange(unreleased, 0));
  };
  bool open = true;
  while (open) {
    while (!reorder.find(next_seq)) {
      release();
      arrived.clear();
      if (!w.pop_some(run_.decoded, arrived, 64)) {
        open = false;
        break;
      }
      for (InFlightSample& item : arrived) reorder.put(std::move(item), next_seq);
    }
    if (!open) break;
    InFlightSample s = reorder.take(next_seq);
    if (s.slot.slot == 0 || !batch) {
      if (s.laid_out()) {
        buffer = s.place.buffer;  // the storage stage took it from the pool for this batch
      } else {
        release();
        auto b = w.take(run_.pool->free());  // waiting for the consumer to hand back a buffer
        if (!b) break;
        buffer = *b;
      }
      batch.emplace(BatchAccess::make(run_.pool, buffer, s.slot.epoch, s.slot.batch, device_only));
      batch_t0 = w.lane() ? now_ns() : 0;
      used = 0;
      slots_end = s.laid_out() ? s.place.slots_end : 0;
    }
    if (s.error && run_.config.on_error == OnError::kFail) {
      // Every batch before this sample's is out: now its error (the batch it was in is not
      // delivered).
      unreleased += std::exchange(s.reserved, 0);
      run_.buffers.put(std::move(s.raw));
      run_.buffers.put(std::move(s.decoded));
      for (Spill& sp : spills) unreleased += std::exchange(sp.s.reserved, 0);
      spills.clear();
      run_.fail_in_order(std::move(*s.error));
      break;
    }
    if (s.error) {
      run_.skip(*s.error);
    } else if (s.spilled) {
      // Its place in the batch's order now; its bytes and members at the batch's end.
      std::vector<BatchMember>& members = BatchAccess::members(*batch);
      BatchSample held;
      held.first_member = static_cast<std::uint32_t>(members.size());
      members.resize(members.size() + s.members.size());
      BatchAccess::samples(*batch).push_back(held);
      BatchAccess::add(*batch, s.digest, s.decoded_bytes);
      if (run_.config.transform) BatchAccess::results(*batch).push_back(std::move(s.result));
      w.count(1, s.decoded_bytes);
      spills.push_back({std::move(s), BatchAccess::samples(*batch).size() - 1});
      s.reserved = 0;  // given back once copied in
    } else if (s.laid_out()) {
      BatchSample bs =
          place_in_batch(dataset, s, BatchAccess::members(*batch));  // already in place
      used = std::max(used, bs.offset + bs.size);
      direct_delivered += s.decoded_bytes;
      copied_bytes += s.copied_bytes;  // stored members decode copied into the slot
      BatchAccess::samples(*batch).push_back(bs);
      BatchAccess::add(*batch, s.digest, s.decoded_bytes);
      if (run_.config.transform) BatchAccess::results(*batch).push_back(std::move(s.result));
      w.count(1, s.decoded_bytes);
    } else {
      auto grown = ensure_room(*buffer, used, s, run_.sink.get(), &copied_bytes);
      if (!grown) {
        run_.fail(std::move(grown).error());
        break;
      }
      run_.pool_grown_bytes += *grown;
      BatchSample bs = copy_into_batch(dataset, s, *buffer, used, BatchAccess::members(*batch));
      copied_bytes += s.decoded_bytes;
      bounce_delivered += s.decoded_bytes;
      BatchAccess::samples(*batch).push_back(bs);
      BatchAccess::add(*batch, s.digest, s.decoded_bytes);
      if (run_.config.transform) BatchAccess::results(*batch).push_back(std::move(s.result));
      w.count(1, s.decoded_bytes);
    }
    run_.buffers.put(std::move(s.raw));
    run_.buffers.put(std::move(s.decoded));
    unreleased += s.reserved;
    const bool last = s.slot.slot + 1 == s.slot.batch_len;
    ++next_seq;
    run_.collate_cursor.store(next_seq, std::memory_order_release);
    if (last && !spills.empty()) {
      if (!copy_spills()) break;
    }
    if (last) {
      spin_for(run_.config.diagnostics.collate_cost, run_.stop_flag());
      Batch out = std::move(*batch);
      batch.reset();
      release();
      if (TraceLane* lane = w.lane()) {
        lane->span("collate", "collate batch", batch_t0, now_ns(),
                   static_cast<double>(out.samples().size()));
      }
      if (!w.push(run_.batches, out)) break;
    }
  }
  for (Spill& sp : spills) unreleased += sp.s.reserved;  // a batch the run left unfinished
  release();
  run_.batches.close();
}

}  // namespace feedline::loader::detail
