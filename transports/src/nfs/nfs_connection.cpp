// NfsConnection: one libnfs context driven by one thread. See nfs_client.hpp for why; the
// numbered rules of a connection's thread are here:
//
// 1. Only the connection's thread touches its nfs_context, its open-file table and its RPC table.
//    Other threads only push into the inbox (under inbox_mu_) and write the eventfd.
// 2. Every RPC sent carries an Rpc record owned by rpcs_. A callback first checks Rpc::dead: a
//    context being torn down may still call back (nfs_destroy_context cancels what is queued), and
//    those calls must do nothing. Records are freed after the context is destroyed.
// 3. The connection breaks when nfs_service() fails, when a callback reports a transport error,
//    or when an RPC has had no answer for options.timeout. Then: every RPC is marked dead, its read
//    goes back to the pending list (one attempt spent), the context is destroyed, open files are
//    forgotten (their NFSv4 state died with the session), and a new context connects after a
//    backoff (100 ms doubling to 1 s). Pending reads whose deadline passes fail with kTimeout.
// 4. A read ends exactly once: finish() removes it from every list before telling its sink.
// 5. A read its caller cancelled ends within one turn of the loop (~100 ms) wherever it is: in the
//    inbox or pending (failed there), on the wire (its Rpc is marked abandoned: the answer, if one
//    comes, is dropped, and the bytes were never ours to copy: libnfs reads into its own buffer),
//    or waiting for a mount that nobody else waits for (the mount is given up).
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "detail/nfs_util.hpp"
#include "feedline/core/clock.hpp"
#include "feedline/core/thread_name.hpp"
#include "feedline/core/unique_fd.hpp"

namespace feedline::transports {

using namespace detail;

// --- NfsConnection -----------------------------------------------------------------------------

class NfsConnection::Impl {
 public:
  Impl(NfsUrl url, std::string exp, NfsOptions options, unsigned index)
      : url_(std::move(url)), export_(std::move(exp)), options_(options), index_(index) {}

  ~Impl() {
    stop_.store(true);
    wake();
    if (thread_.joinable()) thread_.join();
  }

  Result<void> start() {
    event_fd_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!event_fd_) return fail(Error::from_errno(errno, "eventfd"));
    thread_ = std::thread([this] {
      name_this_thread("fl-nfs");
      run();
    });
    return {};
  }

  void submit(NfsRead* r) {
    const std::uint64_t budget = static_cast<std::uint64_t>(options_.timeout.count()) *
                                 1'000'000ull * std::max(1u, options_.max_attempts);
    r->deadline_ns = now_ns() + budget;
    r->done = r->copied = 0;
    r->attempts = 0;
    r->sent_ns = 0;
    r->rtt_ns.clear();
    r->error.reset();
    {
      std::lock_guard lock(inbox_mu_);
      inbox_.push_back(r);
    }
    wake();
  }

  std::atomic<std::uint64_t> readmax{kDefaultIoMax};
  std::atomic<std::uint64_t> reconnects{0};
  std::atomic<std::uint64_t> retries{0};

 private:
  // Files stay open on a connection while they are used, and idle ones are closed once more
  // than this many are open. NFSv4 open state is per (open-owner, file) and libnfs 4.0 has one
  // open-owner per context: two opens of one file share a stateid and a CLOSE ends both. So a
  // connection opens each path once, and a path being closed is reopened only after the CLOSE
  // is answered.
  static constexpr std::size_t kMaxOpenFiles = 256;

  enum class Kind { kRead, kOpen, kClose };
  struct Rpc {
    Impl* self;
    Kind kind;
    NfsRead* read = nullptr;  // kRead; null once abandoned
    std::string path;         // kOpen, kClose
    std::uint64_t sent_ns = 0;
    bool dead = false;
    bool abandoned = false;  // rule 5: the read was cancelled and has ended
  };
  struct File {
    enum class State { kOpening, kOpen, kClosing } state = State::kOpening;
    nfsfh* fh = nullptr;
    std::vector<NfsRead*> waiting;  // for the open (or the close, then a new open)
    std::size_t busy = 0;           // reads on the wire with this handle
    std::uint64_t last_used = 0;
  };

  void wake() {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(event_fd_.get(), &one, sizeof one);
  }

  void run() {
    while (!stop_.load()) {
      if (!nfs_ && now_ns() >= next_connect_ns_) connect();
      take_inbox();
      while (nfs_ && !broken_ && !pending_.empty()) {
        NfsRead* r = pending_.front();
        pending_.pop_front();
        issue(r);
      }
      if (nfs_ && !broken_) close_idle();
      expire(now_ns());
      if (broken_) teardown();

      pollfd fds[2] = {{event_fd_.get(), POLLIN, 0}, {-1, 0, 0}};
      nfds_t n = 1;
      if (nfs_) {
        fds[1] = {nfs_get_fd(nfs_), static_cast<short>(nfs_which_events(nfs_)), 0};
        n = 2;
      }
      int wait_ms = 100;  // libnfs's RPC timeouts need nfs_service() every 100 ms or so
      if (!nfs_) {
        const std::uint64_t t = now_ns();
        wait_ms = next_connect_ns_ > t ? static_cast<int>(std::min<std::uint64_t>(
                                             100, (next_connect_ns_ - t) / 1'000'000 + 1))
                                       : 0;
      }
      if (::poll(fds, n, wait_ms) < 0 && errno != EINTR) break;
      if (fds[0].revents & POLLIN) {
        std::uint64_t v;
        [[maybe_unused]] const ssize_t rd = ::read(event_fd_.get(), &v, sizeof v);
      }
      if (nfs_) {
        if (nfs_service(nfs_, n == 2 ? fds[1].revents : 0) < 0) {
          broken_reason_ = fmt::format("connection lost: {}", error_text(nfs_));
          broken_ = true;
        }
        if (broken_) teardown();
      }
    }
    shutdown();
  }

  void connect() {
    auto ctx = make_context(url_, options_, client_name("io", index_, generation_));
    if (!ctx) {
      fail_all_pending(ctx.error());
      next_connect_ns_ = now_ns() + 1'000'000'000ull;
      return;
    }
    // Given up when the connection closes, or when every read waiting for it was cancelled
    // (rule 5): expire() then ends them.
    nfs_context* nfs = *ctx;
    std::string detail;
    const int rc = run_async(
        nfs, options_.timeout, [this] { return stop_.load() || nobody_waits(); }, detail,
        [this](nfs_context* n, nfs_cb cb, void* priv) {
          return nfs_mount_async(n, url_.server.c_str(), export_.c_str(), cb, priv);
        });
    if (rc != 0) {
      broken_reason_ = fmt::format("cannot reconnect: {}", detail);
      if (nfs) nfs_destroy_context(nfs);
      backoff_ms_ = backoff_ms_ == 0 ? 100 : std::min<std::uint64_t>(1000, backoff_ms_ * 2);
      next_connect_ns_ = now_ns() + backoff_ms_ * 1'000'000ull;
      return;
    }
    nfs_ = nfs;
    backoff_ms_ = 0;
    if (generation_ > 0) reconnects.fetch_add(1);
    ++generation_;
    readmax.store(io_max(nfs_get_readmax(nfs_)));
  }

  void take_inbox() {
    std::lock_guard lock(inbox_mu_);
    for (NfsRead* r : inbox_) pending_.push_back(r);
    inbox_.clear();
  }

  bool cancelled(const NfsRead* r) const {
    return r->cancel_epoch && r->cancel_epoch->load(std::memory_order_acquire) > r->epoch;
  }

  // Reads wait for a mount, and every one of them was cancelled.
  bool nobody_waits() {
    take_inbox();
    return !pending_.empty() && std::all_of(pending_.begin(), pending_.end(),
                                            [this](const NfsRead* r) { return cancelled(r); });
  }

  void issue(NfsRead* r) {
    if (cancelled(r)) {
      finish(r, std::make_unique<Error>(Errc::kCancelled, "read cancelled"));
      return;
    }
    auto [it, inserted] = files_.try_emplace(r->path);
    File& f = it->second;
    f.last_used = ++tick_;
    if (inserted) {
      f.waiting.push_back(r);
      start_open(it->first, f);
      return;
    }
    if (f.state == File::State::kOpen) {
      send_read(r, f);
    } else {
      f.waiting.push_back(r);
    }
  }

  // NFSv4.0 numbers the OPENs and CLOSEs of an open-owner (one per libnfs context) with a seqid
  // and the server takes them strictly in order: two in flight at once get BAD_SEQID or
  // BAD_STATEID. So a connection has at most one OPEN or CLOSE on the wire; others queue here.
  // On failure to queue, the connection is marked broken; teardown() collects f.waiting.
  void start_open(const std::string& path, File& f) {
    f.state = File::State::kOpening;
    state_ops_.push_back({Kind::kOpen, path, nullptr});
    next_state_op();
  }

  void next_state_op() {
    while (!state_op_busy_ && !state_ops_.empty() && nfs_ && !broken_) {
      StateOp op = std::move(state_ops_.front());
      state_ops_.pop_front();
      auto rpc = std::make_unique<Rpc>(Rpc{this, op.kind, nullptr, op.path, now_ns(), false});
      const int rc = op.kind == Kind::kOpen
                         ? nfs_open_async(nfs_, op.path.c_str(), O_RDONLY, &Impl::rpc_cb, rpc.get())
                         : nfs_close_async(nfs_, op.fh, &Impl::rpc_cb, rpc.get());
      if (rc < 0) {
        broken_reason_ = fmt::format("cannot queue an open or close: {}", error_text(nfs_));
        broken_ = true;
        return;
      }
      state_op_busy_ = true;
      rpcs_.emplace(rpc.get(), std::move(rpc));
    }
  }

  void send_read(NfsRead* r, File& f) {
    const std::uint64_t now = now_ns();
    if (r->sent_ns == 0) r->sent_ns = now;
    ++r->attempts;
    auto rpc = std::make_unique<Rpc>(Rpc{this, Kind::kRead, r, {}, now, false});
    const int rc = nfs_pread_async(nfs_, f.fh, r->offset + r->done, r->length - r->done,
                                   &Impl::rpc_cb, rpc.get());
    if (rc < 0) {
      broken_reason_ = fmt::format("cannot queue a read: {}", error_text(nfs_));
      broken_ = true;
      requeue(r);
      return;
    }
    ++f.busy;
    rpcs_.emplace(rpc.get(), std::move(rpc));
  }

  // Closes the least recently used idle files while more than kMaxOpenFiles are open.
  void close_idle() {
    while (files_.size() > kMaxOpenFiles) {
      File* victim = nullptr;
      const std::string* path = nullptr;
      for (auto& [p, f] : files_) {
        if (f.state == File::State::kOpen && f.busy == 0 && f.waiting.empty() &&
            (!victim || f.last_used < victim->last_used)) {
          victim = &f;
          path = &p;
        }
      }
      if (!victim) return;
      state_ops_.push_back({Kind::kClose, *path, victim->fh});
      victim->state = File::State::kClosing;
      victim->fh = nullptr;
      next_state_op();
      if (broken_) return;
      // A closing file still counts until its CLOSE is answered; stop when only those remain.
      std::size_t open = 0;
      for (auto& [p, f] : files_) open += f.state != File::State::kClosing;
      if (open <= kMaxOpenFiles) return;
    }
  }

  // Rule 2: a dead record means the context is being destroyed.
  static void rpc_cb(int err, nfs_context*, void* data, void* priv) {
    auto* rpc = static_cast<Rpc*>(priv);
    if (rpc->dead) return;
    Impl* self = rpc->self;
    auto owned = std::move(self->rpcs_.at(rpc));
    self->rpcs_.erase(rpc);
    if (rpc->abandoned) return;  // rule 5: its read has ended
    switch (rpc->kind) {
      case Kind::kRead:
        self->on_read(*rpc, err, data);
        break;
      case Kind::kOpen:
        self->state_op_busy_ = false;
        self->on_open(*rpc, err, data);
        break;
      case Kind::kClose:
        self->state_op_busy_ = false;
        self->on_close(*rpc);
        break;
    }
    self->next_state_op();
  }

  void on_open(const Rpc& rpc, int err, void* data) {
    auto it = files_.find(rpc.path);
    if (it == files_.end()) return;
    File& f = it->second;
    if (err < 0) {
      const std::string detail = data ? static_cast<const char*>(data) : "";
      if (is_transport_error(err, detail)) {
        broken_reason_ = fmt::format("open failed: {}", detail);
        broken_ = true;  // teardown() requeues f.waiting
        return;
      }
      Error e = make_error(err, "opening for read", detail, url_.version);
      if (-err == ENOENT)
        e.with_hint("the file is gone: was it deleted or replaced during the run?");
      std::vector<NfsRead*> waiting;
      waiting.swap(f.waiting);
      files_.erase(it);  // a later read tries again
      for (NfsRead* r : waiting) finish(r, std::make_unique<Error>(e));
      return;
    }
    f.state = File::State::kOpen;
    f.fh = static_cast<nfsfh*>(data);
    std::vector<NfsRead*> waiting;
    waiting.swap(f.waiting);
    for (NfsRead* r : waiting) send_read(r, f);
  }

  void on_close(const Rpc& rpc) {
    auto it = files_.find(rpc.path);
    if (it == files_.end() || it->second.state != File::State::kClosing) return;
    if (it->second.waiting.empty()) {
      files_.erase(it);
    } else {
      start_open(it->first, it->second);
    }
  }

  void on_read(const Rpc& rpc, int err, void* data) {
    NfsRead* r = rpc.read;
    r->rtt_ns.push_back(now_ns() - rpc.sent_ns);
    auto f = files_.find(r->path);
    if (f != files_.end() && f->second.busy > 0) --f->second.busy;
    if (err < 0) {
      const std::string detail = data ? static_cast<const char*>(data) : "";
      if (is_transport_error(err, detail)) {
        broken_reason_ = fmt::format("read failed: {}", detail);
        broken_ = true;
        requeue(r);
        return;
      }
      Error e = make_error(err, "read", detail, url_.version);
      if (-err == ESTALE || -err == ENOENT) {
        e.with_hint("the file handle went stale: was the file deleted or replaced during the run?");
      }
      finish(r, std::make_unique<Error>(std::move(e)));
      return;
    }
    const auto got = std::min<std::uint64_t>(static_cast<std::uint64_t>(err), r->length - r->done);
    // libnfs 4.0 owns `data` only for the duration of this callback: copy it out here.
    if (got > 0) std::memcpy(r->dst + r->done, data, got);
    r->done += got;
    r->copied += got;
    if (got == 0 || r->done == r->length) {
      finish(r, nullptr);
      return;
    }
    // A short answer before the end of the file: ask for the rest (not a new attempt).
    if (f == files_.end() || f->second.state != File::State::kOpen) {
      requeue(r);
      return;
    }
    --r->attempts;
    send_read(r, f->second);
  }

  // Back to the pending list after a transport failure, while attempts and time remain.
  void requeue(NfsRead* r) {
    if (r->attempts >= std::max(1u, options_.max_attempts) || now_ns() > r->deadline_ns) {
      finish(r, std::make_unique<Error>(
                    Error(Errc::kTimeout,
                          fmt::format("gave up after {} attempts: {}", r->attempts, broken_reason_))
                        .with_sys_errno(ETIMEDOUT)
                        .with_hint(hint_for(Errc::kTimeout, url_.version))));
      return;
    }
    if (r->attempts > 0) retries.fetch_add(1);
    pending_.push_back(r);
  }

  void expire(std::uint64_t now) {
    const auto timeout = static_cast<std::uint64_t>(options_.timeout.count()) * 1'000'000ull;
    for (auto it = pending_.begin(); it != pending_.end();) {
      NfsRead* r = *it;
      if (now > r->deadline_ns) {
        it = pending_.erase(it);
        finish(
            r,
            std::make_unique<Error>(
                Error(Errc::kTimeout,
                      fmt::format("no answer from the server within {} ms ({} attempts){}",
                                  options_.timeout.count() * std::max(1u, options_.max_attempts),
                                  r->attempts, broken_reason_.empty() ? "" : ": " + broken_reason_))
                    .with_sys_errno(ETIMEDOUT)
                    .with_hint(hint_for(Errc::kTimeout, url_.version))));
      } else if (cancelled(r)) {
        it = pending_.erase(it);
        finish(r, std::make_unique<Error>(Errc::kCancelled, "read cancelled"));
      } else {
        ++it;
      }
    }
    // Rule 5: cancelled reads on the wire end now; their RPCs stay until answered (or dropped).
    for (const auto& [p, rpc] : rpcs_) {
      if (rpc->kind != Kind::kRead || rpc->abandoned || !cancelled(rpc->read)) continue;
      rpc->abandoned = true;
      NfsRead* r = std::exchange(rpc->read, nullptr);
      if (auto f = files_.find(r->path); f != files_.end() && f->second.busy > 0) --f->second.busy;
      finish(r, std::make_unique<Error>(Errc::kCancelled, "read cancelled"));
    }
    for (const auto& [p, rpc] : rpcs_) {
      if (now > rpc->sent_ns + timeout) {
        broken_reason_ = fmt::format("no answer to an RPC for {} ms", options_.timeout.count());
        broken_ = true;
        break;
      }
    }
  }

  // Rule 3.
  void teardown() {
    broken_ = false;
    std::vector<NfsRead*> reads = drop_context();
    next_connect_ns_ = now_ns() + 100'000'000ull;
    for (NfsRead* r : reads) requeue(r);
  }

  // Marks every RPC dead, destroys the context (open files die with it) and returns the reads
  // that were on the wire or waiting for an open.
  std::vector<NfsRead*> drop_context() {
    std::vector<NfsRead*> reads;
    for (auto& [p, rpc] : rpcs_) {
      rpc->dead = true;
      if (rpc->kind == Kind::kRead && !rpc->abandoned) reads.push_back(rpc->read);
    }
    for (auto& [path, f] : files_) {
      for (NfsRead* r : f.waiting) reads.push_back(r);
      f.waiting.clear();
      if (f.state == File::State::kOpen && nfs_) release(f.fh);
    }
    for (const StateOp& op : state_ops_) {
      if (op.kind == Kind::kClose && nfs_) release(op.fh);
    }
    files_.clear();
    state_ops_.clear();
    state_op_busy_ = false;
    if (nfs_) nfs_destroy_context(nfs_);
    nfs_ = nullptr;
    rpcs_.clear();
    return reads;
  }

  // libnfs frees a handle only when a CLOSE for it completes, and nfs_destroy_context() does not
  // free open handles: queue a CLOSE that the destruction right after cancels (libnfs frees the
  // handle in that callback). The server forgets the state with the old session.
  void release(nfsfh* fh) { nfs_close_async(nfs_, fh, &Impl::ignore_cb, nullptr); }
  static void ignore_cb(int, nfs_context*, void*, void*) {}

  void fail_all_pending(const Error& e) {
    while (!pending_.empty()) {
      NfsRead* r = pending_.front();
      pending_.pop_front();
      finish(r, std::make_unique<Error>(e));
    }
  }

  void shutdown() {
    take_inbox();
    std::vector<NfsRead*> reads(pending_.begin(), pending_.end());
    pending_.clear();
    // Nothing is in flight when the owner goes (its queues are gone): close the files (one CLOSE
    // at a time, as always), giving the server at most a second before the context is dropped.
    if (nfs_ && !broken_ && rpcs_.empty()) {
      for (auto& [path, f] : files_) {
        if (f.state != File::State::kOpen) continue;
        state_ops_.push_back({Kind::kClose, path, f.fh});
        f.state = File::State::kClosing;
        f.fh = nullptr;
      }
      const std::uint64_t deadline = now_ns() + 1'000'000'000ull;
      next_state_op();
      while (nfs_ && !broken_ && state_op_busy_ && now_ns() < deadline) {
        pollfd pfd{nfs_get_fd(nfs_), static_cast<short>(nfs_which_events(nfs_)), 0};
        if (::poll(&pfd, 1, 100) < 0 && errno != EINTR) break;
        if (nfs_service(nfs_, pfd.revents) < 0) break;
      }
    }
    for (NfsRead* r : drop_context()) reads.push_back(r);
    for (NfsRead* r : reads)
      finish(r, std::make_unique<Error>(Errc::kCancelled, "the NFS connection closed"));
  }

  // Rule 4.
  void finish(NfsRead* r, std::unique_ptr<Error> e) {
    r->error = std::move(e);
    r->sink->on_nfs_read(*r);
  }

  NfsUrl url_;
  std::string export_;
  NfsOptions options_;
  unsigned index_;
  UniqueFd event_fd_;  // wakes the thread; the destructor joins the thread before it closes
  std::thread thread_;
  std::atomic<bool> stop_{false};

  std::mutex inbox_mu_;
  std::vector<NfsRead*> inbox_;

  // The thread's own (rule 1):
  nfs_context* nfs_ = nullptr;
  unsigned generation_ = 0;
  std::uint64_t next_connect_ns_ = 0;
  std::uint64_t backoff_ms_ = 0;
  std::uint64_t tick_ = 0;
  bool broken_ = false;
  std::string broken_reason_;
  std::deque<NfsRead*> pending_;
  std::unordered_map<Rpc*, std::unique_ptr<Rpc>> rpcs_;
  std::unordered_map<std::string, File> files_;
  struct StateOp {
    Kind kind;
    std::string path;
    nfsfh* fh;  // kClose
  };
  std::deque<StateOp> state_ops_;
  bool state_op_busy_ = false;
};

NfsConnection::NfsConnection(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NfsConnection::~NfsConnection() = default;

Result<std::unique_ptr<NfsConnection>> NfsConnection::start(const NfsUrl& url,
                                                            std::string export_path,
                                                            const NfsOptions& options,
                                                            unsigned index) {
  auto impl = std::make_unique<Impl>(url, std::move(export_path), options, index);
  FEEDLINE_TRY(impl->start());
  return std::unique_ptr<NfsConnection>(new NfsConnection(std::move(impl)));
}

void NfsConnection::submit(NfsRead* read) { impl_->submit(read); }
std::uint64_t NfsConnection::readmax() const noexcept { return impl_->readmax.load(); }
std::uint64_t NfsConnection::reconnects() const noexcept { return impl_->reconnects.load(); }
std::uint64_t NfsConnection::retries() const noexcept { return impl_->retries.load(); }

}  // namespace feedline::transports
