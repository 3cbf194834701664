#include "feedline/storage/latency.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "feedline/core/units.hpp"

namespace feedline::storage {
namespace {

// "50ms", as parse_duration() reads it back (whole units where they fit).
std::string duration_text(std::chrono::nanoseconds d) {
  const std::int64_t ns = d.count();
  if (ns == 0) return "0s";
  if (ns % 1'000'000'000 == 0) return fmt::format("{}s", ns / 1'000'000'000);
  if (ns % 1'000'000 == 0) return fmt::format("{}ms", ns / 1'000'000);
  if (ns % 1'000 == 0) return fmt::format("{}us", ns / 1'000);
  return fmt::format("{}ns", ns);
}

}  // namespace

LatencyDistribution LatencyDistribution::normal(std::chrono::nanoseconds mean,
                                                std::chrono::nanoseconds stdev) {
  LatencyDistribution d;
  d.kind = Kind::kNormal;
  d.mean = mean;
  d.stdev = stdev;
  return d;
}

LatencyDistribution LatencyDistribution::lognormal(std::chrono::nanoseconds mean,
                                                   std::chrono::nanoseconds stdev) {
  LatencyDistribution d = normal(mean, stdev);
  d.kind = Kind::kLognormal;
  return d;
}

Result<LatencyDistribution> LatencyDistribution::parse(std::string_view text) {
  auto bad = [&](std::string why) {
    return fail(
        Error(Errc::kInvalidArgument, fmt::format("latency '{}': {}; expected a duration (2ms), "
                                                  "normal:MEAN:STDEV or lognormal:MEAN:STDEV "
                                                  "(e.g. normal:50ms:5ms)",
                                                  text, why)));
  };
  auto duration = [&](std::string_view part) -> Result<std::chrono::nanoseconds> {
    auto d = parse_duration(part);
    if (!d) return bad(d.error().message());
    if (d->count() < 0) return bad("a latency cannot be negative");
    return *d;
  };
  const auto colon = text.find(':');
  if (colon == std::string_view::npos) {
    FEEDLINE_ASSIGN_OR_RETURN(auto d, duration(text));
    return LatencyDistribution(d);
  }
  const std::string_view kind = text.substr(0, colon);
  const std::string_view rest = text.substr(colon + 1);
  if (kind == "fixed") {
    if (rest.find(':') != std::string_view::npos) return bad("fixed takes one duration");
    FEEDLINE_ASSIGN_OR_RETURN(auto d, duration(rest));
    return LatencyDistribution(d);
  }
  if (kind != "normal" && kind != "lognormal")
    return bad(fmt::format("unknown distribution '{}'", kind));
  const auto colon2 = rest.find(':');
  if (colon2 == std::string_view::npos || rest.find(':', colon2 + 1) != std::string_view::npos) {
    return bad(fmt::format("{} takes a mean and a standard deviation", kind));
  }
  FEEDLINE_ASSIGN_OR_RETURN(auto mean, duration(rest.substr(0, colon2)));
  FEEDLINE_ASSIGN_OR_RETURN(auto stdev, duration(rest.substr(colon2 + 1)));
  if (kind == "lognormal" && mean.count() == 0)
    return bad("a lognormal latency needs a mean above zero");
  return kind == "normal" ? normal(mean, stdev) : lognormal(mean, stdev);
}

std::string LatencyDistribution::describe() const {
  switch (kind) {
    case Kind::kFixed:
      return duration_text(mean);
    case Kind::kNormal:
      return fmt::format("normal:{}:{}", duration_text(mean), duration_text(stdev));
    case Kind::kLognormal:
      return fmt::format("lognormal:{}:{}", duration_text(mean), duration_text(stdev));
  }
  return duration_text(mean);
}

LatencySampler::LatencySampler(const LatencyDistribution& distribution, std::uint64_t seed)
    : d_(distribution), rng_(seed) {
  const double m = static_cast<double>(d_.mean.count());
  const double s = static_cast<double>(d_.stdev.count());
  if (d_.kind == LatencyDistribution::Kind::kLognormal && m > 0) {
    // The mean and deviation given are the latencies' own: those of the logarithm follow.
    sigma_ = std::sqrt(std::log1p((s * s) / (m * m)));
    mu_ = std::log(m) - sigma_ * sigma_ / 2;
  } else {
    mu_ = m;
    sigma_ = s;
  }
}

std::chrono::nanoseconds LatencySampler::next() {
  if (d_.kind == LatencyDistribution::Kind::kFixed || sigma_ <= 0)
    return std::max(d_.mean, std::chrono::nanoseconds(0));
  double ns;
  if (d_.kind == LatencyDistribution::Kind::kNormal) {
    ns = std::normal_distribution<double>(mu_, sigma_)(rng_);
  } else {
    ns = std::lognormal_distribution<double>(mu_, sigma_)(rng_);
  }
  return std::chrono::nanoseconds(static_cast<std::int64_t>(std::clamp(ns, 0.0, 1e18)));
}

}  // namespace feedline::storage
