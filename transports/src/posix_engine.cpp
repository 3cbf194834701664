// The POSIX engine: a pool of threads, each doing blocking pread(2) calls; and the pool itself
// (detail/pool_engine.hpp), which the cuFile engine shares with a different blocking read.
//
// submit() appends to a shared pending list and wakes workers; a worker reads until its request is
// complete (looping over short reads, retrying EINTR/EAGAIN), then appends it to the done list and
// wakes the reaper. One mutex guards both lists: the pool exists for portability, for kernels
// without io_uring and for cuFile's synchronous reads, not for the last percent of speed.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "detail/pool_engine.hpp"
#include "feedline/core/clock.hpp"
#include "feedline/transports/file_engine.hpp"

namespace feedline::transports {
namespace {

class PoolEngine final : public FileEngine {
 public:
  PoolEngine(std::string name, unsigned threads, detail::BlockingRead read,
             std::vector<std::string> notes)
      : name_(std::move(name)), read_(std::move(read)), notes_(std::move(notes)) {
    const unsigned n = std::clamp(threads, 1u, 256u);
    workers_.reserve(n);
    for (unsigned i = 0; i < n; ++i) {
      workers_.emplace_back([this] { work(); });
    }
  }

  ~PoolEngine() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    work_cv_.notify_all();
    workers_.clear();  // joins
  }

  Result<void> register_buffers(std::span<const MutableBytes>) override {
    return fail(Errc::kUnsupported, fmt::format("the {} engine has no registered buffers", name_));
  }
  Result<int> register_file(int) override {
    return fail(Errc::kUnsupported, fmt::format("the {} engine has no registered files", name_));
  }

  void submit(std::span<FileRead* const> reads) noexcept override {
    if (reads.empty()) return;
    {
      std::lock_guard lock(mu_);
      for (FileRead* r : reads) {
        r->done = 0;
        r->error = 0;
        r->resubmits = 0;
        pending_.push_back(r);
      }
      in_flight_ += reads.size();
    }
    if (reads.size() == 1) {
      work_cv_.notify_one();
    } else {
      work_cv_.notify_all();
    }
  }

  std::size_t reap(std::span<FileRead*> out, std::size_t min_complete,
                   std::chrono::nanoseconds timeout) noexcept override {
    std::unique_lock lock(mu_);
    const std::size_t want = std::min(min_complete, out.size());
    if (done_.size() < want) {
      done_cv_.wait_for(lock, timeout, [&] { return done_.size() >= want; });
    }
    const std::size_t n = std::min(out.size(), done_.size());
    for (std::size_t i = 0; i < n; ++i) {
      out[i] = done_.front();
      done_.pop_front();
    }
    in_flight_ -= n;
    return n;
  }

  void cancel_all() noexcept override {
    std::lock_guard lock(mu_);
    for (FileRead* r : pending_) {
      r->error = ECANCELED;
      done_.push_back(r);
    }
    pending_.clear();
    done_cv_.notify_all();
  }

  std::size_t in_flight() const noexcept override {
    std::lock_guard lock(mu_);
    return in_flight_;
  }

  EngineInfo info() const override {
    return {name_, {fmt::format("threads={}", workers_.size())}, notes_};
  }

 private:
  void work() {
    for (;;) {
      FileRead* r = nullptr;
      {
        std::unique_lock lock(mu_);
        work_cv_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
        if (pending_.empty()) return;  // stopping, and nothing left to read
        r = pending_.front();
        pending_.pop_front();
      }
      r->issued_ns = now_ns();
      read_(*r);
      {
        std::lock_guard lock(mu_);
        done_.push_back(r);
      }
      done_cv_.notify_one();
    }
  }

  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<FileRead*> pending_;
  std::deque<FileRead*> done_;
  std::size_t in_flight_ = 0;
  bool stopping_ = false;
  std::string name_;
  detail::BlockingRead read_;
  std::vector<std::string> notes_;
  std::vector<std::jthread> workers_;  // last: joined before the lists above are destroyed
};

void pread_fully(FileRead& r) noexcept {
  while (r.done < r.length) {
    const ssize_t n =
        ::pread(r.fd, r.dst + r.done, r.length - r.done, static_cast<off_t>(r.offset + r.done));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) {
        ++r.resubmits;
        continue;
      }
      // EINVAL after progress is O_DIRECT reaching end of file mid-block: a short read.
      if (!(errno == EINVAL && r.done > 0)) r.error = errno;
      return;
    }
    if (n == 0) return;  // end of file: a short read
    r.done += static_cast<std::uint32_t>(n);
    if (r.done < r.length) ++r.resubmits;
  }
}

unsigned posix_threads(const EngineOptions& o) {
  return o.posix_threads ? o.posix_threads : std::max(1u, o.depth);
}

}  // namespace

std::unique_ptr<FileEngine> detail::make_pool_engine(std::string name, unsigned threads,
                                                     BlockingRead read,
                                                     std::vector<std::string> notes) {
  return std::make_unique<PoolEngine>(std::move(name), threads, std::move(read), std::move(notes));
}

Result<std::unique_ptr<FileEngine>> make_posix_engine(const EngineOptions& options) {
  return detail::make_pool_engine("posix", posix_threads(options), pread_fully, {});
}

std::string_view engine_name(EngineKind kind) noexcept {
  switch (kind) {
    case EngineKind::kAuto:
      return "auto";
    case EngineKind::kUring:
      return "uring";
    case EngineKind::kPosix:
      return "posix";
  }
  return "auto";
}

Result<EngineKind> parse_engine(std::string_view text) {
  if (text == "auto") return EngineKind::kAuto;
  if (text == "uring" || text == "io_uring") return EngineKind::kUring;
  if (text == "posix" || text == "psync" || text == "pread") return EngineKind::kPosix;
  return fail(Errc::kInvalidArgument,
              fmt::format("unknown engine '{}' (choose uring, posix or auto)", text));
}

Result<std::unique_ptr<FileEngine>> make_file_engine(EngineKind kind,
                                                     const EngineOptions& options) {
  switch (kind) {
    case EngineKind::kUring:
      return make_uring_engine(options);
    case EngineKind::kPosix:
      return make_posix_engine(options);
    case EngineKind::kAuto:
      break;
  }
  auto uring = make_uring_engine(options);
  if (uring) return uring;
  return detail::make_pool_engine(
      "posix", posix_threads(options), pread_fully,
      {fmt::format("io_uring unavailable, using posix: {}", uring.error().what())});
}

}  // namespace feedline::transports
