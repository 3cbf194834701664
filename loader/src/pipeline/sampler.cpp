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
  Sampler s(c);
  if (s.per_epoch_ == 0) {
    return fail(Errc::kInvalidArgument,
                fmt::format("rank {} of {} gets no samples per epoch from {} samples with batch size {}{}",
                            c.rank, c.world_size, c.num_samples, c.batch_size,
                            c.drop_last ? " and drop-last" : ""));
  }
  return s;
}

Sampler::Sampler(const SamplerConfig& c) : config_(c) {
  const std::uint64_t mine =
      c.num_samples / c.world_size + (c.rank < c.num_samples % c.world_size ? 1 : 0);
  per_epoch_ = c.drop_last ? mine / c.batch_size * c.batch_size : mine;
}

std::uint64_t Sampler::batches_per_epoch() const noexcept {
  return (per_epoch_ + config_.batch_size - 1) / config_.batch_size;
}

void Sampler::load_epoch(std::uint32_t epoch) {
  std::vector<std::uint32_t> all(config_.num_samples);
  std::iota(all.begin(), all.end(), 0u);
  if (config_.shuffle) {
    // Seeded by (seed, epoch) only: every rank computes the same permutation.
    std::mt19937_64 rng(config_.seed * 0x9e3779b97f4a7c15ull + epoch);
    std::shuffle(all.begin(), all.end(), rng);
  }
  order_.clear();
  for (std::uint64_t i = config_.rank; i < all.size(); i += config_.world_size) order_.push_back(all[i]);
  order_.resize(per_epoch_);
  pos_ = 0;
  epoch_ = epoch;
  loaded_ = true;
}

std::optional<SampleSlot> Sampler::next() {
  if (!loaded_) load_epoch(0);
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
