// libnfs behind feedline's NfsSession (metadata, writes) and NfsConnection (reads, one thread each).
// See the header for the threading and reconnect design; the numbered rules of a connection's
// thread are here:
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
#include "feedline/transports/nfs_client.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

// clang-format off
#include <nfsc/libnfs.h>
// clang-format on

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "feedline/core/clock.hpp"

namespace feedline::transports {
namespace {

constexpr std::uint64_t kDefaultIoMax = 1 << 20;  // libnfs 4.0 reports 0 for NFSv4 readmax
// libnfs 4.0 encodes an NFSv4 WRITE into a fixed buffer of about 4 KiB: larger writes fail with
// "ZDR error: Failed to encode COMPOUND4args" (fixed in later libnfs with an allocation hint).
// Writes (dataset generation only) therefore go in 2 KiB pieces over NFSv4: slow, but correct.
constexpr std::uint64_t kNfs4WriteMax = 2048;

std::string hint_for(Errc code, int version) {
  switch (code) {
    case Errc::kNotFound: return "check the path on the server";
    case Errc::kPermissionDenied:
      return "check the file's permissions and the export's Access_Type/Squash settings; requests "
             "run as this user's uid unless the URL says ?uid=";
    case Errc::kTimeout:
    case Errc::kIo:
      return version == 4 ? "is the server up? NFSv4 listens on TCP port 2049 unless the URL says ?nfsport="
                          : "is the server up? NFSv3 needs rpcbind (port 111) and mountd on the server";
    default: return "";
  }
}

bool is_transport_error(int rc, std::string_view detail);

// A negative errno and libnfs's message -> an Error with a hint ("is the server up?" only for
// transport failures, not for errors the server answered with).
Error make_error(int rc, std::string_view what, std::string_view detail, int version) {
  const int err = rc < 0 ? -rc : EIO;
  Error e = Error::from_errno(err, what);
  if (!detail.empty()) {
    e = Error(e.code(), fmt::format("{}: {}", what, detail)).with_sys_errno(err);
  }
  if (e.code() == Errc::kIo && !is_transport_error(rc, detail)) return e;
  if (auto h = hint_for(e.code(), version); !h.empty()) e.with_hint(std::move(h));
  return e;
}

// Transport failures, as libnfs 4.0 reports them: the socket failed ("nfs_service failed", EIO),
// an RPC timed out, or the connection was reset. A server that answers with an NFS error status
// gives the errno of that status (ENOENT, EACCES, ...) and is not retried here.
bool is_transport_error(int rc, std::string_view detail) {
  switch (-rc) {
    case ETIMEDOUT: case ECONNRESET: case ECONNREFUSED: case ENOTCONN: case EPIPE: case EFAULT:
    case EINTR: case ECANCELED:
      return true;
    case EIO:
      return detail.find("NFS4ERR_IO") == std::string_view::npos &&
             detail.find("NFS3ERR_IO") == std::string_view::npos;
    default:
      return false;
  }
}

std::string error_text(nfs_context* nfs) {
  const char* e = nfs ? nfs_get_error(nfs) : nullptr;
  return e ? std::string(e) : std::string();
}

// A context with the URL's arguments (version, nfsport, uid, ...) applied by libnfs's own parser,
// libnfs's reconnect off (we reconnect, see the header), RPC timeouts on.
Result<nfs_context*> make_context(const NfsUrl& url, const NfsOptions& options, const std::string& client) {
  nfs_context* nfs = nfs_init_context();
  if (!nfs) return fail(Errc::kResourceExhausted, "cannot create an NFS context (nfs_init_context)");
  nfs_url* parsed = nfs_parse_url_incomplete(nfs, url.text.c_str());
  if (!parsed) {
    Error e(Errc::kInvalidArgument, fmt::format("bad NFS URL: {}", error_text(nfs)));
    nfs_destroy_context(nfs);
    return fail(std::move(e).with_object(url.text));
  }
  nfs_destroy_url(parsed);
  nfs_set_autoreconnect(nfs, 0);
  // libnfs takes whole seconds.
  const auto ms = std::max<std::int64_t>(1000, (options.timeout.count() + 999) / 1000 * 1000);
  nfs_set_timeout(nfs, static_cast<int>(ms));
  nfs_set_dircache(nfs, 0);  // listings must see what another client just wrote
  if (url.version == 4) nfs4_set_client_name(nfs, client.c_str());
  return nfs;
}

std::string client_name(std::string_view role, unsigned index, unsigned generation) {
  return fmt::format("feedline-{}-{}-{}-{}", ::getpid(), role, index, generation);
}

std::uint64_t io_max(std::uint64_t reported) { return reported == 0 ? kDefaultIoMax : reported; }

}  // namespace

// --- URL ---------------------------------------------------------------------------------------

Result<NfsUrl> parse_nfs_url(std::string_view text) {
  NfsUrl url;
  url.text = std::string(text);
  auto bad = [&](std::string msg) {
    return fail(Error(Errc::kInvalidArgument, std::move(msg))
                    .with_object(url.text)
                    .with_hint("write nfs://server/export/path[?version=4&nfsport=2049]"));
  };
  if (!text.starts_with("nfs://")) return bad("not an nfs:// URL");
  std::string_view rest = text.substr(6);
  const auto q = rest.find('?');
  if (q != std::string_view::npos) {
    url.query = std::string(rest.substr(q + 1));
    rest = rest.substr(0, q);
  }
  const auto slash = rest.find('/');
  url.server = std::string(rest.substr(0, slash));
  if (url.server.empty()) return bad("no server in the URL");
  url.path = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  // Let libnfs check the arguments it owns (unknown ones, bad numbers).
  nfs_context* nfs = nfs_init_context();
  if (!nfs) return fail(Errc::kResourceExhausted, "cannot create an NFS context (nfs_init_context)");
  nfs_url* parsed = nfs_parse_url_incomplete(nfs, url.text.c_str());
  if (!parsed) {
    std::string e = error_text(nfs);
    nfs_destroy_context(nfs);
    return bad(fmt::format("libnfs cannot parse it: {}", e));
  }
  nfs_destroy_url(parsed);
  nfs_destroy_context(nfs);
  for (std::string_view args = url.query; !args.empty();) {
    const auto amp = args.find('&');
    const std::string_view kv = args.substr(0, amp);
    args = amp == std::string_view::npos ? std::string_view() : args.substr(amp + 1);
    if (kv == "version=4") url.version = 4;
    else if (kv == "version=3") url.version = 3;
    else if (kv.starts_with("version=")) return bad("version must be 3 or 4");
  }
  return url;
}

// --- NfsSession --------------------------------------------------------------------------------

struct NfsSession::State {
  std::mutex mu;
  nfs_context* nfs = nullptr;
  unsigned generation = 0;
};

NfsSession::NfsSession(NfsUrl url, NfsOptions options)
    : url_(std::move(url)), options_(options), state_(std::make_unique<State>()) {}

NfsSession::~NfsSession() {
  if (state_->nfs) nfs_destroy_context(state_->nfs);
}

Result<std::unique_ptr<NfsSession>> NfsSession::connect(const NfsUrl& url, const NfsOptions& options) {
  std::unique_ptr<NfsSession> s(new NfsSession(url, options));
  // The export is the shortest leading part of the path that mounts.
  std::vector<std::string> candidates;
  for (std::size_t pos = 1; pos <= url.path.size(); ++pos) {
    if (pos == url.path.size() || url.path[pos] == '/') {
      if (pos > 1) candidates.push_back(url.path.substr(0, pos));
    }
  }
  if (candidates.empty()) candidates.push_back("/");
  std::string tried;
  for (const std::string& exp : candidates) {
    FEEDLINE_ASSIGN_OR_RETURN(nfs_context * nfs,
                              make_context(url, options, client_name("meta", 0, s->state_->generation++)));
    const int rc = nfs_mount(nfs, url.server.c_str(), exp.c_str());
    if (rc == 0) {
      s->state_->nfs = nfs;
      s->export_ = exp;
      s->readmax_ = io_max(nfs_get_readmax(nfs));
      return s;
    }
    const std::string detail = error_text(nfs);
    nfs_destroy_context(nfs);
    if (is_transport_error(rc, detail)) {
      return fail(Error(Errc::kIo, fmt::format("cannot reach the NFS server {}: {}", url.server, detail))
                      .with_sys_errno(-rc)
                      .with_object(url.text)
                      .with_hint(hint_for(Errc::kIo, url.version)));
    }
    if (-rc == EACCES || -rc == EPERM) {
      return fail(make_error(rc, fmt::format("mounting {}", exp), detail, url.version).with_object(url.text));
    }
    tried += tried.empty() ? exp : ", " + exp;
  }
  return fail(Error(Errc::kNotFound, fmt::format("the server {} exports none of {}", url.server, tried))
                  .with_object(url.text)
                  .with_hint("check the export path (the server's EXPORT Path/Pseudo)"));
}

namespace {
// Runs fn(nfs) -> rc on the session's context, reconnecting and retrying transport failures up
// to max_attempts times. Holds the session's lock.
template <typename Fn>
int session_call(NfsSession& self, const NfsUrl& url, const NfsOptions& options, const std::string& exp,
                 std::mutex& mu, nfs_context*& nfs, unsigned& generation,
                 std::atomic<std::uint64_t>& reconnects, std::string& detail, Fn&& fn) {
  (void)self;
  std::lock_guard lock(mu);
  int rc = -EIO;
  for (unsigned attempt = 0; attempt < std::max(1u, options.max_attempts); ++attempt) {
    if (attempt > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(1000u, 100u << std::min(attempt, 4u))));
    }
    if (!nfs) {
      auto ctx = make_context(url, options, client_name("meta", 0, generation++));
      if (!ctx) {
        detail = ctx.error().message();
        return -EINVAL;
      }
      rc = nfs_mount(*ctx, url.server.c_str(), exp.c_str());
      if (rc != 0) {
        detail = error_text(*ctx);
        nfs_destroy_context(*ctx);
        if (!is_transport_error(rc, detail)) return rc;
        continue;
      }
      nfs = *ctx;
      reconnects.fetch_add(1);
    }
    rc = fn(nfs);
    if (rc >= 0) return rc;
    detail = error_text(nfs);
    if (!is_transport_error(rc, detail)) return rc;
    nfs_destroy_context(nfs);
    nfs = nullptr;
  }
  return rc;
}
}  // namespace

#define FEEDLINE_NFS_CALL(detail, fn) \
  session_call(*this, url_, options_, export_, state_->mu, state_->nfs, state_->generation, reconnects_, detail, fn)

namespace {
std::string url_of(const NfsUrl& url, const std::string& exp, const std::string& path) {
  return fmt::format("nfs://{}{}{}", url.server, exp == "/" ? "" : exp, path);
}
}  // namespace

Result<NfsStat> NfsSession::stat(const std::string& path) {
  nfs_stat_64 st{};
  std::string detail;
  const int rc = FEEDLINE_NFS_CALL(detail, [&](nfs_context* nfs) { return nfs_stat64(nfs, path.c_str(), &st); });
  if (rc < 0) return fail(make_error(rc, "stat", detail, url_.version).with_object(url_of(url_, export_, path)));
  return NfsStat{st.nfs_size, S_ISDIR(st.nfs_mode), S_ISREG(st.nfs_mode)};
}

Result<std::vector<NfsDirEntry>> NfsSession::list_dir(const std::string& path) {
  std::vector<NfsDirEntry> out;
  std::string detail;
  const int rc = FEEDLINE_NFS_CALL(detail, [&](nfs_context* nfs) {
    out.clear();
    nfsdir* dir = nullptr;
    const int r = nfs_opendir(nfs, path.empty() ? "/" : path.c_str(), &dir);
    if (r < 0) return r;
    while (nfsdirent* e = nfs_readdir(nfs, dir)) {
      const std::string_view name(e->name);
      if (name == "." || name == "..") continue;
      out.push_back({std::string(name), e->size, S_ISDIR(e->mode), S_ISREG(e->mode)});
    }
    nfs_closedir(nfs, dir);
    return 0;
  });
  if (rc < 0) return fail(make_error(rc, "listing", detail, url_.version).with_object(url_of(url_, export_, path)));
  return out;
}

Result<void> NfsSession::mkdir_p(const std::string& dir) {
  for (std::size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string part = dir.substr(0, pos);
    if (part == "/" || part.empty()) continue;
    std::string detail;
    const int rc = FEEDLINE_NFS_CALL(detail, [&](nfs_context* nfs) { return nfs_mkdir(nfs, part.c_str()); });
    if (rc < 0 && rc != -EEXIST) {
      return fail(make_error(rc, "creating the directory", detail, url_.version).with_object(url_of(url_, export_, part)));
    }
  }
  return {};
}

Result<void> NfsSession::write_at(const std::string& path, std::uint64_t offset, const void* data,
                                  std::uint64_t size, bool truncate) {
  std::string detail;
  std::uint64_t written = 0;
  const int rc = FEEDLINE_NFS_CALL(detail, [&](nfs_context* nfs) {
    nfsfh* fh = nullptr;
    // libnfs 4.0 sends O_CREAT as a guarded NFSv4 create (EXIST on an existing file), and
    // ignores the mode: create once, then fchmod to 0644 like the file backend's files (its
    // path-based nfs_chmod breaks the NFSv4 open seqid: the next open fails with BAD_SEQID).
    int r = nfs_open2(nfs, path.c_str(), truncate ? O_WRONLY | O_CREAT | O_TRUNC : O_WRONLY, 0644, &fh);
    if (r < 0) return r;
    if (truncate && (r = nfs_fchmod(nfs, fh, 0644)) < 0) {
      nfs_close(nfs, fh);
      return r;
    }
    const std::uint64_t chunk = url_.version == 4 ? kNfs4WriteMax : io_max(nfs_get_writemax(nfs));
    written = 0;
    while (written < size) {
      const std::uint64_t n = std::min(chunk, size - written);
      r = nfs_pwrite(nfs, fh, offset + written, n, static_cast<const char*>(data) + written);
      if (r < 0) break;
      if (r == 0) {
        r = -EIO;
        break;
      }
      written += static_cast<std::uint64_t>(r);
    }
    const int c = nfs_close(nfs, fh);
    return r < 0 ? r : c;
  });
  if (rc < 0) {
    return fail(make_error(rc, "writing", detail, url_.version)
                    .with_object(url_of(url_, export_, path))
                    .with_offset(offset + written));
  }
  return {};
}

Result<void> NfsSession::rename(const std::string& from, const std::string& to) {
  std::string detail;
  const int rc = FEEDLINE_NFS_CALL(detail, [&](nfs_context* nfs) { return nfs_rename(nfs, from.c_str(), to.c_str()); });
  if (rc < 0) return fail(make_error(rc, "rename into place", detail, url_.version).with_object(url_of(url_, export_, to)));
  return {};
}

Result<void> NfsSession::unlink(const std::string& path) {
  std::string detail;
  const int rc = FEEDLINE_NFS_CALL(detail, [&](nfs_context* nfs) { return nfs_unlink(nfs, path.c_str()); });
  if (rc < 0) return fail(make_error(rc, "unlink", detail, url_.version).with_object(url_of(url_, export_, path)));
  return {};
}

#undef FEEDLINE_NFS_CALL

// --- NfsConnection -----------------------------------------------------------------------------

class NfsConnection::Impl {
 public:
  Impl(NfsUrl url, std::string exp, NfsOptions options, unsigned index)
      : url_(std::move(url)), export_(std::move(exp)), options_(options), index_(index) {}

  ~Impl() {
    stop_.store(true);
    wake();
    if (thread_.joinable()) thread_.join();
    if (event_fd_ >= 0) ::close(event_fd_);
  }

  Result<void> start() {
    event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (event_fd_ < 0) return fail(Error::from_errno(errno, "eventfd"));
    thread_ = std::thread([this] { run(); });
    return {};
  }

  void submit(NfsRead* r) {
    const std::uint64_t budget = static_cast<std::uint64_t>(options_.timeout.count()) * 1'000'000ull *
                                 std::max(1u, options_.max_attempts);
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
    NfsRead* read = nullptr;  // kRead
    std::string path;         // kOpen, kClose
    std::uint64_t sent_ns = 0;
    bool dead = false;
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
    [[maybe_unused]] const ssize_t n = ::write(event_fd_, &one, sizeof one);
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

      pollfd fds[2] = {{event_fd_, POLLIN, 0}, {-1, 0, 0}};
      nfds_t n = 1;
      if (nfs_) {
        fds[1] = {nfs_get_fd(nfs_), static_cast<short>(nfs_which_events(nfs_)), 0};
        n = 2;
      }
      int wait_ms = 100;  // libnfs's RPC timeouts need nfs_service() every 100 ms or so
      if (!nfs_) {
        const std::uint64_t t = now_ns();
        wait_ms = next_connect_ns_ > t
                      ? static_cast<int>(std::min<std::uint64_t>(100, (next_connect_ns_ - t) / 1'000'000 + 1))
                      : 0;
      }
      if (::poll(fds, n, wait_ms) < 0 && errno != EINTR) break;
      if (fds[0].revents & POLLIN) {
        std::uint64_t v;
        [[maybe_unused]] const ssize_t rd = ::read(event_fd_, &v, sizeof v);
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
    const int rc = nfs_mount(*ctx, url_.server.c_str(), export_.c_str());
    if (rc != 0) {
      broken_reason_ = fmt::format("cannot reconnect: {}", error_text(*ctx));
      nfs_destroy_context(*ctx);
      backoff_ms_ = backoff_ms_ == 0 ? 100 : std::min<std::uint64_t>(1000, backoff_ms_ * 2);
      next_connect_ns_ = now_ns() + backoff_ms_ * 1'000'000ull;
      return;
    }
    nfs_ = *ctx;
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
    const int rc = nfs_pread_async(nfs_, f.fh, r->offset + r->done, r->length - r->done, &Impl::rpc_cb, rpc.get());
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
    switch (rpc->kind) {
      case Kind::kRead: self->on_read(*rpc, err, data); break;
      case Kind::kOpen: self->state_op_busy_ = false; self->on_open(*rpc, err, data); break;
      case Kind::kClose: self->state_op_busy_ = false; self->on_close(*rpc); break;
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
      if (-err == ENOENT) e.with_hint("the file is gone: was it deleted or replaced during the run?");
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
                    Error(Errc::kTimeout, fmt::format("gave up after {} attempts: {}", r->attempts, broken_reason_))
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
        finish(r, std::make_unique<Error>(
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
    std::vector<NfsRead*> reads = drop_context(false);
    next_connect_ns_ = now_ns() + 100'000'000ull;
    for (NfsRead* r : reads) requeue(r);
  }

  // Marks every RPC dead, destroys the context (open files die with it) and returns the reads
  // that were on the wire or waiting for an open.
  std::vector<NfsRead*> drop_context(bool close_files) {
    std::vector<NfsRead*> reads;
    for (auto& [p, rpc] : rpcs_) {
      rpc->dead = true;
      if (rpc->kind == Kind::kRead) reads.push_back(rpc->read);
    }
    for (auto& [path, f] : files_) {
      for (NfsRead* r : f.waiting) reads.push_back(r);
      f.waiting.clear();
      if (close_files && f.state == File::State::kOpen && nfs_) nfs_close(nfs_, f.fh);
    }
    files_.clear();
    state_ops_.clear();
    state_op_busy_ = false;
    if (nfs_) nfs_destroy_context(nfs_);
    nfs_ = nullptr;
    rpcs_.clear();
    return reads;
  }

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
    // Nothing is in flight when the owner goes (its queues are gone): close files cleanly.
    const bool idle = rpcs_.empty();
    for (NfsRead* r : drop_context(idle)) reads.push_back(r);
    for (NfsRead* r : reads) finish(r, std::make_unique<Error>(Errc::kCancelled, "the NFS connection closed"));
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
  int event_fd_ = -1;
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

Result<std::unique_ptr<NfsConnection>> NfsConnection::start(const NfsUrl& url, std::string export_path,
                                                            const NfsOptions& options, unsigned index) {
  auto impl = std::make_unique<Impl>(url, std::move(export_path), options, index);
  FEEDLINE_TRY(impl->start());
  return std::unique_ptr<NfsConnection>(new NfsConnection(std::move(impl)));
}

void NfsConnection::submit(NfsRead* read) { impl_->submit(read); }
std::uint64_t NfsConnection::readmax() const noexcept { return impl_->readmax.load(); }
std::uint64_t NfsConnection::reconnects() const noexcept { return impl_->reconnects.load(); }
std::uint64_t NfsConnection::retries() const noexcept { return impl_->retries.load(); }

}  // namespace feedline::transports
