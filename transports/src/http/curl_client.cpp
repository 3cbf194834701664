// The HttpClient behind s3:// and http(s)://: a request's life from start() to its callback.
//
// Three parts, each in its own file:
//  - curl_reactor.cpp: libcurl's multi-socket interface on a Boost.Asio loop (sockets, timers,
//    the threaded or driven loop). It hands each finished attempt back here.
//  - transfer.cpp: one request's easy-handle set-up and the callbacks that move its bytes.
//  - retry.cpp: pure policy: what an attempt's outcome means (done, retry under a reason, fail
//    with which Error), the backoff, the Range a retry asks for.
// This file joins them: launch an attempt (a pooled easy handle, configured), judge its end,
// wait out a backoff and launch again, or complete the request; cancel and stop everything in
// flight; and libcurl's process-wide initialisation (HttpLibrary).
//
// Every Transfer is owned by `active_` from launch() to finish() (raw pointers: curl's
// CURLOPT_PRIVATE points to it), on the loop thread only.
#include <curl/curl.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <ctime>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <random>
#include <stop_token>
#include <unordered_set>

#include "detail/answer.hpp"
#include "detail/curl_reactor.hpp"
#include "detail/retry.hpp"
#include "detail/transfer.hpp"
#include "feedline/transports/http_client.hpp"

namespace feedline::transports {
namespace {

using detail::AttemptVerdict;
using detail::Transfer;

class CurlClient final : public HttpClient, private detail::TransferSink {
 public:
  explicit CurlClient(const HttpClientOptions& o) : options_(o), setup_(options_) {}

  Result<void> init() {
    setup_.sockets = reactor_.socket_hooks();
    FEEDLINE_TRY(reactor_.open(options_.max_connections, options_.driven, *this));
    // Last: a stop already requested runs the callback here, and it posts to the loop.
    if (options_.stop.stop_possible()) on_stop_.emplace(options_.stop, [this] { on_stop(); });
    return {};
  }

  ~CurlClient() override {
    on_stop_.reset();  // waits for a callback running on another thread; none runs after this
    if (options_.driven) {
      shutdown();
    } else {
      reactor_.post([this] { shutdown(); });
    }
    reactor_.join();
  }

  void start(HttpRequest request, HttpCallback done) override {
    Transfer* t = make_transfer(std::move(request), std::move(done));
    if (options_.driven) {
      launch(t);  // the owner's thread: the loop's own
    } else {
      reactor_.post([this, t] { launch(t); });
    }
  }

  void start_many(std::vector<std::pair<HttpRequest, HttpCallback>> requests) override {
    std::vector<Transfer*> ts;
    ts.reserve(requests.size());
    for (auto& [req, done] : requests) ts.push_back(make_transfer(std::move(req), std::move(done)));
    if (options_.driven) {
      for (Transfer* t : ts) launch(t);
      return;
    }
    reactor_.post([this, ts = std::move(ts)] {
      for (Transfer* t : ts) launch(t);
    });
  }

  std::size_t run_for(std::chrono::nanoseconds timeout) override {
    if (!options_.driven) return 0;
    if (stopping_.load(std::memory_order_acquire) && !active_.empty()) {
      cancel_everything("interrupted");
      return 1;
    }
    std::size_t n = reactor_.run_for(timeout);
    if (stopping_.load(std::memory_order_acquire) && !active_.empty()) {
      cancel_everything("interrupted");
      ++n;
    }
    return n;
  }

  void wake() override {
    if (options_.driven) reactor_.post([] {});  // a handler to run: run_for() returns
  }

  bool driven() const noexcept override { return options_.driven; }

  void cancel_all() override { cancel_on_loop(std::nullopt); }
  void cancel_group(std::uint64_t group) override { cancel_on_loop(group); }

  HttpClientStats stats() const override { return reactor_.stats(); }

 private:
  static Transfer* make_transfer(HttpRequest request, HttpCallback done) {
    auto t = std::make_unique<Transfer>();
    t->req = std::move(request);
    t->done = std::move(done);
    return t.release();  // owned by active_ from launch() on, freed by finish()
  }

  // One attempt: the first, or a retry after its backoff (the Transfer keeps its easy handle).
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
    if (!t->easy) {
      t->easy = pool_.acquire();
      if (!t->easy) {
        finish(t, fail(Errc::kResourceExhausted, "curl_easy_init failed"));
        return;
      }
    }
    if (auto r = detail::configure(*t, setup_); !r) {
      finish(t, fail(std::move(r).error().with_object(t->shown())));
      return;
    }
    t->begin_attempt();
    if (!reactor_.add(t->easy.get()))
      finish(t, fail(Errc::kInternal, "curl_multi_add_handle failed"));
  }

  // The reactor's report of an attempt's end: complete the request, or try again after a backoff.
  void attempt_done(Transfer* t, CURLcode rc) override {
    CURL* e = t->easy.get();
    long status = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    curl_off_t starttransfer = 0, total = 0;
    long connects = 0;
    curl_easy_getinfo(e, CURLINFO_STARTTRANSFER_TIME_T, &starttransfer);
    curl_easy_getinfo(e, CURLINFO_TOTAL_TIME_T, &total);
    curl_easy_getinfo(e, CURLINFO_NUM_CONNECTS, &connects);
    t->resp.ttfb_ns = static_cast<std::uint64_t>(starttransfer) * 1000;
    t->resp.total_ns = static_cast<std::uint64_t>(total) * 1000;
    t->resp.connections += static_cast<std::uint64_t>(connects);
    t->resp.status = status;
    if (status >= 300 && status < 400) {
      char* to = nullptr;
      if (curl_easy_getinfo(e, CURLINFO_REDIRECT_URL, &to) == CURLE_OK && to != nullptr)
        t->resp.redirect_url = to;
    }
    if (t->refused) {  // the answer's headers contradict the request (detail/answer.hpp)
      finish(t, fail(std::move(*t->refused).with_object(t->shown()).with_offset(t->asked().first)));
      return;
    }

    detail::AttemptOutcome outcome{rc, status, t->range_ignored, t->overflow, t->errbuf, t->filled};
    outcome.reused_connection = connects == 0;
    AttemptVerdict v =
        detail::judge_attempt(outcome, t->shape(), t->resp.attempts, options_.max_attempts);
    switch (v.next) {
      case AttemptVerdict::Next::kSucceed:
        finish(t, std::move(t->resp));
        return;
      case AttemptVerdict::Next::kFail:
        // The object's name only now: a string built per successful read would cost on the hot
        // path.
        finish(t, fail(std::move(*v.error).with_object(t->shown())));
        return;
      case AttemptVerdict::Next::kRetry:
        break;
    }
    ++t->resp.retries[v.reason];
    ++t->resp.attempts;
    const detail::Backoff backoff{options_.backoff_base, options_.backoff_cap};
    if (!t->backoff) t->backoff = std::make_unique<boost::asio::steady_timer>(reactor_.io());
    t->backoff->expires_after(
        retry_wait(*t, detail::backoff_delay(backoff, t->resp.attempts, rng_)));
    t->backoff->async_wait([this, t](const boost::system::error_code& ec) {
      if (ec || !active_.contains(t)) return;  // cancelled: cancel_everything() finished it
      active_.erase(t);
      launch(t);
    });
  }

  // The wait before a retry: the backoff, or longer where a 429/503 says Retry-After, but never
  // longer than the stall timeout (the longest the client waits for a server in any case).
  std::chrono::milliseconds retry_wait(const Transfer& t, std::chrono::milliseconds backoff) const {
    if (t.resp.status != 429 && t.resp.status != 503) return backoff;
    const auto it = t.resp.headers.find("retry-after");
    if (it == t.resp.headers.end()) return backoff;
    const auto asked = detail::parse_retry_after(it->second, std::time(nullptr));
    if (!asked) return backoff;
    const auto capped = std::min<std::chrono::milliseconds>(*asked, options_.stall_timeout);
    return std::max(backoff, capped);
  }

  void finish(Transfer* t, Result<HttpResponse> result) {
    active_.erase(t);
    std::unique_ptr<Transfer> owned(t);
    if (!shut_down_) pool_.release(std::move(t->easy));  // reset by configure() before its next use
    HttpCallback cb = std::move(t->done);
    cb(std::move(result));
  }

  // cancel_all() / cancel_group(): on the loop's thread, returning once it is done.
  void cancel_on_loop(std::optional<std::uint64_t> group) {
    if (options_.driven) {
      cancel_everything("cancelled", group);
      return;
    }
    std::promise<void> p;
    auto f = p.get_future();
    reactor_.post([this, &p, group] {
      cancel_everything("cancelled", group);
      p.set_value();
    });
    f.wait();
  }

  // Every request in flight, or only those of `group`.
  void cancel_everything(const char* why, std::optional<std::uint64_t> group = std::nullopt) {
    std::vector<Transfer*> all;
    all.reserve(active_.size());
    for (Transfer* t : active_) {
      if (!group || t->req.group == *group) all.push_back(t);
    }
    for (Transfer* t : all) {
      if (t->easy) reactor_.remove(t->easy.get());  // harmless when it waits for a backoff
      if (t->backoff) t->backoff->cancel();
      Error e = Error(Errc::kCancelled, why).with_object(t->shown());
      // Cancelled while it waited to retry a throttled answer (a Retry-After longer than the run
      // had left): the answer stays counted (the queue reads it from the error).
      if (t->resp.attempts > 0 && (t->resp.status == 429 || t->resp.status == 503))
        e.with_http_status(static_cast<int>(t->resp.status));
      finish(t, fail(std::move(e)));
    }
  }

  // HttpClientOptions::stop was requested, on whichever thread requested it: later launches
  // fail at once; what is in flight is failed on the loop's thread (threaded: posted there;
  // driven: by run_for(), which this wakes).
  void on_stop() {
    stopping_.store(true, std::memory_order_release);
    if (options_.driven) {
      reactor_.post([] {});
    } else {
      reactor_.post([this] {
        if (!shut_down_) cancel_everything("interrupted");
      });
    }
  }

  // On the loop thread, once: fails what is in flight, then cleans up the easy handles and the
  // reactor (in that order: no easy handle may outlive the multi handle's connections in use).
  void shutdown() {
    shut_down_ = true;
    cancel_everything("cancelled");
    pool_.clear();
    reactor_.close();
  }

  HttpClientOptions options_;
  detail::TransferSetup setup_;  // refers to options_
  // Before every member that holds an Asio object (backoff timers in active_'s transfers).
  detail::CurlReactor reactor_;
  std::unordered_set<Transfer*> active_;
  detail::EasyPool pool_;
  std::mt19937_64 rng_{std::random_device{}()};
  bool shut_down_ = false;
  std::atomic<bool> stopping_{false};
  std::optional<std::stop_callback<std::function<void()>>> on_stop_;
};

// ---- libcurl's process-wide state ----

std::atomic<int> g_libraries_held{0};

// HttpClient::create() without an HttpLibrary held: libcurl is initialised once for the rest of
// the process (see HttpLibrary in http_client.hpp).
Result<void> ensure_curl_initialised() {
  if (g_libraries_held.load(std::memory_order_acquire) > 0) return {};
  static std::once_flag once;
  static CURLcode rc = CURLE_OK;
  std::call_once(once, [] { rc = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (rc != CURLE_OK) {
    return fail(
        Error(Errc::kResourceExhausted,
              fmt::format("libcurl could not initialise: {}", curl_easy_strerror(rc)))
            .with_hint(
                "HTTP transfers need libcurl's TLS library to start; check the memory left"));
  }
  return {};
}

}  // namespace

Result<HttpLibrary> HttpLibrary::init() {
  if (const CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT); rc != CURLE_OK) {
    return fail(
        Error(Errc::kResourceExhausted,
              fmt::format("libcurl could not initialise: {}", curl_easy_strerror(rc)))
            .with_hint(
                "HTTP transfers need libcurl's TLS library to start; check the memory left"));
  }
  g_libraries_held.fetch_add(1, std::memory_order_acq_rel);
  HttpLibrary lib;
  lib.held_ = true;
  return lib;
}

HttpLibrary::HttpLibrary(HttpLibrary&& other) noexcept : held_(std::exchange(other.held_, false)) {}

HttpLibrary& HttpLibrary::operator=(HttpLibrary&& other) noexcept {
  if (this != &other) {
    release();
    held_ = std::exchange(other.held_, false);
  }
  return *this;
}

HttpLibrary::~HttpLibrary() { release(); }

void HttpLibrary::release() noexcept {
  if (!held_) return;
  held_ = false;
  g_libraries_held.fetch_sub(1, std::memory_order_acq_rel);
  curl_global_cleanup();
}

bool HttpLibrary::held() noexcept { return g_libraries_held.load(std::memory_order_acquire) > 0; }

Result<std::unique_ptr<HttpClient>> HttpClient::create(const HttpClientOptions& options) {
  if (options.sigv4 && options.basic_auth) {
    return fail(Errc::kInvalidArgument,
                "an HTTP client signs with SigV4 or sends Basic credentials, not both");
  }
  FEEDLINE_TRY(ensure_curl_initialised());
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
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

}  // namespace feedline::transports
