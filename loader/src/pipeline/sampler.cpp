#include "feedline/loader/sampler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>

namespace feedline::loader {

Result<Sampler> Sampler::create(const SamplerConfig& c) {
  if (c.num_samples == 0) return fail(Errc::kNotFound, "the dataset has no samples");
  if (c.num_samples > 0xffffffffull) return fail(Errc::kInvalidArgument, "more than 2^32 samples");
  if (c.batch_size == 0) return fail(Errc::kInvalidArgument, "batch size must be at least 1");
  if (c.epochs == 0) return fail(Errc::kInvalidArgument, "epochs must be at least 1");
  if (c.world_size == 0 || c.rank >= c.world_size) {
    return fail(Errc::kInvalidArgument,
                fmt::format("rank {} is not below world size {}", c.rank, c.world_size));
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
  if (c.start_batch > s.total_batches()) {
    return fail(Errc::kInvalidArgument,
                fmt::format("cannot resume after batch {}: this rank's run has {} batches",
                            c.start_batch, s.total_batches()));
  }
  return s;
}

Sampler::Sampler(const SamplerConfig& c) : config_(c) {
  const std::uint64_t n = c.num_samples, w = c.world_size, bs = c.batch_size;
  const std::uint64_t few = n / w, many = few + (n % w ? 1 : 0);
  std::uint64_t mine = c.rank < n % w ? many : few;
  // Every rank must get as many batches per epoch, or a DDP job hangs in the collective the
  // rank with one batch more waits in. When the n % w ranks with a sample more would get a
  // batch more, every rank takes `few` (the epoch's last n % w samples in order go to no rank:
  // others each epoch when shuffled). See the header.
  auto batches = [&](std::uint64_t m) { return c.drop_last ? m / bs : (m + bs - 1) / bs; };
  if (w > 1 && batches(few) != batches(many)) mine = few;
  per_epoch_ = c.drop_last ? mine / bs * bs : mine;
}

std::uint64_t Sampler::batches_per_epoch() const noexcept {
  return (per_epoch_ + config_.batch_size - 1) / config_.batch_size;
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

void Sampler::load_epoch(std::uint32_t epoch) {
  order_.clear();
  if (config_.shuffle && config_.shard_shuffle > 0) {
    // Contiguous blocks per rank (sizes as striding gives them: the first n % w ranks one more).
    const std::vector<std::uint32_t> all = interleaved(epoch);
    const std::uint64_t w = config_.world_size, r = config_.rank, n = all.size();
    const std::uint64_t begin = r * (n / w) + std::min(r, n % w);
    order_.assign(all.begin() + static_cast<std::ptrdiff_t>(begin),
                  all.begin() + static_cast<std::ptrdiff_t>(begin + n / w + (r < n % w ? 1 : 0)));
  } else {
    std::vector<std::uint32_t> all(config_.num_samples);
    std::iota(all.begin(), all.end(), 0u);
    if (config_.shuffle) {
      // Seeded by (seed, epoch) only: every rank computes the same permutation.
      std::mt19937_64 rng(config_.seed * 0x9e3779b97f4a7c15ull + epoch);
      std::shuffle(all.begin(), all.end(), rng);
    }
    for (std::uint64_t i = config_.rank; i < all.size(); i += config_.world_size)
      order_.push_back(all[i]);
  }
  order_.resize(per_epoch_);
  pos_ = 0;
  epoch_ = epoch;
  loaded_ = true;
}

std::optional<SampleSlot> Sampler::next() {
  if (!loaded_) {
    const std::uint64_t bpe = batches_per_epoch();
    const auto epoch = static_cast<std::uint32_t>(config_.start_batch / bpe);
    if (epoch >= config_.epochs) return std::nullopt;  // resumed after the last batch
    load_epoch(epoch);
    pos_ = (config_.start_batch % bpe) * config_.batch_size;
  }
  if (pos_ == per_epoch_) {
    if (epoch_ + 1 >= config_.epochs) return std::nullopt;
    load_epoch(epoch_ + 1);
  }
  SampleSlot s;
  s.seq = seq_++;
  s.sample = order_[pos_];
  s.epoch = epoch_;
  const std::uint64_t b = pos_ / config_.batch_size;
  s.batch = epoch_ * batches_per_epoch() + b;
  s.slot = static_cast<std::uint32_t>(pos_ % config_.batch_size);
  s.batch_len = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(config_.batch_size, per_epoch_ - b * config_.batch_size));
  ++pos_;
  return s;
}

}  // namespace feedline::loader
