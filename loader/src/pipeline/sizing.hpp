// How big the pipeline's pool and read-ahead window are: a pure function of the dataset, the
// config and the data path, decided once in start().
//
// The memory budget holds: the batch pool (batch buffers), the recycled sample buffers (an
// eighth of the budget, at most 64 MiB) and the samples in flight (each sample's footprint is
// reserved at admission: its stored bytes plus, for zstd members, its decoded size or an
// estimate). Buffers beyond prefetch + 1 + caller_batches (a network's deeper window) fit in half
// the budget. When even those leave no room for the largest sample in flight, the pool shrinks to
// fit, down to two batch buffers (one filling, one with the consumer: the pipeline still runs,
// prefetching less), and `fitted` says so; only a budget that cannot hold two batches and the
// largest sample is an error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "feedline/core/error.hpp"
#include "feedline/loader/dataset.hpp"
#include "feedline/loader/loader.hpp"

namespace feedline::loader::detail {

struct PoolSizing {
  std::uint64_t batch_samples = 1;  // the largest batch: batch_size, at most one epoch of this rank
  std::size_t buffers = 0;          // batch buffers in the pool
  std::uint64_t batch_cap = 0;      // bytes of each host batch buffer (grown on demand)
  std::uint64_t device_cap = 0;     // bytes of each device twin (reads into GPU memory)
  std::uint64_t recycle = 0;        // bytes of freed sample buffers kept for reuse
  std::uint64_t pool_bytes = 0;     // batch_cap x buffers + recycle, charged to the budget
  std::uint64_t sample_limit = 0;   // a sample's footprint may be at most this
  std::uint64_t decode_limit = 0;   // a sample's members may declare at most this, decoded
  std::uint64_t window = 0;         // samples storage may read ahead of collate
  // Per sample: bytes reserved at admission; kOversized or > sample_limit: skipped when its turn
  // comes (only with on_error = kSkip: otherwise sizing failed).
  std::vector<std::uint64_t> footprints;
  std::vector<std::string> fitted;  // what the budget made smaller than asked (MemoryReport)
};

inline constexpr std::uint64_t kOversized = ~std::uint64_t{0};

// The largest batch first: min(batch_size, samples_per_epoch). networked: the backend's
// reads take milliseconds (a deeper window). kInvalidArgument when the budget cannot hold two
// batches and the largest sample, or a sample is too large (with on_error = kFail).
Result<PoolSizing> size_pool(const Dataset& dataset, const LoaderConfig& config,
                             const DataPathPlan& plan, bool networked,
                             std::uint64_t samples_per_epoch);

// The footprint of sample s on this path (its stored bytes, plus the decoded bytes of members
// to decode unless decode writes into the batch buffer); for a sample of unknown size, `guess`
// (size_guess() of unknown_size.hpp) stands for its stored bytes.
std::uint64_t footprint(const Dataset& dataset, const DecodePlan& plan, const Sample& s,
                        DataPath path, std::uint64_t guess);

// The storage threads a run of config takes on this backend and path (LoaderConfig::
// storage_threads, or the automatic choice where it is 0): pipeline.cpp.
unsigned storage_threads_for(const LoaderConfig& config, const storage::Backend& backend,
                             const Dataset& dataset, DataPath path);

// With config.max_sample_bytes: the size by which s is too large (stored, or decoded as the
// index says), else 0; and the error for it.
std::uint64_t oversized(const Dataset& dataset, const DecodePlan& plan, const Sample& s,
                        const LoaderConfig& config);
Error larger_than_max(const Dataset& dataset, std::size_t index, std::uint64_t size,
                      const LoaderConfig& config);

}  // namespace feedline::loader::detail
