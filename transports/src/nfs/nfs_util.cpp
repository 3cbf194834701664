// libnfs helpers and the nfs:// URL parser.
#include "detail/nfs_util.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace feedline::transports {
namespace detail {

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
  for (const char* status : {"NFS4ERR_STALE_CLIENTID", "NFS4ERR_STALE_STATEID", "NFS4ERR_BAD_STATEID",
                             "NFS4ERR_OLD_STATEID", "NFS4ERR_EXPIRED", "NFS4ERR_BAD_SEQID",
                             "NFS4ERR_GRACE", "NFS4ERR_DELAY", "NFS3ERR_JUKEBOX", "NFS4ERR_RESOURCE",
                             "NFS4ERR_LEASE_MOVED", "NFS4ERR_ADMIN_REVOKED"}) {
    if (detail.find(status) != std::string_view::npos) return true;
  }
  switch (-rc) {
    case EPERM:
      // libnfs's synchronous calls return -1 when the request could not even start ("Failed to
      // start connection", a name that does not resolve); a server's refusal names its status.
      return detail.find("ERR_PERM") == std::string_view::npos &&
             detail.find("ERR_ACCES") == std::string_view::npos;
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


}  // namespace detail

using detail::error_text;

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

}  // namespace feedline::transports
