// The faults decorator: per read, drawn at submit() from a seeded generator (so a given sequence of
// submissions fails the same way on every run), applied when the inner read comes back.
#include <fmt/format.h>

#include <atomic>
#include <cerrno>

#include "feedline/core/clock.hpp"
#include "feedline/storage/decorators.hpp"
#include "feedline/storage/forwarding.hpp"

namespace feedline::storage {
namespace {

constexpr std::uint64_t kError = 1, kReset = 2, kShort = 4, kSpike = 8;  // Forwarded::tag bits

// splitmix64: small, fast, and the same on every platform (unlike std's distributions).
class Draws {
 public:
  explicit Draws(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // In [0, 1).
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  std::uint64_t state_;
};

class FaultsQueue final : public ForwardingQueue {
 public:
  FaultsQueue(unsigned depth, std::unique_ptr<IoQueue> inner, const FaultsConfig& config,
              std::uint64_t seed)
      : ForwardingQueue(depth, std::move(inner)), config_(config), draws_(seed) {
    // Always present, so a report shows "0 resets" rather than nothing.
    mutable_stats().start({&counters::kFaultsErrors, &counters::kFaultsResets,
                           &counters::kFaultsShortReads, &counters::kFaultsSpikes});
  }

  QueueInfo info() const override {
    QueueInfo i = ForwardingQueue::info();
    i.features.push_back(fmt::format("faults(errors={}, resets={}, short_reads={}, spikes={})",
                                     config_.error_rate, config_.reset_rate,
                                     config_.short_read_rate, config_.spike_rate));
    return i;
  }

 protected:
  void accept(std::span<ReadOp* const> ops) override {
    for (ReadOp* op : ops) {
      Forwarded& f = track(*op);
      // Four draws per read whatever the rates, so changing one rate keeps the others' picks.
      const bool error = draws_.uniform() < config_.error_rate;
      const bool reset = draws_.uniform() < config_.reset_rate;
      const bool short_read = draws_.uniform() < config_.short_read_rate;
      const bool spike = draws_.uniform() < config_.spike_rate;
      const std::uint64_t cut = draws_.next();
      f.tag = (error ? kError : 0) | (reset ? kReset : 0) | (spike ? kSpike : 0);
      if (short_read && op->length > 1) {
        f.tag |= kShort;
        send(f, 0, 1 + cut % (op->length - 1));  // 1 .. length-1 bytes first
      } else {
        send(f);
      }
    }
  }

  std::uint64_t on_inner_done(Forwarded& f) noexcept override {
    ReadOp& op = *f.op;
    QueueStats& stats = mutable_stats();
    if (f.tag & kShort) {
      f.tag &= ~kShort;
      // The first request came back whole but short of the read: read the rest. (Fewer bytes
      // than it asked for is the object's end: nothing more to read.)
      if (op.result && *op.result == f.inner.length && *op.result < op.length) {
        if (cancelled()) {
          op.result = fail(Error(Errc::kCancelled, "read cancelled")
                               .with_object(op.object->display_name())
                               .with_offset(op.offset));
          return kDeliverNow;
        }
        ++stats.count(counters::kFaultsShortReads);
        ++f.retries;
        send(f, *op.result);
        return kResent;
      }
    }
    if (op.result && (f.tag & (kError | kReset))) {
      if (f.tag & kError) {
        ++stats.count(counters::kFaultsErrors);
        op.result = fail(Error(Errc::kIo, "read: injected I/O error (faults decorator)")
                             .with_sys_errno(EIO)
                             .with_object(op.object->display_name())
                             .with_offset(op.offset));
      } else {
        ++stats.count(counters::kFaultsResets);
        op.result = fail(
            Error(Errc::kIo, "read: connection reset by peer (injected by the faults decorator)")
                .with_sys_errno(ECONNRESET)
                .with_object(op.object->display_name())
                .with_offset(op.offset));
      }
    }
    if ((f.tag & kSpike) && !cancelled()) {
      ++stats.count(counters::kFaultsSpikes);
      return now_ns() + static_cast<std::uint64_t>(config_.spike_latency.count());
    }
    return kDeliverNow;
  }

 private:
  FaultsConfig config_;
  Draws draws_;
};

class FaultsBackend final : public ForwardingBackend {
 public:
  FaultsBackend(std::unique_ptr<Backend> inner, const FaultsConfig& config)
      : ForwardingBackend(std::move(inner)), config_(config) {}

  Result<std::unique_ptr<IoQueue>> make_queue(const QueueOptions& options) override {
    FEEDLINE_ASSIGN_OR_RETURN(auto q, inner().make_queue(options));
    const std::uint64_t k = queues_.fetch_add(1, std::memory_order_relaxed);
    return std::unique_ptr<IoQueue>(std::make_unique<FaultsQueue>(
        options.depth, std::move(q), config_, config_.seed ^ (k * 0xd1b54a32d192ed03ull)));
  }

 private:
  FaultsConfig config_;
  std::atomic<std::uint64_t> queues_{0};
};

}  // namespace

Result<std::unique_ptr<Backend>> make_faults(std::unique_ptr<Backend> inner,
                                             const FaultsConfig& config) {
  for (const auto& [name, rate] :
       {std::pair{"error_rate", config.error_rate}, std::pair{"reset_rate", config.reset_rate},
        std::pair{"short_read_rate", config.short_read_rate},
        std::pair{"spike_rate", config.spike_rate}}) {
    if (!(rate >= 0 && rate <= 1)) {
      return fail(Errc::kInvalidArgument,
                  fmt::format("faults: {} is {}; a rate is between 0 and 1", name, rate));
    }
  }
  if (config.spike_latency.count() < 0) {
    return fail(Errc::kInvalidArgument, "faults: spike_latency cannot be negative");
  }
  return std::unique_ptr<Backend>(std::make_unique<FaultsBackend>(std::move(inner), config));
}

}  // namespace feedline::storage
