// The throttle decorator. A read becomes eligible when the shared token bucket can pay for its
// bytes (reads larger than the bucket wait until it is full, then overdraw it), then runs on the
// inner queue; its completion is delivered once its added latency (drawn per read) has passed
// since it came back. Everything is driven by poll(): the decorator has no threads of its own.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <mutex>
#include <string>

#include "feedline/core/clock.hpp"
#include "feedline/storage/decorators.hpp"
#include "feedline/storage/forwarding.hpp"

namespace feedline::storage {
namespace {

// Starts empty and holds at most 100 ms of tokens, so even a short run sees the cap (a bucket
// that starts with a second's worth lets small datasets through unthrottled).
class TokenBucket {
 public:
  explicit TokenBucket(double rate)
      : rate_(rate), burst_(rate / 10), tokens_(0), last_ns_(now_ns()) {}
  // Takes n bytes if available now; else returns the ns to wait.
  std::uint64_t take(std::uint64_t n) {
    std::lock_guard lock(mu_);
    refill();
    const double need =
        std::min(static_cast<double>(n), burst_);  // big reads overdraw a full bucket
    if (tokens_ >= need) {
      tokens_ -= static_cast<double>(n);
      return 0;
    }
    return static_cast<std::uint64_t>((need - tokens_) / rate_ * 1e9) + 1;
  }

 private:
  void refill() {
    const std::uint64_t t = now_ns();
    tokens_ = std::min(burst_, tokens_ + rate_ * static_cast<double>(t - last_ns_) / 1e9);
    last_ns_ = t;
  }
  std::mutex mu_;
  const double rate_;
  const double burst_;
  double tokens_;
  std::uint64_t last_ns_;
};

class ThrottleQueue final : public ForwardingQueue {
 public:
  ThrottleQueue(unsigned depth, std::unique_ptr<IoQueue> inner, TokenBucket* bucket,
                const LatencyDistribution& latency, std::chrono::nanoseconds seek,
                std::uint64_t seed)
      : ForwardingQueue(depth, std::move(inner)),
        bucket_(bucket),
        latency_(latency),
        seek_(seek),
        sampler_(latency, seed) {}

  QueueInfo info() const override {
    QueueInfo i = ForwardingQueue::info();
    i.features.push_back(!latency_.is_zero() || bucket_ || seek_.count() > 0 ? "throttled"
                                                                             : "throttle-off");
    return i;
  }

 protected:
  void accept(std::span<ReadOp* const> ops) override {
    waiting_.insert(waiting_.end(), ops.begin(), ops.end());
    pump();
  }

  void pump() override {
    next_token_wait_ = 0;
    while (!waiting_.empty()) {
      ReadOp* op = waiting_.front();
      if (bucket_) {
        const std::uint64_t wait = bucket_->take(op->length);
        if (wait) {
          next_token_wait_ = wait;
          return;
        }
      }
      waiting_.pop_front();
      Forwarded& f = track(*op);
      // A seek unless this read goes on from where this queue's previous read of the object
      // ended (or a short gap past it), in the order reads leave for the storage.
      const bool follows = op->object->key() == last_key_ && op->offset >= last_end_ &&
                           op->offset - last_end_ <= kSeekFreeGap;
      f.tag = seek_.count() > 0 && !follows ? 1 : 0;
      if (seek_.count() > 0) last_key_ = op->object->key();
      last_end_ = op->offset + op->length;
      send(f);
    }
  }

  std::uint64_t next_pump_ns() const override {
    return waiting_.empty() ? std::numeric_limits<std::uint64_t>::max()
                            : now_ns() + next_token_wait_;
  }

  // The latency the caller sees runs from its own submit(), through the wait for tokens and the
  // inner read, to the end of the added latency.
  std::uint64_t on_inner_done(Forwarded& f) noexcept override {
    const std::uint64_t seek = f.tag ? static_cast<std::uint64_t>(seek_.count()) : 0;
    if (latency_.is_zero() && seek == 0) return kDeliverNow;
    return now_ns() + seek +
           (latency_.is_zero() ? 0 : static_cast<std::uint64_t>(sampler_.next().count()));
  }

  // Reads waiting for tokens end cancelled; reads that already finished and wait out the added
  // latency are delivered at the next poll (an hour of --throttle-latency must not hold a
  // Ctrl-C); reads on the inner queue are cancelled there.
  void on_cancel() override {
    for (ReadOp* op : waiting_) {
      complete_at_next_poll(
          *op, fail(Error(Errc::kCancelled, "read cancelled").with_offset(op->offset)));
    }
    waiting_.clear();
  }

 private:
  TokenBucket* bucket_;
  LatencyDistribution latency_;
  std::chrono::nanoseconds seek_;
  std::string last_key_;  // where the previous read left the "disk head": its object, its end
  std::uint64_t last_end_ = 0;
  LatencySampler sampler_;
  std::deque<ReadOp*> waiting_;  // for tokens
  std::uint64_t next_token_wait_ = 0;
};

class ThrottleBackend final : public ForwardingBackend {
 public:
  ThrottleBackend(std::unique_ptr<Backend> inner, const ThrottleConfig& c)
      : ForwardingBackend(std::move(inner)), config_(c) {
    if (c.bytes_per_second > 0) bucket_ = std::make_unique<TokenBucket>(c.bytes_per_second);
  }

  Result<std::unique_ptr<IoQueue>> make_queue(const QueueOptions& options) override {
    FEEDLINE_TRY(host_memory_only(options));
    FEEDLINE_ASSIGN_OR_RETURN(auto q, inner().make_queue(options));
    // Each queue its own sequence of latencies, the same on every run.
    const std::uint64_t seed =
        config_.seed + 0x9e3779b97f4a7c15ull * queues_.fetch_add(1, std::memory_order_relaxed);
    return std::unique_ptr<IoQueue>(std::make_unique<ThrottleQueue>(
        options.depth, std::move(q), bucket_.get(), config_.latency, config_.seek, seed));
  }
  // Reads into GPU memory are not throttled: not offered (the pipeline copies batches instead).
  BackendCaps caps() const override {
    BackendCaps c = inner().caps();
    c.device_reads = false;
    return c;
  }

 private:
  ThrottleConfig config_;
  std::unique_ptr<TokenBucket> bucket_;
  std::atomic<std::uint64_t> queues_{0};
};

}  // namespace

std::unique_ptr<Backend> make_throttle(std::unique_ptr<Backend> inner,
                                       const ThrottleConfig& config) {
  return std::make_unique<ThrottleBackend>(std::move(inner), config);
}

}  // namespace feedline::storage
