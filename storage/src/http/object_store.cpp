#include "object_store.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <deque>
#include <future>
#include <thread>

#include "feedline/core/clock.hpp"
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

// Reads as ranged GETs. Where the caller mostly polls (QueueOptions::caller_mostly_polls) the
// main client is driven: submit() starts requests on the caller's thread and poll() runs the
// client's event loop there, so responses complete where they are consumed, like io_uring
// completions, with no thread hand-over. Otherwise the client has its own loop thread and poll()
// waits for the completions it hands over.
//
// Large parts (kLargePart and up) are also spread over helper clients, each with an event-loop
// thread of its own (HttpConfig::loops): libcurl receives into its own buffer and we copy each
// body into the caller's, ~0.15 CPU-s per GiB on top of the kernel's copy, so one loop tops out
// near 2 GB/s on one core where a second loop reaches ~2.8 GB/s (bench/compare-http.sh). Small
// requests stay on the main client: for them the hand-over between threads would cost more than
// the copy it spreads. Large parts in flight over all loops are capped at the connection count;
// the rest wait here, in order, so --connections keeps its meaning.
//
// Where the caller allows it (QueueOptions::coalesce), reads submitted together that lie close
// together in one object (at most kMaxGap apart, as the samples of a tar shard read in storage
// order, a header between each) are coalesced into one GET of up to a part, its body scattered
// into each read's buffer: a request costs a round trip and ~20-60 us of CPU on each side
// whatever its size, so 64 KiB tar members read one GET each ran at ~12k/s where the same bytes
// in 8 MiB GETs stream at line rate.
class HttpQueue final : public IoQueue {
 public:
  static constexpr std::uint64_t kLargePart = 1u << 20;
  static constexpr std::uint64_t kMaxGap = 16u << 10;

  HttpQueue(unsigned depth, std::vector<std::unique_ptr<HttpClient>> loops, std::uint64_t part_size, unsigned connections,
            bool coalesce)
      : IoQueue(depth), part_size_(part_size), connections_(connections), coalesce_(coalesce) {
    for (auto& c : loops) loops_.push_back(Loop{std::move(c), 0});
  }

  ~HttpQueue() override {
    HttpQueue::cancel();
    while (in_flight() > 0) do_poll(1, std::chrono::milliseconds(100));
  }

  void cancel() override {
    std::deque<Waiting> waiting;
    waiting.swap(waiting_);
    for (auto& w : waiting) push_done(Part{std::move(w.members), fail(Errc::kCancelled, "cancelled"), w.length, kNoLoop});
    for (auto& l : loops_) l.client->cancel_all();
  }

  QueueInfo info() const override {
    QueueInfo i{"http", {"curl-multi-socket", "asio"}, {}};
    i.features.push_back(fmt::format("{} connections", connections_));
    i.features.push_back(fmt::format("{} parts", format_part()));
    if (loops_.size() > 1) i.features.push_back(fmt::format("{} event loops for parts >= 1 MiB", loops_.size()));
    return i;
  }

 protected:
  void do_submit(std::span<ReadOp* const> ops) override {
    const std::uint64_t now = now_ns();
    std::vector<Piece> pieces;  // single-part reads: candidates for coalescing
    for (ReadOp* op : ops) {
      auto st = std::make_shared<OpState>();
      st->op = op;
      const auto* h = dynamic_cast<const HttpObject*>(op->object);
      if (h == nullptr || op->dst.size() < op->length) {
        st->error = Error(Errc::kInvalidArgument,
                          h == nullptr ? "not an object of this HTTP backend" : "destination buffer smaller than the read")
                        .with_object(h ? h->shown() : std::string())
                        .with_offset(op->offset);
        push_ready(std::move(st));
        continue;
      }
      st->shown = h->shown();
      // Reads stop at the object's end (a short read, as from a file): no 416 answers.
      const std::uint64_t end = std::min(h->size(), op->offset + op->length);
      if (op->offset >= end) {
        push_ready(std::move(st));
        continue;
      }
      const std::uint64_t len = end - op->offset;
      const std::uint64_t parts = (len + part_size_ - 1) / part_size_;
      st->parts_left = static_cast<unsigned>(parts);
      op->times.issued_ns = now;
      if (parts == 1) {
        pieces.push_back(Piece{h, op->offset, len, op->dst.first(static_cast<std::size_t>(len)), std::move(st)});
        continue;
      }
      for (std::uint64_t i = 0; i < parts; ++i) {
        const std::uint64_t off = i * part_size_;
        const std::uint64_t n = std::min(part_size_, len - off);
        HttpRequest req = request_for(*h, op->offset + off, n);
        req.dst = op->dst.subspan(static_cast<std::size_t>(off), static_cast<std::size_t>(n));
        std::vector<Member> m;
        m.push_back(Member{st, 0, n});
        issue(std::move(req), std::move(m), n);
      }
    }
    coalesce(pieces);
    if (!main_batch_.empty()) loops_[0].client->start_many(std::exchange(main_batch_, {}));
    start_waiting();
  }

  std::size_t do_poll(std::size_t min_complete, std::chrono::nanoseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    HttpClient& main = *loops_[0].client;
    std::size_t completed = 0;
    for (;;) {
      if (in_flight() == 0) return completed;  // nothing can complete (done_ is empty too)
      const auto left = deadline - std::chrono::steady_clock::now();
      const bool wait = completed < min_complete && left.count() > 0;
      std::deque<Part> batch;
      if (main.driven()) {
        // Run the loop: at once for what is ready, waiting only while more is needed. Helper
        // loops hand their parts over through remote_ and wake() this loop.
        bool remote_ready = false;
        if (loops_.size() > 1) {
          std::lock_guard lock(mu_);
          remote_ready = !remote_.empty();
        }
        main.run_for(wait && done_.empty() && !remote_ready ? std::chrono::duration_cast<std::chrono::nanoseconds>(left)
                                                             : std::chrono::nanoseconds(0));
        batch.swap(done_);
        if (loops_.size() > 1) {
          std::lock_guard lock(mu_);
          for (Part& p : remote_) batch.push_back(std::move(p));
          remote_.clear();
        }
      } else {
        std::unique_lock lock(mu_);
        if (wait) cv_.wait_until(lock, deadline, [this] { return !done_.empty(); });
        batch.swap(done_);
      }
      for (Part& p : batch) completed += account(p);
      start_waiting();
      if (completed >= min_complete || std::chrono::steady_clock::now() >= deadline) return completed;
    }
  }

 private:
  static constexpr std::size_t kNoLoop = static_cast<std::size_t>(-1);

  struct OpState {
    ReadOp* op = nullptr;
    unsigned parts_left = 0;
    std::uint64_t bytes = 0;
    std::uint32_t retries = 0;
    std::optional<Error> error;
    std::string shown;
  };
  // An op's share of a request: its bytes are the request's [at, at + length).
  struct Member {
    std::shared_ptr<OpState> st;
    std::uint64_t at = 0;
    std::uint64_t length = 0;
  };
  struct Part {
    std::vector<Member> members;  // one op, or several coalesced
    Result<HttpResponse> r;  // a value-less part (an op finished at submit) has parts_left == 0
    std::uint64_t length = 0;    // the request's range; 0: no request (the op ended at submit)
    std::size_t loop = kNoLoop;  // the client that ran it (kNoLoop: none)
  };
  // A single-part read before coalescing.
  struct Piece {
    const HttpObject* object;
    std::uint64_t offset;
    std::uint64_t length;
    MutableBytes dst;
    std::shared_ptr<OpState> st;
  };
  struct Loop {
    std::unique_ptr<HttpClient> client;
    unsigned requests = 0;  // in flight there (counted on the polling thread)
  };
  struct Waiting {
    HttpRequest req;
    std::vector<Member> members;
    std::uint64_t length = 0;
  };

  HttpRequest request_for(const HttpObject& h, std::uint64_t offset, std::uint64_t length) const {
    HttpRequest req;
    req.url = h.url();
    req.shown = h.shown();
    req.range_offset = offset;
    req.range_length = length;
    req.whole = offset == 0 && length == h.size();
    return req;
  }

  // Large parts wait for a loop (several loops), the rest go to the main loop's next batch.
  void issue(HttpRequest req, std::vector<Member> members, std::uint64_t n) {
    if (loops_.size() > 1 && n >= kLargePart) {
      waiting_.push_back(Waiting{std::move(req), std::move(members), n});
      return;
    }
    ++loops_[0].requests;
    main_batch_.emplace_back(std::move(req), [this, m = std::move(members), n](Result<HttpResponse> r) mutable {
      push_done(Part{std::move(m), std::move(r), n, 0});
    });
  }

  // One request per run of pieces in one object, in offset order, each at most kMaxGap after
  // the last and all within one part; at most an eighth of the queue's depth per request, so
  // that several requests stay in flight (one request at a time would wait out every first
  // byte: the ops it frees arrive together and would form the next single request).
  void coalesce(std::vector<Piece>& pieces) {
    const std::size_t max_group = coalesce_ ? std::max(1u, depth() / 8) : 1;
    std::stable_sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
      return a.object != b.object ? std::less<>()(a.object, b.object) : a.offset < b.offset;
    });
    for (std::size_t i = 0; i < pieces.size();) {
      const Piece& first = pieces[i];
      std::uint64_t end = first.offset + first.length;
      std::size_t j = i + 1;
      while (j < pieces.size() && j - i < max_group && pieces[j].object == first.object && pieces[j].offset >= end &&
             pieces[j].offset - end <= kMaxGap && pieces[j].offset + pieces[j].length - first.offset <= part_size_) {
        end = pieces[j].offset + pieces[j].length;
        ++j;
      }
      HttpRequest req = request_for(*first.object, first.offset, end - first.offset);
      std::vector<Member> members;
      members.reserve(j - i);
      if (j - i == 1) {
        req.dst = first.dst;
        members.push_back(Member{first.st, 0, first.length});
      } else {
        for (std::size_t k = i; k < j; ++k) {
          const std::uint64_t at = pieces[k].offset - first.offset;
          req.scatter.push_back(HttpRequest::Segment{at, pieces[k].dst});
          members.push_back(Member{pieces[k].st, at, pieces[k].length});
        }
        mutable_stats().counters["http_coalesced_reads"] += j - i;
      }
      issue(std::move(req), std::move(members), end - first.offset);
      i = j;
    }
  }

  std::string format_part() const {
    return part_size_ % (1u << 20) == 0 ? fmt::format("{} MiB", part_size_ >> 20) : fmt::format("{} B", part_size_);
  }

  // Starts waiting large parts on the least busy loops while fewer than connections_ run.
  void start_waiting() {
    if (waiting_.empty()) return;
    std::vector<std::vector<std::pair<HttpRequest, transports::HttpCallback>>> batches(loops_.size());
    while (!waiting_.empty() && large_in_flight_ < connections_) {
      Waiting w = std::move(waiting_.front());
      waiting_.pop_front();
      std::size_t best = 0;
      for (std::size_t i = 1; i < loops_.size(); ++i) {
        if (loops_[i].requests < loops_[best].requests) best = i;
      }
      ++loops_[best].requests;
      ++large_in_flight_;
      batches[best].emplace_back(std::move(w.req), [this, m = std::move(w.members), n = w.length, best](Result<HttpResponse> r) mutable {
        push_done(Part{std::move(m), std::move(r), n, best});
      });
    }
    for (std::size_t i = 0; i < loops_.size(); ++i) {
      if (!batches[i].empty()) loops_[i].client->start_many(std::move(batches[i]));
    }
  }

  void push_ready(std::shared_ptr<OpState> st) {
    std::vector<Member> m;
    m.push_back(Member{std::move(st), 0, 0});
    push_done(Part{std::move(m), HttpResponse{}, 0, kNoLoop});
  }

  // From the clients' callbacks: on this thread (a driven main client, or cancel()) or on a
  // client's own thread.
  void push_done(Part p) {
    HttpClient& main = *loops_[0].client;
    const bool here = p.loop == 0 || p.loop == kNoLoop;
    if (main.driven() && here) {
      done_.push_back(std::move(p));
      return;
    }
    if (main.driven()) {  // a helper loop's thread: hand over, wake the polling thread
      {
        std::lock_guard lock(mu_);
        remote_.push_back(std::move(p));
      }
      main.wake();
      return;
    }
    std::lock_guard lock(mu_);
    done_.push_back(std::move(p));
    if (done_.size() == 1) cv_.notify_one();  // the poller drains everything it finds
  }

  // Records one request; returns the ops it finished.
  std::size_t account(Part& p) {
    auto& stats = mutable_stats();
    if (p.loop != kNoLoop) {
      --loops_[p.loop].requests;
      if (loops_.size() > 1 && p.length >= kLargePart) --large_in_flight_;
    }
    std::size_t finished = 0;
    if (p.length == 0) {  // ended at submit
      for (Member& m : p.members) finished += finish(*m.st);
      return finished;
    }
    std::optional<Error> error;
    std::uint64_t body = 0;
    std::uint32_t retries = 0;
    if (p.loop == kNoLoop) {  // cancelled while waiting for a loop: never sent
      error = p.r.error();
    } else if (p.r) {
      ++stats.counters["http_requests"];
      const HttpResponse& r = *p.r;
      stats.histograms["ttfb_ns"].record(r.ttfb_ns);
      stats.histograms["transfer_ns"].record(r.total_ns > r.ttfb_ns ? r.total_ns - r.ttfb_ns : 0);
      if (r.connections) stats.counters["http_connections_opened"] += r.connections;
      for (const auto& [reason, n] : r.retries) {
        stats.counters["http_retries"] += n;
        stats.counters["http_retry_" + reason] += n;
        if (reason == "http_503" || reason == "http_429") stats.counters["http_throttled"] += n;
        retries += n;
      }
      if (r.status == 200 || r.status == 206) {
        body = r.bytes;
      } else {
        error = Error(r.status == 404 ? Errc::kNotFound
                      : (r.status == 401 || r.status == 403) ? Errc::kPermissionDenied
                                                             : Errc::kIo,
                      fmt::format("HTTP {} to a ranged GET", r.status))
                    .with_http_status(static_cast<int>(r.status));
      }
    } else {
      ++stats.counters["http_requests"];
      // Ended by cancel() (Ctrl-C): not a failure of the server's.
      if (p.r.error().code() != Errc::kCancelled) ++stats.counters["http_failed_requests"];
      error = p.r.error();
    }
    for (Member& m : p.members) {
      OpState& st = *m.st;
      st.retries += retries;
      if (error && !st.error) {
        st.error = *error;
        if (p.r) st.error = std::move(*st.error).with_object(st.shown).with_offset(st.op->offset);
      } else if (!error) {
        st.bytes += body > m.at ? std::min(m.length, body - m.at) : 0;
      }
      if (--st.parts_left == 0) finished += finish(st);
    }
    return finished;
  }

  std::size_t finish(OpState& st) {
    auto& stats = mutable_stats();
    std::uint64_t max_open = 0;  // the loops' peaks, added up (an upper bound when they differ in time)
    for (const auto& l : loops_) max_open += l.client->stats().max_open_connections;
    auto& peak = stats.counters["http_connections_peak"];
    peak = std::max<std::uint64_t>(peak, max_open);
    ReadOp& op = *st.op;
    if (st.error) {
      op.result = fail(std::move(*st.error));
    } else {
      op.result = st.bytes;
    }
    complete(op, st.retries);
    return 1;
  }

  std::vector<Loop> loops_;  // [0]: the main client (driven or threaded); the rest: helpers
  std::uint64_t part_size_;
  unsigned connections_;
  bool coalesce_;
  std::deque<Waiting> waiting_;  // large parts not started yet (several loops only)
  std::vector<std::pair<HttpRequest, transports::HttpCallback>> main_batch_;  // do_submit's, for the main loop
  unsigned large_in_flight_ = 0;
  std::mutex mu_;           // guards done_ when the main client is threaded, and remote_
  std::condition_variable cv_;
  std::deque<Part> done_;   // completions not yet accounted
  std::deque<Part> remote_; // helper loops' completions for a driven main client
};

}  // namespace

ObjectStore::ObjectStore(HttpConfig http, std::optional<transports::SigV4> sigv4, std::stop_token stop,
                         std::optional<transports::BasicAuth> basic_auth)
    : http_(std::move(http)), sigv4_(std::move(sigv4)), stop_(std::move(stop)), basic_auth_(std::move(basic_auth)) {}

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

Error ObjectStore::http_error(const HttpResponse& r, std::string_view object, std::string_view what) const {
  const auto body = s3::parse_error(r.body);
  const std::string code = body ? body->code : std::string();
  std::string message = fmt::format("{}: HTTP {}", what, r.status);
  if (body) message += fmt::format(" {}: {}", body->code, body->message);
  Errc errc = Errc::kIo;
  std::string hint = "check the URL and the server's log";
  if ((r.status == 401 || r.status == 403) && scheme() != "s3") {
    errc = Errc::kPermissionDenied;
    hint = r.status == 403 ? "the server refuses access to this object: check its permissions there"
           : basic_auth_   ? "the server refused the user name and password of the URL: check them (percent-encode "
                             "':', '@' and '/' in them)"
                           : "the server wants a user name and password: put them in the URL, "
                             "http://user:password@host/... (percent-encode ':', '@' and '/' in them)";
  } else if (r.status == 401 || r.status == 403) {
    errc = Errc::kPermissionDenied;
    hint = code == "SignatureDoesNotMatch" || code == "InvalidAccessKeyId"
               ? "the credentials are wrong: check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the profile "
                 "(--profile, AWS_PROFILE), and the region"
               : "access denied: check the credentials (AWS_ACCESS_KEY_ID, --profile) and the bucket's policy";
  } else if (r.status == 404) {
    errc = Errc::kNotFound;
    hint = code == "NoSuchBucket" ? "the bucket does not exist: check its name and the endpoint (--endpoint)"
           : scheme() == "s3"     ? "no object there: check the key (a prefix lists with `aws s3 ls`)"
                                  : "no object there: check the URL (`curl -I URL` shows what the server has)";
  } else if (r.status == 301 || r.status == 307 || code == "PermanentRedirect" || code == "AuthorizationHeaderMalformed") {
    hint = "the bucket is in another region: set AWS_REGION or --region";
  } else if (r.status >= 500) {
    hint = "the server failed; retries were exhausted (--max-attempts)";
  }
  return Error(errc, std::move(message)).with_http_status(static_cast<int>(r.status)).with_object(std::string(object)).with_hint(hint);
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
    return fail(Error(Errc::kUnsupported, "the server gave no Content-Length for the object")
                    .with_object(shown(key))
                    .with_hint("feedline needs object sizes; serve the data from a server that sends them"));
  }
  return ObjectInfo{std::string(key), *size};
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
          } else {
            e = Error(Errc::kUnsupported, "the server gave no Content-Length").with_object(shown(keys[i]));
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
  return std::unique_ptr<ObjectHandle>(std::make_unique<HttpObject>(info.key, info.size, url_for(key), shown(key)));
}

Result<std::unique_ptr<IoQueue>> ObjectStore::make_queue(const QueueOptions& options) {
  const unsigned connections = http_.connections ? http_.connections : std::max(1u, options.depth);
  auto o = client_options(connections);
  o.driven = options.caller_mostly_polls;  // run by the queue's poll() (see HttpQueue)
  std::vector<std::unique_ptr<HttpClient>> loops;
  FEEDLINE_ASSIGN_OR_RETURN(auto main, HttpClient::create(o));
  loops.push_back(std::move(main));
  // Helpers only where large parts can run side by side: never more loops than connections.
  const unsigned want = std::min(event_loops(), connections);
  o.driven = false;
  for (unsigned i = 1; i < want; ++i) {
    FEEDLINE_ASSIGN_OR_RETURN(auto helper, HttpClient::create(o));
    loops.push_back(std::move(helper));
  }
  return std::unique_ptr<IoQueue>(
      std::make_unique<HttpQueue>(options.depth, std::move(loops), std::max<std::uint64_t>(http_.part_size, 4096), connections,
                                  options.coalesce));
}

unsigned ObjectStore::event_loops() const {
  if (http_.loops > 0) return http_.loops;
  return std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
}

BackendCaps ObjectStore::caps() const { return BackendCaps{1, 1ull << 40, true, true}; }

}  // namespace feedline::storage::detail
