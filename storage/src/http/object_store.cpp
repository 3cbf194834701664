// ObjectStore: what s3:// and http(s):// share (object_store.hpp): HEAD for sizes (one by one or
// concurrently for stat_many), the control and clean-up clients, and the mapping of HTTP and S3
// error answers. Reads go through the queue in http_queue.cpp.
#include "object_store.hpp"

#include "http_queue.hpp"
#include "listing.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <future>
#include <thread>

#include "feedline/core/clock.hpp"
#include "feedline/core/redact.hpp"
#include "feedline/storage/s3_xml.hpp"

namespace feedline::storage::detail {
namespace {

using transports::HttpClient;
using transports::HttpRequest;
using transports::HttpResponse;

std::optional<std::uint64_t> to_u64(std::string_view s) {
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

ObjectStore::ObjectStore(HttpConfig http, std::optional<transports::SigV4> sigv4,
                         std::stop_token stop, std::optional<transports::BasicAuth> basic_auth)
    : http_(std::move(http)),
      sigv4_(std::move(sigv4)),
      stop_(std::move(stop)),
      basic_auth_(std::move(basic_auth)) {}

transports::HttpClientOptions ObjectStore::client_options(unsigned connections) const {
  transports::HttpClientOptions o;
  o.max_connections = std::max(1u, connections);
  o.insecure = http_.insecure;
  o.ca_bundle = http_.ca_bundle;
  o.connect_timeout = http_.connect_timeout;
  o.stall_timeout = http_.stall_timeout;
  o.max_attempts = std::max(1u, http_.max_attempts);
  o.sigv4 = sigv4_;
  o.basic_auth = basic_auth_;
  o.connect_to = http_.connect_to;
  return o;
}

Result<transports::HttpClient*> ObjectStore::control() {
  std::lock_guard lock(control_mu_);
  if (!control_) {
    auto o = client_options(16);
    o.stop = stop_;
    FEEDLINE_ASSIGN_OR_RETURN(control_, HttpClient::create(o));
  }
  return control_.get();
}

Result<transports::HttpClient*> ObjectStore::cleanup() {
  std::lock_guard lock(control_mu_);
  if (!cleanup_) {
    auto o = client_options(1);
    o.connect_timeout = std::min(o.connect_timeout, std::chrono::milliseconds(2000));
    o.stall_timeout = std::min(o.stall_timeout, std::chrono::milliseconds(2000));
    o.max_attempts = 1;
    FEEDLINE_ASSIGN_OR_RETURN(cleanup_, HttpClient::create(o));
  }
  return cleanup_.get();
}

Error ObjectStore::http_error(const HttpResponse& r, std::string_view object,
                              std::string_view what) const {
  const auto body = s3::parse_error(r.body);
  const std::string code = body ? body->code : std::string();
  std::string message = fmt::format("{}: HTTP {}", what, r.status);
  if (body) message += fmt::format(" {}: {}", body->code, body->message);
  const bool redirect = r.status >= 300 && r.status < 400;
  if (redirect) {
    // Where it points, without its secrets (a presigned URL's signature, a password).
    message += r.redirect_url.empty()
                   ? std::string(", a redirect without a Location")
                   : fmt::format(", a redirect to {}", redact_url(r.redirect_url));
  }
  const auto region = r.headers.find("x-amz-bucket-region");
  Errc errc = Errc::kIo;
  std::string hint = "check the URL and the server's log";
  if ((r.status == 401 || r.status == 403) && scheme() != "s3") {
    errc = Errc::kPermissionDenied;
    hint = r.status == 403 ? "the server refuses access to this object: check its permissions there"
           : basic_auth_
               ? "the server refused the user name and password of the URL: check them "
                 "(percent-encode "
                 "':', '@' and '/' in them)"
               : "the server wants a user name and password: put them in the URL, "
                 "http://user:password@host/... (percent-encode ':', '@' and '/' in them)";
  } else if (r.status == 401 || r.status == 403) {
    errc = Errc::kPermissionDenied;
    hint = code == "SignatureDoesNotMatch" || code == "InvalidAccessKeyId"
               ? "the credentials are wrong: check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or "
                 "the profile "
                 "({profile}, AWS_PROFILE), and the region"
               : "access denied: check the credentials (AWS_ACCESS_KEY_ID, {profile}) and the "
                 "bucket's policy";
  } else if (r.status == 404) {
    errc = Errc::kNotFound;
    hint = code == "NoSuchBucket"
               ? "the bucket does not exist: check its name and the endpoint ({endpoint})"
           : scheme() == "s3"
               ? "no object there: check the key (a prefix lists with `aws s3 ls`)"
               : "no object there: check the URL (`curl -I URL` shows what the server has)";
  } else if (scheme() == "s3" &&
             (code == "PermanentRedirect" || code == "AuthorizationHeaderMalformed" ||
              (redirect && region != r.headers.end()))) {
    hint = region != r.headers.end()
               ? fmt::format("the bucket is in the region {}: set AWS_REGION or {{region}}",
                             region->second)
               : "the bucket is in another region: set AWS_REGION or {region}";
  } else if (redirect) {
    // curl follows no redirect: a signed request or a password must not go to another host.
    hint = scheme() == "s3"
               ? "feedline does not follow redirects: point {endpoint} at the server the redirect "
                 "names"
               : "feedline does not follow redirects: use the URL the redirect names";
  } else if (r.status >= 500) {
    hint = "the server failed; retries were exhausted ({max_attempts})";
  }
  return Error(errc, std::move(message))
      .with_http_status(static_cast<int>(r.status))
      .with_object(std::string(object))
      .with_hint(hint);
}

Result<ObjectInfo> ObjectStore::stat(std::string_view key) {
  FEEDLINE_ASSIGN_OR_RETURN(HttpClient * c, control());
  HttpRequest req;
  req.method = "HEAD";
  req.url = url_for(key);
  req.shown = shown(key);
  FEEDLINE_ASSIGN_OR_RETURN(HttpResponse r, c->perform(std::move(req)));
  if (r.status != 200) return fail(http_error(r, shown(key), "HEAD"));
  const auto it = r.headers.find("content-length");
  const auto size = it == r.headers.end() ? std::nullopt : to_u64(it->second);
  if (!size) {
    return fail(
        Error(Errc::kUnsupported, "the server gave no Content-Length for the object")
            .with_object(shown(key))
            .with_hint(
                "feedline needs object sizes; serve the data from a server that sends them"));
  }
  ObjectInfo info{std::string(key), *size};
  FEEDLINE_TRY(check_listed_size(info, shown(key)));
  return info;
}

Result<std::vector<ObjectInfo>> ObjectStore::stat_many(std::span<const std::string> keys) {
  // The HEADs run on a client of their own, driven by this thread (no hand-over per answer),
  // 64 in flight over at most 16 connections. The stop token fails them all (run_for() returns
  // within its 100 ms slice) and the loop ends with the first error, kCancelled.
  auto o = client_options(16);
  o.driven = true;
  o.stop = stop_;
  FEEDLINE_ASSIGN_OR_RETURN(auto client, HttpClient::create(o));
  std::vector<ObjectInfo> out(keys.size());
  std::optional<Error> first_error;
  std::size_t pending = 0, next = 0;
  constexpr std::size_t kWindow = 64;  // HEADs in flight
  while ((next < keys.size() && !first_error) || pending > 0) {
    std::vector<std::pair<HttpRequest, transports::HttpCallback>> batch;
    while (next < keys.size() && !first_error && pending + batch.size() < kWindow) {
      const std::size_t i = next++;
      HttpRequest req;
      req.method = "HEAD";
      req.url = url_for(keys[i]);
      req.shown = shown(keys[i]);
      batch.emplace_back(std::move(req), [&, i](Result<HttpResponse> r) {
        --pending;
        std::optional<Error> e;
        if (!r) {
          e = r.error();
        } else if (r->status != 200) {
          e = http_error(*r, shown(keys[i]), "HEAD");
        } else {
          const auto it = r->headers.find("content-length");
          const auto size = it == r->headers.end() ? std::nullopt : to_u64(it->second);
          if (size) {
            out[i] = ObjectInfo{keys[i], *size};
            if (auto ok = check_listed_size(out[i], shown(keys[i])); !ok) e = ok.error();
          } else {
            e = Error(Errc::kUnsupported, "the server gave no Content-Length")
                    .with_object(shown(keys[i]));
          }
        }
        if (e && !first_error) first_error = std::move(e);
      });
    }
    pending += batch.size();
    if (!batch.empty()) client->start_many(std::move(batch));
    if (pending > 0) client->run_for(std::chrono::milliseconds(100));
  }
  if (first_error) return fail(std::move(*first_error));
  return out;
}

Result<std::unique_ptr<ObjectHandle>> ObjectStore::open(std::string_view key) {
  FEEDLINE_ASSIGN_OR_RETURN(ObjectInfo info, stat(key));
  return std::unique_ptr<ObjectHandle>(
      std::make_unique<HttpObject>(info.key, info.size, url_for(key), shown(key)));
}

namespace {

// The caller's HTTP options for a queue (QueueOptions::http), or the defaults.
const HttpQueueOptions& http_options(const QueueOptions& options) noexcept {
  static const HttpQueueOptions defaults;
  return options.http != nullptr ? *options.http : defaults;
}

}  // namespace

Result<std::unique_ptr<IoQueue>> ObjectStore::make_queue(const QueueOptions& options) {
  FEEDLINE_TRY(host_memory_only(options));
  const HttpQueueOptions& use = http_options(options);
  if (use.shared_by > 0) return make_shared_queue(options.depth, options.coalesce, use.shared_by);
  const unsigned connections = http_.connections ? http_.connections : std::max(1u, options.depth);
  auto o = client_options(connections);
  o.driven = use.caller_mostly_polls;  // run by the queue's poll() (see HttpQueue)
  std::vector<std::shared_ptr<HttpClient>> loops;
  FEEDLINE_ASSIGN_OR_RETURN(auto main, HttpClient::create(o));
  loops.push_back(std::move(main));
  // Helpers only where large parts can run side by side: never more loops than connections.
  const unsigned want = std::min(event_loops(), connections);
  o.driven = false;
  for (unsigned i = 1; i < want; ++i) {
    FEEDLINE_ASSIGN_OR_RETURN(auto helper, HttpClient::create(o));
    loops.push_back(std::move(helper));
  }
  return make_http_queue(options.depth, std::move(loops),
                         std::max<std::uint64_t>(http_.part_size, 4096), connections,
                         options.coalesce, false, answer_error());
}

// One pool for every sharing queue: libcurl keeps connections per multi handle (a share object's
// connection cache is not safe across threads), so the pool is a set of clients, each a multi
// handle on a loop thread of its own with its part of the connections. Every queue uses all of
// them, its main loop (small requests) the next one round, so that the queues' small requests
// spread over the loops' threads; each client reuses a connection whichever queue opened it.
Result<std::unique_ptr<IoQueue>> ObjectStore::make_shared_queue(unsigned depth, bool coalesce,
                                                                unsigned shared_by) {
  std::lock_guard lock(pool_mu_);
  if (!pool_) {
    SharedPool pool;
    const std::uint64_t all = static_cast<std::uint64_t>(shared_by) * std::max(1u, depth);
    pool.connections = http_.connections
                           ? http_.connections
                           : static_cast<unsigned>(std::min<std::uint64_t>(all, 4096));
    // A loop per queue (at most one per core, or 4): small requests cost the loop's thread CPU
    // each, and queues that each have a main loop of their own kept the rate of queues with
    // clients of their own (4 loaders of 16 KiB objects on 2 cores: ~25k/s either way, where
    // 2 loops for the 4 made ~21k/s). HttpConfig::loops, where set, is the pool's.
    const unsigned cores = std::max(4u, std::thread::hardware_concurrency());
    const unsigned loops = std::min(
        http_.loops > 0 ? http_.loops : std::min(std::max(1u, shared_by), cores), pool.connections);
    for (unsigned i = 0; i < loops; ++i) {
      // The first ones take the remainder: the loops' connections add up to the pool's.
      const unsigned mine = pool.connections / loops + (i < pool.connections % loops ? 1 : 0);
      auto o = client_options(mine);
      o.driven = false;
      FEEDLINE_ASSIGN_OR_RETURN(auto client, HttpClient::create(o));
      pool.loops.push_back(std::move(client));
    }
    pool_ = std::move(pool);
  }
  const std::size_t n = pool_->loops.size();
  const std::size_t first = pool_->queues++ % n;
  std::vector<std::shared_ptr<HttpClient>> loops;
  for (std::size_t i = 0; i < n; ++i) loops.push_back(pool_->loops[(first + i) % n]);
  return make_http_queue(depth, std::move(loops), std::max<std::uint64_t>(http_.part_size, 4096),
                         pool_->connections, coalesce, true, answer_error());
}

AnswerError ObjectStore::answer_error() const {
  // The backend outlives its queues (backend.hpp).
  return [this](const HttpResponse& r, std::string_view object) {
    return http_error(r, object, "GET");
  };
}

unsigned ObjectStore::event_loops() const {
  if (http_.loops > 0) return http_.loops;
  return std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
}

BackendCaps ObjectStore::caps() const {
  BackendCaps c{1, kHttpMaxRequest, true, true};
  c.cpu_per_request = http_.connections == 0;  // the pool follows each queue's depth
  return c;
}

}  // namespace feedline::storage::detail
