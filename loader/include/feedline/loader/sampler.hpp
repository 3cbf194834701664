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
//
// Resume (SamplerConfig::resume), also on another number of ranks (an elastic job that lost a
// node). A ResumePoint names the epoch to resume in and what earlier runs delivered of it: for
// each run, oldest first, its world size and how many batches each of its ranks had delivered
// (DDP ranks step together, so that count is the same on every rank, and any rank's state serves
// every rank). Each run's ranks shared what the run before left: the first run split the epoch's
// order as above; a later one split the samples its predecessor's ranks had been given and not
// yet delivered (in the epoch's order), striding or in blocks as above, by the same rule of equal
// batches. Resumed with the last run's world size, rank r goes on with its own list; with another,
// the rest is split again over the new ranks. Every sample of the epoch then goes out once, but
// for the at most w - 1 that a split with a batch more for some ranks leaves to no rank. Epochs
// after the resumed one are whole, as without a resume.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "feedline/core/error.hpp"

namespace feedline::loader {

// What one earlier run delivered of an epoch (see the header).
struct EpochProgress {
  std::uint32_t world_size = 1;
  std::uint64_t batches = 0;  // delivered by each of its ranks, of that epoch
  bool operator==(const EpochProgress&) const = default;
};

// Where a run resumes: in `epoch`, after what `progress` says earlier runs delivered of it (oldest
// first; empty: from the epoch's start). epoch == epochs: the run was over.
struct ResumePoint {
  std::uint32_t epoch = 0;
  std::vector<EpochProgress> progress;
  bool operator==(const ResumePoint&) const = default;
  bool at_start() const noexcept { return epoch == 0 && progress.empty(); }
};

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
  // Resume where earlier runs with the same settings (but maybe another world size) stopped: the
  // run delivers the rest of resume.epoch, then the later epochs. SampleSlot::epoch counts from
  // the job's start; ::seq from 0.
  ResumePoint resume;
};

struct SampleSlot {
  std::uint64_t seq = 0;     // position in this rank's whole run (all epochs)
  std::uint32_t sample = 0;  // index into Dataset::samples
  std::uint32_t epoch = 0;
  // Batch number in this rank's whole job: epoch * batches_per_epoch() + its place in the epoch
  // (a resumed epoch's batches are numbered as that epoch's last ones).
  std::uint64_t batch = 0;
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
  // The samples of each whole epoch that no rank gets: where one sample more on the first
  // n % w ranks would start a batch of its own, every rank takes n / w (a DDP job hangs when
  // one rank has a batch more), and the last n % w of the epoch's order go to no rank. 0 for
  // one rank, or where the shares make as many batches (drop_last's own drops not counted).
  std::uint64_t left_out_per_epoch() const noexcept;
  // What this run delivers, from its (resume) start to its end.
  std::uint64_t total_samples() const noexcept;
  std::uint64_t total_batches() const noexcept;
  const SamplerConfig& config() const noexcept { return config_; }
  // Where the job stands once this run delivered its first `batches` batches: the resume point
  // of a run that goes on from there (any rank's, with any world size).
  ResumePoint resume_point_after(std::uint64_t batches) const;

 private:
  explicit Sampler(const SamplerConfig& c);
  // The samples this rank delivers in `epoch`: its share of the whole epoch, or of the rest of
  // the resumed one.
  std::vector<std::uint32_t> epoch_list(std::uint32_t epoch) const;
  std::vector<std::uint32_t> epoch_order(std::uint32_t epoch) const;
  std::vector<std::uint32_t> interleaved(std::uint32_t epoch) const;
  std::uint64_t batches_of(std::uint64_t samples) const noexcept;
  void load_epoch(std::uint32_t epoch);

  SamplerConfig config_;
  std::uint64_t per_epoch_ = 0;      // samples this rank delivers per whole epoch (after drop_last)
  std::uint64_t first_samples_ = 0;  // ... in the run's first epoch (the resumed one's rest)
  bool continued_ = false;  // resumed with the last run's world size: this rank's own list goes on
  std::vector<std::uint32_t> order_;  // this rank's samples for the current epoch
  std::uint32_t epoch_ = 0;
  std::uint64_t pos_ = 0;     // in order_
  std::uint64_t batch0_ = 0;  // the current epoch's first batch number
  std::uint64_t seq_ = 0;
  bool loaded_ = false;
};

}  // namespace feedline::loader
