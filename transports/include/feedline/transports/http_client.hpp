// An asynchronous HTTP/1.1 client for object stores: libcurl's multi-socket interface driven by
// one Boost.Asio event loop per client.
//
// Two ways to run the loop:
//  - threaded (the default): the client has a thread of its own. Requests are started from any
//    thread; completions run on the client's thread and must be quick (hand the result on).
//  - driven (HttpClientOptions::driven): no thread. One owner thread starts requests and runs the
//    loop itself with run_for(); completions run inside run_for() on that thread. An I/O queue
//    that already polls for completions uses this: a response then costs no hand-over between
//    threads (two wake-ups and a context switch each way, on 2 cores about a quarter of the CPU
//    that 64 KiB GETs cost). Bodies of GETs are written straight into the
// caller's buffer at the right offset: no intermediate copy. Connections are kept alive and
// reused (curl's connection cache, shared by every request of a client, at most
// `max_connections` per host).
//
// Retries live here, where the bytes are: a request that fails with a retryable outcome (HTTP
// 429/500/502/503/504, connect or transfer timeout, connection reset, a truncated body) is tried
// again after an exponential backoff with full jitter, at most `max_attempts` times in all; a GET
// that had already received part of its range asks only for the missing bytes. Every retry is
// counted by reason in the response. A 429 or 503 that carries Retry-After (seconds or a date)
// waits at least that long before the next attempt, but never longer than `stall_timeout` (the
// longest the client waits for a server anyway; a Retry-After of a year is not obeyed); a stop or
// a cancel ends the wait at once.
//
// URLs go to the server as they are written: no dot-segment removal ("a/../b" stays, as S3 keys
// need; CURLOPT_PATH_AS_IS), so no key can make a request for another path.
//
// Signing: with `sigv4` set, curl signs each request (CURLOPT_AWS_SIGV4); we never hand-write
// SigV4. HTTP Basic credentials (`basic_auth`, from an http://user:password@host/ URL) reach curl
// as options, never inside a URL. Secrets are never part of an error message.
//
// Stopping: once HttpClientOptions::stop is requested, every request of the client not yet
// completed fails with kCancelled ("interrupted") within about 100 ms, whatever it waits on (a
// server that accepted and never answers, one that sends a byte a second, a retry's backoff),
// and every later one fails at once. So perform() returns promptly on Ctrl-C. cancel_all() is the
// same for the requests in flight at that moment, without refusing later ones; cancel_group() for
// those of one user of a shared client.
//
// Process-wide set-up: libcurl must be initialised before threads start (HttpLibrary below); the
// composition root (main()) holds an HttpLibrary for as long as clients exist.
//
// curl, curl/curl.h and Asio stay inside src/http/.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "feedline/core/bytes.hpp"
#include "feedline/core/error.hpp"

namespace feedline::transports {

struct SigV4 {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // sent as x-amz-security-token when set
  std::string region = "us-east-1";
  std::string service = "s3";
};

// HTTP Basic authentication (RFC 7617), sent pre-emptively with every request.
struct BasicAuth {
  std::string user;
  std::string password;
};

struct HttpClientOptions {
  unsigned max_connections = 16;  // per host
  bool insecure = false;          // no TLS peer/host verification
  std::string ca_bundle;          // empty: the system's CA store
  std::chrono::milliseconds connect_timeout{10'000};
  std::chrono::milliseconds stall_timeout{30'000};  // an attempt that gets no byte this long fails
  unsigned max_attempts = 5;
  std::chrono::milliseconds backoff_base{50};  // attempt n waits U(0, min(cap, base * 2^n))
  std::chrono::milliseconds backoff_cap{2'000};
  std::optional<SigV4> sigv4;
  std::optional<BasicAuth> basic_auth;  // not together with sigv4 (create() refuses both)
  // "HOST:PORT:CONNECT-HOST:CONNECT-PORT" entries, like curl --connect-to: requests for HOST:PORT
  // go to another address while the URL (and the signed Host header) stay as written.
  std::vector<std::string> connect_to;
  // No thread of its own: the owner calls run_for() (see the top of this file). Every call on a
  // driven client must come from one thread at a time.
  bool driven = false;
  // Ends every request (see "Stopping" above). A default token never stops.
  std::stop_token stop;
};

struct HttpRequest {
  std::string method = "GET";        // GET, HEAD, PUT, POST, DELETE
  std::string url;                   // fully encoded
  std::vector<std::string> headers;  // "Name: value"
  // A ranged GET: bytes [offset, offset + length) land in dst (dst.size() >= length). The
  // response is a short read when the object ends first. Without a range, the body (up to
  // max_body bytes) is kept in HttpResponse::body.
  std::optional<std::uint64_t> range_offset;
  std::uint64_t range_length = 0;
  MutableBytes dst;
  // Instead of dst: the range's bytes scattered over several buffers (one GET for several
  // nearby reads). Segment i takes the range's bytes [at, at + dst.size()); segments are in
  // order, do not overlap and lie inside the range; bytes between them are dropped.
  struct Segment {
    std::uint64_t at = 0;
    MutableBytes dst;
  };
  std::vector<Segment> scatter;
  // The range is the whole object (offset 0, length = its size): the first attempt is a plain
  // GET without Range, a 200 of exactly range_length bytes; a retry after a partial body asks
  // for the rest with a Range. Servers answer plain GETs at least as well (nginx with
  // tcp_nopush stalls 206 answers 40 ms at a time, about 1 in 200); a larger body is an error.
  bool whole = false;
  // The object's size as the caller knows it (a listing, a HEAD). Every answer to the ranged GET
  // is checked against the request (see src/http/detail/answer.hpp): a 206 must carry a
  // Content-Range of exactly the bytes asked for, ending early only at the object's end, with a
  // total of this size; a 200 (Range ignored, from offset 0) a Content-Length of this size. An
  // answer that fails is a kCorrupt error, refused before its body lands. nullopt: the size is
  // not known (size_unknown), and only the range itself is checked.
  std::optional<std::uint64_t> known_size;
  // The object's size is unknown: a ranged GET from offset 0 whose range_length is a guess. Its
  // answer says the size (HttpResponse::object_size): a 206's Content-Range, a 200's
  // Content-Length (the server ignored Range: the body's first range_length bytes land in dst,
  // the rest is not read and the request succeeds), or a 416's "Content-Range: bytes */N" (an
  // answer with status 416 and no body: N is 0 for an empty object).
  bool size_unknown = false;
  // size_unknown only: dst may then hold fewer than range_length bytes (a batch slot of the
  // typical size, with the guess as the cap). Before a body byte would land past dst's end, this
  // is called once, on the client's thread, with the bytes the object needs (the answer's size
  // when its headers gave one, else range_length) and how many body bytes dst already holds. It
  // returns a destination of at least `need` bytes holding those (dst becomes it: the body goes
  // on there, with no second request), or fewer bytes to end the request with what dst holds
  // (it then succeeds; the callee keeps the reason).
  std::function<MutableBytes(std::uint64_t need, std::uint64_t filled)> grow_dst;
  ConstBytes upload;  // PUT / POST body; must stay valid until the completion
  std::size_t max_body = 16u << 20;
  // The object as the user named it, for error messages (the URL may carry a signature).
  std::string shown;
  // Whose request it is, where several users share one client (the I/O queues of the loaders of
  // one host, sharing its connections): cancel_group() ends a group's requests and no others.
  std::uint64_t group = 0;
};

struct HttpResponse {
  long status = 0;
  std::uint64_t bytes = 0;  // body bytes received (into dst, or into body)
  std::string body;         // bodies of un-ranged requests, and of errors (first 64 KiB)
  // Lower-case names; not kept for the 200/206 answers of ranged requests (reads).
  std::map<std::string, std::string, std::less<>> headers;
  unsigned attempts = 1;
  std::map<std::string, std::uint32_t, std::less<>>
      retries;                    // reason ("http_503", "reset", ...) -> count
  std::uint64_t ttfb_ns = 0;      // last attempt: request start to first response byte
  std::uint64_t total_ns = 0;     // last attempt: start to end
  std::uint64_t connections = 0;  // new connections this request opened (all attempts)
  // HttpRequest::size_unknown: the object's size as the answer gave it (nullopt: it did not, as
  // a chunked 200 or "Content-Range: bytes 0-9/*").
  std::optional<std::uint64_t> object_size;
  // A redirect (3xx; never followed): where its Location points, as a full URL (a relative one
  // resolved against the request's). Empty otherwise. May hold secrets: redact before showing.
  std::string redirect_url;
};

using HttpCallback = std::function<void(Result<HttpResponse>)>;

struct HttpClientStats {
  std::uint64_t connections_opened = 0;
  std::uint64_t max_open_connections = 0;
  std::uint64_t open_connections = 0;
};

class HttpClient {
 public:
  static Result<std::unique_ptr<HttpClient>> create(const HttpClientOptions& options);
  virtual ~HttpClient() = default;

  // Threaded clients: thread-safe. The callback runs on the client's thread (driven: in a later
  // run_for(), or before start returns when the request cannot start) exactly once, also on
  // cancel_all().
  virtual void start(HttpRequest request, HttpCallback done) = 0;
  // Starts several at once: one hand-over to the loop thread instead of one per request.
  virtual void start_many(std::vector<std::pair<HttpRequest, HttpCallback>> requests) = 0;
  // Blocking convenience for control requests (HEAD, LIST, PUT). Returns within about 100 ms of
  // HttpClientOptions::stop with kCancelled.
  Result<HttpResponse> perform(HttpRequest request);
  // Fails every request not yet completed with kCancelled (their callbacks still run).
  virtual void cancel_all() = 0;
  // The same for the requests of one group (HttpRequest::group): the other users' requests go on.
  virtual void cancel_group(std::uint64_t group) = 0;
  // Driven clients: runs the event loop on the calling thread until something happened (a
  // socket became ready, a timer fired) or the timeout passed, then everything else already
  // ready; completion callbacks run here. Returns the handlers run. Threaded clients: returns 0.
  virtual std::size_t run_for(std::chrono::nanoseconds timeout) = 0;
  // Driven clients: makes a run_for() in progress (or the next one) return, from any thread —
  // for owners that also wait on work finishing elsewhere. Threaded clients: nothing.
  virtual void wake() = 0;
  virtual HttpClientStats stats() const = 0;
  virtual bool driven() const noexcept = 0;

 protected:
  HttpClient() = default;
};

// libcurl's process-wide state (curl_global_init / curl_global_cleanup). curl_global_init sets up
// libcurl's TLS and other libraries and is not safe while other threads might use them, so the
// composition root calls init() early, before it starts any thread (main(), ahead of the signal
// thread), and keeps the handle until every HttpClient is gone:
//   auto http_library = transports::HttpLibrary::init();  // an error only when libcurl cannot
//   start
// Handles count: libcurl is cleaned up when the last one goes. A process that holds none still
// works: HttpClient::create() then initialises libcurl itself on first use, once, for the rest of
// the process (never cleaned up) — correct as long as no other thread uses libcurl or OpenSSL at
// that moment (unit tests, single-threaded tools). Builds without libcurl: init() succeeds and
// does nothing.
class HttpLibrary {
 public:
  static Result<HttpLibrary> init();
  HttpLibrary(HttpLibrary&& other) noexcept;
  HttpLibrary& operator=(HttpLibrary&& other) noexcept;
  HttpLibrary(const HttpLibrary&) = delete;
  HttpLibrary& operator=(const HttpLibrary&) = delete;
  ~HttpLibrary();
  // True while some HttpLibrary handle is alive (always false without libcurl).
  static bool held() noexcept;

 private:
  HttpLibrary() = default;
  void release() noexcept;
  bool held_ = false;
};

// "libcurl/7.88.1 OpenSSL/3.0.x ..." or "not built in".
std::string http_library_version();
bool http_compiled_in() noexcept;

// S3/AWS-style URI encoding of one path segment or query value (RFC 3986 unreserved kept;
// '/' kept when keep_slash).
std::string uri_encode(std::string_view text, bool keep_slash);

}  // namespace feedline::transports
