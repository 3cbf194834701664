// The throttle decorator. A read becomes eligible when the shared token bucket can pay for its
// bytes (reads larger than the bucket wait until it is full, then overdraw it),
// then runs on the inner queue; its completion is delivered once `latency` has passed since it
// was issued. Everything is driven by poll(): the decorator has no threads of its own.
#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <mutex>
#include <thread>

#include "feedline/core/clock.hpp"
#include "feedline/storage/decorators.hpp"

namespace feedline::storage {
namespace {

// Starts empty and holds at most 100 ms of tokens, so even a short run sees the cap (a bucket
// that starts with a second's worth lets small datasets through unthrottled).
class TokenBucket {
 public:
  explicit TokenBucket(double rate) : rate_(rate), burst_(rate / 10), tokens_(0), last_ns_(now_ns()) {}
  // Takes n bytes if available now; else returns the ns to wait.
  std::uint64_t take(std::uint64_t n) {
    std::lock_guard lock(mu_);
    refill();
    const double need = std::min(static_cast<double>(n), burst_);  // big reads overdraw a full bucket
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

class ThrottleQueue final : public IoQueue, private ReadCompletion {
 public:
  ThrottleQueue(unsigned depth, std::unique_ptr<IoQueue> inner, TokenBucket* bucket,
                std::chrono::nanoseconds latency)
      : IoQueue(depth), inner_(std::move(inner)), bucket_(bucket), latency_(latency) {}

  ~ThrottleQueue() override {
    // Inner reads may still write into callers' buffers: let them finish.
    inner_->cancel();
    while (inner_->in_flight() > 0) inner_->poll(1, std::chrono::milliseconds(100));
  }

  // Reads waiting for tokens end cancelled; reads that already finished and wait out the added
  // latency are delivered at the next poll (an hour of --throttle-latency must not hold a
  // Ctrl-C); reads on the inner queue are cancelled there.
  void cancel() override {
    for (Held& h : finished_) h.ready_ns = 0;
    for (ReadOp* op : waiting_) {
      op->result = fail(Error(Errc::kCancelled, "read cancelled").with_offset(op->offset));
      finished_.push_front({op, 0});
    }
    waiting_.clear();
    cancelled_ = true;
    inner_->cancel();
  }

  QueueInfo info() const override {
    QueueInfo i = inner_->info();
    i.features.push_back(latency_.count() || bucket_ ? "throttled" : "throttle-off");
    return i;
  }

 protected:
  void do_submit(std::span<ReadOp* const> ops) override {
    for (ReadOp* op : ops) waiting_.push_back(op);
    release_eligible();
  }

  std::size_t do_poll(std::size_t min_complete, std::chrono::nanoseconds timeout) override {
    const std::uint64_t deadline = now_ns() + static_cast<std::uint64_t>(timeout.count());
    std::size_t n = 0;
    for (;;) {
      release_eligible();
      const std::uint64_t now = now_ns();
      while (!finished_.empty() && finished_.front().ready_ns <= now) {
        ReadOp* op = finished_.front().op;
        finished_.pop_front();
        complete(*op);
        ++n;
      }
      if (n >= std::max<std::size_t>(min_complete, 1) || now >= deadline) break;
      // Sleep until the next event: a held completion, a token refill, or an inner completion.
      std::uint64_t wake = deadline;
      if (!finished_.empty()) wake = std::min(wake, finished_.front().ready_ns);
      if (!waiting_.empty()) wake = std::min(wake, now + next_token_wait_);
      const auto wait = std::chrono::nanoseconds(wake > now ? wake - now : 0);
      if (inner_->in_flight() > 0) {
        inner_->poll(1, wait);
      } else if (wait.count() > 0) {
        std::this_thread::sleep_for(std::min(wait, std::chrono::nanoseconds(2'000'000)));
      }
      if (n > 0 && min_complete == 0) break;
    }
    return n;
  }

 private:
  struct Held {
    ReadOp* op;
    std::uint64_t ready_ns;
  };

  void release_eligible() {
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
      // Run the read on the inner queue with ourselves as its completion; restore afterwards.
      original_.push_back({op, op->done, op->times.queued_ns});
      op->done = this;
      inner_->submit(*op);
    }
  }

  void on_read_complete(ReadOp& op) noexcept override {
    const bool cancelled = cancelled_;
    // Restore what the caller set; the latency the caller sees runs from its own submit(),
    // through the wait for tokens, to the end of the added latency.
    for (auto it = original_.begin(); it != original_.end(); ++it) {
      if (it->op == &op) {
        op.done = it->done;
        op.times.issued_ns = op.times.queued_ns;  // when the read left the throttle
        op.times.queued_ns = it->queued_ns;
        original_.erase(it);
        break;
      }
    }
    const std::uint64_t ready = cancelled ? 0 : now_ns() + static_cast<std::uint64_t>(latency_.count());
    // Held completions are ordered by ready time because latency is constant.
    finished_.push_back({&op, ready});
  }

  std::unique_ptr<IoQueue> inner_;
  TokenBucket* bucket_;
  std::chrono::nanoseconds latency_;
  std::deque<ReadOp*> waiting_;
  std::deque<Held> finished_;
  struct Original {
    ReadOp* op;
    ReadCompletion* done;
    std::uint64_t queued_ns;
  };
  std::vector<Original> original_;
  std::uint64_t next_token_wait_ = 0;
  bool cancelled_ = false;  // once cancel() ran, completions are delivered without the added latency
};

class ThrottleBackend final : public Backend {
 public:
  ThrottleBackend(std::unique_ptr<Backend> inner, const ThrottleConfig& c)
      : inner_(std::move(inner)), config_(c) {
    if (c.bytes_per_second > 0) bucket_ = std::make_unique<TokenBucket>(c.bytes_per_second);
  }
  std::string_view scheme() const noexcept override { return inner_->scheme(); }
  Result<ObjectInfo> stat(std::string_view key) override { return inner_->stat(key); }
  Result<std::vector<ObjectInfo>> list(std::string_view prefix) override { return inner_->list(prefix); }
  Result<std::unique_ptr<ObjectHandle>> open(std::string_view key) override { return inner_->open(key); }
  Result<std::unique_ptr<ObjectWriter>> create(std::string_view key) override { return inner_->create(key); }
  Result<std::unique_ptr<IoQueue>> make_queue(const QueueOptions& options) override {
    FEEDLINE_ASSIGN_OR_RETURN(auto inner, inner_->make_queue(options));
    return std::make_unique<ThrottleQueue>(options.depth, std::move(inner), bucket_.get(), config_.latency);
  }
  // Reads into GPU memory would bypass the throttle: not offered.
  BackendCaps caps() const override {
    BackendCaps c = inner_->caps();
    c.device_reads = false;
    return c;
  }

 private:
  std::unique_ptr<Backend> inner_;
  ThrottleConfig config_;
  std::unique_ptr<TokenBucket> bucket_;
};

}  // namespace

std::unique_ptr<Backend> make_throttle(std::unique_ptr<Backend> inner, const ThrottleConfig& config) {
  return std::make_unique<ThrottleBackend>(std::move(inner), config);
}

}  // namespace feedline::storage
