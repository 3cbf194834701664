// One storage thread's read slots and read issuer (read_issuer.hpp).
#include "read_issuer.hpp"

namespace feedline::loader::detail {

ReadSlots::ReadSlots(unsigned depth, Admission& admission) : admission_(admission), slots_(depth) {
  free_.reserve(slots_.size());
  for (auto& s : slots_) free_.push_back(&s);
}

ReadSlot* ReadSlots::take() noexcept {
  ReadSlot* slot = free_.back();
  free_.pop_back();
  return slot;
}

void ReadSlots::give_back(ReadSlot* slot) noexcept {
  slot->own_handle.reset();
  free_.push_back(slot);
}

void ReadSlots::count_in(const storage::ReadOp& op) noexcept {
  bytes_in_flight_ += op.length;
  admission_.bytes_in_flight.fetch_add(op.length, std::memory_order_relaxed);
  admission_.reads_in_flight.fetch_add(1, std::memory_order_relaxed);
}

void ReadSlots::count_out(const storage::ReadOp& op) noexcept {
  bytes_in_flight_ -= op.length;
  admission_.bytes_in_flight.fetch_sub(op.length, std::memory_order_relaxed);
  admission_.reads_in_flight.fetch_sub(1, std::memory_order_relaxed);
}

void ReadSlots::forget_in_flight() noexcept {
  admission_.bytes_in_flight.fetch_sub(bytes_in_flight_, std::memory_order_relaxed);
  bytes_in_flight_ = 0;
}

// O_DIRECT reads on one storage thread go to the device one by one, each as soon as its object
// is open, as fio submits them; handed over in batches (one io_uring_enter per admission round),
// 100,000 shuffled 4 KiB files read at 46-57k files/s against 60-87k one by one (5 alternating
// pairs of the same small io_uring program; fio 94k). With several threads the others keep the
// device busy meanwhile, and batches cost less: 2 threads over the same files, caches dropped,
// the same files/s in 15% less CPU (9 alternating pairs; every submission is a doorbell, a VM
// exit on virtio). Page-cache reads stay batched: there the system call per read is the cost,
// and the device is not involved.
ReadIssuer::ReadIssuer(RunState& run, const StoragePath& path, Admission& admission,
                       ReadSlots& slots, storage::IoQueue& queue, HandleCache& handles,
                       unsigned threads)
    : run_(run),
      path_(path),
      admission_(admission),
      slots_(slots),
      queue_(queue),
      handles_(handles),
      grow_unknown_(run,
                    [](storage::ReadOp& op) -> InFlightSample& {
                      return static_cast<ReadSlot*>(op.user)->sample;
                    }),
      submit_each_(run.backend.caps().alignment > 1 && !path.reads_into_device() && threads == 1) {
  // Reads of samples of unknown size get a larger buffer here when their object outgrows the guess.
  if (auto* unknown = queue.unknown_sizes()) unknown->set_growth(&grow_unknown_);
}

ReadIssuer::Round ReadIssuer::issue(Worker& w) {
  Round r;
  while (slots_.any_free() &&
         admission_.bytes_in_flight.load(std::memory_order_relaxed) < run_.config.io_max_bytes) {
    Admission::Admitted got = admission_.next(w);
    if (got.kind == Admission::Admitted::kEnd) {
      r.ended = true;
      break;
    }
    if (got.kind == Admission::Admitted::kFailed) {
      r.stop = true;
      break;
    }
    if (got.kind == Admission::Admitted::kLimited) {
      r.limited = true;
      r.why = got.why;
      break;
    }
    const bool go_on = got.kind == Admission::Admitted::kDeliver
                           ? deliver(w, std::move(got.sample))
                           : start_read(w, std::move(got.sample)) != Outcome::kStop;
    if (!go_on) {
      r.stop = true;
      break;
    }
  }
  return r;
}

void ReadIssuer::flush() {
  if (!batch_.empty()) queue_.submit(batch_);
  batch_.clear();
}

ReadIssuer::Outcome ReadIssuer::start_read(Worker& w, InFlightSample&& s) {
  const Sample& smp = run_.dataset.samples[s.slot.sample];
  std::unique_ptr<storage::ObjectHandle> opened;
  auto handle = handles_.get(smp.object, opened);
  if (!handle) {
    s.error = std::move(handle).error();
    run_.budget.release(s.reserved);
    s.reserved = 0;
    return deliver(w, std::move(s)) ? Outcome::kDelivered : Outcome::kStop;
  }
  ReadRange range{smp.offset, read_length(smp, run_.config)};
  auto dst = path_.destination(s, smp, range);
  if (!dst) {
    run_.budget.release(s.reserved);
    run_.fail(std::move(dst).error());
    return Outcome::kStop;
  }
  ReadSlot* slot = slots_.take();
  slot->sample = std::move(s);
  slot->own_handle = std::move(opened);
  slot->op = storage::ReadOp{};
  slot->op.object = *handle;
  slot->op.offset = range.offset;
  slot->op.length = range.length;
  slot->op.dst = *dst;
  slot->op.done = &slots_;
  slot->op.user = slot;
  slots_.count_in(slot->op);
  batch_.push_back(&slot->op);
  if (submit_each_) flush();
  return Outcome::kRead;
}

}  // namespace feedline::loader::detail
