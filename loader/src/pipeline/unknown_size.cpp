// Samples of unknown size (unknown_size.hpp).
#include "unknown_size.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "sizing.hpp"

namespace feedline::loader::detail {

const Sample* first_unknown_size(const Dataset& dataset) noexcept {
  const auto it = std::find_if(dataset.samples.begin(), dataset.samples.end(),
                               [](const Sample& s) { return size_unknown(s); });
  return it == dataset.samples.end() ? nullptr : &*it;
}

std::uint64_t size_guess(const LoaderConfig& config) noexcept {
  const std::uint64_t asked = config.max_sample_bytes ? config.max_sample_bytes : kDefaultSizeGuess;
  const std::uint64_t cap = config.memory_budget / (2 * std::max(1u, config.io_depth));
  const std::uint64_t guess = std::max<std::uint64_t>(std::min(asked, cap), kPageAlign);
  return align_up(guess, kPageAlign);
}

std::uint64_t SlotSizer::slot() const noexcept {
  const std::uint64_t n = count_.load(std::memory_order_relaxed);
  std::uint64_t want = kUnknownSizeBatchEstimate;
  if (n > 0) {
    const std::uint64_t mean = total_.load(std::memory_order_relaxed) / n;
    want = std::min(largest_.load(std::memory_order_relaxed), 2 * mean);
  }
  return align_up(std::max<std::uint64_t>(std::min(want, guess_), 1), kPageAlign);
}

void SlotSizer::saw(std::uint64_t size) noexcept {
  count_.fetch_add(1, std::memory_order_relaxed);
  total_.fetch_add(size, std::memory_order_relaxed);
  std::uint64_t seen = largest_.load(std::memory_order_relaxed);
  while (size > seen && !largest_.compare_exchange_weak(seen, size, std::memory_order_relaxed)) {
  }
}

namespace {

Error too_large(const RunState& run, const Sample& smp, std::uint64_t size, std::uint64_t limit,
                bool max_sample) {
  const Dataset& d = run.dataset;
  Error e = max_sample ? Error(Errc::kInvalidArgument,
                               fmt::format("sample '{}' has {} bytes, more than the largest sample "
                                           "allowed ({} bytes)",
                                           smp.key, size, limit))
                             .with_hint(
                                 "raise {max_sample_size}, or {on_error=skip} to leave such "
                                 "samples out")
                       : Error(Errc::kResourceExhausted,
                               fmt::format("sample '{}' has {} bytes, more than the memory budget "
                                           "allows a sample ({} bytes)",
                                           smp.key, size, limit))
                             .with_hint(
                                 "raise {memory_budget}, or {on_error=skip} to leave such "
                                 "samples out");
  return std::move(e).with_object(run.backend.display_name(d.objects[smp.object].key));
}

}  // namespace

Result<MutableBytes> GrowUnknown::grow(storage::ReadOp& op, std::uint64_t size,
                                       std::uint64_t filled) noexcept {
  InFlightSample& s = sample_of_(op);
  const Sample& smp = run_.dataset.samples[s.slot.sample];
  const std::uint64_t max = run_.config.max_sample_bytes;
  if (max && size > max) return fail(too_large(run_, smp, size, max, true));
  const std::uint64_t limit = run_.sizing.sample_limit;
  if (align_up(size, kPageAlign) > limit) return fail(too_large(run_, smp, size, limit, false));
  FEEDLINE_ASSIGN_OR_RETURN(AlignedBuffer bigger, run_.buffers.get(size));
  const std::uint64_t keep = std::min<std::uint64_t>(filled, op.dst.size());
  if (keep) std::memcpy(bigger.data(), op.dst.data(), static_cast<std::size_t>(keep));
  if (bigger.size() > s.reserved) {
    run_.budget.force(bigger.size() - s.reserved);
    s.reserved = bigger.size();
  }
  // Out of its batch slot (the direct path): collate copies it in after the batch's slots.
  if (s.laid_out()) s.spilled = true;
  run_.buffers.put(std::move(s.raw));  // a slot's sample has none
  s.raw = std::move(bigger);
  return s.raw.span();
}

void finish_unknown_size(RunState& run, const Sample& smp, std::uint64_t size, InFlightSample& s) {
  const std::uint64_t max = run.config.max_sample_bytes;
  if (max && size > max) {
    s.error = too_large(run, smp, size, max, true);
    return;
  }
  const std::uint64_t need = align_up(std::max<std::uint64_t>(size, 1), kPageAlign);
  if (s.reserved > need) {
    run.budget.release(s.reserved - need);
    s.reserved = need;
  }
}

}  // namespace feedline::loader::detail
