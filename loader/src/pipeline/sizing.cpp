// Pool and window sizing (sizing.hpp): each sample's footprint (size_samples), the batch buffer's
// size for the data path (batch_capacity), then size_pool fits the buffers to the budget.
#include "sizing.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "feedline/core/units.hpp"
#include "stage_work.hpp"
#include "unknown_size.hpp"

namespace feedline::loader::detail {
namespace {

// Bytes of freed sample buffers kept for reuse: an eighth of the budget, at most 64 MiB.
std::uint64_t recycle_bytes(std::uint64_t budget) {
  return std::min<std::uint64_t>(budget / 8, 64ull << 20);
}

// Samples storage may read ahead of collate over a network, in units of io_depth. With only
// prefetch + 1 + the caller's batches ahead, small batches starve the reads: batch 32 at depth 16
// kept 7 of 16 requests in flight against a web server (one slow response holds the window while
// the next batches wait). Local storage keeps just those: its reads come back in microseconds, and
// more buffers only cost start-up time (they are locked, so faulted in, at once).
constexpr std::uint64_t kWindowDepths = 16;
constexpr std::size_t kMaxBatchBuffers = 64;
// Two batch buffers run a pipeline: collate fills one while the consumer holds the other.
constexpr std::size_t kFewestBatchBuffers = 2;

// Batch buffers a run needs at least: the prefetched ones, collate's, and the caller's.
std::size_t least_batch_buffers(const LoaderConfig& c) {
  return std::size_t{c.prefetch_batches} + 1 + std::max(1u, c.caller_batches);
}

// Batch buffers wanted: least_batch_buffers() at least; over a network, more when batches are
// small, so that the window (every buffer's batch) holds kWindowDepths x io_depth samples.
std::size_t wanted_batch_buffers(const LoaderConfig& c, bool networked) {
  const std::size_t floor = least_batch_buffers(c);
  if (!networked) return floor;
  const std::uint64_t batch = std::max(1u, c.sampler.batch_size);
  const std::uint64_t for_window = (kWindowDepths * c.io_depth + batch - 1) / batch + 1;
  return std::max<std::size_t>(floor, std::min<std::uint64_t>(for_window, kMaxBatchBuffers));
}

}  // namespace

std::uint64_t footprint(const Dataset& dataset, const DecodePlan& plan, const Sample& s,
                        DataPath path, std::uint64_t guess) {
  if (size_unknown(s)) {
    // What its read allocates first (unknown_size.hpp); a larger object is charged when its
    // buffer grows, and what the object did not need is given back once it is read. A file to
    // decode (zstd, an image): its decoded size, estimated from the guess.
    std::uint64_t bytes = guess;
    for (std::uint32_t i = 0; i < s.member_count; ++i) {
      if (plan.decodes(s.first_member + i) && path != DataPath::kDecodeInPlace)
        bytes += guess * kDecodeEstimate;
    }
    return bytes;
  }
  std::uint64_t bytes = align_up(s.length, kPageAlign);
  if (path == DataPath::kDecodeInPlace)
    return bytes;  // decoded bytes go into the batch buffer (the pool's share)
  for (std::uint32_t i = 0; i < s.member_count; ++i) {
    const std::size_t index = s.first_member + i;
    if (plan.decodes(index)) bytes += decoded_estimate(plan, index, dataset.members[index]);
  }
  return bytes;
}

std::uint64_t oversized(const Dataset& dataset, const DecodePlan& plan, const Sample& s,
                        const LoaderConfig& config) {
  const std::uint64_t max = config.max_sample_bytes;
  if (max == 0 || size_unknown(s)) return 0;  // unknown: checked once read (unknown_size.hpp)
  if (s.length > max) return s.length;
  std::uint64_t decoded = 0;
  for (std::uint32_t i = 0; i < s.member_count; ++i) {
    const std::size_t index = s.first_member + i;
    decoded += plan.known_size(index, dataset.members[index]).value_or(0);
  }
  return decoded > max ? decoded : 0;
}

Error larger_than_max(const Dataset& dataset, std::size_t index, std::uint64_t size,
                      const LoaderConfig& config) {
  const Sample& s = dataset.samples[index];
  return Error(Errc::kInvalidArgument,
               fmt::format("sample '{}' has {} bytes, more than the largest sample "
                           "allowed ({} bytes)",
                           s.key, size, config.max_sample_bytes))
      .with_object(dataset.objects[s.object].key)
      .with_offset(s.offset)
      .with_hint("raise {max_sample_size}, or {on_error=skip} to leave such samples out");
}

namespace {

Error needs_more_than(const Dataset& dataset, std::size_t index, std::uint64_t need,
                      std::uint64_t room) {
  const Sample& s = dataset.samples[index];
  return Error(Errc::kInvalidArgument,
               fmt::format("sample '{}' needs {} bytes, more than the {} bytes of memory budget it "
                           "can have (the rest holds batch and recycled buffers)",
                           s.key, need, room))
      .with_object(dataset.objects[s.object].key)
      .with_offset(s.offset)
      .with_hint("raise {memory_budget}, or {on_error=skip} to leave such samples out");
}

// What the samples' footprints add up to, over those the run can hold.
struct Footprints {
  std::uint64_t estimated = 0;  // for the batch buffers: a sample of unknown size as a small one
  std::uint64_t counted = 0;
  std::uint64_t largest = 0;
  std::size_t largest_index = 0;
};

// Each sample's footprint into z.footprints; a sample over max_sample_bytes, or over sample_cap,
// is an error with on_error = fail, else skipped when its turn comes.
Result<Footprints> size_samples(const Dataset& dataset, const LoaderConfig& config,
                                const DataPathPlan& plan, std::uint64_t sample_cap, PoolSizing& z) {
  Footprints t;
  z.footprints.reserve(dataset.samples.size());
  const std::uint64_t guess = size_guess(config);
  for (std::size_t i = 0; i < dataset.samples.size(); ++i) {
    if (const std::uint64_t size = oversized(dataset, plan.decode, dataset.samples[i], config)) {
      if (config.on_error == OnError::kFail) return fail(larger_than_max(dataset, i, size, config));
      z.footprints.push_back(kOversized);  // skipped when its turn comes
      continue;
    }
    const std::uint64_t f = footprint(dataset, plan.decode, dataset.samples[i], plan.path, guess);
    z.footprints.push_back(f);
    if (f > sample_cap) {
      if (config.on_error == OnError::kFail)
        return fail(needs_more_than(dataset, i, f, sample_cap));
      continue;  // skipped when its turn comes
    }
    // A sample of unknown size holds its guess while it is read, but batches hold what it turns
    // out to be: sized for a typical small sample, grown on demand.
    t.estimated += size_unknown(dataset.samples[i]) ? std::min(f, kUnknownSizeBatchEstimate) : f;
    ++t.counted;
    if (f > t.largest) {
      t.largest = f;
      t.largest_index = i;
    }
  }
  return t;
}

// The bytes of each host batch buffer: sized from the average decoded sample (avg), grown on
// demand; where samples have slots laid out per batch, for the worst batch when `buffers` of
// those fit in half the budget with the recycled ones, so that they never grow.
std::uint64_t batch_capacity(const Dataset& dataset, const DataPathPlan& plan, std::uint64_t batch,
                             std::uint64_t avg, std::size_t buffers, std::uint64_t recycle,
                             std::uint64_t budget) {
  const DataPath path = plan.path;
  std::uint64_t batch_cap = align_up(batch * (avg + 2 * kMemberAlign) + 65536, kPageAlign);
  if (path == DataPath::kDecodeInPlace) {
    // Decode in place: slots of decoded size, laid out per batch by the storage stage; like the
    // direct path's, buffers are sized for the worst batch when the budget allows.
    std::uint64_t widest = 0;
    std::uint64_t decoded_total = 0;
    for (const Sample& smp : dataset.samples) {
      const std::uint64_t b = decoded_slot_bytes(dataset, plan.decode, smp) + kMemberAlign;
      widest = std::max(widest, b);
      decoded_total += b;
    }
    const std::uint64_t worst = align_up(batch * widest, kPageAlign);
    const std::uint64_t typical = align_up(
        batch * (decoded_total / std::max<std::size_t>(1, dataset.samples.size())), kPageAlign);
    batch_cap = worst * buffers + recycle < budget / 2 ? worst : std::max(typical, kPageAlign);
  }
  if (reads_into_slot(path)) {
    // Direct path: every sample has a 4 KiB-aligned slot (O_DIRECT reads land in place). Size the
    // buffers for the worst batch when the budget allows, so they never grow (and stay registered
    // with the I/O queue); otherwise for the average, grown per batch where needed.
    // (A sample of unknown size counts as its first slot: slots then take the size learned from
    // the objects read, and buffers grow for them.)
    const std::uint64_t widest = std::max(
        dataset.max_sample_bytes, has_unknown_sizes(dataset) ? kUnknownSizeBatchEstimate : 0);
    const std::uint64_t worst = batch * align_up(widest, kPageAlign);
    const std::uint64_t typical = align_up(batch * (avg + kPageAlign), kPageAlign);
    batch_cap = worst * buffers + recycle < budget / 2 ? std::max(worst, kPageAlign) : typical;
  }
  // Reads into GPU memory: the host buffers hold nothing (the slots are in the device twins).
  if (reads_into_device(path)) batch_cap = kPageAlign;
  return batch_cap;
}

}  // namespace

Result<PoolSizing> size_pool(const Dataset& dataset, const LoaderConfig& config,
                             const DataPathPlan& plan, bool networked,
                             std::uint64_t samples_per_epoch) {
  PoolSizing z;
  const std::uint64_t budget = config.memory_budget;
  // No batch is larger than what one epoch of this rank holds (a batch size above the dataset
  // must not size buffers for samples that do not exist).
  z.batch_samples = std::max<std::uint64_t>(
      1, std::min<std::uint64_t>(config.sampler.batch_size, samples_per_epoch));
  z.recycle = recycle_bytes(budget);
  const std::size_t min_buffers = least_batch_buffers(config);
  std::size_t buffers = wanted_batch_buffers(config, networked);
  // A sample may use at most half of what is left after the recycled buffers: the other half
  // holds batches.
  const std::uint64_t sample_cap = (budget - std::min(budget, z.recycle)) / 2;
  FEEDLINE_ASSIGN_OR_RETURN(const Footprints t, size_samples(dataset, config, plan, sample_cap, z));
  const std::uint64_t largest = t.largest;
  const std::uint64_t batch = z.batch_samples;
  const std::uint64_t avg = t.estimated / std::max<std::uint64_t>(1, t.counted);
  const std::uint64_t batch_cap =
      batch_capacity(dataset, plan, batch, avg, buffers, z.recycle, budget);
  // Reads into GPU memory: the slots are in device twins sized for the worst batch (GPU memory,
  // outside the host budget), so they never grow and stay registered with cuFile.
  z.device_cap = std::max(batch * align_up(dataset.max_sample_bytes, kPageAlign), kPageAlign);
  // Buffers beyond the least are there for a deeper read window: only as many as fit in half
  // the budget (the other half is for samples in flight).
  while (buffers > min_buffers && batch_cap * buffers + z.recycle > budget / 2) --buffers;
  // Then the pool fits the budget with room for the largest sample in flight, shrinking below
  // the least (down to two buffers) where it must.
  auto fits = [&](std::size_t n) {
    const std::uint64_t pool = batch_cap * n + z.recycle;
    return pool < budget && largest <= budget - pool;
  };
  const std::size_t asked = buffers;
  while (buffers > kFewestBatchBuffers && !fits(buffers)) --buffers;
  z.pool_bytes = batch_cap * buffers + z.recycle;
  if (z.pool_bytes >= budget) {
    return fail(
        Error(Errc::kInvalidArgument,
              fmt::format("the memory budget of {} bytes cannot hold {} batch buffers of {} bytes "
                          "(batch size {} x ~{} bytes per sample) and {} bytes of recycled buffers",
                          budget, buffers, batch_cap, batch, avg, z.recycle))
            .with_hint("raise {memory_budget}, or lower {batch_size}"));
  }
  z.sample_limit = budget - z.pool_bytes;
  z.decode_limit =
      config.max_sample_bytes ? std::min(z.sample_limit, config.max_sample_bytes) : z.sample_limit;
  if (largest > z.sample_limit && config.on_error == OnError::kFail) {
    return fail(needs_more_than(dataset, t.largest_index, largest, z.sample_limit));
  }
  if (buffers < asked) {
    const std::uint64_t enough = batch_cap * asked + z.recycle + largest;
    z.fitted.push_back(
        fmt::format("memory_budget {} holds {} batch buffers of {}, not the {} asked for "
                    "(prefetch_batches {} + 1 + caller_batches {}): "
                    "batches are prefetched {} deep and storage reads less far ahead; about {} "
                    "would hold them all",
                    format_bytes(static_cast<double>(budget)), buffers,
                    format_bytes(static_cast<double>(batch_cap)), asked, config.prefetch_batches,
                    std::max(1u, config.caller_batches), buffers - kFewestBatchBuffers,
                    format_bytes(static_cast<double>(enough))));
  }
  z.buffers = buffers;
  z.batch_cap = batch_cap;
  // At least twice the IO depth, so the window never caps reads in flight below io_depth.
  z.window = std::max<std::uint64_t>(std::uint64_t{buffers} * batch, 2ull * config.io_depth);
  return z;
}

}  // namespace feedline::loader::detail
