// The counting decorator: every call counted by name in a shared CallCounts, then passed on.
#include <algorithm>

#include "feedline/storage/decorators.hpp"
#include "feedline/storage/forwarding.hpp"

namespace feedline::storage {

namespace {

constexpr std::size_t index_of(std::string_view name) noexcept {
  for (std::size_t i = 0; i < CallCounts::kNames.size(); ++i) {
    if (CallCounts::kNames[i] == name) return i;
  }
  return CallCounts::kNames.size();
}

}  // namespace

std::uint64_t CallCounts::get(std::string_view name) const noexcept {
  const std::size_t i = index_of(name);
  return i < counts_.size() ? counts_[i].load(std::memory_order_relaxed) : 0;
}

std::map<std::string, std::uint64_t> CallCounts::snapshot() const {
  std::map<std::string, std::uint64_t> out;
  for (std::size_t i = 0; i < kNames.size(); ++i)
    out[std::string(kNames[i])] = counts_[i].load(std::memory_order_relaxed);
  return out;
}

void CallCounts::add(std::string_view name, std::uint64_t n) noexcept {
  const std::size_t i = index_of(name);
  if (i < counts_.size()) counts_[i].fetch_add(n, std::memory_order_relaxed);
}

namespace {

class CountingQueue final : public ForwardingQueue {
 public:
  CountingQueue(unsigned depth, std::unique_ptr<IoQueue> inner, std::shared_ptr<CallCounts> counts)
      : ForwardingQueue(depth, std::move(inner)), counts_(std::move(counts)) {}

 protected:
  void accept(std::span<ReadOp* const> ops) override {
    counts_->add("submit");
    counts_->add("ops", ops.size());
    ForwardingQueue::accept(ops);
  }
  std::size_t do_poll(std::size_t min_complete, std::chrono::nanoseconds timeout) override {
    counts_->add("poll");
    return ForwardingQueue::do_poll(min_complete, timeout);
  }
  std::uint64_t on_inner_done(Forwarded& f) noexcept override {
    if (f.op->result) counts_->add("bytes", *f.op->result);
    return kDeliverNow;
  }
  void on_cancel() override { counts_->add("cancel"); }

 private:
  std::shared_ptr<CallCounts> counts_;
};

class CountingBackend final : public ForwardingBackend {
 public:
  CountingBackend(std::unique_ptr<Backend> inner, std::shared_ptr<CallCounts> counts)
      : ForwardingBackend(std::move(inner)), counts_(std::move(counts)) {}

  Result<ObjectInfo> stat(std::string_view key) override {
    counts_->add("stat");
    return ForwardingBackend::stat(key);
  }
  Result<std::vector<ObjectInfo>> stat_many(std::span<const std::string> keys) override {
    counts_->add("stat_many");
    counts_->add("stat_many_keys", keys.size());
    return ForwardingBackend::stat_many(keys);
  }
  Result<std::vector<ObjectInfo>> list(std::string_view prefix) override {
    counts_->add("list");
    return ForwardingBackend::list(prefix);
  }
  Result<std::unique_ptr<ObjectHandle>> open(std::string_view key) override {
    counts_->add("open");
    return ForwardingBackend::open(key);
  }
  Result<std::unique_ptr<ObjectHandle>> open_known(const ObjectInfo& info) override {
    counts_->add("open_known");
    return ForwardingBackend::open_known(info);
  }
  Result<std::unique_ptr<ObjectHandle>> open_deferred(const ObjectInfo& info) override {
    counts_->add("open_deferred");
    return ForwardingBackend::open_deferred(info);
  }
  Result<std::unique_ptr<ObjectWriter>> create(std::string_view key) override {
    counts_->add("create");
    return ForwardingBackend::create(key);
  }
  std::string display_name(std::string_view key) const override {
    counts_->add("display_name");
    return ForwardingBackend::display_name(key);
  }
  Result<std::unique_ptr<IoQueue>> make_queue(const QueueOptions& options) override {
    counts_->add("make_queue");
    FEEDLINE_ASSIGN_OR_RETURN(auto q, inner().make_queue(options));
    return std::unique_ptr<IoQueue>(
        std::make_unique<CountingQueue>(options.depth, std::move(q), counts_));
  }

 private:
  std::shared_ptr<CallCounts> counts_;
};

}  // namespace

std::unique_ptr<Backend> make_counting(std::unique_ptr<Backend> inner,
                                       std::shared_ptr<CallCounts> counts) {
  if (!counts) counts = std::make_shared<CallCounts>();
  return std::make_unique<CountingBackend>(std::move(inner), std::move(counts));
}

}  // namespace feedline::storage
