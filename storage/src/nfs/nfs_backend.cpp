// The NFS backend: stat, listing, open and writes through one NfsSession (synchronous, bounded),
// reads through a pool of NfsConnections shared by every queue of the backend (--connections,
// like the kernel's nconnect).
//
// A ReadOp is split into reads of at most the server's read size (1 MiB when libnfs does not
// say), spread round-robin over the connections, so one large read uses every connection. The
// op completes when its last piece is back; poll() runs completions in the caller's thread, as
// every queue does. libnfs 4.0 hands read data to its callback in its own buffer: the connection
// thread copies it into the op's destination there, and the queue counts those bytes in
// counters::kCopiedBytes (one copy per byte delivered, against the file backend's zero).
//
// Keys are paths inside the export ("/ds/shard-000000.tar"); errors name the full nfs:// URL.
// Writes (for `gen` and the conformance suite) go to a temporary name and are renamed into place
// on commit, so an abandoned writer leaves no object.
#include "nfs_backend.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "feedline/core/clock.hpp"
#include "feedline/storage/queue_parts.hpp"
#include "feedline/transports/nfs_client.hpp"

namespace feedline::storage::detail {
namespace {

using transports::NfsConnection;
using transports::NfsRead;
using transports::NfsSession;

std::string join(const std::string& dir, const std::string& name) {
  return dir.ends_with('/') ? dir + name : dir + "/" + name;
}

// The connections and what the session and they count, shared by the backend and its queues.
class Pool {
 public:
  Pool(std::shared_ptr<NfsSession> session, transports::NfsOptions options, unsigned connections)
      : session_(std::move(session)), options_(options), count_(std::max(1u, connections)) {}

  Result<void> start() {
    std::lock_guard lock(mu_);
    if (!conns_.empty()) return {};
    for (unsigned i = 0; i < count_; ++i) {
      FEEDLINE_ASSIGN_OR_RETURN(
          auto c, NfsConnection::start(session_->url(), session_->export_path(), options_, i));
      conns_.push_back(std::move(c));
    }
    return {};
  }

  NfsConnection& next() {
    return *conns_[next_.fetch_add(1, std::memory_order_relaxed) % conns_.size()];
  }
  std::uint64_t readmax() const {
    return conns_.empty() ? session_->readmax() : conns_.front()->readmax();
  }

  // Reconnects since the last call (each counted once, by whichever queue asks first).
  std::uint64_t take_new_reconnects() {
    std::uint64_t total = session_->reconnects();
    {
      std::lock_guard lock(mu_);
      for (auto& c : conns_) total += c->reconnects();
    }
    const std::uint64_t before = reported_reconnects_.exchange(total);
    return total > before ? total - before : 0;
  }

  unsigned count() const noexcept { return count_; }
  NfsSession& session() { return *session_; }

 private:
  std::shared_ptr<NfsSession> session_;
  transports::NfsOptions options_;
  unsigned count_;
  std::mutex mu_;
  std::vector<std::unique_ptr<NfsConnection>> conns_;
  std::atomic<std::uint64_t> next_{0};
  std::atomic<std::uint64_t> reported_reconnects_{0};
};

std::string url_of(NfsSession& s, const std::string& key) {
  const std::string& exp = s.export_path();
  return fmt::format("nfs://{}{}{}", s.url().server, exp == "/" ? "" : exp, key);
}

// The size seen at open() and the URL for errors. The file itself is opened by each connection
// on its first read (and kept open there), not here.
class NfsHandle final : public ObjectHandle {
 public:
  NfsHandle(std::string key, std::uint64_t size, std::string url)
      : ObjectHandle(std::move(key), size), url_(std::move(url)) {}
  const std::string& url() const noexcept { return url_; }
  std::string display_name() const override { return url_; }

 private:
  std::string url_;
};

class NfsQueue final : public IoQueue, public transports::NfsReadSink {
 public:
  static constexpr std::uint64_t kMaxRequest = 1ull << 30;

  NfsQueue(unsigned depth, std::shared_ptr<Pool> pool)
      : IoQueue(depth, kMaxRequest), pool_(std::move(pool)) {
    // Always present, so a report shows "0 reconnects" rather than nothing.
    mutable_stats().start(
        {&counters::kCopiedBytes, &counters::kReconnects, &counters::kNfsRetries, &counters::kRtt});
  }

  // Ops still on a connection may be writing into callers' buffers: cancel what has not been
  // sent, then wait for every piece to come back (completions are not run).
  ~NfsQueue() override {
    cancel();
    done_.wait_idle();
  }

  void cancel() override { epoch_.fetch_add(1, std::memory_order_acq_rel); }

  QueueInfo info() const override {
    QueueInfo i{"nfs", {}, {}};
    i.features.push_back(fmt::format("nfsv{}", const_cast<Pool&>(*pool_).session().url().version));
    i.features.push_back(fmt::format("connections={}", pool_->count()));
    i.features.push_back(fmt::format("rsize={}", pool_->readmax()));
    i.notes.push_back(
        "libnfs 4.0 returns read data in its own buffer: each byte is copied once (copied_bytes)");
    return i;
  }

  // On a connection's thread. The last piece of an op hands the op over (the acq_rel count orders
  // the other pieces' writes before it).
  void on_nfs_read(NfsRead& read) noexcept override {
    auto* slot = static_cast<Slot*>(read.user);
    if (slot->left.fetch_sub(1, std::memory_order_acq_rel) == 1) done_.push(slot);
  }

 protected:
  void do_submit(std::span<ReadOp* const> ops) override {
    const std::uint64_t piece = std::max<std::uint64_t>(4096, pool_->readmax());
    for (ReadOp* op : ops) {
      const auto* h = dynamic_cast<const NfsHandle*>(op->object);
      if (!h) {
        complete_at_next_poll(*op,
                              fail(Error(Errc::kInvalidArgument, "the op names no nfs:// object")
                                       .with_object(op->object->display_name())
                                       .with_offset(op->offset)));
        continue;
      }
      if (op->length == 0) {
        complete_at_next_poll(*op, std::uint64_t{0});
        continue;
      }
      Slot* s = slots_.acquire();
      s->op = op;
      const std::size_t n = static_cast<std::size_t>((op->length + piece - 1) / piece);
      s->pieces.clear();
      s->pieces.resize(n);
      const std::uint64_t epoch = epoch_.load(std::memory_order_acquire);
      for (std::size_t i = 0; i < n; ++i) {
        NfsRead& r = s->pieces[i];
        r.path = h->key();
        r.offset = op->offset + i * piece;
        r.length = std::min(piece, op->length - i * piece);
        r.dst = op->dst.data() + i * piece;
        r.sink = this;
        r.user = s;
        r.cancel_epoch = &epoch_;
        r.epoch = epoch;
      }
      s->left.store(n, std::memory_order_relaxed);
      done_.expect();
      for (NfsRead& r : s->pieces) pool_->next().submit(&r);
    }
  }

  std::size_t do_poll(std::size_t min_complete, std::chrono::nanoseconds timeout) override {
    std::size_t n = 0;
    if (min_complete > 0) done_.wait(min_complete, timeout);
    ready_.clear();
    done_.drain(ready_);
    for (Slot* s : ready_) {
      finish(*s);
      ++n;
    }
    if (const std::uint64_t r = pool_->take_new_reconnects(); r > 0)
      mutable_stats().count(counters::kReconnects) += r;
    return n;
  }

 private:
  struct Slot {
    ReadOp* op = nullptr;
    std::vector<NfsRead> pieces;
    std::atomic<std::size_t> left{0};  // pieces not back yet
  };

  void finish(Slot& s) noexcept {
    ReadOp& op = *s.op;
    const auto* h = dynamic_cast<const NfsHandle*>(op.object);
    std::uint32_t retries = 0;
    std::uint64_t got = 0, copied = 0, issued = 0;
    bool gap = false;
    const NfsRead* failed = nullptr;
    auto& hist = mutable_stats().histogram(counters::kRtt);
    for (const NfsRead& r : s.pieces) {
      if (r.attempts > 1) retries += r.attempts - 1;
      for (std::uint64_t rtt : r.rtt_ns) hist.record(rtt);
      copied += r.copied;
      if (r.sent_ns != 0 && (issued == 0 || r.sent_ns < issued)) issued = r.sent_ns;
      if (r.error && !failed) failed = &r;
      if (!gap) {
        got += r.done;
        gap = r.done < r.length;
      }
    }
    mutable_stats().count(counters::kCopiedBytes) += copied;
    mutable_stats().count(counters::kNfsRetries) += retries;
    if (failed) {
      Error e = *failed->error;
      if (e.code() != Errc::kCancelled && h) e.with_object(h->url()).with_offset(failed->offset);
      op.result = fail(std::move(e));
    } else {
      // The size was taken at open(): an object that now ends earlier was changed under us.
      const std::uint64_t size = h ? h->size() : 0;
      const std::uint64_t expected = op.offset < size ? std::min(op.length, size - op.offset) : 0;
      if (got < expected) {
        op.result =
            fail(Error(Errc::kIo, fmt::format("the object ends at {} but was {} bytes when opened",
                                              op.offset + got, size))
                     .with_object(h->url())
                     .with_offset(op.offset + got)
                     .with_hint("was it replaced or truncated during the run? Read a dataset "
                                "nothing writes to"));
      } else {
        op.result = got;
      }
    }
    op.times.issued_ns = issued;
    slots_.release(&s);
    complete(op, retries);
  }

  std::shared_ptr<Pool> pool_;
  std::atomic<std::uint64_t> epoch_{0};
  SlotPool<Slot> slots_;
  CompletionInbox<Slot*> done_;  // from the connections' threads; expects one per op sent
  std::vector<Slot*> ready_;     // the polling thread's
};

class NfsWriter final : public ObjectWriter {
 public:
  NfsWriter(std::shared_ptr<Pool> pool, std::string path, std::string tmp)
      : pool_(std::move(pool)), path_(std::move(path)), tmp_(std::move(tmp)) {}
  ~NfsWriter() override {
    if (!committed_) (void)pool_->session().unlink(tmp_);
  }
  Result<void> append(ConstBytes data) override {
    FEEDLINE_TRY(pool_->session().write_at(tmp_, written_, data.data(), data.size(), false));
    written_ += data.size();
    return {};
  }
  Result<void> commit() override {
    FEEDLINE_TRY(pool_->session().rename(tmp_, path_));
    committed_ = true;
    return {};
  }

 private:
  std::shared_ptr<Pool> pool_;
  std::string path_;
  std::string tmp_;
  std::uint64_t written_ = 0;
  bool committed_ = false;
};

class NfsBackend final : public Backend {
 public:
  explicit NfsBackend(std::shared_ptr<Pool> pool) : pool_(std::move(pool)) {}

  std::string_view scheme() const noexcept override { return "nfs"; }

  Result<ObjectInfo> stat(std::string_view key) override {
    const std::string path = normalize(key);
    FEEDLINE_ASSIGN_OR_RETURN(auto st, session().stat(path));
    if (st.is_dir) {
      return fail(Error(Errc::kIsDirectory, "expected a file, found a directory")
                      .with_object(url_of(session(), path)));
    }
    return ObjectInfo{path, st.size};
  }

  Result<std::vector<ObjectInfo>> list(std::string_view prefix) override {
    const std::string p = normalize(prefix);
    std::vector<ObjectInfo> out;
    const std::string dir_path = p.size() > 1 && p.ends_with('/') ? p.substr(0, p.size() - 1) : p;
    auto st = session().stat(dir_path);
    if (st && st->is_dir) {
      FEEDLINE_TRY(walk(dir_path, out));
    } else {
      const auto slash = p.rfind('/');
      const std::string dir = slash == 0 ? "/" : p.substr(0, slash);
      auto listed = session().list_dir(dir);
      if (!listed) return fail(!st ? std::move(st).error() : std::move(listed).error());
      for (const auto& e : *listed) {
        const std::string full = join(dir, e.name);
        if (e.is_regular && full.starts_with(p)) out.push_back({full, e.size});
      }
    }
    // Nothing there at all: say so with the URL (an empty directory is an empty listing).
    if (out.empty() && !st && st.error().code() == Errc::kNotFound)
      return fail(std::move(st).error());
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
    return out;
  }

  Result<std::unique_ptr<ObjectHandle>> open(std::string_view key) override {
    const std::string path = normalize(key);
    auto st = session().stat(path);
    if (!st) {
      Error e = std::move(st).error();
      e = Error(e.code(), fmt::format("opening for read: {}", e.message()))
              .with_sys_errno(e.sys_errno())
              .with_object(e.object())
              .with_hint(e.hint());
      return fail(std::move(e));
    }
    if (st->is_dir) {
      return fail(Error(Errc::kIsDirectory, "expected a file, found a directory")
                      .with_object(url_of(session(), path))
                      .with_hint("name a file inside it"));
    }
    if (!st->is_regular) {
      return fail(
          Error(Errc::kInvalidArgument, "not a regular file").with_object(url_of(session(), path)));
    }
    return std::make_unique<NfsHandle>(path, st->size, url_of(session(), path));
  }

  Result<std::unique_ptr<ObjectWriter>> create(std::string_view key) override {
    const std::string path = normalize(key);
    if (path == "/" || path.ends_with('/')) {
      return fail(Error(Errc::kInvalidArgument, "cannot create an object named by a directory path")
                      .with_object(url_of(session(), path)));
    }
    const auto slash = path.rfind('/');
    if (slash > 0) FEEDLINE_TRY(session().mkdir_p(path.substr(0, slash)));
    static std::atomic<std::uint64_t> counter{0};
    std::string tmp = fmt::format("{}.feedline-tmp-{}-{}", path, ::getpid(), counter.fetch_add(1));
    FEEDLINE_TRY(session().write_at(tmp, 0, nullptr, 0, true));
    return std::make_unique<NfsWriter>(pool_, path, std::move(tmp));
  }

  Result<std::unique_ptr<IoQueue>> make_queue(const QueueOptions& options) override {
    FEEDLINE_TRY(host_memory_only(options));
    FEEDLINE_TRY(pool_->start());
    return std::make_unique<NfsQueue>(options.depth, pool_);
  }

  BackendCaps caps() const override { return {1, NfsQueue::kMaxRequest, true, true}; }

  std::string display_name(std::string_view key) const override {
    return url_of(pool_->session(), normalize(key));
  }

 private:
  NfsSession& session() { return pool_->session(); }

  static std::string normalize(std::string_view key) {
    if (key.starts_with('/')) return std::string(key);
    std::string k = "/";
    k.append(key);
    return k;
  }

  Result<void> walk(const std::string& dir, std::vector<ObjectInfo>& out) {
    FEEDLINE_ASSIGN_OR_RETURN(auto entries, session().list_dir(dir));
    for (const auto& e : entries) {
      const std::string full = join(dir, e.name);
      if (e.is_dir) {
        FEEDLINE_TRY(walk(full, out));
      } else if (e.is_regular) {
        out.push_back({full, e.size});
      }
    }
    return {};
  }

  std::shared_ptr<Pool> pool_;
};

}  // namespace

Result<Resolved> open_nfs_url(const ParsedUrl& url, const BackendConfig& config) {
  FEEDLINE_ASSIGN_OR_RETURN(auto u, transports::parse_nfs_url(url.text));
  transports::NfsOptions options;
  options.timeout = config.nfs.timeout;
  options.max_attempts = std::max(1u, config.nfs.max_attempts);
  options.stop =
      config.stop;  // ends the session's metadata calls (the connections' reads end by cancel())
  FEEDLINE_ASSIGN_OR_RETURN(auto session, NfsSession::connect(u, options));
  const std::string& exp = session->export_path();
  // The path inside the export ("/ds/" for nfs://h/export/ds/), "/" for the export itself.
  std::string_view rest(u.path);
  if (exp != "/") rest.remove_prefix(std::min(exp.size(), rest.size()));
  std::string key(rest.empty() ? std::string_view("/") : rest);
  auto pool = std::make_shared<Pool>(std::shared_ptr<NfsSession>(std::move(session)), options,
                                     config.nfs.connections);
  return Resolved{std::make_unique<NfsBackend>(std::move(pool)), std::move(key)};
}

}  // namespace feedline::storage::detail
