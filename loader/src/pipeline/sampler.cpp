#include "feedline/loader/sampler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>

namespace feedline::loader {

namespace {

// Samples rank r of w is given out of m (see the header): as striding gives them, but when the
// m % w ranks with one more would get a batch more, every rank takes m / w (a DDP job hangs in
// the collective that the rank with a batch more waits in).
std::uint64_t share_of(std::uint64_t m, std::uint64_t w, std::uint64_t r, std::uint64_t bs,
                       bool drop_last) {
  const std::uint64_t few = m / w, many = few + (m % w ? 1 : 0);
  std::uint64_t mine = r < m % w ? many : few;
  auto batches = [&](std::uint64_t k) { return drop_last ? k / bs : (k + bs - 1) / bs; };
  if (w > 1 && batches(few) != batches(many)) mine = few;
  return drop_last ? mine / bs * bs : mine;
}

// Calls f(j, position) for the first `count` positions of an order of m that rank r of w is
// given: its contiguous block (shard shuffle: striding would split the runs), or every w-th.
template <typename F>
void for_each_position(std::uint64_t m, std::uint64_t w, std::uint64_t r, std::uint64_t count,
                       bool contiguous, F&& f) {
  const std::uint64_t begin = contiguous ? r * (m / w) + std::min(r, m % w) : r;
  const std::uint64_t step = contiguous ? 1 : w;
  for (std::uint64_t j = 0; j < count; ++j) f(j, begin + j * step);
}

// Bounds on a resume point (it comes from a state file): each level costs a pass over the epoch.
constexpr std::size_t kMaxResumeRuns = 64;
constexpr std::uint32_t kMaxWorldSize = 1u << 20;

}  // namespace

Result<Sampler> Sampler::create(const SamplerConfig& c) {
  if (c.num_samples == 0) return fail(Errc::kNotFound, "the dataset has no samples");
  if (c.num_samples > 0xffffffffull) return fail(Errc::kInvalidArgument, "more than 2^32 samples");
  if (c.batch_size == 0) return fail(Errc::kInvalidArgument, "batch size must be at least 1");
  if (c.epochs == 0) return fail(Errc::kInvalidArgument, "epochs must be at least 1");
  if (c.world_size == 0 || c.world_size > kMaxWorldSize || c.rank >= c.world_size) {
    return fail(Errc::kInvalidArgument,
                fmt::format("rank {} is not below world size {} (at most {})", c.rank, c.world_size,
                            kMaxWorldSize));
  }
  if (!c.shard_starts.empty()) {
    bool ok = c.shard_starts.front() == 0 && c.shard_starts.back() < c.num_samples;
    for (std::size_t i = 1; ok && i < c.shard_starts.size(); ++i)
      ok = c.shard_starts[i - 1] < c.shard_starts[i];
    if (!ok)
      return fail(Errc::kInvalidArgument,
                  "shard starts must rise from 0 and lie below the sample count");
  }
  Sampler s(c);
  if (s.per_epoch_ == 0) {
    return fail(
        Errc::kInvalidArgument,
        fmt::format("rank {} of {} gets no samples per epoch from {} samples with batch size {}{}",
                    c.rank, c.world_size, c.num_samples, c.batch_size,
                    c.drop_last ? " and drop-last" : ""));
  }
  // The resume point: checked level by level with counts only (the lists come epoch by epoch).
  const ResumePoint& rp = c.resume;
  auto bad_resume = [&](std::string why) {
    return fail(Errc::kInvalidArgument,
                fmt::format("cannot resume in epoch {}: {}", rp.epoch, why));
  };
  if (rp.epoch > c.epochs || (rp.epoch == c.epochs && !rp.progress.empty()))
    return bad_resume(fmt::format("the run has {} epochs", c.epochs));
  if (rp.progress.size() > kMaxResumeRuns)
    return bad_resume(fmt::format("{} earlier runs in one epoch, at most {}", rp.progress.size(),
                                  kMaxResumeRuns));
  const std::uint64_t bs = c.batch_size;
  std::uint64_t m = c.num_samples;  // the samples the next run's ranks share
  s.first_samples_ = s.per_epoch_;
  for (std::size_t i = 0; i < rp.progress.size(); ++i) {
    const EpochProgress& level = rp.progress[i];
    if (level.world_size == 0 || level.world_size > kMaxWorldSize)
      return bad_resume(fmt::format("an earlier run's world size is {}", level.world_size));
    const std::uint64_t w = level.world_size;
    const std::uint64_t had = s.batches_of(share_of(m, w, 0, bs, c.drop_last));
    if (level.batches > had)
      return bad_resume(fmt::format("run {} delivered {} batches per rank, of the {} it had", i + 1,
                                    level.batches, had));
    const std::uint64_t done = level.batches * bs;
    if (i + 1 == rp.progress.size() && w == c.world_size) {
      const std::uint64_t mine = share_of(m, w, c.rank, bs, c.drop_last);
      s.first_samples_ = mine - std::min(mine, done);
      s.continued_ = true;
      break;
    }
    std::uint64_t left = 0;
    for (std::uint64_t r = 0; r < w; ++r) {
      const std::uint64_t share = share_of(m, w, r, bs, c.drop_last);
      left += share - std::min(share, done);
    }
    m = left;
    s.first_samples_ = m ? share_of(m, c.world_size, c.rank, bs, c.drop_last) : 0;
  }
  if (rp.epoch == c.epochs) s.first_samples_ = 0;
  return s;
}

Sampler::Sampler(const SamplerConfig& c) : config_(c) {
  per_epoch_ = share_of(c.num_samples, c.world_size, c.rank, c.batch_size, c.drop_last);
}

std::uint64_t Sampler::batches_of(std::uint64_t samples) const noexcept {
  return (samples + config_.batch_size - 1) / config_.batch_size;
}

std::uint64_t Sampler::batches_per_epoch() const noexcept { return batches_of(per_epoch_); }

std::uint64_t Sampler::left_out_per_epoch() const noexcept {
  const std::uint64_t m = config_.num_samples, w = config_.world_size;
  if (w <= 1 || m % w == 0) return 0;
  // Rank 0 is among the first m % w ranks: its share is the larger one unless the rule cut it.
  return share_of(m, w, 0, config_.batch_size, false) == m / w ? m % w : 0;
}

std::uint64_t Sampler::total_samples() const noexcept {
  const std::uint32_t e = config_.resume.epoch;
  if (e >= config_.epochs) return 0;
  return first_samples_ + per_epoch_ * (config_.epochs - e - 1);
}

std::uint64_t Sampler::total_batches() const noexcept {
  const std::uint32_t e = config_.resume.epoch;
  if (e >= config_.epochs) return 0;
  return batches_of(first_samples_) + batches_per_epoch() * (config_.epochs - e - 1);
}

ResumePoint Sampler::resume_point_after(std::uint64_t batches) const {
  const ResumePoint& from = config_.resume;
  const std::uint32_t epochs = config_.epochs;
  if (from.epoch >= epochs) return ResumePoint{epochs, {}};
  const std::uint64_t first = batches_of(first_samples_);
  if (batches < first) {
    ResumePoint p = from;
    if (batches == 0) return p;
    if (continued_) {
      p.progress.back().batches += batches;
    } else {
      p.progress.push_back(EpochProgress{config_.world_size, batches});
    }
    return p;
  }
  const std::uint64_t rest = batches - first, bpe = batches_per_epoch();
  const std::uint64_t epoch = from.epoch + 1 + rest / bpe;
  if (epoch >= epochs) return ResumePoint{epochs, {}};
  ResumePoint p{static_cast<std::uint32_t>(epoch), {}};
  if (rest % bpe) p.progress.push_back(EpochProgress{config_.world_size, rest % bpe});
  return p;
}

// The epoch's shard-shuffled order of all samples (see the header).
std::vector<std::uint32_t> Sampler::interleaved(std::uint32_t epoch) const {
  const auto n = static_cast<std::uint32_t>(config_.num_samples);
  std::vector<std::uint32_t> starts = config_.shard_starts;
  if (starts.empty()) {
    starts.resize(n);
    std::iota(starts.begin(), starts.end(), 0u);
  }
  const auto shards = static_cast<std::uint32_t>(starts.size());
  auto end_of = [&](std::uint32_t shard) { return shard + 1 < shards ? starts[shard + 1] : n; };
  std::mt19937_64 rng(config_.seed * 0x9e3779b97f4a7c15ull + epoch);
  std::vector<std::uint32_t> shard_order(shards);
  std::iota(shard_order.begin(), shard_order.end(), 0u);
  std::shuffle(shard_order.begin(), shard_order.end(), rng);
  const std::uint32_t run =
      (config_.batch_size + config_.shard_shuffle - 1) / config_.shard_shuffle;
  struct Open {
    std::uint32_t next, end;
  };
  std::vector<Open> open;
  std::uint32_t opened = 0;
  auto refill = [&] {
    while (open.size() < config_.shard_shuffle && opened < shards) {
      const std::uint32_t shard = shard_order[opened++];
      open.push_back(Open{starts[shard], end_of(shard)});
    }
  };
  std::vector<std::uint32_t> all;
  all.reserve(n);
  refill();
  while (!open.empty()) {
    const std::size_t k = std::uniform_int_distribution<std::size_t>(0, open.size() - 1)(rng);
    Open& o = open[k];
    for (std::uint32_t i = 0; i < run && o.next < o.end; ++i) all.push_back(o.next++);
    if (o.next == o.end) {
      open[k] = open.back();
      open.pop_back();
      refill();
    }
  }
  return all;
}

// Every sample in the epoch's order (seeded by (seed, epoch) only: every rank computes the same).
std::vector<std::uint32_t> Sampler::epoch_order(std::uint32_t epoch) const {
  if (config_.shuffle && config_.shard_shuffle > 0) return interleaved(epoch);
  std::vector<std::uint32_t> all(config_.num_samples);
  std::iota(all.begin(), all.end(), 0u);
  if (config_.shuffle) {
    std::mt19937_64 rng(config_.seed * 0x9e3779b97f4a7c15ull + epoch);
    std::shuffle(all.begin(), all.end(), rng);
  }
  return all;
}

std::vector<std::uint32_t> Sampler::epoch_list(std::uint32_t epoch) const {
  std::vector<std::uint32_t> order = epoch_order(epoch);
  const bool contiguous = config_.shuffle && config_.shard_shuffle > 0;
  const std::uint64_t bs = config_.batch_size;
  const bool drop = config_.drop_last;
  const std::uint64_t w = config_.world_size, rank = config_.rank;
  std::vector<std::uint32_t> mine;
  if (epoch == config_.resume.epoch) {
    const auto& progress = config_.resume.progress;
    for (std::size_t i = 0; i < progress.size(); ++i) {
      const std::uint64_t m = order.size(), lw = progress[i].world_size;
      const std::uint64_t done = progress[i].batches * bs;
      if (continued_ && i + 1 == progress.size()) {
        // Same world size as the run that stopped: this rank's own list goes on.
        for_each_position(m, w, rank, share_of(m, w, rank, bs, drop), contiguous,
                          [&](std::uint64_t j, std::uint64_t p) {
                            if (j >= done) mine.push_back(order[p]);
                          });
        return mine;
      }
      // What that run's ranks were given and had not delivered, in the epoch's order.
      std::vector<bool> left(m, false);
      for (std::uint64_t r = 0; r < lw; ++r) {
        for_each_position(m, lw, r, share_of(m, lw, r, bs, drop), contiguous,
                          [&](std::uint64_t j, std::uint64_t p) { left[p] = j >= done; });
      }
      std::vector<std::uint32_t> rest;
      for (std::uint64_t p = 0; p < m; ++p) {
        if (left[p]) rest.push_back(order[p]);
      }
      order = std::move(rest);
    }
  }
  const std::uint64_t m = order.size();
  if (m == 0) return mine;
  for_each_position(m, w, rank, share_of(m, w, rank, bs, drop), contiguous,
                    [&](std::uint64_t, std::uint64_t p) { mine.push_back(order[p]); });
  return mine;
}

void Sampler::load_epoch(std::uint32_t epoch) {
  order_ = epoch_list(epoch);
  // A resumed epoch's rest is numbered as that epoch's last batches.
  const std::uint64_t bpe = batches_per_epoch();
  batch0_ = std::uint64_t{epoch} * bpe + (bpe - std::min(bpe, batches_of(order_.size())));
  pos_ = 0;
  epoch_ = epoch;
  loaded_ = true;
}

std::optional<SampleSlot> Sampler::next() {
  if (!loaded_) {
    if (config_.resume.epoch >= config_.epochs) return std::nullopt;  // the run was over
    load_epoch(config_.resume.epoch);
  }
  while (pos_ == order_.size()) {  // a resumed epoch may have nothing left for this rank
    if (epoch_ + 1 >= config_.epochs) return std::nullopt;
    load_epoch(epoch_ + 1);
  }
  SampleSlot s;
  s.seq = seq_++;
  s.sample = order_[pos_];
  s.epoch = epoch_;
  const std::uint64_t b = pos_ / config_.batch_size;
  s.batch = batch0_ + b;
  s.slot = static_cast<std::uint32_t>(pos_ % config_.batch_size);
  s.batch_len = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(config_.batch_size, order_.size() - b * config_.batch_size));
  ++pos_;
  return s;
}

}  // namespace feedline::loader
