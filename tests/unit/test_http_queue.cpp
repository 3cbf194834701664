// The HTTP backend's I/O queue with several event loops (HttpConfig::loops, --http-loops): large
// range parts spread over helper loops land byte for byte whether the main loop is driven by the
// poller or has a thread of its own; never more large parts in flight than --connections; cancel
// ends parts still waiting for a connection, and reads that trickle or get no answer. The stop
// token (BackendConfig::stop) ends every control call of s3:// and http:// within a second, and
// credentials in an http:// URL are sent as Basic authentication and shown nowhere. Against the
// scripted servers of http_test_server.hpp and http_stall_server.hpp.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "feedline/storage/counters.hpp"
#include "feedline/storage/registry.hpp"
#include "http_stall_server.hpp"
#include "http_test_server.hpp"
#include "test_support.hpp"

using namespace feedline;
using namespace feedline::storage;
using feedline::test::HttpTestReply;
using feedline::test::HttpTestRequest;
using feedline::test::HttpTestServer;
using feedline::test::object_bytes;
using feedline::test::partial;
using feedline::test::StallServer;

namespace {

// Serves one object: HEAD with its size, ranged GETs as 206, each GET held `hold` so that parts
// overlap; counts the GETs being answered at once.
struct ObjectServer {
  std::string obj;
  std::atomic<std::chrono::milliseconds> hold;  // changed while the server runs
  std::atomic<int> active{0}, peak{0}, gets{0};
  // When set: a GET waits (at most 2 s) until this many are in the server at once, so that a
  // test of requests running side by side does not depend on how the threads were scheduled.
  std::atomic<int> rendezvous{0};
  HttpTestServer server;

  ObjectServer(std::size_t size, std::chrono::milliseconds h)
      : obj(object_bytes(size)),
        hold(h),
        server([this](const HttpTestRequest& r) { return answer(r); }) {}

  HttpTestReply answer(const HttpTestRequest& r) {
    if (r.method == "HEAD") {
      return HttpTestReply{
          fmt::format("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", obj.size())};
    }
    const int now = ++active;
    int seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
    ++gets;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (peak.load() < rendezvous.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(hold.load());
    --active;
    if (r.header("range").empty()) return HttpTestReply{HttpTestServer::reply(200, obj)};
    return HttpTestReply{partial(obj, r)};
  }

  std::string url() const { return fmt::format("http://127.0.0.1:{}/data/obj.bin", server.port()); }
};

struct Collector final : ReadCompletion {
  std::atomic<int> calls{0};
  void on_read_complete(ReadOp&) noexcept override { ++calls; }
};

void poll_until(IoQueue& q, const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done() && std::chrono::steady_clock::now() < deadline)
    q.poll(1, std::chrono::milliseconds(50));
  REQUIRE(done());
}

struct Opened {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ObjectHandle> handle;
};

Opened open_object(const ObjectServer& s, unsigned connections, unsigned loops) {
  BackendConfig config;
  config.http.connections = connections;
  config.http.loops = loops;
  config.http.part_size = 1u << 20;
  config.http.connect_timeout = std::chrono::milliseconds(2000);
  Registry registry;
  register_builtin_backends(registry);
  auto r = registry.open(s.url(), config);
  REQUIRE(r);
  auto h = r->backend->open(r->key);
  REQUIRE(h);
  return Opened{std::move(r->backend), std::move(*h)};
}

}  // namespace

TEST_CASE(
    "http queue: large parts over several event loops land byte for byte, within --connections",
    "[http][storage]") {
  // 8 MiB + a tail: eight parts of 1 MiB (helper loops too) and one of 12,345 bytes (main loop).
  ObjectServer s((8u << 20) + 12345, std::chrono::milliseconds(5));
  for (const bool driven : {true, false}) {
    for (const unsigned connections : {2u, 5u}) {
      DYNAMIC_SECTION((driven ? "loop in poll()" : "loop threads")
                      << ", " << connections << " connections") {
        auto o = open_object(s, connections, 3);
        HttpQueueOptions http;
        http.caller_mostly_polls = driven;
        QueueOptions qo;
        qo.depth = 4;
        qo.http = &http;
        auto q = o.backend->make_queue(qo);
        REQUIRE(q);
        const auto info = (*q)->info();
        const std::string loops = fmt::format("{} event loops", std::min(3u, connections));
        CHECK(std::any_of(info.features.begin(), info.features.end(), [&](const std::string& f) {
          return f.find(loops) != std::string::npos;
        }));

        const std::uint64_t size = s.obj.size();
        auto whole = AlignedBuffer::allocate(size).value();
        auto middle = AlignedBuffer::allocate(3u << 20).value();
        Collector c;
        ReadOp a, b;
        a.object = b.object = o.handle.get();
        a.done = b.done = &c;
        a.offset = 0;
        a.length = size;
        a.dst = whole.span();
        b.offset = 100;
        b.length = 3u << 20;
        b.dst = middle.span();
        s.peak = 0;
        s.gets = 0;
        s.rendezvous = 2;  // parts side by side, whatever the scheduling (a sanitizer's included)
        (*q)->submit(a);
        (*q)->submit(b);
        poll_until(**q, [&] { return c.calls == 2; });
        s.rendezvous = 0;
        REQUIRE(a.result);
        REQUIRE(b.result);
        CHECK(*a.result == size);
        CHECK(*b.result == (3u << 20));
        CHECK(std::memcmp(whole.data(), s.obj.data(), size) == 0);
        CHECK(std::memcmp(middle.data(), s.obj.data() + 100, 3u << 20) == 0);
        CHECK(s.gets == 12);  // 9 + 3 parts, each once
        CHECK((*q)->stats().counters.at("http_requests") == 12);
        // Large parts never exceed the connections; the small tail may run beside them.
        CHECK(s.peak <= static_cast<int>(connections) + 1);
        CHECK(s.peak >= 2);  // parts did run side by side
      }
    }
  }
}

TEST_CASE("http queue: cancel ends parts still waiting for a connection; every op completes once",
          "[http][storage]") {
  ObjectServer s(16u << 20, std::chrono::milliseconds(20));
  for (const bool driven : {true, false}) {
    DYNAMIC_SECTION((driven ? "loop in poll()" : "loop threads")) {
      auto o = open_object(s, 2, 2);  // two loops, two connections: 14 of the 16 parts wait here
      HttpQueueOptions http;
      http.caller_mostly_polls = driven;
      QueueOptions qo;
      qo.http = &http;
      auto q = o.backend->make_queue(qo);
      REQUIRE(q);
      const auto features = (*q)->info().features;
      CHECK(std::find(features.begin(), features.end(), "2 event loops for parts >= 1 MiB") !=
            features.end());
      auto buf = AlignedBuffer::allocate(s.obj.size()).value();
      Collector c;
      ReadOp op;
      op.object = o.handle.get();
      op.done = &c;
      op.offset = 0;
      op.length = s.obj.size();
      op.dst = buf.span();
      s.gets = 0;
      (*q)->submit(op);
      (*q)->poll(0, std::chrono::milliseconds(30));
      (*q)->cancel();
      poll_until(**q, [&] { return c.calls == 1; });
      REQUIRE_FALSE(op.result);
      CHECK(op.result.error().code() == Errc::kCancelled);
      CHECK(s.gets < 16);  // the waiting parts were never sent, nor counted as requests
      CHECK((*q)->stats().counters.at("http_requests") <= static_cast<std::uint64_t>(s.gets) + 2);
      CHECK((*q)->in_flight() == 0);
      // The queue goes on working after a cancel.
      Collector c2;
      ReadOp again = op;
      again.done = &c2;
      again.length = 2u << 20;
      (*q)->submit(again);
      poll_until(**q, [&] { return c2.calls == 1; });
      REQUIRE(again.result);
      CHECK(*again.result == (2u << 20));
      CHECK(std::memcmp(buf.data(), s.obj.data(), 2u << 20) == 0);
      CHECK(c.calls == 1);  // still once
    }
  }
}

TEST_CASE(
    "http queues sharing the backend's connections (the accelerators of one host) open at most "
    "the pool's count together; cancel and destruction end one queue's reads, not another's",
    "[http][storage]") {
  ObjectServer s(1u << 20, std::chrono::milliseconds(5));
  auto o = open_object(s, 3, 0);                      // the pool: 3 connections for both queues
  const std::size_t before = s.server.connections();  // the HEAD's
  HttpQueueOptions http;
  http.shared_by = 2;
  QueueOptions qo;
  qo.depth = 8;
  qo.http = &http;
  auto a = o.backend->make_queue(qo);
  auto b = o.backend->make_queue(qo);
  REQUIRE(a);
  REQUIRE(b);
  for (auto* q : {&*a, &*b}) {
    const auto features = (*q)->info().features;
    CHECK(std::find(features.begin(), features.end(), "3 connections shared with other queues") !=
          features.end());
  }

  SECTION("reads of both queues land byte for byte over the one pool") {
    constexpr std::size_t kReads = 16, kLen = 4096;
    auto buf = AlignedBuffer::allocate(2 * kReads * kLen).value();
    Collector c;
    std::vector<ReadOp> ops(2 * kReads);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      ops[i].object = o.handle.get();
      ops[i].done = &c;
      ops[i].offset = i * 7919;  // scattered, never nearby: one GET each
      ops[i].length = kLen;
      ops[i].dst = buf.span().subspan(i * kLen, kLen);
      (i < kReads ? **a : **b).submit(ops[i]);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (c.calls < static_cast<int>(ops.size()) && std::chrono::steady_clock::now() < deadline) {
      (*a)->poll(0, std::chrono::milliseconds(5));
      (*b)->poll(0, std::chrono::milliseconds(5));
    }
    REQUIRE(c.calls == static_cast<int>(ops.size()));
    for (std::size_t i = 0; i < ops.size(); ++i) {
      REQUIRE(ops[i].result);
      CHECK(*ops[i].result == kLen);
      CHECK(std::memcmp(buf.data() + i * kLen, s.obj.data() + i * 7919, kLen) == 0);
    }
    // 32 reads, 16 in flight at once, 3 connections for both queues (apart: 3 each).
    CHECK(s.server.connections() - before <= 3);
    CHECK(s.peak <= 3);
    CHECK(s.gets == static_cast<int>(ops.size()));
  }

  SECTION("cancel() on one queue leaves the other's reads to finish") {
    s.hold = std::chrono::milliseconds(2000);  // b's read is still on the server when a goes
    auto buf = AlignedBuffer::allocate(2 * 4096).value();
    Collector ca, cb;
    ReadOp ra, rb;
    ra.object = rb.object = o.handle.get();
    ra.done = &ca;
    rb.done = &cb;
    ra.offset = 0;
    rb.offset = 100'000;
    ra.length = rb.length = 4096;
    ra.dst = buf.span().first(4096);
    rb.dst = buf.span().subspan(4096, 4096);
    (*a)->submit(ra);
    (*b)->submit(rb);
    const auto t0 = std::chrono::steady_clock::now();
    (*a)->cancel();
    poll_until(**a, [&] { return ca.calls == 1; });
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));  // not the 2 s hold
    REQUIRE_FALSE(ra.result);
    CHECK(ra.result.error().code() == Errc::kCancelled);
    a->reset();  // a queue going away while another reads through the same loops
    poll_until(**b, [&] { return cb.calls == 1; });
    REQUIRE(rb.result);
    CHECK(*rb.result == 4096);
    CHECK(std::memcmp(buf.data() + 4096, s.obj.data() + 100'000, 4096) == 0);
  }
}

TEST_CASE(
    "http queue: nearby reads submitted together share one GET; each gets its bytes, short reads "
    "and errors",
    "[http][storage]") {
  // Reads of 10,000 bytes 512 bytes apart (like tar members, a header between each).
  constexpr std::uint64_t kLen = 10'000, kStride = 10'512;
  ObjectServer s(2u << 20, std::chrono::milliseconds(0));
  std::atomic<bool> refuse_second_half{false};
  HttpTestServer server([&](const HttpTestRequest& r) {
    if (refuse_second_half && r.method == "GET" &&
        r.header("range").starts_with("bytes=1048576-")) {
      return HttpTestReply{HttpTestServer::reply(403, "<Error><Code>AccessDenied</Code></Error>")};
    }
    return s.answer(r);
  });
  BackendConfig config;
  config.http.loops = 1;
  Registry registry;
  register_builtin_backends(registry);
  auto opened = registry.open(fmt::format("http://127.0.0.1:{}/obj.bin", server.port()), config);
  REQUIRE(opened);
  auto h = opened->backend->open(opened->key);
  REQUIRE(h);
  QueueOptions qo;
  qo.depth = 64;  // at most 64 / 8 = 8 reads per GET
  qo.coalesce = true;
  HttpQueueOptions http;
  http.caller_mostly_polls = GENERATE(false, true);
  qo.http = &http;
  auto q = opened->backend->make_queue(qo);
  REQUIRE(q);

  // 20 reads from offset 0 (submitted in reverse), 4 from 1 MiB, one running past the end, and
  // one far from all others.
  std::vector<std::uint64_t> offsets;
  for (int i = 19; i >= 0; --i) offsets.push_back(static_cast<std::uint64_t>(i) * kStride);
  for (int i = 0; i < 4; ++i)
    offsets.push_back((1u << 20) + static_cast<std::uint64_t>(i) * kStride);
  offsets.push_back((2u << 20) - 3000);
  offsets.push_back(600'000);
  auto buf = AlignedBuffer::allocate(offsets.size() * kLen).value();
  std::vector<ReadOp> ops(offsets.size());
  std::vector<ReadOp*> ptrs;
  Collector c;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    ops[i].object = h->get();
    ops[i].offset = offsets[i];
    ops[i].length = kLen;
    ops[i].dst = buf.span().subspan(i * kLen, kLen);
    ops[i].done = &c;
    ptrs.push_back(&ops[i]);
  }
  auto check_bytes = [&](std::size_t i, std::uint64_t want) {
    REQUIRE(ops[i].result);
    CHECK(*ops[i].result == want);
    CHECK(std::memcmp(ops[i].dst.data(), s.obj.data() + offsets[i], want) == 0);
  };

  SECTION("every read lands its own bytes") {
    s.gets = 0;
    (*q)->submit(ptrs);
    poll_until(**q, [&] { return c.calls == static_cast<int>(ops.size()); });
    for (std::size_t i = 0; i < 24; ++i) check_bytes(i, kLen);
    check_bytes(24, 3000);  // short at the object's end
    check_bytes(25, kLen);
    // The 20 from 0 in GETs of at most 8 (three), the 4 at 1 MiB in one; the read at the end and
    // the lone one are too far from the rest: one GET each. Six GETs for 26 reads.
    CHECK(s.gets == 6);
    CHECK((*q)->stats().counters.at("http_requests") == 6);
    CHECK((*q)->stats().counters.at("http_coalesced_reads") == 24);
  }
  SECTION("without QueueOptions::coalesce (bench storage) every read is a GET of its own") {
    QueueOptions plain = qo;
    plain.coalesce = false;
    auto pq = opened->backend->make_queue(plain);
    REQUIRE(pq);
    s.gets = 0;
    (*pq)->submit(ptrs);
    poll_until(**pq, [&] { return c.calls == static_cast<int>(ops.size()); });
    for (std::size_t i = 0; i < 24; ++i) check_bytes(i, kLen);
    check_bytes(24, 3000);
    CHECK(s.gets == static_cast<int>(ops.size()));
    CHECK((*pq)->stats().counters.at("http_coalesced_reads") == 0);  // there, and nothing shared
  }
  SECTION("an error answer fails every read of its GET, each naming its own offset") {
    refuse_second_half = true;
    (*q)->submit(ptrs);
    poll_until(**q, [&] { return c.calls == static_cast<int>(ops.size()); });
    for (std::size_t i = 0; i < 20; ++i) check_bytes(i, kLen);
    for (std::size_t i = 20; i < 24; ++i) {
      REQUIRE_FALSE(ops[i].result);
      CHECK(ops[i].result.error().code() == Errc::kPermissionDenied);
      CHECK(ops[i].result.error().what().find(fmt::format("{}", offsets[i])) != std::string::npos);
    }
    check_bytes(24, 3000);
    check_bytes(25, kLen);
  }
}

namespace {

using Clock = std::chrono::steady_clock;
using feedline::testing::seconds_since;

// A backend over `url` whose stop is requested 200 ms after start_clock(); `stopped_at` notes
// when (a loaded machine may wake the stopping thread late: the time to end counts from there).
struct Stoppable {
  std::stop_source source;
  std::unique_ptr<Backend> backend;
  std::string key;
  std::atomic<Clock::rep> stopped_at{0};
  std::jthread stopper;

  explicit Stoppable(const std::string& url, const std::string& endpoint = "") {
    BackendConfig config;
    config.stop = source.get_token();
    config.http.stall_timeout =
        std::chrono::seconds(30);  // the stop must end it, not the stall timeout
    config.http.max_attempts = 1;
    config.s3.endpoint = endpoint;
    config.s3.access_key_id = endpoint.empty() ? "" : "AKID";
    config.s3.secret_access_key = endpoint.empty() ? "" : "SECRET";
    Registry registry;
    register_builtin_backends(registry);
    auto r = registry.open(url, config);
    REQUIRE(r);
    backend = std::move(r->backend);
    key = r->key;
  }
  void start_clock() {
    stopper = std::jthread([this] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      stopped_at = Clock::now().time_since_epoch().count();
      source.request_stop();
    });
  }
};

// The call ended with kCancelled "interrupted", after the stop and within a second of it.
template <typename R>
void check_interrupted(const R& r, const Stoppable& s) {
  const auto at = s.stopped_at.load();
  const double after_stop = at == 0 ? -1.0 : seconds_since(Clock::time_point(Clock::duration(at)));
  REQUIRE_FALSE(r);
  INFO(r.error().what());
  CHECK(r.error().code() == Errc::kCancelled);
  CHECK(r.error().message() == "interrupted");
  CHECK(after_stop >= 0);
  CHECK(after_stop < 1.0);
}

}  // namespace

TEST_CASE("http and s3 control calls end with kCancelled within a second of the stop token",
          "[http][stop][storage]") {
  const auto mode = GENERATE(StallServer::Mode::kSilent, StallServer::Mode::kTrickle);
  StallServer server(mode, 1 << 20, std::chrono::milliseconds(100));
  const std::string base = fmt::format("http://127.0.0.1:{}", server.port());
  const std::string endpoint = base;

  SECTION("http stat (HEAD)") {
    Stoppable s(base + "/d/obj.bin");
    s.start_clock();
    check_interrupted(s.backend->stat(s.key), s);
  }
  SECTION("http open (HEAD)") {
    Stoppable s(base + "/d/obj.bin");
    s.start_clock();
    check_interrupted(s.backend->open(s.key), s);
  }
  SECTION("http list (a directory's JSON listing)") {
    Stoppable s(base + "/d/");
    s.start_clock();
    check_interrupted(s.backend->list(s.key), s);
  }
  SECTION("http stat_many: a few keys (HEADs on a driven client)") {
    Stoppable s(base + "/d/");
    std::vector<std::string> keys;
    for (int i = 0; i < 5; ++i) keys.push_back(fmt::format("/d/{}.bin", i));
    s.start_clock();
    check_interrupted(s.backend->stat_many(keys), s);
  }
  SECTION("http stat_many: many keys (the directory's listing first)") {
    Stoppable s(base + "/d/");
    std::vector<std::string> keys;
    for (int i = 0; i < 100; ++i) keys.push_back(fmt::format("/d/{}.bin", i));
    s.start_clock();
    check_interrupted(s.backend->stat_many(keys), s);
  }
  SECTION("http PUT") {
    Stoppable s(base + "/d/");
    auto w = s.backend->create("/d/new.bin");
    REQUIRE(w);
    const std::string body(1000, 'x');
    REQUIRE((*w)->append(ConstBytes(reinterpret_cast<const std::byte*>(body.data()), body.size())));
    s.start_clock();
    check_interrupted((*w)->commit(), s);
  }
  SECTION("s3 list (ListObjectsV2)") {
    Stoppable s("s3://bucket/prefix/", endpoint);
    s.start_clock();
    check_interrupted(s.backend->list(s.key), s);
  }
  SECTION("s3 stat_many (HEADs)") {
    Stoppable s("s3://bucket/prefix/", endpoint);
    std::vector<std::string> keys{"prefix/a", "prefix/b", "prefix/c"};
    s.start_clock();
    check_interrupted(s.backend->stat_many(keys), s);
  }
  SECTION("s3 multipart upload (CreateMultipartUpload)") {
    Stoppable s("s3://bucket/prefix/", endpoint);
    auto w = s.backend->create("prefix/big.bin");
    REQUIRE(w);
    const std::vector<std::byte> part(8u << 20, std::byte{'x'});  // HttpConfig::part_size
    s.start_clock();
    check_interrupted((*w)->append(part), s);  // a full part: the upload starts here
  }
  SECTION("s3 PutObject") {
    Stoppable s("s3://bucket/prefix/", endpoint);
    auto w = s.backend->create("prefix/small.bin");
    REQUIRE(w);
    const std::vector<std::byte> body(100, std::byte{'x'});
    REQUIRE((*w)->append(body));
    s.start_clock();
    check_interrupted((*w)->commit(), s);
  }
}

TEST_CASE("cancel() ends reads that trickle or get no answer within a second, each completing once",
          "[http][stop][storage]") {
  StallServer silent(StallServer::Mode::kSilent);
  StallServer trickle(StallServer::Mode::kTrickleBody, 8u << 20,
                      std::chrono::milliseconds(20));  // 50 bytes/s
  const bool driven = GENERATE(false, true);
  const unsigned loops = GENERATE(1u, 2u);
  DYNAMIC_SECTION((driven ? "loop in poll()" : "loop threads") << ", " << loops << " event loops") {
    BackendConfig config;
    config.http.loops = loops;
    config.http.connections = 4;
    config.http.part_size = 1u << 20;
    config.http.stall_timeout = std::chrono::seconds(30);
    Registry registry;
    register_builtin_backends(registry);
    auto a = registry.open(fmt::format("http://127.0.0.1:{}/a.bin", silent.port()), config);
    auto b = registry.open(fmt::format("http://127.0.0.1:{}/b.bin", trickle.port()), config);
    REQUIRE(a);
    REQUIRE(b);
    // Sizes as a listing would give them: no HEAD (the silent server would hold it).
    auto ha = a->backend->open_known(ObjectInfo{a->key, 8u << 20});
    auto hb = b->backend->open_known(ObjectInfo{b->key, 8u << 20});
    REQUIRE(ha);
    REQUIRE(hb);
    HttpQueueOptions http;
    http.caller_mostly_polls = driven;
    QueueOptions qo;
    qo.depth = 4;
    qo.http = &http;
    auto qa = a->backend->make_queue(qo);
    auto qb = b->backend->make_queue(qo);
    REQUIRE(qa);
    REQUIRE(qb);
    auto buf = AlignedBuffer::allocate(4u << 20).value();
    Collector c;
    // Small reads (the main loop) and a 2 MiB read (parts of 1 MiB: the helper loop when there
    // is one) on each server.
    std::vector<ReadOp> ops(4);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      ops[i].object = i < 2 ? ha->get() : hb->get();
      ops[i].offset = 0;
      ops[i].length = i % 2 == 0 ? 65536 : (2u << 20);
      ops[i].dst = buf.span().subspan(i % 2 == 0 ? 0 : (2u << 20), ops[i].length);
      ops[i].done = &c;
    }
    (*qa)->submit(ops[0]);
    (*qa)->submit(ops[1]);
    (*qb)->submit(ops[2]);
    (*qb)->submit(ops[3]);
    const auto started = Clock::now();
    // At least 300 ms, and until body bytes trickle in (later on a loaded machine).
    while ((seconds_since(started) < 0.3 || trickle.bytes_sent() == 0) &&
           seconds_since(started) < 5) {
      (*qa)->poll(0, std::chrono::milliseconds(10));
      (*qb)->poll(0, std::chrono::milliseconds(10));
    }
    CHECK(c.calls == 0);  // nothing could finish: no answer, or 50 bytes/s
    CHECK(trickle.bytes_sent() > 0);
    const auto t0 = Clock::now();
    (*qa)->cancel();
    (*qb)->cancel();
    while (c.calls < 4 && seconds_since(t0) < 5) {
      (*qa)->poll(1, std::chrono::milliseconds(20));
      (*qb)->poll(1, std::chrono::milliseconds(20));
    }
    CHECK(seconds_since(t0) < 1.0);
    REQUIRE(c.calls == 4);
    for (const ReadOp& op : ops) {
      REQUIRE_FALSE(op.result);
      CHECK(op.result.error().code() == Errc::kCancelled);
    }
    CHECK((*qa)->in_flight() == 0);
    CHECK((*qb)->in_flight() == 0);
  }
}

TEST_CASE("http://user:password@host/: sent as Basic authentication, shown nowhere",
          "[http][auth][storage]") {
  const std::string obj = object_bytes(5000);
  HttpTestServer server([&](const HttpTestRequest& r) {
    // "reader" / "s3cr@t:pw", written percent-encoded in the URL.
    if (r.header("authorization") != "Basic cmVhZGVyOnMzY3JAdDpwdw==") {
      return HttpTestReply{HttpTestServer::reply(401, "<html>401 Authorization Required</html>",
                                                 {"WWW-Authenticate: Basic realm=\"feedline\""})};
    }
    if (r.method == "HEAD")
      return HttpTestReply{
          fmt::format("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", obj.size())};
    if (r.header("range").empty())
      return HttpTestReply{HttpTestServer::reply(200, obj)};  // a whole-object GET
    return HttpTestReply{partial(obj, r)};
  });
  Registry registry;
  register_builtin_backends(registry);
  const std::string secret = "s3cr%40t%3Apw";
  auto r =
      registry.open(fmt::format("http://reader:{}@127.0.0.1:{}/d/obj.bin", secret, server.port()),
                    BackendConfig{});
  REQUIRE(r);
  CHECK(r->key == "/d/obj.bin");
  const std::string shown = r->backend->display_name(r->key);
  CHECK(shown == fmt::format("http://reader:***@127.0.0.1:{}/d/obj.bin", server.port()));
  auto h = r->backend->open(r->key);
  REQUIRE(h);
  CHECK((*h)->size() == obj.size());
  QueueOptions qo;
  auto q = r->backend->make_queue(qo);
  REQUIRE(q);
  auto buf = AlignedBuffer::allocate(obj.size()).value();
  Collector c;
  ReadOp op;
  op.object = h->get();
  op.length = obj.size();
  op.dst = buf.span();
  op.done = &c;
  (*q)->submit(op);
  poll_until(**q, [&] { return c.calls == 1; });
  REQUIRE(op.result);
  CHECK(std::memcmp(buf.data(), obj.data(), obj.size()) == 0);
  for (const auto& req : server.requests()) {
    CHECK(req.target.find("s3cr") == std::string::npos);
    CHECK(req.target.find("reader") == std::string::npos);
  }

  // A wrong password: 401, kPermissionDenied, and neither form of the password in the error.
  auto bad =
      registry.open(fmt::format("http://reader:wr%40ngpass@127.0.0.1:{}/d/obj.bin", server.port()),
                    BackendConfig{});
  REQUIRE(bad);
  auto denied = bad->backend->stat(bad->key);
  REQUIRE_FALSE(denied);
  const std::string what = denied.error().what();
  INFO(what);
  CHECK(denied.error().code() == Errc::kPermissionDenied);
  CHECK(denied.error().http_status() == 401);
  CHECK(what.find("401") != std::string::npos);
  CHECK(what.find("wr%40ngpass") == std::string::npos);
  CHECK(what.find("wr@ngpass") == std::string::npos);
  CHECK(what.find(fmt::format("127.0.0.1:{}/d/obj.bin", server.port())) != std::string::npos);

  // A URL with credentials and no host: the error hides the password too.
  auto nohost = registry.open("http://reader:hunter22@/x", BackendConfig{});
  REQUIRE_FALSE(nohost);
  CHECK(nohost.error().code() == Errc::kInvalidArgument);
  CHECK(nohost.error().what().find("hunter22") == std::string::npos);
  // s3:// takes no credentials in the URL.
  auto s3 = registry.open("s3://AKIA:hunter22@bucket/k", BackendConfig{});
  REQUIRE_FALSE(s3);
  CHECK(s3.error().code() == Errc::kInvalidArgument);
  CHECK(s3.error().what().find("hunter22") == std::string::npos);
}

TEST_CASE("http queue: the HTTP counters of counters.hpp, there from the start and counted",
          "[http][storage][counters]") {
  namespace sc = storage::counters;
  const std::string obj = object_bytes(100'000);
  std::atomic<int> busy{1};  // 503s busy.bin still answers before its bytes
  HttpTestServer server([&](const HttpTestRequest& r) {
    if (r.method == "HEAD") {
      return HttpTestReply{
          fmt::format("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", obj.size())};
    }
    if (r.target.ends_with("/gone.bin")) return HttpTestReply{HttpTestServer::reply(404, "gone")};
    if (r.target.ends_with("/down.bin")) return HttpTestReply{HttpTestServer::reply(503, "down")};
    if (r.target.ends_with("/busy.bin") && busy-- > 0)
      return HttpTestReply{HttpTestServer::reply(503, "slow down")};
    return HttpTestReply{partial(obj, r)};
  });
  BackendConfig config;
  config.http.loops = 1;
  config.http.max_attempts = 2;
  Registry registry;
  register_builtin_backends(registry);
  auto opened = registry.open(fmt::format("http://127.0.0.1:{}/d/ok.bin", server.port()), config);
  REQUIRE(opened);
  QueueOptions qo;
  qo.depth = 4;
  auto q = opened->backend->make_queue(qo);
  REQUIRE(q);
  // Every exact name of the HTTP definitions, at 0 before the first read.
  for (const CounterDef* d : sc::kAll) {
    if (d->producer != "http" || d->family) continue;
    INFO(d->name);
    if (d->kind == CounterKind::kHistogram) {
      REQUIRE((*q)->stats().find_histogram(*d) != nullptr);
      CHECK((*q)->stats().find_histogram(*d)->count() == 0);
    } else {
      REQUIRE((*q)->stats().counters.contains(d->name));
      CHECK((*q)->stats().counter(*d) == 0);
    }
  }
  const std::string dir = opened->key.substr(0, opened->key.rfind('/') + 1);
  std::vector<std::unique_ptr<ObjectHandle>> handles;
  for (const char* name : {"ok.bin", "busy.bin", "gone.bin", "down.bin"}) {
    auto h = opened->backend->open(dir + name);
    REQUIRE(h);
    handles.push_back(std::move(*h));
  }
  auto buf = AlignedBuffer::allocate(4 * 4096).value();
  std::vector<ReadOp> ops(handles.size());
  Collector c;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    ops[i].object = handles[i].get();
    ops[i].length = 4096;
    ops[i].dst = buf.span().subspan(i * 4096, 4096);
    ops[i].done = &c;
    (*q)->submit(ops[i]);
  }
  poll_until(**q, [&] { return c.calls == static_cast<int>(ops.size()); });
  CHECK(ops[0].result);
  CHECK(ops[1].result);  // after one 503
  CHECK_FALSE(ops[2].result);
  CHECK_FALSE(ops[3].result);  // 503 on both attempts
  const QueueStats& st = (*q)->stats();
  CHECK(st.counter(sc::kHttpRequests) == 4);
  // By the status of each request's last answer: the retried 503 is under its retry reason.
  CHECK(st.counters.at("http_status_206") == 2);
  CHECK(st.counters.at("http_status_404") == 1);
  CHECK(st.counters.at("http_status_503") == 1);
  // down.bin, out of attempts (a 404 is an answer, not a failed request).
  CHECK(st.counter(sc::kHttpFailedRequests) == 1);
  CHECK(st.counters.at("http_retry_http_503") >= 1);
  CHECK(st.counter(sc::kHttpRetries) >= 1);
  CHECK(st.counter(sc::kHttpThrottled) == st.counter(sc::kHttpRetries));
  CHECK(st.counter(sc::kHttpConnectionsOpened) >= 1);
  CHECK(st.counter(sc::kHttpConnectionsPeak) >= 1);
  CHECK(st.find_histogram(sc::kTtfb)->count() == 3);  // the requests that got an answer to read
  CHECK(st.find_histogram(sc::kTransfer)->count() == 3);
}
