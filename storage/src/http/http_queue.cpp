// HttpQueue: reads of s3:// and http(s):// objects as ranged GETs (see http_queue.hpp).
#include "http_queue.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <deque>
#include <functional>
#include <mutex>

#include "feedline/core/clock.hpp"
#include "feedline/storage/queue_parts.hpp"
#include "feedline/storage/unknown_size_reads.hpp"
#include "object_store.hpp"

namespace feedline::storage::detail {
namespace {

// An HTTP status as the member of http_status_ (counters.hpp): "206". No allocation.
struct StatusText {
  std::array<char, 8> digits{};
  std::size_t size = 0;
  operator std::string_view() const noexcept { return {digits.data(), size}; }
};
StatusText status_text(long status) noexcept {
  StatusText t;
  t.size = fmt::format_to_n(t.digits.data(), t.digits.size(), "{}", status).size;
  t.size = std::min(t.size, t.digits.size());
  return t;
}

using transports::HttpClient;
using transports::HttpRequest;
using transports::HttpResponse;

// Reads as ranged GETs. Where the caller mostly polls (HttpQueueOptions::caller_mostly_polls) the
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
// the rest wait here, in order, so --connections keeps its meaning. What the helper loops (or a
// threaded main client) finish reaches the polling thread through a CompletionInbox whose wake
// hook, for a driven main client, is that client's wake().
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
  static constexpr std::uint64_t kMaxRequest = kHttpMaxRequest;

  // loops: at least one (the main client).
  HttpQueue(unsigned depth, std::vector<std::shared_ptr<HttpClient>> loops, std::uint64_t part_size,
            unsigned connections, bool coalesce, bool shared, AnswerError answer_error)
      : IoQueue(depth, kMaxRequest),
        part_size_(part_size),
        connections_(connections),
        coalesce_(coalesce),
        shared_(shared),
        answer_error_(std::move(answer_error)),
        inbox_(wake_for(*loops.front())) {
    for (auto& c : loops) loops_.push_back(Loop{std::move(c), 0});
    using namespace counters;
    mutable_stats().start({&kHttpRequests, &kHttpFailedRequests, &kHttpCoalescedReads,
                           &kHttpUnknownSizeRestReads, &kHttpConnectionsOpened,
                           &kHttpConnectionsPeak, &kHttpRetries, &kHttpThrottled, &kTtfb,
                           &kTransfer});
  }

  ~HttpQueue() override {
    HttpQueue::cancel();
    while (in_flight() > 0) poll(1, std::chrono::milliseconds(100));
  }

  void cancel() override {
    std::deque<Waiting> waiting;
    waiting.swap(waiting_);
    for (auto& w : waiting)
      push_done(Part{std::move(w.members), fail(Errc::kCancelled, "cancelled"), w.length, kNoLoop});
    for (auto& l : loops_) l.client->cancel_group(group_);  // not other queues' on shared loops
  }

  UnknownSizeReads* unknown_sizes() noexcept override { return &unknown_; }

  QueueInfo info() const override {
    QueueInfo i{"http", {"curl-multi-socket", "asio"}, {}};
    i.features.push_back(
        fmt::format("{} connections{}", connections_, shared_ ? " shared with other queues" : ""));
    i.features.push_back(fmt::format("{} parts", format_part()));
    if (loops_.size() > 1)
      i.features.push_back(fmt::format("{} event loops for parts >= 1 MiB", loops_.size()));
    return i;
  }

 protected:
  void do_submit(std::span<ReadOp* const> ops) override {
    const std::uint64_t now = now_ns();
    std::vector<Piece> pieces;  // single-part reads: candidates for coalescing
    for (ReadOp* op : ops) {
      const auto* h = dynamic_cast<const HttpObject*>(op->object);
      if (h == nullptr) {
        complete_at_next_poll(
            *op, fail(Error(Errc::kInvalidArgument, "not an object of this HTTP backend")
                          .with_object(op->object->display_name())
                          .with_offset(op->offset)));
        continue;
      }
      if (reads_unknown_size(*op)) {  // submit() checked: offset 0, a guess, a growth
        auto st = std::make_shared<OpState>();
        st->op = op;
        st->shown = h->shown();
        st->parts_left = 1;
        st->unknown = true;
        st->growth = unknown_.growth();
        op->times.issued_ns = now;
        // A destination smaller than the guess (a batch slot of the typical size): on a driven
        // client, whose callbacks run in poll(), a larger object gets its room from the growth as
        // soon as the answer's headers say its size, and its body goes on there in the same GET.
        // Elsewhere the GET asks for what the destination holds, and a larger object costs a
        // second one for the rest.
        const bool early = op->dst.size() < op->length && loops_[0].client->driven();
        st->cap = early ? op->length : std::min<std::uint64_t>(op->length, op->dst.size());
        HttpRequest req = request_for(*h, 0, st->cap);
        req.whole = false;
        req.size_unknown = true;
        req.dst = op->dst.first(static_cast<std::size_t>(std::min(st->cap, op->dst.size())));
        if (early) {
          req.grow_dst = [st = st.get()](std::uint64_t need, std::uint64_t filled) {
            return grow_early(*st, need, filled);
          };
        }
        std::vector<Member> m;
        m.push_back(Member{std::move(st), 0, op->length});
        // On the main loop whatever the guess: most such objects are small, and a large guess
        // (1 MiB, --max-sample-size) must not send each of them through a helper loop's thread.
        issue(std::move(req), std::move(m), std::min(op->length, kLargePart - 1));
        continue;
      }
      // Reads stop at the object's end (a short read, as from a file): no 416 answers.
      const std::uint64_t end = std::min(h->size(), op->offset + op->length);
      if (op->offset >= end) {
        complete_at_next_poll(*op, std::uint64_t{0});
        continue;
      }
      auto st = std::make_shared<OpState>();
      st->op = op;
      st->shown = h->shown();
      const std::uint64_t len = end - op->offset;
      const std::uint64_t parts = (len + part_size_ - 1) / part_size_;
      st->parts_left = static_cast<unsigned>(parts);
      op->times.issued_ns = now;
      if (parts == 1) {
        pieces.push_back(
            Piece{h, op->offset, len, op->dst.first(static_cast<std::size_t>(len)), std::move(st)});
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
        // loops hand their parts over through the inbox and wake() this loop.
        const bool remote_ready = loops_.size() > 1 && !inbox_.empty();
        main.run_for(wait && done_.empty() && !remote_ready
                         ? std::chrono::duration_cast<std::chrono::nanoseconds>(left)
                         : std::chrono::nanoseconds(0));
        batch.swap(done_);
        if (loops_.size() > 1) inbox_.drain(batch);
      } else {
        if (wait) inbox_.wait(1, std::chrono::duration_cast<std::chrono::nanoseconds>(left));
        inbox_.drain(batch);
      }
      for (Part& p : batch) completed += account(p);
      start_waiting();
      if (completed >= min_complete || std::chrono::steady_clock::now() >= deadline)
        return completed;
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
    // An object of unknown size (unknown_size_reads.hpp): until the first answer came (then the
    // size is known: `size`). growth: the queue's, where a larger object gets its room.
    bool unknown = false;
    ReadGrowth* growth = nullptr;
    std::uint64_t size = 0;
    std::uint64_t cap = 0;  // ... the most its first GET asks for (the guess, or less)
  };
  // An op's share of a request: its bytes are the request's [at, at + length).
  struct Member {
    std::shared_ptr<OpState> st;
    std::uint64_t at = 0;
    std::uint64_t length = 0;
  };
  struct Part {
    std::vector<Member> members;  // one op, or several coalesced
    Result<HttpResponse> r;
    std::uint64_t length = 0;    // the request's range
    std::size_t loop = kNoLoop;  // the client that ran it (kNoLoop: none, cancelled while waiting)
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
    std::shared_ptr<HttpClient> client;
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
    if (h.size() != kUnknownSize) req.known_size = h.size();  // every answer is checked against it
    req.group = group_;
    return req;
  }

  // Large parts wait for a loop (several loops), the rest go to the main loop's next batch.
  void issue(HttpRequest req, std::vector<Member> members, std::uint64_t n) {
    if (loops_.size() > 1 && n >= kLargePart) {
      waiting_.push_back(Waiting{std::move(req), std::move(members), n});
      return;
    }
    ++loops_[0].requests;
    main_batch_.emplace_back(std::move(req),
                             [this, m = std::move(members), n](Result<HttpResponse> r) mutable {
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
      while (j < pieces.size() && j - i < max_group && pieces[j].object == first.object &&
             pieces[j].offset >= end && pieces[j].offset - end <= kMaxGap &&
             pieces[j].offset + pieces[j].length - first.offset <= part_size_) {
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
        mutable_stats().count(counters::kHttpCoalescedReads) += j - i;
      }
      issue(std::move(req), std::move(members), end - first.offset);
      i = j;
    }
  }

  std::string format_part() const {
    return part_size_ % (1u << 20) == 0 ? fmt::format("{} MiB", part_size_ >> 20)
                                        : fmt::format("{} B", part_size_);
  }

  // Starts waiting large parts on the least busy loops while fewer than connections_ run.
  void start_waiting() {
    if (waiting_.empty()) return;
    std::vector<std::vector<std::pair<HttpRequest, transports::HttpCallback>>> batches(
        loops_.size());
    while (!waiting_.empty() && large_in_flight_ < connections_) {
      Waiting w = std::move(waiting_.front());
      waiting_.pop_front();
      std::size_t best = 0;
      for (std::size_t i = 1; i < loops_.size(); ++i) {
        if (loops_[i].requests < loops_[best].requests) best = i;
      }
      ++loops_[best].requests;
      ++large_in_flight_;
      batches[best].emplace_back(std::move(w.req), [this, m = std::move(w.members), n = w.length,
                                                    best](Result<HttpResponse> r) mutable {
        push_done(Part{std::move(m), std::move(r), n, best});
      });
    }
    for (std::size_t i = 0; i < loops_.size(); ++i) {
      if (!batches[i].empty()) loops_[i].client->start_many(std::move(batches[i]));
    }
  }

  // A driven main client's loop runs in poll(): what a helper loop hands over wakes it.
  static std::function<void()> wake_for(HttpClient& main) {
    if (!main.driven()) return {};
    return [c = &main] { c->wake(); };
  }

  // From the clients' callbacks: on this thread (a driven main client, or cancel()) or on a
  // client's own thread (helper loops, a threaded main client), which hands over.
  void push_done(Part p) {
    const bool here = p.loop == 0 || p.loop == kNoLoop;
    if (loops_[0].client->driven() && here) {
      done_.push_back(std::move(p));
      return;
    }
    inbox_.push(std::move(p));
  }

  // Records one request; returns the ops it finished.
  std::size_t account(Part& p) {
    auto& stats = mutable_stats();
    if (p.loop != kNoLoop) {
      --loops_[p.loop].requests;
      if (loops_.size() > 1 && p.length >= kLargePart) --large_in_flight_;
    }
    std::size_t finished = 0;
    std::optional<Error> error;
    std::uint64_t body = 0;
    std::uint32_t retries = 0;
    if (p.loop == kNoLoop) {  // cancelled while waiting for a loop: never sent
      error = p.r.error();
    } else if (p.r) {
      using namespace counters;
      ++stats.count(kHttpRequests);
      const HttpResponse& r = *p.r;
      if (r.status > 0) ++stats.count(kHttpStatus, status_text(r.status));
      stats.histogram(kTtfb).record(r.ttfb_ns);
      stats.histogram(kTransfer).record(r.total_ns > r.ttfb_ns ? r.total_ns - r.ttfb_ns : 0);
      stats.count(kHttpConnectionsOpened) += r.connections;
      for (const auto& [reason, n] : r.retries) {
        stats.count(kHttpRetries) += n;
        stats.count(kHttpRetry, reason) += n;
        if (reason == "http_503" || reason == "http_429") stats.count(kHttpThrottled) += n;
        retries += n;
      }
      if (r.status == 200 || r.status == 206) {
        body = r.bytes;
      } else if (r.status == 416 && first_of_unknown(p) && r.object_size == 0) {
        body = 0;  // "Content-Range: bytes */0": an empty object
      } else {
        error = answer_error_(r, p.members.front().st->shown);
      }
    } else {
      ++stats.count(counters::kHttpRequests);
      // Ended by cancel() (Ctrl-C): not a failure of the server's.
      if (p.r.error().code() != Errc::kCancelled) ++stats.count(counters::kHttpFailedRequests);
      // Out of attempts on a status (a 503 after every retry): that answer was its last.
      if (const int status = p.r.error().http_status(); status > 0)
        ++stats.count(counters::kHttpStatus, status_text(status));
      // Cancelled (the run's end, Ctrl-C) while it waited to retry a throttled answer: that
      // retry counts, or a run cut short by a server's Retry-After would show no throttling.
      if (const int status = p.r.error().http_status();
          p.r.error().code() == Errc::kCancelled && (status == 429 || status == 503)) {
        const std::string reason = fmt::format("http_{}", status);
        ++stats.count(counters::kHttpRetries);
        ++stats.count(counters::kHttpRetry, reason);
        ++stats.count(counters::kHttpThrottled);
      }
      error = p.r.error();
    }
    if (!error && first_of_unknown(p)) return learned_size(p, *p.r, retries);
    for (Member& m : p.members) {
      OpState& st = *m.st;
      st.retries += retries;
      if (error && !st.error) {
        st.error = *error;
        // In place: `st.error = std::move(*st.error).with_object(...)` would move it onto itself.
        if (p.r) st.error->with_object(st.shown).with_offset(st.op->offset);
      } else if (!error) {
        st.bytes += body > m.at ? std::min(m.length, body - m.at) : 0;
      }
      if (--st.parts_left == 0) finished += finish(st);
    }
    return finished;
  }

  // Room from the growth for an object of `size` bytes whose first `filled` are in op.dst: op.dst
  // becomes it; false, with st.error set, when refused.
  static bool grow_dst(OpState& st, std::uint64_t size, std::uint64_t filled) {
    ReadOp& op = *st.op;
    auto room = st.growth->grow(op, size, filled);
    if (room && room->size() < size) {
      room = fail(Errc::kInternal, fmt::format("ReadGrowth::grow gave {} bytes for an object of {}",
                                               room->size(), size));
    }
    if (!room) {
      Error e = std::move(room).error();
      if (e.object().empty()) e.with_object(st.shown);
      st.error = std::move(e);
      return false;
    }
    op.dst = *room;
    return true;
  }

  // HttpRequest::grow_dst of a read of unknown length whose destination is smaller than its
  // guess: nothing when the growth refuses (the op then fails with its error once the answer ends).
  static MutableBytes grow_early(OpState& st, std::uint64_t need, std::uint64_t filled) {
    return grow_dst(st, need, filled) ? st.op->dst : MutableBytes{};
  }

  // The first answer to a read of an object of unknown size.
  static bool first_of_unknown(const Part& p) {
    return p.members.size() == 1 && p.members.front().st->unknown;
  }

  // The first answer to a read of unknown length came: the object's size is known. Finishes the
  // op when the object fit in the guess; otherwise gets a larger destination from the growth
  // (unless grow_early got it one from the answer's headers) and reads the rest there: a ranged GET
  // for the rest after a 206, the whole object again after a 200 (the server ignores Range: a Range
  // for the rest would get the object from its start). Returns the ops finished (0 or 1).
  std::size_t learned_size(Part& p, const HttpResponse& r, std::uint32_t retries) {
    const std::shared_ptr<OpState> keep = p.members.front().st;
    OpState& st = *keep;
    ReadOp& op = *st.op;
    st.unknown = false;
    st.retries += retries;
    if (st.error) return finish(st);  // grow_early refused the room for the object
    const std::uint64_t got = r.status == 416 ? 0 : r.bytes;
    auto failed = [&](Error e) {
      st.error = std::move(e).with_object(st.shown);
      return finish(st);
    };
    std::uint64_t size = got;
    if (r.object_size) {
      size = *r.object_size;
    } else if (got >= st.cap) {  // a guess filled, and no word of what comes after
      return failed(
          Error(Errc::kUnsupported,
                fmt::format("the server gave no size for the object (no Content-Length or "
                            "Content-Range total) and it is at least {} bytes",
                            got))
              .with_hint("give {max_sample_size} larger than the largest object, or serve the "
                         "directory with a JSON listing (nginx: autoindex on; autoindex_format "
                         "json;)"));
    }
    if (size < got || (size > got && got < st.cap)) {
      return failed(Error(Errc::kIo, fmt::format("the server sent {} bytes of the object's first "
                                                 "{} for an object of {} bytes",
                                                 got, st.cap, size))
                        .with_http_status(static_cast<int>(r.status)));
    }
    st.bytes = got;
    if (size == got) return finish(st);
    // Not grown yet (grow_early sizes it from the headers when the destination was smaller).
    if (op.dst.size() < size && !grow_dst(st, size, got)) return finish(st);
    st.size = size;  // finish() checks the rest came whole
    const auto* h = static_cast<const HttpObject*>(op.object);
    const bool ranges = r.status == 206;
    const std::uint64_t from = ranges ? got : 0;
    if (!ranges) st.bytes = 0;  // all of it again, from the start
    const std::uint64_t len = size - from;
    const std::uint64_t parts = ranges ? (len + part_size_ - 1) / part_size_ : 1;
    st.parts_left = static_cast<unsigned>(parts);
    for (std::uint64_t i = 0; i < parts; ++i) {
      const std::uint64_t off = from + i * part_size_;
      const std::uint64_t n = ranges ? std::min(part_size_, size - off) : len;
      HttpRequest req = request_for(*h, off, n);
      req.whole = !ranges;  // a plain GET of the object, exactly `size` bytes
      req.known_size = size;
      req.dst = op.dst.subspan(static_cast<std::size_t>(off), static_cast<std::size_t>(n));
      std::vector<Member> m;
      m.push_back(Member{keep, 0, n});
      issue(std::move(req), std::move(m), n);
    }
    mutable_stats().count(counters::kHttpUnknownSizeRestReads) += 1;
    if (!main_batch_.empty()) loops_[0].client->start_many(std::exchange(main_batch_, {}));
    return 0;
  }

  std::size_t finish(OpState& st) {
    auto& stats = mutable_stats();
    std::uint64_t max_open =
        0;  // the loops' peaks, added up (an upper bound when they differ in time)
    for (const auto& l : loops_) max_open += l.client->stats().max_open_connections;
    auto& peak = stats.count(counters::kHttpConnectionsPeak);
    peak = std::max<std::uint64_t>(peak, max_open);
    ReadOp& op = *st.op;
    if (st.error) {
      op.result = fail(std::move(*st.error));
    } else if (st.size != 0 && st.bytes != st.size) {  // the rest of an object of unknown size
      op.result = fail(Error(Errc::kCorrupt, fmt::format("the object ended after {} of the {} "
                                                         "bytes its server gave as its size",
                                                         st.bytes, st.size))
                           .with_object(st.shown)
                           .with_hint("datasets must not change while they are read"));
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
  bool shared_;  // the clients are the backend's connection pool, other queues' requests on them
  UnknownSizeReads unknown_;  // reads of objects of unknown size: where larger ones get room
  AnswerError answer_error_;
  // This queue's requests on the clients (HttpRequest::group): cancel() ends these only.
  const std::uint64_t group_ = next_group_.fetch_add(1, std::memory_order_relaxed);
  static inline std::atomic<std::uint64_t> next_group_{1};
  std::deque<Waiting> waiting_;  // large parts not started yet (several loops only)
  std::vector<std::pair<HttpRequest, transports::HttpCallback>>
      main_batch_;  // do_submit's, for the main loop
  unsigned large_in_flight_ = 0;
  std::deque<Part> done_;        // a driven main client's completions, on the polling thread
  CompletionInbox<Part> inbox_;  // from the other threads: helper loops, a threaded main client
};

}  // namespace

std::unique_ptr<IoQueue> make_http_queue(unsigned depth,
                                         std::vector<std::shared_ptr<transports::HttpClient>> loops,
                                         std::uint64_t part_size, unsigned connections,
                                         bool coalesce, bool shared, AnswerError answer_error) {
  return std::make_unique<HttpQueue>(depth, std::move(loops), part_size, connections, coalesce,
                                     shared, std::move(answer_error));
}

}  // namespace feedline::storage::detail
