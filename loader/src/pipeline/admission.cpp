// The storage stage's admission (admission.hpp).
#include "admission.hpp"

#include <fmt/format.h>

#include "unknown_size.hpp"

namespace feedline::loader::detail {

void LimitTimer::set(AdmissionLimit l) {
  if (l == limit_) return;
  const std::uint64_t t = now_ns();
  if (limit_ == AdmissionLimit::kWindow) window_ns_ += t - since_;
  if (limit_ == AdmissionLimit::kBudget) budget_ns_ += t - since_;
  limit_ = l;
  since_ = t;
}

Admission::Admission(RunState& run, Sampler& sampler, StoragePath& path)
    : run_(run), sampler_(sampler), path_(path) {
  pending_ = sampler_.next();
}

Admission::Admitted Admission::next(Worker& w) {
  Admitted out;
  std::lock_guard lock(mu_);
  if (failed_) {
    out.kind = Admitted::kFailed;
    return out;
  }
  if (!pending_) return out;  // kEnd
  const SampleSlot pending = *pending_;
  if (pending.seq >= run_.collate_cursor.load(std::memory_order_acquire) + run_.sizing.window) {
    out.kind = Admitted::kLimited;
    out.why = AdmissionLimit::kWindow;
    return out;
  }
  if (path_.lays_out_batches() && pending.batch != layout_.batch) {
    out.kind = lay_out(w, pending);
    if (out.kind != Admitted::kRead) {
      out.why = AdmissionLimit::kWindow;  // kLimited: the consumer has not handed back a buffer
      return out;
    }
  }
  InFlightSample& s = out.sample;
  s.slot = pending;
  // The batch's buffer travels with each of its samples, a skipped one's too.
  if (path_.lays_out_batches()) s.place = place_of(pending, run_.dataset.samples[pending.sample]);
  if (auto e = too_large(pending)) {  // only with on_error = skip
    s.error = std::move(*e);
    pending_ = next_slot();
    out.kind = Admitted::kDeliver;
    return out;
  }
  if (!reserve(s)) {
    out.sample = InFlightSample{};
    out.kind = Admitted::kLimited;
    out.why = AdmissionLimit::kBudget;
    return out;
  }
  pending_ = next_slot();
  out.kind = Admitted::kRead;
  return out;
}

AdmissionLimit Admission::held_back(AdmissionLimit why) const noexcept {
  if (why == AdmissionLimit::kWindow &&
      reads_in_flight.load(std::memory_order_relaxed) * 2 >= run_.sizing.window)
    return AdmissionLimit::kNone;
  return why;
}

std::optional<SampleSlot> Admission::next_slot() {
  if (ahead_.empty()) return sampler_.next();
  const SampleSlot s = ahead_.front();
  ahead_.pop_front();
  return s;
}

// A free buffer is taken without blocking (reads in flight must be polled); the buffer grows
// before anything lands in it.
Admission::Admitted::Kind Admission::lay_out(Worker& w, const SampleSlot& first) {
  auto b = w.pop_for(run_.pool->free(), std::chrono::nanoseconds(0));
  if (!b) return Admitted::kLimited;
  while (ahead_.size() + 1 < first.batch_len) {
    auto more = sampler_.next();
    if (!more) break;
    ahead_.push_back(*more);
  }
  const PoolSizing& sizing = run_.sizing;
  layout_.offsets.assign(first.batch_len, 0);
  layout_.learned = path_.learned_slot();
  std::uint64_t off = 0;
  auto place = [&](const SampleSlot& sl) {
    layout_.offsets[sl.slot] = off;
    if (sizing.footprints[sl.sample] > sizing.sample_limit) return;  // skipped: no slot
    off += path_.slot_bytes(run_.dataset.samples[sl.sample], layout_.learned);
  };
  place(first);
  for (const auto& sl : ahead_) place(sl);
  auto grown = path_.fit(**b, off);
  if (!grown) {
    run_.fail(std::move(grown).error());
    failed_ = true;
    return Admitted::kFailed;
  }
  if (*grown) {
    run_.pool_grown_bytes += *grown;
    if (!layout_.noted_growth) {
      layout_.noted_growth = true;
      run_.note_path(path_.growth_note(layout_.learned));
    }
  }
  layout_.buffer = *b;
  layout_.batch = first.batch;
  layout_.end = off;
  return Admitted::kRead;
}

SlotPlace Admission::place_of(const SampleSlot& s, const Sample& smp) const {
  SlotPlace p;
  p.fill = path_.fill();
  p.buffer = layout_.buffer;
  p.offset = layout_.offsets[s.slot];
  if (size_unknown(smp)) p.room = layout_.learned;
  p.slots_end = layout_.end;
  return p;
}

std::optional<Error> Admission::too_large(const SampleSlot& s) const {
  const std::uint64_t footprint = run_.sizing.footprints[s.sample];
  if (footprint <= run_.sizing.sample_limit) return std::nullopt;
  const Dataset& dataset = run_.dataset;
  const Sample& smp = dataset.samples[s.sample];
  if (footprint == kOversized) {
    return larger_than_max(dataset, s.sample,
                           oversized(dataset, run_.plan.decode, smp, run_.config), run_.config);
  }
  return Error(Errc::kResourceExhausted,
               fmt::format("sample '{}' needs {} bytes, more than the memory budget allows ({})",
                           smp.key, path_.reservation(footprint), run_.sizing.sample_limit))
      .with_object(dataset.objects[smp.object].key)
      .with_offset(smp.offset);
}

// What a transform returns is held in the budget (ResultBytes): a sample of a batch after the
// one collate fills is admitted with room for a result as large as the largest so far (none
// before the first is known). The batch collate fills goes on whatever results hold once no
// finished batch is queued for the consumer: the results held then are freed only by batches
// the consumer has yet to get (flow control, pipeline.hpp).
bool Admission::reserve(InFlightSample& s) {
  const SampleSlot& slot = s.slot;
  const std::uint64_t need = path_.reservation(run_.sizing.footprints[slot.sample]);
  std::uint64_t result_room = 0, slack = 0;
  bool room_known = true;
  if (run_.config.transform) {
    if (slot.seq - slot.slot <= run_.collate_cursor.load(std::memory_order_acquire)) {
      if (run_.batches.depth_now() == 0 && run_.device_batches.depth_now() == 0)
        slack = run_.results->held();
    } else {
      const auto largest = run_.results->largest();
      room_known = largest.has_value();
      result_room = largest.value_or(0);
    }
  }
  if (!room_known || !run_.budget.try_acquire(need + result_room, slack)) return false;
  s.reserved = need + result_room;
  s.result_room = result_room;
  return true;
}

}  // namespace feedline::loader::detail
