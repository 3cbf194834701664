// A log-linear latency histogram (HdrHistogram's layout, fixed precision).
//
// Values below 128 get exact buckets. Above, every power of two [2^e, 2^(e+1)) is split into 64
// equal sub-buckets, so a bucket is at most 1/64 of its lower bound wide. A percentile reports the
// midpoint of its bucket, which is within 1/128 (0.8%) of any value in it: "<= 1% relative error
// on any percentile". Min, max, count and sum are exact.
//
// Not thread-safe: keep one per thread (or per queue) and merge() them for the report; merging is
// exact because every histogram has the same buckets. About 30 KiB each.
#pragma once

#include <array>
#include <cstdint>

namespace feedline {

class Histogram {
 public:
  static constexpr int kSubBits = 6;  // 64 sub-buckets per power of two
  static constexpr std::uint64_t kExactLimit = 1u << (kSubBits + 1);  // 128
  static constexpr std::size_t kBuckets =
      kExactLimit + (64 - (kSubBits + 1)) * (std::size_t{1} << kSubBits);

  void record(std::uint64_t value) noexcept {
    ++counts_[bucket_of(value)];
    ++count_;
    sum_ += static_cast<double>(value);
    if (value < min_) min_ = value;
    if (value > max_) max_ = value;
  }
  void merge(const Histogram& other) noexcept;
  void reset() noexcept { *this = Histogram(); }

  std::uint64_t count() const noexcept { return count_; }
  std::uint64_t min() const noexcept { return count_ ? min_ : 0; }
  std::uint64_t max() const noexcept { return max_; }
  double mean() const noexcept { return count_ ? sum_ / static_cast<double>(count_) : 0.0; }
  // q in [0, 1]; 0 when empty. percentile(0.5) is the median, percentile(0.999) p99.9.
  std::uint64_t percentile(double q) const noexcept;

  static std::size_t bucket_of(std::uint64_t value) noexcept {
    if (value < kExactLimit) return static_cast<std::size_t>(value);
    const int e = 63 - __builtin_clzll(value);  // >= kSubBits + 1
    const int shift = e - kSubBits;
    const std::uint64_t sub = (value >> shift) & ((1u << kSubBits) - 1);
    return kExactLimit + static_cast<std::size_t>(e - kSubBits - 1) * (std::size_t{1} << kSubBits) +
           static_cast<std::size_t>(sub);
  }
  // Smallest value that lands in bucket b, and the bucket's width.
  static std::uint64_t bucket_low(std::size_t b) noexcept;
  static std::uint64_t bucket_width(std::size_t b) noexcept;

 private:
  std::array<std::uint64_t, kBuckets> counts_{};
  std::uint64_t count_ = 0;
  double sum_ = 0;
  std::uint64_t min_ = ~std::uint64_t{0};
  std::uint64_t max_ = 0;
};

}  // namespace feedline
