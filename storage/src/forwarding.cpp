#include "feedline/storage/forwarding.hpp"

#include <algorithm>
#include <thread>

#include "feedline/core/clock.hpp"

namespace feedline::storage {

ForwardingQueue::ForwardingQueue(unsigned depth, std::unique_ptr<IoQueue> inner)
    : IoQueue(depth, inner->max_request()), inner_(std::move(inner)) {}

ForwardingQueue::~ForwardingQueue() {
  // Inner reads may still be writing into callers' buffers: cancel them and wait for each. The
  // callers' completions are not run (their owners may be gone).
  inner_->cancel();
  std::vector<ReadOp*> back;
  while (inner_->in_flight() > 0) {
    back.clear();
    inner_->poll(1, std::chrono::milliseconds(100), back);
  }
}

void ForwardingQueue::cancel() {
  cancelled_ = true;  // held completions go at the next poll, and nothing is held from now on
  on_cancel();
  inner_->cancel();
}

void ForwardingQueue::accept(std::span<ReadOp* const> ops) {
  for (ReadOp* op : ops) send(track(*op));
}

ForwardingQueue::Forwarded& ForwardingQueue::track(ReadOp& op) {
  Forwarded* f = slots_.acquire();
  f->op = &op;
  f->at = 0;
  f->retries = 0;
  f->tag = 0;
  return *f;
}

void ForwardingQueue::send(Forwarded& f, std::uint64_t at, std::uint64_t length) {
  const ReadOp& op = *f.op;
  const std::uint64_t n = length != 0 ? length : op.length - std::min(at, op.length);
  f.at = at;
  f.inner = ReadOp{};
  f.inner.object = op.object;
  f.inner.offset = op.offset + at;
  f.inner.length = n;
  f.inner.dst = op.dst.subspan(static_cast<std::size_t>(at), static_cast<std::size_t>(n));
  f.inner.user = &f;
  batch_.push_back(&f.inner);
}

void ForwardingQueue::flush() {
  if (batch_.empty()) return;
  inner_->submit(batch_);
  batch_.clear();
}

void ForwardingQueue::do_submit(std::span<ReadOp* const> ops) {
  accept(ops);
  flush();
}

std::size_t ForwardingQueue::do_poll(std::size_t min_complete, std::chrono::nanoseconds timeout) {
  const std::uint64_t deadline =
      now_ns() + static_cast<std::uint64_t>(std::max<std::int64_t>(timeout.count(), 0));
  const std::size_t want = std::max<std::size_t>(min_complete, 1);
  std::size_t n = 0;
  for (bool polled = false;; polled = true) {
    pump();
    flush();
    const std::uint64_t now = now_ns();
    n += deliver_due(now);
    if (n >= want || (n > 0 && min_complete == 0) || in_flight() == 0) break;
    if (polled && now >= deadline) break;
    // Wait for the next event: an inner completion, a held completion's time, pump()'s next send.
    std::uint64_t wake = deadline;
    if (!held_.empty()) wake = std::min(wake, held_.top().ready_ns);
    wake = std::min(wake, next_pump_ns());
    const auto wait = std::chrono::nanoseconds(wake > now ? wake - now : 0);
    if (inner_->in_flight() > 0) {
      inner_->poll(wait.count() > 0 ? 1 : 0, wait, inner_done_);
      n += finish_inner(now_ns());
      flush();  // what on_inner_done() sent again
    } else if (wait.count() > 0) {
      std::this_thread::sleep_for(std::min(wait, std::chrono::nanoseconds(2'000'000)));
    }
  }
  return n;
}

std::size_t ForwardingQueue::finish_inner(std::uint64_t now) noexcept {
  // Delivering runs callers' completions, which may submit (and, rarely, poll) again.
  std::vector<ReadOp*> back = std::move(inner_done_);
  inner_done_.clear();
  std::size_t n = 0;
  for (ReadOp* in : back) {
    Forwarded& f = *static_cast<Forwarded*>(in->user);
    ReadOp& op = *f.op;
    if (op.times.issued_ns == 0) op.times.issued_ns = in->times.issued_ns;  // the transport took it
    if (in->result) {
      op.result = f.at + *in->result;
    } else {
      op.result = std::move(in->result);
    }
    const std::uint64_t when = on_inner_done(f);
    if (when == kResent) continue;
    if (cancelled_ || when <= now) {
      deliver(f);
      ++n;
    } else {
      held_.push(Held{when, seq_++, &f});
    }
  }
  back.clear();
  if (inner_done_.empty()) inner_done_ = std::move(back);  // keep the capacity
  return n;
}

std::size_t ForwardingQueue::deliver_due(std::uint64_t now) noexcept {
  std::size_t n = 0;
  while (!held_.empty() && (cancelled_ || held_.top().ready_ns <= now)) {
    Forwarded* f = held_.top().f;
    held_.pop();
    deliver(*f);
    ++n;
  }
  return n;
}

void ForwardingQueue::deliver(Forwarded& f) noexcept {
  ReadOp& op = *f.op;
  const std::uint32_t retries = f.retries;
  slots_.release(&f);
  complete(op, retries);
}

}  // namespace feedline::storage
