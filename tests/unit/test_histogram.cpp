#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "feedline/core/histogram.hpp"

using feedline::Histogram;

namespace {
std::uint64_t exact_percentile(std::vector<std::uint64_t> v, double q) {
  std::sort(v.begin(), v.end());
  auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  rank = std::clamp<std::size_t>(rank, 1, v.size());
  return v[rank - 1];
}
}  // namespace

TEST_CASE("bucket boundaries are contiguous and narrow", "[core][histogram]") {
  for (std::size_t b = 0; b + 1 < Histogram::kBuckets; ++b) {
    REQUIRE(Histogram::bucket_low(b) + Histogram::bucket_width(b) == Histogram::bucket_low(b + 1));
    REQUIRE(Histogram::bucket_of(Histogram::bucket_low(b)) == b);
    REQUIRE(Histogram::bucket_of(Histogram::bucket_low(b + 1) - 1) == b);
    // width <= 1/64 of the bucket's lower bound (or 1 for the exact buckets)
    REQUIRE(Histogram::bucket_width(b) * 64 <=
            std::max<std::uint64_t>(Histogram::bucket_low(b), 64));
  }
  CHECK(Histogram::bucket_of(~std::uint64_t{0}) == Histogram::kBuckets - 1);
}

TEST_CASE("percentiles are within 1% of the exact value", "[core][histogram]") {
  std::mt19937_64 rng(42);
  std::lognormal_distribution<double> dist(11.0, 1.5);  // ~60 us median, long tail
  std::vector<std::uint64_t> values;
  Histogram h;
  for (int i = 0; i < 200000; ++i) {
    const auto v = static_cast<std::uint64_t>(dist(rng));
    values.push_back(v);
    h.record(v);
  }
  for (double q : {0.5, 0.9, 0.99, 0.999, 0.9999}) {
    const double exact = static_cast<double>(exact_percentile(values, q));
    const double got = static_cast<double>(h.percentile(q));
    INFO("q=" << q << " exact=" << exact << " got=" << got);
    CHECK(std::abs(got - exact) <= 0.01 * exact + 1);
  }
  CHECK(h.min() == *std::min_element(values.begin(), values.end()));
  CHECK(h.max() == *std::max_element(values.begin(), values.end()));
  CHECK(h.count() == values.size());
}

TEST_CASE("merging per-thread histograms equals one histogram of everything", "[core][histogram]") {
  Histogram a, b, all;
  for (std::uint64_t v = 1; v < 100000; v += 7) {
    (v % 3 ? a : b).record(v * 13);
    all.record(v * 13);
  }
  a.merge(b);
  CHECK(a.count() == all.count());
  CHECK(a.min() == all.min());
  CHECK(a.max() == all.max());
  CHECK(a.mean() == Approx(all.mean()));
  for (double q : {0.0, 0.5, 0.99, 0.9999, 1.0}) CHECK(a.percentile(q) == all.percentile(q));
}

TEST_CASE("an empty histogram reports zeros; small values are exact", "[core][histogram]") {
  Histogram h;
  CHECK(h.percentile(0.5) == 0);
  CHECK(h.count() == 0);
  CHECK(h.min() == 0);
  for (std::uint64_t v : {3, 3, 5, 100}) h.record(v);
  CHECK(h.percentile(0.5) == 3);
  CHECK(h.percentile(0.75) == 5);
  CHECK(h.percentile(1.0) == 100);
}
