// Latencies drawn from a distribution, for the decorators that add them (throttle's per-read
// latency). The text form is the one loader's --compute-time reads: a plain duration ("2ms",
// fixed), "fixed:2ms", "normal:MEAN:STDEV" (clamped at zero) or "lognormal:MEAN:STDEV" (MEAN and
// STDEV of the latencies themselves, as gen's lognormal sizes), e.g. "normal:50ms:5ms".
#pragma once

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>

#include "feedline/core/error.hpp"

namespace feedline::storage {

struct LatencyDistribution {
  enum class Kind : std::uint8_t { kFixed, kNormal, kLognormal };

  Kind kind = Kind::kFixed;
  std::chrono::nanoseconds mean{0};
  std::chrono::nanoseconds stdev{0};  // kNormal, kLognormal

  LatencyDistribution() = default;
  // A fixed latency: ThrottleConfig{.latency = 2ms} reads as it did before distributions.
  template <typename Rep, typename Period>
  LatencyDistribution(
      std::chrono::duration<Rep, Period> fixed)  // NOLINT(google-explicit-constructor)
      : mean(std::chrono::duration_cast<std::chrono::nanoseconds>(fixed)) {}
  static LatencyDistribution normal(std::chrono::nanoseconds mean, std::chrono::nanoseconds stdev);
  static LatencyDistribution lognormal(std::chrono::nanoseconds mean,
                                       std::chrono::nanoseconds stdev);

  // kInvalidArgument naming the text and the forms it accepts.
  static Result<LatencyDistribution> parse(std::string_view text);
  // The text parse() reads back: "2ms", "normal:50ms:5ms".
  std::string describe() const;
  bool is_zero() const noexcept {
    return mean.count() == 0 && (kind == Kind::kFixed || stdev.count() == 0);
  }
  bool operator==(const LatencyDistribution&) const = default;
};

// Draws from a distribution with a seeded generator: the same seed gives the same latencies.
class LatencySampler {
 public:
  LatencySampler(const LatencyDistribution& distribution, std::uint64_t seed);
  std::chrono::nanoseconds next();  // never negative

 private:
  LatencyDistribution d_;
  std::mt19937_64 rng_;
  double mu_ = 0, sigma_ = 0;  // of the normal distribution (kLognormal: of the logarithm)
};

}  // namespace feedline::storage
