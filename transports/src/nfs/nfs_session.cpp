// NfsSession: metadata and writes over one libnfs context, under one lock. Each call is libnfs's
// asynchronous form driven here on the caller's thread (detail::run_async), so that it ends within
// about 100 ms of NfsOptions::stop: libnfs's synchronous calls wait in their own poll() loop and
// cannot be interrupted (a server that accepted and never answers held Ctrl-C for the whole
// timeout, times every retry).
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <stop_token>
#include <thread>

#include "detail/nfs_util.hpp"
#include "feedline/core/redact.hpp"

namespace feedline::transports {

using namespace detail;

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

namespace {

std::function<bool()> stopped_by(const std::stop_token& stop) {
  return [stop] { return stop.stop_requested(); };
}

Error interrupted(std::string object) {
  return Error(Errc::kCancelled, "interrupted").with_object(std::move(object));
}

// Mounts `exp` on a new context: the context, or the error's rc and detail (no context then).
int mount(const NfsUrl& url, const NfsOptions& options, const std::string& exp,
          const std::string& client, nfs_context*& out, std::string& detail) {
  out = nullptr;
  auto ctx = make_context(url, options, client);
  if (!ctx) {
    detail = ctx.error().message();
    return -EINVAL;
  }
  nfs_context* nfs = *ctx;
  const int rc = run_async(nfs, options.timeout, stopped_by(options.stop), detail,
                           [&](nfs_context* n, nfs_cb cb, void* priv) {
                             return nfs_mount_async(n, url.server.c_str(), exp.c_str(), cb, priv);
                           });
  if (rc != 0) {
    if (nfs) nfs_destroy_context(nfs);
    return rc < 0 ? rc : -EIO;
  }
  out = nfs;
  return 0;
}

// Sleeps `d` unless stop is requested first; false when it was.
bool backoff(const std::stop_token& stop, std::chrono::milliseconds d) {
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock lock(m);
  cv.wait_for(lock, stop, d, [] { return false; });
  return !stop.stop_requested();
}

}  // namespace

Result<std::unique_ptr<NfsSession>> NfsSession::connect(const NfsUrl& url,
                                                        const NfsOptions& options) {
  std::unique_ptr<NfsSession> s(new NfsSession(url, options));
  const std::string shown = redact_url(url.text);
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
    if (options.stop.stop_requested()) return fail(interrupted(shown));
    nfs_context* nfs = nullptr;
    std::string detail;
    const int rc =
        mount(url, options, exp, client_name("meta", 0, s->state_->generation++), nfs, detail);
    if (rc == 0) {
      s->state_->nfs = nfs;
      s->export_ = exp;
      s->readmax_ = io_max(nfs_get_readmax(nfs));
      return s;
    }
    if (rc == -ECANCELED && options.stop.stop_requested()) return fail(interrupted(shown));
    if (rc == -EINVAL) return fail(Error(Errc::kInvalidArgument, detail).with_object(shown));
    if (is_transport_error(rc, detail)) {
      return fail(Error(rc == -ETIMEDOUT ? Errc::kTimeout : Errc::kIo,
                        fmt::format("cannot reach the NFS server {}: {}", url.server, detail))
                      .with_sys_errno(-rc)
                      .with_object(shown)
                      .with_hint(hint_for(Errc::kIo, url.version)));
    }
    if (-rc == EACCES || -rc == EPERM) {
      return fail(
          make_error(rc, fmt::format("mounting {}", exp), detail, url.version).with_object(shown));
    }
    tried += tried.empty() ? exp : ", " + exp;
  }
  return fail(
      Error(Errc::kNotFound, fmt::format("the server {} exports none of {}", url.server, tried))
          .with_object(shown)
          .with_hint("check the export path (the server's EXPORT Path/Pseudo)"));
}

namespace {
// Runs fn(nfs, detail) -> rc on the session's context, reconnecting and retrying transport
// failures up to max_attempts times. Holds the session's lock. Once stop is requested: -ECANCELED
// at once (detail "interrupted"), also from within a call or a backoff.
template <typename Fn>
int session_call(const NfsUrl& url, const NfsOptions& options, const std::string& exp,
                 std::mutex& mu, nfs_context*& nfs, unsigned& generation,
                 std::atomic<std::uint64_t>& reconnects, std::string& detail, Fn&& fn) {
  std::lock_guard lock(mu);
  int rc = -EIO;
  auto stopped = [&] {
    detail = "interrupted";
    return -ECANCELED;
  };
  for (unsigned attempt = 0; attempt < std::max(1u, options.max_attempts); ++attempt) {
    if (options.stop.stop_requested()) return stopped();
    if (attempt > 0 && !backoff(options.stop, std::chrono::milliseconds(std::min(
                                                  1000u, 100u << std::min(attempt, 4u))))) {
      return stopped();
    }
    if (!nfs) {
      rc = mount(url, options, exp, client_name("meta", 0, generation++), nfs, detail);
      if (rc != 0) {
        if (rc == -ECANCELED && options.stop.stop_requested()) return stopped();
        if (rc == -EINVAL || !is_transport_error(rc, detail)) return rc;
        continue;
      }
      reconnects.fetch_add(1);
    }
    rc = fn(nfs, detail);
    if (rc >= 0) return rc;
    if (options.stop.stop_requested())
      return stopped();  // run_async dropped a context it gave up on
    if (!is_transport_error(rc, detail)) return rc;
    if (nfs) nfs_destroy_context(nfs);
    nfs = nullptr;
  }
  return rc;
}

// A failed call's error: kCancelled "interrupted" after a stop, else from the errno and libnfs's
// message, naming the object.
Error call_error(int rc, std::string_view what, const std::string& detail, int version,
                 std::string object) {
  if (rc == -ECANCELED && detail == "interrupted") return interrupted(std::move(object));
  return make_error(rc, what, detail, version).with_object(std::move(object));
}

// One libnfs call on the session's context, bounded and stoppable (see run_async).
int call(nfs_context*& nfs, const NfsOptions& options, std::string& detail, const NfsStart& start,
         const NfsDone& on_done = {}) {
  return run_async(nfs, options.timeout, stopped_by(options.stop), detail, start, on_done);
}

// libnfs frees a handle only when a CLOSE for it completes; nfs_destroy_context() does not free
// open handles. A CLOSE queued just before the context is dropped is cancelled by the drop, and
// libnfs frees the handle in that callback.
void release(nfs_context* nfs, nfsfh* fh) {
  if (nfs && fh)
    nfs_close_async(
        nfs, fh, [](int, nfs_context*, void*, void*) {}, nullptr);
}
}  // namespace

#define FEEDLINE_NFS_CALL(detail, fn)                                                             \
  session_call(url_, options_, export_, state_->mu, state_->nfs, state_->generation, reconnects_, \
               detail, fn)

namespace {
std::string url_of(const NfsUrl& url, const std::string& exp, const std::string& path) {
  return fmt::format("nfs://{}{}{}", url.server, exp == "/" ? "" : exp, path);
}
}  // namespace

Result<NfsStat> NfsSession::stat(const std::string& path) {
  NfsStat out;
  std::string detail;
  const int rc = FEEDLINE_NFS_CALL(detail, [&](nfs_context*& nfs, std::string& d) {
    return call(
        nfs, options_, d,
        [&](nfs_context* n, nfs_cb cb, void* priv) {
          return nfs_stat64_async(n, path.c_str(), cb, priv);
        },
        [&](int, void* data) {
          const auto* st = static_cast<const nfs_stat_64*>(data);
          out = NfsStat{st->nfs_size, S_ISDIR(st->nfs_mode), S_ISREG(st->nfs_mode)};
        });
  });
  if (rc < 0)
    return fail(call_error(rc, "stat", detail, url_.version, url_of(url_, export_, path)));
  return out;
}

Result<std::vector<NfsDirEntry>> NfsSession::list_dir(const std::string& path) {
  std::vector<NfsDirEntry> out;
  std::string detail;
  const int rc = FEEDLINE_NFS_CALL(detail, [&](nfs_context*& nfs, std::string& d) {
    out.clear();
    const char* dir_path = path.empty() ? "/" : path.c_str();
    return call(
        nfs, options_, d,
        [&](nfs_context* n, nfs_cb cb, void* priv) {
          return nfs_opendir_async(n, dir_path, cb, priv);
        },
        [&](int, void* data) {
          // libnfs read the whole directory: walking it is local.
          auto* dir = static_cast<nfsdir*>(data);
          while (nfsdirent* e = nfs_readdir(nfs, dir)) {
            const std::string_view name(e->name);
            if (name == "." || name == "..") continue;
            out.push_back({std::string(name), e->size, S_ISDIR(e->mode), S_ISREG(e->mode)});
          }
          nfs_closedir(nfs, dir);
        });
  });
  if (rc < 0)
    return fail(call_error(rc, "listing", detail, url_.version, url_of(url_, export_, path)));
  return out;
}

Result<void> NfsSession::mkdir_p(const std::string& dir) {
  for (std::size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string part = dir.substr(0, pos);
    if (part == "/" || part.empty()) continue;
    std::string detail;
    const int rc = FEEDLINE_NFS_CALL(detail, [&](nfs_context*& nfs, std::string& d) {
      return call(nfs, options_, d, [&](nfs_context* n, nfs_cb cb, void* priv) {
        return nfs_mkdir_async(n, part.c_str(), cb, priv);
      });
    });
    if (rc < 0 && rc != -EEXIST) {
      return fail(call_error(rc, "creating the directory", detail, url_.version,
                             url_of(url_, export_, part)));
    }
  }
  return {};
}

Result<void> NfsSession::write_at(const std::string& path, std::uint64_t offset, const void* data,
                                  std::uint64_t size, bool truncate) {
  std::string detail;
  std::uint64_t written = 0;
  const int rc = FEEDLINE_NFS_CALL(detail, [&](nfs_context*& nfs, std::string& d) {
    nfsfh* fh = nullptr;
    // libnfs 4.0 sends O_CREAT as a guarded NFSv4 create (EXIST on an existing file), and
    // ignores the mode: create once, then fchmod to 0644 like the file backend's files (its
    // path-based nfs_chmod breaks the NFSv4 open seqid: the next open fails with BAD_SEQID).
    const int flags = truncate ? O_WRONLY | O_CREAT | O_TRUNC : O_WRONLY;
    int r = call(
        nfs, options_, d,
        [&](nfs_context* n, nfs_cb cb, void* priv) {
          return nfs_open2_async(n, path.c_str(), flags, 0644, cb, priv);
        },
        [&](int, void* h) { fh = static_cast<nfsfh*>(h); });
    if (r < 0) return r;
    // On a failure below the handle is released (its context may be dropped right after).
    if (truncate) {
      r = call(nfs, options_, d, [&](nfs_context* n, nfs_cb cb, void* priv) {
        return nfs_fchmod_async(n, fh, 0644, cb, priv);
      });
      if (r < 0) {
        release(nfs, fh);
        return r;
      }
    }
    const std::uint64_t chunk = url_.version == 4 ? kNfs4WriteMax : io_max(nfs_get_writemax(nfs));
    written = 0;
    while (written < size) {
      const std::uint64_t n = std::min(chunk, size - written);
      const char* src = static_cast<const char*>(data) + written;
      r = call(nfs, options_, d, [&](nfs_context* c, nfs_cb cb, void* priv) {
        return nfs_pwrite_async(c, fh, offset + written, n, src, cb, priv);
      });
      if (r < 0) break;
      if (r == 0) {
        r = -EIO;
        d = "the server wrote 0 bytes";
        break;
      }
      written += static_cast<std::uint64_t>(r);
    }
    if (r < 0) {
      release(nfs, fh);
      return r;
    }
    return call(nfs, options_, d, [&](nfs_context* n, nfs_cb cb, void* priv) {
      return nfs_close_async(n, fh, cb, priv);
    });
  });
  if (rc < 0) {
    Error e = call_error(rc, "writing", detail, url_.version, url_of(url_, export_, path));
    if (e.code() != Errc::kCancelled) e.with_offset(offset + written);
    return fail(std::move(e));
  }
  return {};
}

Result<void> NfsSession::rename(const std::string& from, const std::string& to) {
  std::string detail;
  const int rc = FEEDLINE_NFS_CALL(detail, [&](nfs_context*& nfs, std::string& d) {
    return call(nfs, options_, d, [&](nfs_context* n, nfs_cb cb, void* priv) {
      return nfs_rename_async(n, from.c_str(), to.c_str(), cb, priv);
    });
  });
  if (rc < 0)
    return fail(
        call_error(rc, "rename into place", detail, url_.version, url_of(url_, export_, to)));
  return {};
}

Result<void> NfsSession::unlink(const std::string& path) {
  std::string detail;
  const int rc = FEEDLINE_NFS_CALL(detail, [&](nfs_context*& nfs, std::string& d) {
    return call(nfs, options_, d, [&](nfs_context* n, nfs_cb cb, void* priv) {
      return nfs_unlink_async(n, path.c_str(), cb, priv);
    });
  });
  if (rc < 0)
    return fail(call_error(rc, "unlink", detail, url_.version, url_of(url_, export_, path)));
  return {};
}

#undef FEEDLINE_NFS_CALL
}  // namespace feedline::transports
