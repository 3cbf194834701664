// libcurl multi-socket + Boost.Asio: the HttpClient behind s3:// and http(s)://.
//
// One thread runs an io_context: the client's own, or the owner's inside run_for() (driven).
// curl tells us which sockets to watch (CURLMOPT_SOCKETFUNCTION) and when to call back for
// timeouts (CURLMOPT_TIMERFUNCTION); Asio waits on the sockets
// (async_wait, no reading: curl reads) and calls curl_multi_socket_action. Sockets are created
// and closed by us (CURLOPT_OPENSOCKETFUNCTION / CLOSESOCKETFUNCTION) as asio::ip::tcp::socket
// objects, so a pending wait can never outlive its descriptor. Every curl call happens on the
// loop thread; other threads only post.
#include <curl/curl.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <strings.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <cstring>
#include <future>
#include <mutex>
#include <random>
#include <stop_token>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "feedline/core/clock.hpp"
#include "feedline/core/redact.hpp"
#include "feedline/core/thread_name.hpp"
#include "feedline/transports/http_client.hpp"

namespace feedline::transports {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

constexpr std::size_t kErrorBodyLimit = 64 * 1024;

bool retryable_status(long s) { return s == 429 || s == 500 || s == 502 || s == 503 || s == 504; }

// A curl code worth another attempt, and the reason it is counted under; "" when not retryable.
const char* retry_reason(CURLcode rc) {
  switch (rc) {
    case CURLE_OPERATION_TIMEDOUT:
      return "timeout";
    case CURLE_COULDNT_CONNECT:
      return "connect";
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
      return "reset";
    case CURLE_PARTIAL_FILE:
      return "truncated";
    default:
      return "";
  }
}

struct Sock {
  explicit Sock(asio::io_context& io) : socket(io) {}
  tcp::socket socket;
  int want = 0;  // CURL_POLL_IN / OUT / INOUT, 0 = nothing (removed)
  bool reading = false;
  bool writing = false;
};

// Body bytes still to come below which every read is ACKed at once (see ack_at_once).
constexpr std::uint64_t kAckTail = 256 * 1024;

struct Transfer {
  HttpRequest req;
  HttpCallback done;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  HttpResponse resp;
  std::uint64_t received = 0;  // into dst, all attempts
  std::size_t segment = 0;     // scatter: the first segment not yet filled
  std::size_t upload_pos = 0;
  long status = 0;  // of the current attempt, from its status line
  // The connection's socket, as curl last named it for this transfer (on_socket); for ACKs.
  curl_socket_t fd = CURL_SOCKET_BAD;
  bool range_ignored = false;
  bool overflow = false;
  std::unique_ptr<asio::steady_timer> backoff;
  char errbuf[CURL_ERROR_SIZE] = {};
  std::string last_reason;

  ~Transfer() {
    if (headers) curl_slist_free_all(headers);
    if (easy) curl_easy_cleanup(easy);
  }
  bool ranged() const { return req.range_offset.has_value(); }
  // The object for messages: the caller's name for it, else the URL without its secrets.
  std::string shown() const { return req.shown.empty() ? redact_url(req.url) : req.shown; }

  // Puts `len` body bytes that start `received` bytes into the range where they belong.
  void store(const char* data, std::size_t len) {
    if (req.scatter.empty()) {
      std::memcpy(req.dst.data() + received, data, len);
      return;
    }
    std::uint64_t pos = received;
    while (len > 0 && segment < req.scatter.size()) {
      const HttpRequest::Segment& s = req.scatter[segment];
      const std::uint64_t end = s.at + s.dst.size();
      if (pos >= end) {
        ++segment;
        continue;
      }
      // Bytes before the segment are a gap (dropped); then as many as fit in it.
      const std::uint64_t n = pos < s.at ? std::min<std::uint64_t>(len, s.at - pos) : std::min<std::uint64_t>(len, end - pos);
      if (pos >= s.at) std::memcpy(s.dst.data() + (pos - s.at), data, n);
      pos += n;
      data += n;
      len -= static_cast<std::size_t>(n);
    }
  }
};

class CurlClient final : public HttpClient {
 public:
  explicit CurlClient(const HttpClientOptions& o) : options_(o), timer_(io_), work_(io_.get_executor()) {}

  Result<void> init() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
    multi_ = curl_multi_init();
    if (multi_ == nullptr) return fail(Errc::kResourceExhausted, "curl_multi_init failed");
    curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &CurlClient::on_socket);
    curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
    curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &CurlClient::on_timer);
    curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
    curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS, static_cast<long>(std::max(1u, options_.max_connections)));
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, static_cast<long>(std::max(1u, options_.max_connections) * 2));
    for (const auto& r : options_.connect_to) connect_to_ = curl_slist_append(connect_to_, r.c_str());
    if (options_.sigv4) {
      sigv4_param_ = fmt::format("aws:amz:{}:{}", options_.sigv4->region, options_.sigv4->service);
    }
    if (!options_.driven) {
      thread_ = std::thread([this] {
        name_this_thread("fl-http");
        io_.run();
      });
    }
    // Last: a stop already requested runs the callback here, and it posts to the loop.
    if (options_.stop.stop_possible()) on_stop_.emplace(options_.stop, [this] { on_stop(); });
    return {};
  }

  ~CurlClient() override {
    on_stop_.reset();  // waits for a callback running on another thread; none runs after this
    if (options_.driven) {
      shutdown();
    } else {
      asio::post(io_, [this] { shutdown(); });
    }
    work_.reset();
    if (thread_.joinable()) thread_.join();
    if (connect_to_) curl_slist_free_all(connect_to_);
  }

  void start(HttpRequest request, HttpCallback done) override {
    auto t = std::make_unique<Transfer>();
    t->req = std::move(request);
    t->done = std::move(done);
    Transfer* raw = t.release();
    if (options_.driven) {
      launch(raw);  // the owner's thread: the loop's own
    } else {
      asio::post(io_, [this, raw] { launch(raw); });
    }
  }

  void start_many(std::vector<std::pair<HttpRequest, HttpCallback>> requests) override {
    std::vector<Transfer*> ts;
    ts.reserve(requests.size());
    for (auto& [req, done] : requests) {
      auto t = std::make_unique<Transfer>();
      t->req = std::move(req);
      t->done = std::move(done);
      ts.push_back(t.release());
    }
    if (options_.driven) {
      for (Transfer* t : ts) launch(t);
      return;
    }
    asio::post(io_, [this, ts = std::move(ts)] {
      for (Transfer* t : ts) launch(t);
    });
  }

  std::size_t run_for(std::chrono::nanoseconds timeout) override {
    if (!options_.driven) return 0;
    if (stopping_.load(std::memory_order_acquire) && !active_.empty()) {
      cancel_everything("interrupted");
      return 1;
    }
    std::size_t n = timeout.count() > 0 ? io_.run_one_for(timeout) : io_.poll_one();
    if (n > 0) n += io_.poll();  // and whatever else is ready, in one go
    if (stopping_.load(std::memory_order_acquire) && !active_.empty()) {
      cancel_everything("interrupted");
      ++n;
    }
    return n;
  }

  void wake() override {
    if (options_.driven) asio::post(io_, [] {});  // a handler to run: run_for() returns
  }

  bool driven() const noexcept override { return options_.driven; }

  void cancel_all() override {
    if (options_.driven) {
      cancel_everything("cancelled");
      return;
    }
    std::promise<void> p;
    auto f = p.get_future();
    asio::post(io_, [this, &p] {
      cancel_everything("cancelled");
      p.set_value();
    });
    f.wait();
  }

  HttpClientStats stats() const override {
    return {opened_.load(), max_open_.load(), open_.load()};
  }

 private:
  // ---- requests ----

  void launch(Transfer* t) {
    if (shut_down_) {
      finish(t, fail(Errc::kCancelled, "the HTTP client is shutting down"));
      return;
    }
    if (stopping_.load(std::memory_order_acquire)) {
      finish(t, fail(Error(Errc::kCancelled, "interrupted").with_object(t->shown())));
      return;
    }
    active_.insert(t);
    if (t->easy == nullptr) {
      // Reuse finished transfers' handles: curl_easy_init/cleanup per request costs more than
      // the request itself on a fast server.
      if (!free_easy_.empty()) {
        t->easy = free_easy_.back();
        free_easy_.pop_back();
      } else {
        t->easy = curl_easy_init();
      }
      if (t->easy == nullptr) {
        finish(t, fail(Errc::kResourceExhausted, "curl_easy_init failed"));
        return;
      }
    }
    if (auto r = configure(t); !r) {
      finish(t, fail(std::move(r).error().with_object(t->shown())));
      return;
    }
    t->status = 0;
    t->fd = CURL_SOCKET_BAD;
    t->range_ignored = false;
    t->overflow = false;
    t->errbuf[0] = '\0';
    t->resp.headers.clear();
    if (!t->ranged()) t->resp.body.clear();
    t->upload_pos = 0;
    if (curl_multi_add_handle(multi_, t->easy) != CURLM_OK) {
      finish(t, fail(Errc::kInternal, "curl_multi_add_handle failed"));
    }
  }

  Result<void> configure(Transfer* t) {
    CURL* e = t->easy;
    const HttpRequest& r = t->req;
    curl_easy_reset(e);
    curl_easy_setopt(e, CURLOPT_URL, r.url.c_str());
    curl_easy_setopt(e, CURLOPT_PRIVATE, t);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    // A receive buffer that holds the whole answer (headers included) up to 512 KiB: one recv()
    // per small object instead of one per 16 KiB (curl's default), and each of those recv()s
    // came with a poll(): 5 recv + 6 poll per 64 KiB GET before, 1 + 2 now, as curl's own tool
    // (which asks for 100 KiB).
    if (r.range_offset) {
      const std::uint64_t want = std::clamp<std::uint64_t>(r.range_length + 16 * 1024, 16 * 1024, 512 * 1024);
      curl_easy_setopt(e, CURLOPT_BUFFERSIZE, static_cast<long>(want));
    }
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, &CurlClient::on_open_socket);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, this);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, &CurlClient::on_close_socket);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, this);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &CurlClient::on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &CurlClient::on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, t);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout.count()));
    // A stalled transfer: less than 1 byte/s for stall_timeout fails the attempt.
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME,
                     std::max<long>(1, static_cast<long>(options_.stall_timeout.count() / 1000)));
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, options_.insecure ? 0L : 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, options_.insecure ? 0L : 2L);
    if (!options_.ca_bundle.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, options_.ca_bundle.c_str());
    if (connect_to_) curl_easy_setopt(e, CURLOPT_CONNECT_TO, connect_to_);

    if (t->headers) {
      curl_slist_free_all(t->headers);
      t->headers = nullptr;
    }
    auto add = [t](const std::string& h) { t->headers = curl_slist_append(t->headers, h.c_str()); };
    bool has_sha = false;
    for (const auto& h : r.headers) {
      add(h);
      if (h.size() > 21 && strncasecmp(h.c_str(), "x-amz-content-sha256:", 21) == 0) has_sha = true;
    }
    if (r.range_offset) {
      if (r.range_length == 0) return fail(Errc::kInvalidArgument, "a ranged GET of 0 bytes");
      std::uint64_t end = 0;
      for (const auto& seg : r.scatter) {
        if (seg.at < end || seg.at + seg.dst.size() > r.range_length) {
          return fail(Errc::kInvalidArgument, "scatter segments out of order or outside the range");
        }
        end = seg.at + seg.dst.size();
      }
      if (r.whole && *r.range_offset != 0) return fail(Errc::kInvalidArgument, "a whole-object GET from offset > 0");
      const std::uint64_t first = *r.range_offset + t->received;
      const std::uint64_t last = *r.range_offset + r.range_length - 1;
      if (!(r.whole && t->received == 0)) add(fmt::format("Range: bytes={}-{}", first, last));
    }
    if (r.method == "HEAD") {
      curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else if (r.method == "PUT") {
      curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(e, CURLOPT_READFUNCTION, &CurlClient::on_read);
      curl_easy_setopt(e, CURLOPT_READDATA, t);
      curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(r.upload.size()));
      no_expect(t);
    } else if (r.method == "POST") {
      curl_easy_setopt(e, CURLOPT_POST, 1L);
      curl_easy_setopt(e, CURLOPT_POSTFIELDS, reinterpret_cast<const char*>(r.upload.data()));
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.upload.size()));
      no_expect(t);
    } else if (r.method != "GET") {
      curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r.method.c_str());
    }
    if (options_.sigv4) {
      const SigV4& s = *options_.sigv4;
      // S3 wants the payload hash in a header; it is signed with the rest. Bodies we send are
      // either empty (GET/HEAD/DELETE) or hashed by the caller.
      if (!has_sha) add("x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
      if (!s.session_token.empty()) add("x-amz-security-token: " + s.session_token);
      curl_easy_setopt(e, CURLOPT_AWS_SIGV4, sigv4_param_.c_str());
      curl_easy_setopt(e, CURLOPT_USERNAME, s.access_key_id.c_str());
      curl_easy_setopt(e, CURLOPT_PASSWORD, s.secret_access_key.c_str());
    } else if (options_.basic_auth) {
      // Sent with the first request (no 401 round trip first), as curl -u does.
      curl_easy_setopt(e, CURLOPT_HTTPAUTH, static_cast<long>(CURLAUTH_BASIC));
      curl_easy_setopt(e, CURLOPT_USERNAME, options_.basic_auth->user.c_str());
      curl_easy_setopt(e, CURLOPT_PASSWORD, options_.basic_auth->password.c_str());
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
    return {};
  }

  // Uploads skip curl's "Expect: 100-continue" round trip by removing the header ("Expect:") —
  // except when signing: curl 7.88 then lists "expect" in SignedHeaders although it sends no such
  // header, and every verifier rejects the signature (shown in tests/unit/test_http.cpp). Signed
  // uploads keep curl's default (100-continue above 1 MiB).
  void no_expect(Transfer* t) const {
    if (!options_.sigv4) t->headers = curl_slist_append(t->headers, "Expect:");
  }

  static std::size_t on_header(char* data, std::size_t size, std::size_t n, void* ud) {
    auto* t = static_cast<Transfer*>(ud);
    std::string_view line(data, size * n);
    if (line.starts_with("HTTP/")) {  // a new response (after 100 Continue or a redirect)
      t->resp.headers.clear();
      const auto sp = line.find(' ');
      if (sp != std::string_view::npos) t->status = std::strtol(std::string(line.substr(sp + 1, 3)).c_str(), nullptr, 10);
      return size * n;
    }
    // A ranged read's successful answer: nobody reads its headers, and keeping them (a map node
    // and strings each) was ~3% of the CPU of 10,000 small GETs.
    if (t->ranged() && (t->status == 200 || t->status == 206)) return size * n;
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) return size * n;
    std::string name(line.substr(0, colon));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) value.remove_suffix(1);
    t->resp.headers[std::move(name)] = std::string(value);
    return size * n;
  }

  static std::size_t on_write(char* data, std::size_t size, std::size_t n, void* ud) {
    auto* t = static_cast<Transfer*>(ud);
    const std::size_t len = size * n;
    const bool ok = t->status == 200 || t->status == 206;
    if (t->ranged() && ok) {
      // 200 to a ranged request: the server ignored Range. Fine only when we asked for the
      // object from its first byte (the body is then the object, cut at our length).
      if (t->status == 200 && *t->req.range_offset + t->received != 0 && t->resp.bytes == 0) {
        t->range_ignored = true;
        return 0;
      }
      const std::uint64_t room = t->req.range_length - t->received;
      if (len > room) {
        if (t->status == 200 && t->req.whole) {
          t->overflow = true;  // the object grew since it was listed
        } else if (t->status == 200) {
          t->range_ignored = true;
        } else {
          t->overflow = true;
        }
        return 0;
      }
      t->store(data, len);
      t->received += len;
      t->resp.bytes += len;
      // curl has just read the socket dry: near the end of the body, ACK now (see ack_at_once).
      // A delayed ACK here cost the GET 40 ms, and the in-order read-ahead window behind it
      // waited as long. Earlier in a large body the stream of segments brings ACKs anyway, and
      // one forced per read there cost ~0.1 CPU-s per GiB in extra ACKs.
      if (t->fd != CURL_SOCKET_BAD && t->req.range_length - t->received <= kAckTail) ack_at_once(t->fd);
      return len;
    }
    const std::size_t limit = ok ? t->req.max_body : kErrorBodyLimit;
    if (t->resp.body.size() + len > limit) {
      if (ok) {
        t->overflow = true;
        return 0;
      }
      t->resp.body.append(data, limit - t->resp.body.size());
      return len;
    }
    t->resp.body.append(data, len);
    if (ok) t->resp.bytes += len;
    return len;
  }

  static std::size_t on_read(char* buf, std::size_t size, std::size_t n, void* ud) {
    auto* t = static_cast<Transfer*>(ud);
    const std::size_t left = t->req.upload.size() - t->upload_pos;
    const std::size_t k = std::min(left, size * n);
    std::memcpy(buf, t->req.upload.data() + t->upload_pos, k);
    t->upload_pos += k;
    return k;
  }

  void check_done() {
    int pending = 0;
    while (CURLMsg* m = curl_multi_info_read(multi_, &pending)) {
      if (m->msg != CURLMSG_DONE) continue;
      Transfer* t = nullptr;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &t);
      const CURLcode rc = m->data.result;
      curl_multi_remove_handle(multi_, m->easy_handle);
      attempt_done(t, rc);
    }
  }

  void attempt_done(Transfer* t, CURLcode rc) {
    long status = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
    curl_off_t starttransfer = 0, total = 0;
    long connects = 0;
    curl_easy_getinfo(t->easy, CURLINFO_STARTTRANSFER_TIME_T, &starttransfer);
    curl_easy_getinfo(t->easy, CURLINFO_TOTAL_TIME_T, &total);
    curl_easy_getinfo(t->easy, CURLINFO_NUM_CONNECTS, &connects);
    t->resp.ttfb_ns = static_cast<std::uint64_t>(starttransfer) * 1000;
    t->resp.total_ns = static_cast<std::uint64_t>(total) * 1000;
    t->resp.connections += static_cast<std::uint64_t>(connects);
    t->resp.status = status;
    // Only for errors: a string built per successful read would cost on the hot path.
    const auto shown = [t] { return t->shown(); };

    if (rc == CURLE_WRITE_ERROR && t->range_ignored) {
      finish(t, fail(Error(Errc::kUnsupported, "the server ignored the Range header (answered 200 with the whole object)")
                         .with_object(shown())
                         .with_http_status(static_cast<int>(status))
                         .with_hint("feedline reads byte ranges; serve the data from a server with Range support "
                                    "(nginx, S3, MinIO)")));
      return;
    }
    if (rc == CURLE_WRITE_ERROR && t->overflow) {
      if (t->req.whole && t->status == 200) {
        finish(t, fail(Error(Errc::kCorrupt, fmt::format("the object is larger than the {} bytes it had when the "
                                                         "dataset was opened (did it change?)",
                                                         t->req.range_length))
                           .with_object(shown())
                           .with_hint("datasets must not change while they are read")));
        return;
      }
      finish(t, fail(Error(Errc::kIo, fmt::format("the server sent more than the {} bytes asked for",
                                                  t->ranged() ? t->req.range_length : t->req.max_body))
                         .with_object(shown())));
      return;
    }
    std::string reason;
    if (rc == CURLE_OK) {
      if (retryable_status(status)) reason = fmt::format("http_{}", status);
    } else {
      reason = retry_reason(rc);
      if (reason.empty()) {
        finish(t, fail(curl_error(rc, t, shown())));
        return;
      }
    }
    if (reason.empty()) {
      finish(t, std::move(t->resp));
      return;
    }
    t->last_reason = reason;
    if (t->resp.attempts >= options_.max_attempts) {
      Error err = rc == CURLE_OK ? Error(Errc::kIo, fmt::format("HTTP {} after {} attempts", status, t->resp.attempts))
                                           .with_http_status(static_cast<int>(status))
                                     : curl_error(rc, t, shown());
      std::string msg = rc == CURLE_OK ? err.message()
                                       : fmt::format("{} (gave up after {} attempts)", err.message(), t->resp.attempts);
      std::string hint = status == 503 || status == 429
                             ? "the server is throttling: lower --iodepth/--connections, or raise --max-attempts"
                             : rc != CURLE_OK && !err.hint().empty()
                                   ? err.hint()
                                   : "check the server and the network; --max-attempts and --stall-timeout bound the wait";
      finish(t, fail(Error(err.code(), std::move(msg))
                         .with_object(shown())
                         .with_http_status(static_cast<int>(status))
                         .with_hint(std::move(hint))));
      return;
    }
    ++t->resp.retries[reason];
    ++t->resp.attempts;
    // Full jitter: U(0, min(cap, base * 2^(attempt-1))).
    const auto exp = std::min<std::int64_t>(options_.backoff_cap.count(),
                                            options_.backoff_base.count() << std::min(20u, t->resp.attempts - 2));
    std::uniform_int_distribution<std::int64_t> pick(0, std::max<std::int64_t>(exp, 1));
    if (!t->backoff) t->backoff = std::make_unique<asio::steady_timer>(io_);
    t->backoff->expires_after(std::chrono::milliseconds(pick(rng_)));
    t->backoff->async_wait([this, t](const boost::system::error_code& ec) {
      if (ec || !active_.contains(t)) return;  // cancelled: cancel_everything() finished it
      active_.erase(t);
      launch(t);
    });
  }

  Error curl_error(CURLcode rc, const Transfer* t, const std::string& shown) const {
    std::string detail = t->errbuf[0] ? t->errbuf : curl_easy_strerror(rc);
    Errc code = Errc::kIo;
    std::string hint = "check the URL and that the server is up";
    switch (rc) {
      case CURLE_COULDNT_RESOLVE_HOST:
      case CURLE_COULDNT_RESOLVE_PROXY:
        code = Errc::kIo;  // the endpoint is unusable, not an object that is missing
        hint = "the host name does not resolve: check the URL or --endpoint (DNS)";
        break;
      case CURLE_COULDNT_CONNECT:
        hint = "nothing accepts connections there: check the host, the port and that the server is running";
        break;
      case CURLE_OPERATION_TIMEDOUT:
        code = Errc::kTimeout;
        hint = "the server did not answer in time (--connect-timeout, --stall-timeout)";
        break;
      case CURLE_PEER_FAILED_VERIFICATION:
      case CURLE_SSL_CACERT_BADFILE:
      case CURLE_SSL_CONNECT_ERROR:
        code = Errc::kPermissionDenied;
        hint = "TLS verification failed: pass the server's CA with --ca-bundle (or --insecure to skip checks)";
        break;
      case CURLE_UNSUPPORTED_PROTOCOL:
        code = Errc::kUnsupported;
        hint = "this libcurl cannot speak that protocol";
        break;
      default:
        break;
    }
    return Error(code, fmt::format("{} (curl: {})", detail, curl_easy_strerror(rc))).with_object(shown).with_hint(hint);
  }

  void finish(Transfer* t, Result<HttpResponse> result) {
    active_.erase(t);
    std::unique_ptr<Transfer> owned(t);
    if (t->easy != nullptr && !shut_down_ && free_easy_.size() < 1024) {
      free_easy_.push_back(t->easy);  // reset by configure() before its next use
      t->easy = nullptr;
    }
    HttpCallback cb = std::move(t->done);
    cb(std::move(result));
  }

  void cancel_everything(const char* why) {
    std::vector<Transfer*> all(active_.begin(), active_.end());
    for (Transfer* t : all) {
      curl_multi_remove_handle(multi_, t->easy);  // harmless when it waits for a backoff
      if (t->backoff) t->backoff->cancel();
      finish(t, fail(Error(Errc::kCancelled, why).with_object(t->shown())));
    }
  }

  // HttpClientOptions::stop was requested, on whichever thread requested it: later launches
  // fail at once; what is in flight is failed on the loop's thread (threaded: posted there;
  // driven: by run_for(), which this wakes).
  void on_stop() {
    stopping_.store(true, std::memory_order_release);
    if (options_.driven) {
      asio::post(io_, [] {});
    } else {
      asio::post(io_, [this] {
        if (!shut_down_) cancel_everything("interrupted");
      });
    }
  }

  void shutdown() {
    shut_down_ = true;
    cancel_everything("cancelled");
    timer_.cancel();
    for (CURL* e : free_easy_) curl_easy_cleanup(e);
    free_easy_.clear();
    curl_multi_cleanup(multi_);  // closes cached connections through on_close_socket
    multi_ = nullptr;
    for (auto& [fd, sock] : socks_) {
      boost::system::error_code ec;
      sock->socket.close(ec);  // whatever curl left open: its waits end too
    }
    socks_.clear();
    // Handlers still queued (aborted waits, backoff timers) are dropped, not run: the loop ends
    // here even if one of them would have re-armed something.
    io_.stop();
  }

  // ---- curl <-> Asio ----

  static curl_socket_t on_open_socket(void* ud, curlsocktype purpose, curl_sockaddr* addr) {
    auto* self = static_cast<CurlClient*>(ud);
    if (purpose != CURLSOCKTYPE_IPCXN || (addr->family != AF_INET && addr->family != AF_INET6)) {
      return CURL_SOCKET_BAD;
    }
    auto s = std::make_shared<Sock>(self->io_);
    boost::system::error_code ec;
    s->socket.open(addr->family == AF_INET ? tcp::v4() : tcp::v6(), ec);
    if (ec) return CURL_SOCKET_BAD;
    const curl_socket_t fd = s->socket.native_handle();
    self->socks_[fd] = std::move(s);
    ++self->opened_;
    const auto open = ++self->open_;
    if (open > self->max_open_) self->max_open_ = open;
    return fd;
  }

  static int on_close_socket(void* ud, curl_socket_t fd) {
    auto* self = static_cast<CurlClient*>(ud);
    auto it = self->socks_.find(fd);
    if (it == self->socks_.end()) return ::close(fd);
    boost::system::error_code ec;
    it->second->want = 0;
    it->second->socket.close(ec);  // aborts pending waits; their handlers hold the Sock
    self->socks_.erase(it);
    --self->open_;
    return 0;
  }

  // ACK what arrives at once. Linux delays ACKs on request/response connections (up to 40 ms),
  // and a server that sends the tail of a response only once the rest is ACKed (Nagle: nginx
  // with tcp_nopush, on a response one segment past a full one) then stalls: 1 in 200 small GETs
  // took 40 ms longer, which halved objects/s at 16 in flight. TCP_QUICKACK does not stick, and
  // it sends a pending ACK only once the receive queue is empty, so it is set each time curl
  // waits for an answer (on_socket) and after every body write, when curl has just read the
  // socket dry (one setsockopt each). Once per read wake-up, before curl read, was not enough:
  // curl also reads in calls that no wake-up of this socket started (kernel counter
  // TcpExtDelayedACKs: 25-43 per 10,000 64 KiB GETs before, 0 after).
  static void ack_at_once(curl_socket_t fd) {
#ifdef TCP_QUICKACK
    const int one = 1;
    (void)::setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
#else
    (void)fd;
#endif
  }

  static int on_socket(CURL* easy, curl_socket_t fd, int what, void* ud, void*) {
    auto* self = static_cast<CurlClient*>(ud);
    if (Transfer* t = nullptr; curl_easy_getinfo(easy, CURLINFO_PRIVATE, &t) == CURLE_OK && t != nullptr) {
      t->fd = what == CURL_POLL_REMOVE ? CURL_SOCKET_BAD : fd;
    }
    auto it = self->socks_.find(fd);
    if (it == self->socks_.end()) return 0;
    std::shared_ptr<Sock> s = it->second;
    s->want = what == CURL_POLL_REMOVE ? 0 : what;
    // curl now waits for an answer here: ACK its bytes at once whichever call reads them first.
    // A read wake-up (on_ready) alone is not enough: curl often reads the first bytes of an
    // answer in the same call that sent the request (a timer action, no wake-up), and the ACK
    // for them was then delayed: 1 in 100 tar-member ranges over nginx took 40 ms longer
    // (transfer p99 45 ms; 6 ms with this, and ~10% more samples/s).
    if (s->want & CURL_POLL_IN) ack_at_once(fd);
    if ((s->want & CURL_POLL_IN) && !s->reading) self->wait(s, fd, true);
    if ((s->want & CURL_POLL_OUT) && !s->writing) self->wait(s, fd, false);
    return 0;
  }

  // Asio's reactor watches sockets edge-triggered and async_wait is never speculative: bytes
  // that arrived while no wait was pending (or that curl left unread) raise no new edge, and
  // the wait sat until the next timer: 40 ms stalls on 1 in 200 small GETs. So a read wait first
  // asks the kernel whether bytes are already there, and if so runs curl at once.
  void wait(const std::shared_ptr<Sock>& s, curl_socket_t fd, bool in) {
    (in ? s->reading : s->writing) = true;
    if (in) {
      boost::system::error_code aec;
      if (s->socket.available(aec) > 0 && !aec) {
        asio::post(io_, [this, s, fd] { on_ready(s, fd, true, {}); });
        return;
      }
    }
    s->socket.async_wait(in ? tcp::socket::wait_read : tcp::socket::wait_write,
                         [this, s, fd, in](const boost::system::error_code& ec) { on_ready(s, fd, in, ec); });
  }

  void on_ready(const std::shared_ptr<Sock>& s, curl_socket_t fd, bool in, const boost::system::error_code& ec) {
    (in ? s->reading : s->writing) = false;
    if (ec || !s->socket.is_open()) return;
    const int flag = in ? CURL_POLL_IN : CURL_POLL_OUT;
    if (!(s->want & flag) || multi_ == nullptr) return;
    int running = 0;
    curl_multi_socket_action(multi_, fd, in ? CURL_CSELECT_IN : CURL_CSELECT_OUT, &running);
    check_done();
    // Still wanted (and still the same socket): wait again.
    if ((s->want & flag) && s->socket.is_open() && !(in ? s->reading : s->writing)) wait(s, fd, in);
  }

  static int on_timer(CURLM*, long timeout_ms, void* ud) {
    auto* self = static_cast<CurlClient*>(ud);
    if (timeout_ms < 0) {
      self->timer_.cancel();
      return 0;
    }
    if (timeout_ms == 0) {
      // "Now": run it from the loop (not from inside this callback, which curl forbids).
      self->timer_.cancel();
      asio::post(self->io_, [self] {
        if (self->multi_ == nullptr) return;
        int running = 0;
        curl_multi_socket_action(self->multi_, CURL_SOCKET_TIMEOUT, 0, &running);
        self->check_done();
      });
      return 0;
    }
    self->timer_.expires_after(std::chrono::milliseconds(timeout_ms));
    self->timer_.async_wait([self](const boost::system::error_code& ec) {
      if (ec || self->multi_ == nullptr) return;
      int running = 0;
      curl_multi_socket_action(self->multi_, CURL_SOCKET_TIMEOUT, 0, &running);
      self->check_done();
    });
    return 0;
  }

  HttpClientOptions options_;
  asio::io_context io_;
  asio::steady_timer timer_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  CURLM* multi_ = nullptr;
  curl_slist* connect_to_ = nullptr;
  std::string sigv4_param_;
  std::unordered_map<curl_socket_t, std::shared_ptr<Sock>> socks_;
  std::unordered_set<Transfer*> active_;
  std::vector<CURL*> free_easy_;
  std::mt19937_64 rng_{std::random_device{}()};
  bool shut_down_ = false;
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> opened_{0}, open_{0}, max_open_{0};
  std::thread thread_;
  std::optional<std::stop_callback<std::function<void()>>> on_stop_;
};

}  // namespace

Result<std::unique_ptr<HttpClient>> HttpClient::create(const HttpClientOptions& options) {
  if (options.sigv4 && options.basic_auth) {
    return fail(Errc::kInvalidArgument, "an HTTP client signs with SigV4 or sends Basic credentials, not both");
  }
  auto c = std::make_unique<CurlClient>(options);
  FEEDLINE_TRY(c->init());
  return std::unique_ptr<HttpClient>(std::move(c));
}

Result<HttpResponse> HttpClient::perform(HttpRequest request) {
  if (driven()) {
    std::optional<Result<HttpResponse>> out;
    start(std::move(request), [&out](Result<HttpResponse> r) { out.emplace(std::move(r)); });
    while (!out) run_for(std::chrono::milliseconds(100));
    return std::move(*out);
  }
  std::promise<Result<HttpResponse>> p;
  auto f = p.get_future();
  start(std::move(request), [&p](Result<HttpResponse> r) { p.set_value(std::move(r)); });
  return f.get();
}

std::string http_library_version() { return curl_version(); }
bool http_compiled_in() noexcept { return true; }

std::string uri_encode(std::string_view text, bool keep_slash) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

}  // namespace feedline::transports
