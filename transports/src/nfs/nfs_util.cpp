// libnfs helpers and the nfs:// URL parser.
#include "detail/nfs_util.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "feedline/core/redact.hpp"

namespace feedline::transports {
namespace detail {

std::string hint_for(Errc code, int version) {
  switch (code) {
    case Errc::kNotFound:
      return "check the path on the server";
    case Errc::kPermissionDenied:
      return "check the file's permissions and the export's Access_Type/Squash settings; requests "
             "run as this user's uid unless the URL says ?uid=";
    case Errc::kTimeout:
    case Errc::kIo:
      return version == 4
                 ? "is the server up? NFSv4 listens on TCP port 2049 unless the URL says ?nfsport="
                 : "is the server up? NFSv3 needs rpcbind (port 111) and mountd on the server";
    default:
      return "";
  }
}

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

// Failures that a new connection can cure, as libnfs 4.0 reports them: the socket failed
// ("nfs_service failed", EIO), an RPC timed out, the connection was reset; or the server lost our
// NFSv4 state or asks us to come back (a restarted server: stale client id or stateid, grace
// period, DELAY), which libnfs reports under various errnos with the status in the message. Other
// statuses the server answers with (ENOENT, EACCES, ...) are final.
bool is_transport_error(int rc, std::string_view detail) {
  for (const char* status :
       {"NFS4ERR_STALE_CLIENTID", "NFS4ERR_STALE_STATEID", "NFS4ERR_BAD_STATEID",
        "NFS4ERR_OLD_STATEID", "NFS4ERR_EXPIRED", "NFS4ERR_BAD_SEQID", "NFS4ERR_GRACE",
        "NFS4ERR_DELAY", "NFS3ERR_JUKEBOX", "NFS4ERR_RESOURCE", "NFS4ERR_LEASE_MOVED",
        "NFS4ERR_ADMIN_REVOKED"}) {
    if (detail.find(status) != std::string_view::npos) return true;
  }
  switch (-rc) {
    case EPERM:
      // libnfs's synchronous calls return -1 when the request could not even start ("Failed to
      // start connection", a name that does not resolve); a server's refusal names its status.
      return detail.find("ERR_PERM") == std::string_view::npos &&
             detail.find("ERR_ACCES") == std::string_view::npos;
    case ETIMEDOUT:
    case ECONNRESET:
    case ECONNREFUSED:
    case ENOTCONN:
    case EPIPE:
    case EFAULT:
    case EINTR:
    case ECANCELED:
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
Result<nfs_context*> make_context(const NfsUrl& url, const NfsOptions& options,
                                  const std::string& client) {
  nfs_context* nfs = nfs_init_context();
  if (!nfs)
    return fail(Errc::kResourceExhausted, "cannot create an NFS context (nfs_init_context)");
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

namespace {
struct AsyncCall {
  const NfsDone* on_done = nullptr;
  bool finished = false;
  int status = 0;
  std::string error;
};

void async_cb(int err, nfs_context*, void* data, void* priv) {
  auto* call = static_cast<AsyncCall*>(priv);
  if (call->finished) return;
  call->finished = true;
  call->status = err;
  if (err < 0) {
    call->error = data ? static_cast<const char*>(data) : "";
  } else if (call->on_done && *call->on_done) {
    (*call->on_done)(err, data);
  }
}
}  // namespace

int run_async(nfs_context*& nfs, std::chrono::milliseconds timeout,
              const std::function<bool()>& give_up, std::string& detail, const NfsStart& start,
              const NfsDone& on_done) {
  AsyncCall call;
  call.on_done = &on_done;
  // The callback may run during the destruction: `call` outlives it here.
  auto drop = [&nfs, &call] {
    call.on_done = nullptr;
    nfs_destroy_context(nfs);
    nfs = nullptr;
  };
  if (start(nfs, &async_cb, &call) < 0) {
    detail = error_text(nfs);
    return -1;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout + std::chrono::milliseconds(200);
  while (!call.finished) {
    if (give_up && give_up()) {
      drop();
      detail = "interrupted";
      return -ECANCELED;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      drop();
      detail = fmt::format("no answer from the server within {} ms", timeout.count());
      return -ETIMEDOUT;
    }
    pollfd pfd{nfs_get_fd(nfs), static_cast<short>(nfs_which_events(nfs)), 0};
    if (::poll(&pfd, 1, 100) < 0 && errno != EINTR) {
      detail = fmt::format("poll: {}", std::strerror(errno));
      drop();
      return -EIO;
    }
    if (nfs_service(nfs, pfd.revents) < 0) {
      if (call.finished) break;  // the call ended (with its error) as the socket went
      detail = error_text(nfs);
      if (detail.empty()) detail = "nfs_service failed";
      drop();
      return -EIO;
    }
  }
  if (call.status < 0) {
    // libnfs passes its message with the callback, or only keeps it on the context (a refused
    // connection), or neither.
    detail = call.error;
    if (detail.empty() && nfs) detail = error_text(nfs);
    if (detail.empty()) detail = std::strerror(-call.status);
  }
  return call.status;
}

}  // namespace detail

using detail::error_text;

// --- URL ---------------------------------------------------------------------------------------

namespace {

constexpr const char* kUrlForm =
    "write nfs://server/export/path[?version=4&nfsport=2049&uid=N&gid=N]";
// The query parameters feedline passes on to libnfs, and their ranges. libnfs itself takes any
// name and reads values with atoi(): "nfsport=abc" became port 0 and then "nfs_service failed".
// Left out: libnfs's debug (it prints), dircache and autoreconnect (feedline sets them itself),
// readahead, pagecache, tcp-syncnt and auto-traverse-mounts (no use to a reader here).
struct Parameter {
  const char* name;
  std::uint64_t min;
  std::uint64_t max;
  const char* what;
};
constexpr Parameter kParameters[] = {
    {"version", 3, 4, "3 or 4"},
    {"nfsport", 1, 65535, "a number from 1 to 65535"},
    {"mountport", 1, 65535, "a number from 1 to 65535"},
    {"uid", 0, 2147483647, "a number from 0 to 2147483647"},
    {"gid", 0, 2147483647, "a number from 0 to 2147483647"},
};

std::string known_parameters() {
  std::string out;
  for (const Parameter& p : kParameters) out += out.empty() ? p.name : std::string(", ") + p.name;
  return out;
}

std::optional<std::uint64_t> decimal(std::string_view s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return v;
}

}  // namespace

Result<NfsUrl> parse_nfs_url(std::string_view text) {
  NfsUrl url;
  url.text = std::string(text);
  const std::string shown = redact_url(text);  // errors never show a password typed into the URL
  auto bad = [&](std::string msg, std::string hint = kUrlForm) {
    return fail(Error(Errc::kInvalidArgument, std::move(msg))
                    .with_object(shown)
                    .with_hint(std::move(hint)));
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
  url.path = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  if (url.server.empty()) return bad("no server in the URL");
  if (url.server.find('@') != std::string::npos) {
    return bad("an nfs:// URL takes no user name or password",
               "NFS (AUTH_SYS) names the caller by uid and gid: add ?uid=N&gid=N to the URL");
  }
  // A port after the host: libnfs would take "host:port" as a host name. [v6]:port likewise.
  std::string_view host = url.server;
  std::string_view port;
  bool has_port = false;
  if (host.starts_with('[')) {
    const auto close = host.find(']');
    if (close == std::string_view::npos) return bad("an unclosed '[' in the server part");
    if (close + 1 < host.size()) {
      if (host[close + 1] != ':') return bad("something after the ']' of the server's address");
      has_port = true;
      port = host.substr(close + 2);
      host = host.substr(0, close + 1);
    }
  } else if (const auto colon = host.find(':');
             colon != std::string_view::npos &&
             host.find(':', colon + 1) == std::string_view::npos) {
    has_port = true;
    port = host.substr(colon + 1);
    host = host.substr(0, colon);
  }
  if (has_port) {
    if (!decimal(port)) {
      return bad(fmt::format("the server part '{}' holds a ':' that starts no port", url.server));
    }
    const std::string fixed =
        fmt::format("nfs://{}{}?{}{}nfsport={}", host,
                    url.path == "/" && slash == std::string_view::npos ? "" : url.path, url.query,
                    url.query.empty() ? "" : "&", port);
    return bad(
        fmt::format(
            "the port belongs in ?nfsport={}, not after the host (libnfs reads no port there)",
            port),
        fmt::format("write {}", redact_url(fixed)));
  }
  // Every parameter checked here, each once: libnfs would ignore unknown names and read bad
  // numbers as 0.
  std::vector<std::string_view> seen;
  for (std::string_view args = url.query; !args.empty();) {
    const auto amp = args.find('&');
    const std::string_view kv = args.substr(0, amp);
    args = amp == std::string_view::npos ? std::string_view() : args.substr(amp + 1);
    if (kv.empty()) continue;  // "a=1&&b=2", a trailing '&'
    const auto eq = kv.find('=');
    const std::string_view name = kv.substr(0, eq);
    const Parameter* param = nullptr;
    for (const Parameter& p : kParameters) {
      if (name == p.name) param = &p;
    }
    if (param == nullptr) {
      return bad(
          fmt::format("unknown parameter '{}' in the query (known: {})", name, known_parameters()));
    }
    if (std::find(seen.begin(), seen.end(), name) != seen.end())
      return bad(fmt::format("{} is given twice", name));
    seen.push_back(name);
    const std::string_view value =
        eq == std::string_view::npos ? std::string_view() : kv.substr(eq + 1);
    const auto v = decimal(value);
    if (!v || *v < param->min || *v > param->max) {
      if (eq == std::string_view::npos || value.empty())
        return bad(fmt::format("{} needs a value: {}={}", name, name, param->what));
      return bad(fmt::format("{} must be {}, not '{}'", name, param->what, value));
    }
    if (name == "version") url.version = static_cast<int>(*v);
  }
  // And libnfs's own parser, for anything else it refuses.
  nfs_context* nfs = nfs_init_context();
  if (!nfs)
    return fail(Errc::kResourceExhausted, "cannot create an NFS context (nfs_init_context)");
  nfs_url* parsed = nfs_parse_url_incomplete(nfs, url.text.c_str());
  if (!parsed) {
    std::string e = error_text(nfs);
    nfs_destroy_context(nfs);
    return bad(fmt::format("libnfs cannot parse it: {}", e));
  }
  nfs_destroy_url(parsed);
  nfs_destroy_context(nfs);
  return url;
}

}  // namespace feedline::transports
