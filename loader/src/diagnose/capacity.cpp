// The capacity model (capacity.hpp): each stage's capacity from its measured costs and its
// resources, the least of them the pipeline's rate.
#include "feedline/loader/capacity.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace feedline::loader {
namespace {

constexpr double kUnbounded = std::numeric_limits<double>::infinity();

double ratio(double num, double den) { return den > 0 ? num / den : kUnbounded; }

// What one accelerator may have in flight: the least of its limits (0 means none), and which.
std::pair<double, const char*> reads_in_flight(const Concurrency& c) {
  double d = std::max(1.0, c.io_depth);
  const char* held = "io depth";
  if (c.window_reads > 0 && c.window_reads < d) {
    d = c.window_reads;
    held = "read-ahead window";
  }
  if (c.memory_reads > 0 && c.memory_reads < d) {
    d = c.memory_reads;
    held = "memory budget";
  }
  return {std::max(1.0, d), held};
}

// Reads per second of a closed loop (exact Mean Value Analysis, Reiser and Lavenberg 1980):
// `reads` always in flight, each a pure delay of `delay` seconds (the round trip, a throttle's
// latency) and then `service` seconds at one queue shared by all of them (the storage's
// bandwidth, or its one copying thread). Far from saturation that is Little's law, reads /
// delay; far past it, 1 / service; near the knee (reads ~ (delay + service) / service) it is
// well below both: a window of 24 reads of 1 MiB over 10.5 ms at 2.2 GB/s reads ~11% under
// either bound, as measured. A fractional count interpolates between its neighbours.
double closed_loop_reads_per_second(double reads, double delay, double service) {
  reads = std::max(1.0, reads);
  if (service <= 0) return delay > 0 ? reads / delay : kUnbounded;
  if (delay <= 0) return 1 / service;
  const double ceiling = 1 / service;
  double queued = 0, rate = 0, previous = 0;
  const auto whole = static_cast<std::uint64_t>(std::floor(reads));
  for (std::uint64_t k = 1; k <= whole + 1; ++k) {
    previous = rate;
    const double response = service * (1 + queued);
    rate = static_cast<double>(k) / (delay + response);
    queued = rate * response;
    if (rate >= ceiling * (1 - 1e-9)) return ceiling;  // saturated: more reads only queue
    if (k > 1'000'000) return std::min(reads / (delay + service), ceiling);
  }
  const double frac = reads - static_cast<double>(whole);
  return previous + frac * (rate - previous);
}

}  // namespace

CapacityModel::CapacityModel(Measurements measured, Settings ran,
                             double achieved_samples_per_second)
    : m_(measured), ran_(ran) {
  const Prediction p = raw(ran_);
  calibrated_stage_ = p.limit;
  calibrated_cores_ = p.cores_limit;
  calibrated_bound_ = p.bound + "/" + p.held_by;
  if (p.samples_per_second > 0 && std::isfinite(p.samples_per_second) &&
      achieved_samples_per_second > 0) {
    // A pipeline reaches its limit's capacity only so far; it never beats it by much (the
    // measurements are themselves noisy, hence the slack).
    efficiency_ = std::clamp(achieved_samples_per_second / p.samples_per_second, 0.05, 1.25);
    if (p.limit == StageId::kStorage && !p.cores_limit && p.bound == "latency") {
      // How full the window stayed: the fill at which the storage's closed loop gives what the
      // run achieved (the rate rises with the fill; bisection).
      fill_holder_ = p.held_by;
      double lo = 0.05, hi = 1.25;
      for (int i = 0; i < 40; ++i) {
        fill_ = (lo + hi) / 2;
        (raw(ran_).samples_per_second < achieved_samples_per_second ? lo : hi) = fill_;
      }
      fill_ = (lo + hi) / 2;
    }
  }
  as_run_ = predict(ran_);
}

Prediction CapacityModel::raw(const Settings& s) const {
  const double n = std::max(1u, s.accelerators);
  const double cores = std::max(1u, s.cores);
  Prediction p;

  // Storage: reads in flight over latency; the bandwidth; the threads' CPU where reads cost it.
  StageCapacity storage{StageId::kStorage, kUnbounded, "unbounded", ""};
  {
    const auto [each, held] = reads_in_flight(s.concurrency);
    // Where the run was latency-bound, the window stays as full as it did then (window_fill()).
    const double fill = !fill_holder_.empty() && fill_holder_ == held ? fill_ : 1.0;
    const double in_flight = n * each * fill;
    const double rps = std::max(m_.reads_per_sample, 1e-9);
    const double latency = m_.read_latency_seconds + s.added_latency_seconds;
    const double by_latency = latency > 0 ? in_flight / (latency * rps) : kUnbounded;
    double bandwidth =
        m_.storage_bytes_per_second_max > 0 ? m_.storage_bytes_per_second_max : kUnbounded;
    if (s.storage_bytes_per_second > 0) bandwidth = std::min(bandwidth, s.storage_bytes_per_second);
    const double by_bandwidth = ratio(bandwidth, m_.read_bytes_per_sample);
    const double threads = std::min(n * std::max(1u, s.storage_threads), cores);
    const double by_cpu =
        m_.storage_cpu_bound ? ratio(threads, m_.storage_cpu_seconds) : kUnbounded;
    // In another order the same reads in flight deliver more (or fewer) samples: neighbouring
    // tar members share a read, a rotational disk seeks less; as a controlled run measured.
    const double order = std::max(1e-3, s.order_speedup);
    const double by_reads = by_latency * order;
    // Both together: the reads in flight cycle through the latency and then the bandwidth, a
    // closed loop that stays under either bound near where they meet. The latency measured at
    // a low depth includes a read's own transfer time, which the loop counts at the bandwidth.
    double reads_and_bandwidth = std::min(by_reads, by_bandwidth);
    if (std::isfinite(by_reads) && std::isfinite(by_bandwidth)) {
      const double service = 1 / (by_bandwidth * rps);  // seconds a read, at the bandwidth
      const double delay = std::max(0.0, latency - service) / order;
      reads_and_bandwidth = closed_loop_reads_per_second(in_flight, delay, service) / rps;
    }
    storage.samples_per_second = std::min(reads_and_bandwidth, by_cpu);
    if (storage.samples_per_second == by_cpu && std::isfinite(by_cpu)) {
      storage.bound = "cpu";
    } else if (by_bandwidth <= by_reads && std::isfinite(by_bandwidth)) {
      storage.bound = "bandwidth";
    } else if (std::isfinite(by_reads)) {
      storage.bound = "latency";
      storage.held_by = held;
    }
  }
  // Decode: the host's threads (each accelerator at least one), at most the cores.
  const double decode_threads =
      n * std::max(1.0, std::floor(static_cast<double>(s.decode_threads) / n));
  StageCapacity decode{StageId::kDecode,
                       ratio(std::min(decode_threads, cores), m_.decode_cpu_seconds), "cpu", ""};
  StageCapacity collate{StageId::kCollate, ratio(std::min(n, cores), m_.collate_cpu_seconds), "cpu",
                        ""};
  // The consumer: its steps, and its own overhead between them (the AU it reached as the limit).
  const double asked = s.compute_seconds > 0
                           ? n * static_cast<double>(std::max(1u, s.batch_size)) / s.compute_seconds
                           : kUnbounded;
  StageCapacity consumer{StageId::kConsumer, asked * m_.consumer_au_ceiling,
                         s.compute_seconds > 0 ? "compute" : "unbounded", ""};
  p.stages = {storage, decode, collate, consumer};

  // The cores, shared by every stage's CPU.
  const double cpu_per_sample = m_.storage_cpu_seconds + m_.decode_cpu_seconds +
                                m_.collate_cpu_seconds + m_.consumer_cpu_seconds;
  const double by_cores = ratio(cores, cpu_per_sample);

  const StageCapacity* least = &p.stages.front();
  for (const StageCapacity& st : p.stages) {
    if (st.samples_per_second < least->samples_per_second) least = &st;
  }
  p.samples_per_second = least->samples_per_second;
  p.limit = least->stage;
  p.bound = least->bound;
  p.held_by = least->held_by;
  if (by_cores < p.samples_per_second) {
    // The stages together need more CPU than the cores have: the limit is the cores, and the
    // stage named is the one that spends most of it.
    p.samples_per_second = by_cores;
    p.cores_limit = true;
    const std::pair<double, StageId> spend[] = {{m_.storage_cpu_seconds, StageId::kStorage},
                                                {m_.decode_cpu_seconds, StageId::kDecode},
                                                {m_.collate_cpu_seconds, StageId::kCollate},
                                                {m_.consumer_cpu_seconds, StageId::kConsumer}};
    p.limit = std::max_element(std::begin(spend), std::end(spend))->second;
    p.bound = fmt::format("cores: {:.1f} CPU-us a sample over {:.0f} core(s)", cpu_per_sample * 1e6,
                          cores);
  }
  if (!std::isfinite(p.samples_per_second)) p.samples_per_second = 0;
  // AU: the share of the time the accelerators compute, rate x step time / (N x batch).
  if (s.compute_seconds > 0 && std::isfinite(asked)) {
    p.au = std::min(m_.consumer_au_ceiling, p.samples_per_second / asked);
  }
  return p;
}

Prediction CapacityModel::predict(const Settings& s) const {
  Prediction p = raw(s);
  // A latency-bound run's efficiency is in the window's fill (raw() applies it), not a factor.
  if (fill_holder_.empty() && p.limit == calibrated_stage_ && p.cores_limit == calibrated_cores_ &&
      p.bound + "/" + p.held_by == calibrated_bound_) {
    p.samples_per_second *= efficiency_;
    // Not past the consumer's own pace: AU cannot exceed its ceiling.
    for (const StageCapacity& st : p.stages) {
      if (st.stage == StageId::kConsumer)
        p.samples_per_second = std::min(p.samples_per_second, st.samples_per_second);
    }
    if (p.au && s.compute_seconds > 0) {
      const double asked = std::max(1u, s.accelerators) *
                           static_cast<double>(std::max(1u, s.batch_size)) / s.compute_seconds;
      p.au = std::min(m_.consumer_au_ceiling, p.samples_per_second / asked);
    }
  }
  return p;
}

}  // namespace feedline::loader
