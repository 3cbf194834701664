// The sampler: which samples, in which order, in which batches.
//
// Per epoch: a permutation of all sample indices, seeded by (seed, epoch) so every rank computes
// the same one; rank r of w takes positions r, r+w, r+2w, ... (PyTorch DistributedSampler's
// striding, without padding: every sample of an epoch goes to at most one rank). The rank's list
// is cut into batches of batch_size; the last partial batch is kept or, with drop_last, dropped.
// Batches never span epochs. Every rank gets the same number of batches per epoch (a DDP job
// hangs when one rank has a batch more): where striding would give the first n % w ranks a
// batch more (their one sample more would start a batch), every rank delivers n / w samples,
// and the n % w samples at the end of the epoch's order go to none that epoch.
//
// Shard shuffle (shard_shuffle = K > 0; WebDataset's shard shuffle with tf.data's interleave):
// the shards' order is permuted per epoch, K shards are open at a time, and the order takes runs
// of ceil(batch_size / K) consecutive samples (storage order) from a random open shard, the next
// shard opening as one runs out. A batch then mixes about K shards, and each run's reads lie
// side by side in one shard (one coalesced GET over HTTP instead of one per sample). Rank r of
// w takes the r-th of w contiguous blocks of that order (striding would split the runs).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "feedline/core/error.hpp"

namespace feedline::loader {

struct SamplerConfig {
  std::uint64_t num_samples = 0;
  std::uint32_t batch_size = 1;
  std::uint32_t epochs = 1;
  bool shuffle = true;
  std::uint64_t seed = 0;
  std::uint32_t rank = 0;
  std::uint32_t world_size = 1;
  bool drop_last = false;
  std::uint32_t shard_shuffle = 0;  // K shards open at a time; 0 = shuffle samples (when shuffle)
  // Index of each shard's first sample (ascending, from 0): loader::shard_starts(dataset).
  // Empty: every sample a shard of its own.
  std::vector<std::uint32_t> shard_starts;
  // Resume: this rank's batches already delivered (by an earlier run with the same settings);
  // the run starts at the batch after them, in the epoch they reached, with the same order.
  // SampleSlot::batch and ::epoch count from the run's start as before; ::seq from 0.
  std::uint64_t start_batch = 0;
};

struct SampleSlot {
  std::uint64_t seq = 0;     // position in this rank's whole run (all epochs)
  std::uint32_t sample = 0;  // index into Dataset::samples
  std::uint32_t epoch = 0;
  std::uint64_t batch = 0;      // batch number in this rank's whole run
  std::uint32_t slot = 0;       // position in the batch
  std::uint32_t batch_len = 0;  // samples in this batch
};

class Sampler {
 public:
  static Result<Sampler> create(const SamplerConfig& config);

  // The next sample of the run, or nullopt at the end of the last epoch.
  std::optional<SampleSlot> next();

  std::uint64_t samples_per_epoch() const noexcept { return per_epoch_; }
  std::uint64_t batches_per_epoch() const noexcept;
  std::uint64_t total_samples() const noexcept { return per_epoch_ * config_.epochs; }
  std::uint64_t total_batches() const noexcept { return batches_per_epoch() * config_.epochs; }
  const SamplerConfig& config() const noexcept { return config_; }

 private:
  explicit Sampler(const SamplerConfig& c);
  void load_epoch(std::uint32_t epoch);
  std::vector<std::uint32_t> interleaved(std::uint32_t epoch) const;

  SamplerConfig config_;
  std::uint64_t per_epoch_ = 0;       // samples this rank delivers per epoch (after drop_last)
  std::vector<std::uint32_t> order_;  // this rank's samples for the current epoch
  std::uint32_t epoch_ = 0;
  std::uint64_t pos_ = 0;  // in order_
  std::uint64_t seq_ = 0;
  bool loaded_ = false;
};

}  // namespace feedline::loader
