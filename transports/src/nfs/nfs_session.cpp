// NfsSession: metadata and writes over one libnfs context, with synchronous calls under one lock.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <thread>

#include "detail/nfs_util.hpp"

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
int session_call(const NfsUrl& url, const NfsOptions& options, const std::string& exp, std::mutex& mu,
                 nfs_context*& nfs, unsigned& generation, std::atomic<std::uint64_t>& reconnects,
                 std::string& detail, Fn&& fn) {
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
  session_call(url_, options_, export_, state_->mu, state_->nfs, state_->generation, reconnects_, detail, fn)

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
}  // namespace feedline::transports
