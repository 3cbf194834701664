// Decorators wrap any backend and keep its interface. Each derives from the forwarding bases
// (forwarding.hpp), so every call it does not change reaches the inner backend unchanged: a
// decorated s3:// backend makes the same requests as the plain one.
//
// throttle: a bandwidth cap (token bucket over bytes, shared by every queue of the backend) and
// an added latency per read (fixed, or drawn from a seeded distribution), for planting a slow
// storage in tests and what-if runs. Reads wait in the decorator's queue until the bucket has room
// and then go to the inner backend; completions are held back until the added latency has passed.
//
// faults: seeded fault injection per read: errors, connection resets (retryable), short reads
// (the rest read by a second request), latency spikes. Each fault is counted in the queue's
// QueueStats::counters (counters::kFaultsErrors, kFaultsResets, kFaultsShortReads, kFaultsSpikes:
// "faults_errors", ... in counters.hpp).
//
// counting: counts every Backend and IoQueue call by name, for tests (a spy that proves a call
// reached the backend) and for seeing a run's request pattern.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "feedline/core/error.hpp"
#include "feedline/storage/backend.hpp"
#include "feedline/storage/latency.hpp"

namespace feedline::storage {

struct ThrottleConfig {
  double bytes_per_second = 0;  // 0 = no cap
  LatencyDistribution latency =
      {};  // added to every read: 2ms, or LatencyDistribution::parse("normal:2ms:500us")
  // Added to a read that does not start where its queue's previous read of the same object ended
  // (or a short skip, kSeekFreeGap, past it): a rotational disk's seek, for planting a seek-bound
  // storage that reads in storage order avoid.
  std::chrono::nanoseconds seek{0};
  std::uint64_t seed = 1;  // of the latency draws; each queue draws its own sequence from it
};
// A read starting at most this far past the previous one's end is no seek (a disk reads on
// through a short gap: a tar header between two samples).
inline constexpr std::uint64_t kSeekFreeGap = 64 * 1024;

// Takes ownership of inner. Reads into GPU memory are not offered (caps().device_reads is false).
std::unique_ptr<Backend> make_throttle(std::unique_ptr<Backend> inner,
                                       const ThrottleConfig& config);

// Rates are per read, each between 0 and 1, drawn independently with a generator seeded from
// `seed` (queue k of the backend draws from seed and k): the same submissions fail the same way on
// every run. A read's faults are drawn when it is submitted and applied when it comes back from
// the inner backend (an error or reset replaces its result: the storage was read all the same).
struct FaultsConfig {
  std::uint64_t seed = 1;
  double error_rate = 0;       // fails with kIo (EIO), "injected I/O error"
  double reset_rate = 0;       // fails with kIo and ECONNRESET: Error::retryable() is true
  double short_read_rate = 0;  // the first request returns part of the bytes; a second reads the
                               // rest (counted in QueueStats::retries): the caller sees whole reads
  double spike_rate = 0;       // the completion is held back by spike_latency
  std::chrono::nanoseconds spike_latency{std::chrono::milliseconds(50)};
};

// kInvalidArgument for a rate outside [0, 1] or a negative spike.
Result<std::unique_ptr<Backend>> make_faults(std::unique_ptr<Backend> inner,
                                             const FaultsConfig& config);

// Calls counted by name, shared by a counting backend, its queues and whoever reads them. Names:
// the Backend calls "stat", "stat_many", "list", "open", "open_known", "create", "display_name",
// "make_queue"; the IoQueue calls "submit" (calls), "ops" (reads submitted), "bytes" (bytes read),
// "poll", "cancel"; and "stat_many_keys" (keys asked for by stat_many).
class CallCounts {
 public:
  static constexpr std::array<std::string_view, 14> kNames = {
      "stat",         "stat_many",  "stat_many_keys", "list", "open",  "open_known", "create",
      "display_name", "make_queue", "submit",         "ops",  "bytes", "poll",       "cancel"};

  // 0 for a name never counted (or not in kNames).
  std::uint64_t get(std::string_view name) const noexcept;
  std::map<std::string, std::uint64_t> snapshot() const;
  void add(std::string_view name, std::uint64_t n = 1) noexcept;

 private:
  std::array<std::atomic<std::uint64_t>, kNames.size()> counts_{};
};

// Takes ownership of inner; every call is counted in *counts, then passed on.
std::unique_ptr<Backend> make_counting(std::unique_ptr<Backend> inner,
                                       std::shared_ptr<CallCounts> counts);

}  // namespace feedline::storage
