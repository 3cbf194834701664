#include "feedline/core/histogram.hpp"

#include <algorithm>
#include <cmath>

namespace feedline {

std::uint64_t Histogram::bucket_low(std::size_t b) noexcept {
  if (b < kExactLimit) return b;
  const std::size_t rel = b - kExactLimit;
  const int e = static_cast<int>(rel >> kSubBits) + kSubBits + 1;
  const std::uint64_t sub = rel & ((1u << kSubBits) - 1);
  return ((std::uint64_t{1} << kSubBits) | sub) << (e - kSubBits);
}

std::uint64_t Histogram::bucket_width(std::size_t b) noexcept {
  if (b < kExactLimit) return 1;
  const int e = static_cast<int>((b - kExactLimit) >> kSubBits) + kSubBits + 1;
  return std::uint64_t{1} << (e - kSubBits);
}

void Histogram::merge(const Histogram& other) noexcept {
  for (std::size_t i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  sum_ += other.sum_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
}

std::uint64_t Histogram::percentile(double q) const noexcept {
  if (count_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  // The rank-th smallest value (1-based), nearest-rank definition.
  auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(count_)));
  rank = std::clamp<std::uint64_t>(rank, 1, count_);
  std::uint64_t seen = 0;
  for (std::size_t b = 0; b < kBuckets; ++b) {
    seen += counts_[b];
    if (seen >= rank) {
      const std::uint64_t mid = bucket_low(b) + (bucket_width(b) - 1) / 2;
      return std::clamp(mid, min(), max_);
    }
  }
  return max_;
}

}  // namespace feedline
