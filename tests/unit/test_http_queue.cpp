// The HTTP backend's I/O queue with several event loops (HttpConfig::loops, --http-loops): large
// range parts spread over helper loops land byte for byte whether the main loop is driven by the
// poller or has a thread of its own; never more large parts in flight than --connections; cancel
// ends parts still waiting for a connection. Against the scripted server of http_test_server.hpp.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "feedline/storage/registry.hpp"
#include "http_test_server.hpp"

using namespace feedline;
using namespace feedline::storage;
using feedline::test::HttpTestReply;
using feedline::test::HttpTestRequest;
using feedline::test::HttpTestServer;
using feedline::test::object_bytes;
using feedline::test::partial;

namespace {

// Serves one object: HEAD with its size, ranged GETs as 206, each GET held `hold` so that parts
// overlap; counts the GETs being answered at once.
struct ObjectServer {
  std::string obj;
  std::chrono::milliseconds hold;
  std::atomic<int> active{0}, peak{0}, gets{0};
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
    std::this_thread::sleep_for(hold);
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
        QueueOptions qo;
        qo.depth = 4;
        qo.caller_mostly_polls = driven;
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
        (*q)->submit(a);
        (*q)->submit(b);
        poll_until(**q, [&] { return c.calls == 2; });
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
      QueueOptions qo;
      qo.caller_mostly_polls = driven;
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
  qo.caller_mostly_polls = GENERATE(false, true);
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
    CHECK((*pq)->stats().counters.count("http_coalesced_reads") == 0);
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
