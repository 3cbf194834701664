#include "mem_backend.hpp"

#include <fmt/format.h>

#include <cstring>
#include <deque>
#include <map>
#include <mutex>

namespace feedline::storage::detail {
namespace {

using Blob = std::shared_ptr<const std::vector<std::byte>>;

class MemHandle final : public ObjectHandle {
 public:
  MemHandle(std::string key, Blob blob)
      : ObjectHandle(std::move(key), blob->size()), blob_(std::move(blob)) {}
  const std::vector<std::byte>& bytes() const { return *blob_; }

 private:
  Blob blob_;  // keeps the bytes alive even if the object is overwritten
};

class MemQueue final : public IoQueue {
 public:
  explicit MemQueue(unsigned depth) : IoQueue(depth, kMaxRequest) {}
  ~MemQueue() override { drain_all(); }
  static constexpr std::uint64_t kMaxRequest = 1ull << 30;

  void cancel() override {}  // nothing runs in the background: ops finish at the next poll
  QueueInfo info() const override { return {"mem", {}, {}}; }

 protected:
  void do_submit(std::span<ReadOp* const> ops) override {
    for (ReadOp* op : ops) ready_.push_back(op);
  }

  std::size_t do_poll(std::size_t, std::chrono::nanoseconds) override {
    // Completions may submit more ops; those wait for the next poll (as with a real device).
    std::size_t n = ready_.size();
    for (std::size_t i = 0; i < n; ++i) {
      ReadOp* op = ready_.front();
      ready_.pop_front();
      op->result = read(*op);
      complete(*op);
    }
    return n;
  }

 private:
  // submit() checked the op's destination and length (IoQueue's checks).
  static Result<std::uint64_t> read(ReadOp& op) {
    const auto* h = dynamic_cast<const MemHandle*>(op.object);
    if (!h)
      return fail(Error(Errc::kInvalidArgument, "not a mem:// object").with_offset(op.offset));
    const auto& b = h->bytes();
    if (op.offset >= b.size()) return std::uint64_t{0};
    const std::uint64_t n = std::min<std::uint64_t>(op.length, b.size() - op.offset);
    std::memcpy(op.dst.data(), b.data() + op.offset, n);
    return n;
  }
  void drain_all() {
    while (in_flight() > 0) poll(0, {});
  }
  std::deque<ReadOp*> ready_;
};

class MemBackend;

class MemWriter final : public ObjectWriter {
 public:
  MemWriter(MemBackend& backend, std::string key) : backend_(backend), key_(std::move(key)) {}
  Result<void> append(ConstBytes data) override {
    bytes_.insert(bytes_.end(), data.begin(), data.end());
    return {};
  }
  Result<void> commit() override;

 private:
  MemBackend& backend_;
  std::string key_;
  std::vector<std::byte> bytes_;
};

class MemBackend final : public Backend {
 public:
  std::string_view scheme() const noexcept override { return "mem"; }

  Result<ObjectInfo> stat(std::string_view key) override {
    std::lock_guard lock(mu_);
    auto it = objects_.find(key);
    if (it == objects_.end()) return not_found(key);
    return ObjectInfo{it->first, it->second->size()};
  }

  Result<std::vector<ObjectInfo>> list(std::string_view prefix) override {
    std::lock_guard lock(mu_);
    std::vector<ObjectInfo> out;
    for (auto it = objects_.lower_bound(prefix);
         it != objects_.end() && it->first.starts_with(prefix); ++it) {
      out.push_back({it->first, it->second->size()});
    }
    return out;
  }

  Result<std::unique_ptr<ObjectHandle>> open(std::string_view key) override {
    std::lock_guard lock(mu_);
    auto it = objects_.find(key);
    if (it == objects_.end()) return not_found(key);
    return std::make_unique<MemHandle>(it->first, it->second);
  }

  Result<std::unique_ptr<ObjectWriter>> create(std::string_view key) override {
    if (key.empty()) return fail(Errc::kInvalidArgument, "mem:// object key is empty");
    return std::make_unique<MemWriter>(*this, std::string(key));
  }

  Result<std::unique_ptr<IoQueue>> make_queue(const QueueOptions& options) override {
    FEEDLINE_TRY(host_memory_only(options));
    return std::make_unique<MemQueue>(options.depth);
  }

  BackendCaps caps() const override { return {1, MemQueue::kMaxRequest, true}; }

  void put(std::string key, std::vector<std::byte> bytes) {
    auto blob = std::make_shared<const std::vector<std::byte>>(std::move(bytes));
    std::lock_guard lock(mu_);
    objects_[std::move(key)] = std::move(blob);
  }

 private:
  static std::unexpected<Error> not_found(std::string_view key) {
    return fail(Error(Errc::kNotFound, "no such object").with_object(fmt::format("mem://{}", key)));
  }
  std::mutex mu_;
  std::map<std::string, Blob, std::less<>> objects_;
};

Result<void> MemWriter::commit() {
  backend_.put(std::move(key_), std::move(bytes_));
  return {};
}

}  // namespace

Result<Resolved> open_mem_url(const ParsedUrl& url, const BackendConfig&) {
  std::string key = url.authority + url.path;
  return Resolved{std::make_unique<MemBackend>(), std::move(key)};
}

}  // namespace feedline::storage::detail
