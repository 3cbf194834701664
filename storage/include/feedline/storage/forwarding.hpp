// The forwarding bases every decorator derives from (throttle, faults, counting: decorators.hpp).
//
// ForwardingBackend passes every Backend call on to the backend it wraps, so a decorator overrides
// only what it changes and cannot drop a call by forgetting it: a throttled s3:// backend still
// sizes a brace list with one stat_many() and opens listed objects without a HEAD each.
//
// ForwardingQueue passes reads on to the inner backend's queue. Each caller's op goes to the inner
// queue as an op of the decorator's own (a Forwarded slot), so the inner queue never touches the
// caller's op: its times, result and completion are the decorator's to set, in the caller's thread,
// at the decorator's poll(). A decorator chooses, through the hooks below, when a read is sent
// (do_submit: at once, or later from pump()), what its result is once the inner read is back
// (on_inner_done: keep it, replace it, or send the rest of a read again), and when its completion
// is delivered (at once, or held until a time: an added latency). cancel() delivers held
// completions at once and cancels the inner reads; every op still completes exactly once.
//
// Lifetimes and threads as for any IoQueue: one thread; the inner queue lives and dies inside the
// decorator's, which waits for the inner reads still writing into callers' buffers first.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <queue>
#include <vector>

#include "feedline/storage/backend.hpp"
#include "feedline/storage/queue_parts.hpp"

namespace feedline::storage {

class ForwardingBackend : public Backend {
 public:
  std::string_view scheme() const noexcept override { return inner_->scheme(); }
  Result<ObjectInfo> stat(std::string_view key) override { return inner_->stat(key); }
  Result<std::vector<ObjectInfo>> stat_many(std::span<const std::string> keys) override {
    return inner_->stat_many(keys);
  }
  Result<std::vector<ObjectInfo>> list(std::string_view prefix) override {
    return inner_->list(prefix);
  }
  Result<std::unique_ptr<ObjectHandle>> open(std::string_view key) override {
    return inner_->open(key);
  }
  Result<std::unique_ptr<ObjectHandle>> open_known(const ObjectInfo& info) override {
    return inner_->open_known(info);
  }
  // A decorator whose queue wraps the inner one says no to opens_objects(), and gets none of these.
  Result<std::unique_ptr<ObjectHandle>> open_deferred(const ObjectInfo& info) override {
    return inner_->open_deferred(info);
  }
  Result<std::unique_ptr<ObjectWriter>> create(std::string_view key) override {
    return inner_->create(key);
  }
  std::optional<SpaceInfo> free_space(std::string_view key) override {
    return inner_->free_space(key);
  }
  // The inner queue itself: a decorator that changes reads overrides this and wraps it.
  Result<std::unique_ptr<IoQueue>> make_queue(const QueueOptions& options) override {
    return inner_->make_queue(options);
  }
  BackendCaps caps() const override { return inner_->caps(); }
  std::string display_name(std::string_view key) const override {
    return inner_->display_name(key);
  }

 protected:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  Backend& inner() noexcept { return *inner_; }
  const Backend& inner() const noexcept { return *inner_; }

 private:
  std::unique_ptr<Backend> inner_;
};

class ForwardingQueue : public IoQueue {
 public:
  ~ForwardingQueue() override;

  // Cancels the inner reads and delivers held completions at once (from then on nothing is held);
  // on_cancel() lets the decorator end what it has not sent.
  void cancel() final;
  Result<void> register_buffers(std::span<const MutableBytes> regions) override {
    return inner_->register_buffers(regions);
  }
  Result<void> register_object(const ObjectHandle& object) override {
    return inner_->register_object(object);
  }
  QueueInfo info() const override { return inner_->info(); }

 protected:
  // One caller's op on its way through the decorator.
  struct Forwarded {
    ReadOp* op = nullptr;       // the caller's
    ReadOp inner;               // what the inner queue reads: op's bytes [at, at + inner.length)
    std::uint64_t at = 0;       // where in op the inner read starts
    std::uint32_t retries = 0;  // the decorator's own re-sends, counted in QueueStats::retries
    std::uint64_t tag = 0;      // the decorator's
  };
  static constexpr std::uint64_t kDeliverNow = 0;
  static constexpr std::uint64_t kResent = std::numeric_limits<std::uint64_t>::max();

  ForwardingQueue(unsigned depth, std::unique_ptr<IoQueue> inner);

  void do_submit(std::span<ReadOp* const> ops) final;
  std::size_t do_poll(std::size_t min_complete, std::chrono::nanoseconds timeout) override;

  // The caller submitted ops. The default sends each at once; a decorator that holds ops back
  // keeps them and sends them later, from pump().
  virtual void accept(std::span<ReadOp* const> ops);
  // A slot for op (released when its completion is delivered).
  Forwarded& track(ReadOp& op);
  // Sends op's bytes [at, at + length) to the inner queue (length 0: to the op's end). Reads sent
  // together go to the inner queue as one submit() once the hook that sent them returns.
  void send(Forwarded& f, std::uint64_t at = 0, std::uint64_t length = 0);

  // Runs at the start of every poll() loop: send what has become eligible.
  virtual void pump() {}
  // When pump() next has something to send (now_ns() clock); max: nothing waiting.
  virtual std::uint64_t next_pump_ns() const { return std::numeric_limits<std::uint64_t>::max(); }
  // An inner read of f is back; f.op->result holds the op's result so far (bytes from the op's
  // start, or the inner error). Return kDeliverNow, a time to hold the completion until, or
  // kResent after send()ing more of the op. While cancelled() any time returned means now.
  virtual std::uint64_t on_inner_done(Forwarded& f) noexcept {
    (void)f;
    return kDeliverNow;
  }
  // cancel() ran: end what was not sent (complete_at_next_poll() with kCancelled).
  virtual void on_cancel() {}

  bool cancelled() const noexcept { return cancelled_; }
  IoQueue& inner() noexcept { return *inner_; }
  const IoQueue* forwards_to() const noexcept final { return inner_.get(); }

 private:
  struct Held {
    std::uint64_t ready_ns;
    std::uint64_t seq;  // first in, first out among equal times
    Forwarded* f;
    bool operator>(const Held& o) const noexcept {
      return ready_ns != o.ready_ns ? ready_ns > o.ready_ns : seq > o.seq;
    }
  };

  void flush();
  std::size_t finish_inner(std::uint64_t now) noexcept;
  std::size_t deliver_due(std::uint64_t now) noexcept;
  void deliver(Forwarded& f) noexcept;

  SlotPool<Forwarded> slots_;  // declared before inner_: the inner queue goes first
  std::unique_ptr<IoQueue> inner_;
  std::vector<ReadOp*> inner_done_;
  std::vector<ReadOp*> batch_;
  std::priority_queue<Held, std::vector<Held>, std::greater<>> held_;
  std::uint64_t seq_ = 0;
  bool cancelled_ = false;
};

}  // namespace feedline::storage
