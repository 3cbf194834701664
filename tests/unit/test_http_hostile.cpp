// Servers whose answers are wrong, against the HTTP client and the s3:// and http:// backends:
// a 206 for other bytes than asked (truthfully labelled), without a Content-Range, of an object of
// another size, with a Content-Length past 2^64; a 200 of the wrong size; bytes past a body's
// Content-Length; redirects (shown, never followed); Retry-After (obeyed up to the stall timeout);
// listings with keys outside the prefix or with ".." segments, keys twice, absurd sizes, a
// continuation token that repeats, pages that bring nothing new, and more keys than a listing may
// hold. Each is an error that says what happened and names the object (and range), or a note, and
// never wrong bytes or a request outside the bucket. The pure checks: test_http_answer.cpp.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "feedline/storage/registry.hpp"
#include "feedline/transports/http_client.hpp"
#include "http_test_server.hpp"
#include "test_support.hpp"

using feedline::testing::contains;

using namespace feedline;
using feedline::test::HttpTestReply;
using feedline::test::HttpTestRequest;
using feedline::test::HttpTestServer;
using feedline::test::object_bytes;
using feedline::test::partial;
using feedline::test::range_of;
using transports::HttpClient;
using transports::HttpClientOptions;
using transports::HttpRequest;

namespace {

HttpClientOptions fast(bool driven = false) {
  HttpClientOptions o;
  o.driven = driven;
  o.backoff_base = std::chrono::milliseconds(1);
  o.backoff_cap = std::chrono::milliseconds(5);
  o.connect_timeout = std::chrono::milliseconds(2000);
  o.stall_timeout = std::chrono::seconds(5);
  return o;
}

// A ranged GET of [offset, offset + dst.size()) of an object of `size` bytes at /obj.
HttpRequest ranged(int port, std::uint64_t offset, std::vector<std::byte>& dst,
                   std::optional<std::uint64_t> size) {
  HttpRequest r;
  r.url = fmt::format("http://127.0.0.1:{}/obj", port);
  r.shown = fmt::format("http://127.0.0.1:{}/obj", port);
  r.range_offset = offset;
  r.range_length = dst.size();
  r.dst = dst;
  r.known_size = size;
  return r;
}

std::string as_string(const std::vector<std::byte>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size());
}

// A 206 with obj's bytes [a, b] labelled as such (whatever was asked).
std::string answer_206(const std::string& obj, std::size_t a, std::size_t b,
                       std::vector<std::string> extra = {}) {
  extra.push_back(fmt::format("Content-Range: bytes {}-{}/{}", a, b, obj.size()));
  return HttpTestServer::reply(206, obj.substr(a, b - a + 1), extra);
}

}  // namespace

TEST_CASE("a 206 of other bytes than asked, truthfully labelled, is a data error, not wrong bytes",
          "[http][hostile]") {
  const std::string obj = object_bytes(10'000);
  HttpTestServer server([&](const HttpTestRequest& r) {
    const auto [a, b] = range_of(r);
    return HttpTestReply{answer_206(obj, a + 1, b + 1)};  // one byte later
  });
  auto client = HttpClient::create(fast(GENERATE(false, true)));
  REQUIRE(client);
  std::vector<std::byte> dst(100, std::byte{'#'});
  auto resp = (*client)->perform(ranged(server.port(), 500, dst, 10'000));
  REQUIRE_FALSE(resp);
  INFO(resp.error().what());
  CHECK(resp.error().code() == Errc::kCorrupt);
  CHECK(contains(resp.error().what(), "bytes 500-599"));
  CHECK(contains(resp.error().what(), "bytes 501-600"));
  CHECK(resp.error().object() == fmt::format("http://127.0.0.1:{}/obj", server.port()));
  CHECK(resp.error().offset() == 500u);
  CHECK(as_string(dst) == std::string(100, '#'));  // refused before a byte landed
  CHECK(server.requests().size() == 1);            // not retried: it would answer the same
}

TEST_CASE("a 206 without a Content-Range, or of an object of another size, is refused",
          "[http][hostile]") {
  const std::string obj = object_bytes(10'000);
  const std::string what =
      GENERATE(as<std::string>{}, "no range", "other total", "huge length", "short", "200 size");
  HttpTestServer server([&](const HttpTestRequest& r) {
    const auto [a, b] = range_of(r);
    const std::string body = obj.substr(a, b - a + 1);
    if (what == "no range") return HttpTestReply{HttpTestServer::reply(206, body)};
    if (what == "other total") {
      return HttpTestReply{HttpTestServer::reply(
          206, body, {fmt::format("Content-Range: bytes {}-{}/{}", a, b, obj.size() * 2)})};
    }
    if (what == "huge length") {  // curl reads on for ever: the stall timeout was the only end
      return HttpTestReply{fmt::format(
          "HTTP/1.1 206 X\r\nContent-Length: 99999999999999999999\r\nContent-Range: bytes "
          "{}-{}/{}\r\n\r\n{}",
          a, b, obj.size(), body)};
    }
    if (what == "short") return HttpTestReply{answer_206(obj, a, a + 9)};
    return HttpTestReply{HttpTestServer::reply(200, obj + "x")};  // a 200 of 10,001 bytes
  });
  auto client = HttpClient::create(fast());
  REQUIRE(client);
  std::vector<std::byte> dst(100);
  const auto t0 = std::chrono::steady_clock::now();
  auto resp = (*client)->perform(ranged(server.port(), what == "200 size" ? 0 : 500, dst, 10'000));
  INFO(what);
  REQUIRE_FALSE(resp);
  INFO(resp.error().what());
  CHECK(resp.error().code() == Errc::kCorrupt);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));  // not the stall timeout
  if (what == "no range") CHECK(contains(resp.error().what(), "no Content-Range"));
  if (what == "other total") CHECK(contains(resp.error().what(), "20000"));
  if (what == "huge length") CHECK(contains(resp.error().what(), "Content-Length"));
  if (what == "short") CHECK(contains(resp.error().what(), "only bytes 500-509"));
  if (what == "200 size") CHECK(contains(resp.error().what(), "10001 bytes"));
}

TEST_CASE("a body longer than its Content-Length is said so, not 'Received HTTP/0.9'",
          "[http][hostile]") {
  const std::string obj = object_bytes(10'000);
  HttpTestServer server([&](const HttpTestRequest& r) {
    // The stray bytes come a moment after the answer, as the next answer's start would.
    HttpTestReply reply{partial(obj, r)};
    reply.later = "STRAY BYTES PAST THE CONTENT-LENGTH";
    reply.pause = std::chrono::milliseconds(100);
    return reply;
  });
  HttpClientOptions o = fast();
  o.max_connections = 1;  // the second GET reuses the first's connection
  auto client = HttpClient::create(o);
  REQUIRE(client);
  std::vector<std::byte> first(100), second(100);
  REQUIRE((*client)->perform(ranged(server.port(), 0, first, 10'000)));
  // At once, on the same connection: the stray bytes come after the request went (had they come
  // first, curl would have found the idle connection unclean and opened another).
  auto resp = (*client)->perform(ranged(server.port(), 100, second, 10'000));
  REQUIRE_FALSE(resp);
  INFO(resp.error().what());
  CHECK(resp.error().code() == Errc::kIo);  // the server's fault: exit 1
  CHECK(contains(resp.error().message(), "more bytes than its Content-Length"));
}

TEST_CASE("a redirect is not followed; the answer says where it points", "[http][hostile]") {
  HttpTestServer server([](const HttpTestRequest&) {
    return HttpTestReply{HttpTestServer::reply(
        301, "moved", {"Location: /elsewhere/obj?X-Amz-Signature=deadbeef&x=1"})};
  });
  auto client = HttpClient::create(fast());
  REQUIRE(client);
  std::vector<std::byte> dst(100);
  auto resp = (*client)->perform(ranged(server.port(), 0, dst, 10'000));
  REQUIRE(resp);
  CHECK(resp->status == 301);
  // Resolved against the request's URL (curl's CURLINFO_REDIRECT_URL).
  CHECK(
      resp->redirect_url ==
      fmt::format("http://127.0.0.1:{}/elsewhere/obj?X-Amz-Signature=deadbeef&x=1", server.port()));
  CHECK(server.requests().size() == 1);
}

TEST_CASE("Retry-After is obeyed up to the stall timeout; a year is not waited out",
          "[http][hostile][retry]") {
  const std::string after = GENERATE(as<std::string>{}, "1", "31536000");
  std::atomic<int> calls{0};
  HttpTestServer server([&](const HttpTestRequest&) {
    ++calls;
    return HttpTestReply{
        HttpTestServer::reply(503, "slow down", {"Retry-After: " + std::string(after)})};
  });
  HttpClientOptions o = fast();
  o.max_attempts = 2;
  o.stall_timeout = std::chrono::milliseconds(after == "1" ? 5000 : 300);
  auto client = HttpClient::create(o);
  REQUIRE(client);
  std::vector<std::byte> dst(100);
  const auto t0 = std::chrono::steady_clock::now();
  auto resp = (*client)->perform(ranged(server.port(), 0, dst, 10'000));
  const auto took = std::chrono::steady_clock::now() - t0;
  INFO(after);
  REQUIRE_FALSE(resp);
  CHECK(contains(resp.error().what(), "HTTP 503 after 2 attempts"));
  CHECK(calls == 2);
  if (after == "1") {
    CHECK(took >= std::chrono::milliseconds(950));  // the server's second, not a 5 ms backoff
  } else {
    CHECK(took >= std::chrono::milliseconds(290));  // the stall timeout, not a year
  }
  CHECK(took < std::chrono::seconds(3));
}

TEST_CASE("URLs go out as written: no '..' removal, so a key cannot name another path",
          "[http][hostile]") {
  HttpTestServer server(
      [](const HttpTestRequest&) { return HttpTestReply{HttpTestServer::reply(404, "no")}; });
  auto client = HttpClient::create(fast());
  REQUIRE(client);
  HttpRequest r;
  r.method = "HEAD";
  r.url = fmt::format("http://127.0.0.1:{}/bucket/p/../../etc/./passwd", server.port());
  REQUIRE((*client)->perform(r));
  REQUIRE(server.requests().size() == 1);
  CHECK(server.requests()[0].target == "/bucket/p/../../etc/./passwd");
}

// ---- through the backends ----------------------------------------------------------------------

namespace {

std::unique_ptr<storage::Backend> open_backend(const std::string& url, const std::string& endpoint,
                                               std::uint64_t max_listing = std::uint64_t{1} << 30) {
  storage::BackendConfig config;
  config.http.max_attempts = 2;
  config.http.connect_timeout = std::chrono::milliseconds(2000);
  config.http.max_listing_bytes = max_listing;
  config.s3.endpoint = endpoint;
  config.s3.access_key_id = endpoint.empty() ? "" : "AKID";
  config.s3.secret_access_key = endpoint.empty() ? "" : "SECRET";
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto r = registry.open(url, config);
  REQUIRE(r);
  return std::move(r->backend);
}

// A ListObjectsV2 page.
std::string list_page(const std::vector<std::pair<std::string, std::string>>& keys,
                      const std::string& next_token = "") {
  std::string x = "<?xml version=\"1.0\"?><ListBucketResult><Name>b</Name>";
  for (const auto& [k, size] : keys)
    x += fmt::format("<Contents><Key>{}</Key><Size>{}</Size></Contents>", k, size);
  x += fmt::format("<IsTruncated>{}</IsTruncated>", next_token.empty() ? "false" : "true");
  if (!next_token.empty())
    x += fmt::format("<NextContinuationToken>{}</NextContinuationToken>", next_token);
  return x + "</ListBucketResult>";
}

}  // namespace

TEST_CASE("s3 listing: keys outside the prefix or with '..' segments are marked, keys twice once",
          "[http][hostile][s3]") {
  HttpTestServer server([](const HttpTestRequest& r) {
    if (contains(r.target, "list-type=2")) {
      return HttpTestReply{HttpTestServer::reply(200, list_page({{"p/a.bin", "10"},
                                                                 {"p/../../etc/passwd", "10"},
                                                                 {"q/outside.bin", "10"},
                                                                 {"p/./b.bin", "10"},
                                                                 {"p/c.bin", "10"},
                                                                 {"p/a.bin", "10"},
                                                                 {"p/%2E%2E/d.bin", "10"},
                                                                 {"p/e//f.bin", "10"}}))};
    }
    return HttpTestReply{HttpTestServer::reply(404, "no")};
  });
  auto backend = open_backend("s3://b/p/", fmt::format("http://127.0.0.1:{}", server.port()));
  auto l = backend->list("p/");
  REQUIRE(l);
  std::vector<std::string> inside, outside;
  for (const auto& o : *l) (o.outside ? outside : inside).push_back(o.key);
  CHECK(inside == std::vector<std::string>{"p/%2E%2E/d.bin", "p/a.bin", "p/c.bin", "p/e//f.bin"});
  CHECK(outside == std::vector<std::string>{"p/../../etc/passwd", "p/./b.bin", "q/outside.bin"});
  // The percent-encoded dots are a key's own characters: sent encoded, never as "..".
  auto h = backend->open_known(storage::ObjectInfo{"p/%2E%2E/d.bin", 10});
  REQUIRE(h);
  CHECK(contains((*h)->display_name(), "s3://b/p/%2E%2E/d.bin"));
}

TEST_CASE("s3 listing: a repeated continuation token or pages without new keys stop with an error",
          "[http][hostile][s3]") {
  const std::string how = GENERATE(as<std::string>{}, "same token", "new tokens, same keys");
  std::atomic<int> pages{0};
  HttpTestServer server([&](const HttpTestRequest&) {
    const int n = ++pages;
    return HttpTestReply{HttpTestServer::reply(
        200, list_page({{"p/a.bin", "10"}}, how == "same token" ? "same" : fmt::format("t{}", n)))};
  });
  auto backend = open_backend("s3://b/p/", fmt::format("http://127.0.0.1:{}", server.port()));
  auto l = backend->list("p/");
  INFO(how);
  REQUIRE_FALSE(l);
  INFO(l.error().what());
  CHECK(l.error().code() == Errc::kIo);  // the server's fault: exit 1
  CHECK(contains(l.error().what(), "round in circles"));
  CHECK(l.error().object() == "s3://b/p/");
  CHECK(pages < 30);
}

TEST_CASE("s3 listing: absurd sizes, redirects and more keys than a listing holds are errors",
          "[http][hostile][s3]") {
  SECTION("a size of 2^62") {
    HttpTestServer server([](const HttpTestRequest&) {
      return HttpTestReply{
          HttpTestServer::reply(200, list_page({{"p/a.bin", "4611686018427387904"}}))};
    });
    auto backend = open_backend("s3://b/p/", fmt::format("http://127.0.0.1:{}", server.port()));
    auto l = backend->list("p/");
    REQUIRE_FALSE(l);
    CHECK(l.error().code() == Errc::kCorrupt);
    CHECK(l.error().object() == "s3://b/p/a.bin");
  }
  SECTION("a redirect: exit 1's code, its Location shown without its secrets") {
    HttpTestServer server([](const HttpTestRequest&) {
      return HttpTestReply{HttpTestServer::reply(
          301, "", {"Location: http://elsewhere.example/b/?X-Amz-Signature=deadbeefsig"})};
    });
    auto backend = open_backend("s3://b/p/", fmt::format("http://127.0.0.1:{}", server.port()));
    auto l = backend->list("p/");
    REQUIRE_FALSE(l);
    INFO(l.error().what());
    CHECK(l.error().code() == Errc::kIo);
    CHECK(contains(l.error().what(), "a redirect to http://elsewhere.example/b/"));
    CHECK_FALSE(contains(l.error().what(), "deadbeefsig"));
    CHECK(contains(l.error().what(), "does not follow redirects"));
  }
  SECTION("more keys than the listing may hold") {
    std::atomic<int> pages{0};
    HttpTestServer server([&](const HttpTestRequest&) {
      const int n = ++pages;
      std::vector<std::pair<std::string, std::string>> keys;
      for (int i = 0; i < 1000; ++i)
        keys.emplace_back(fmt::format("p/{:04}/{:06}-with-a-longer-name.bin", n, i), "10");
      return HttpTestReply{HttpTestServer::reply(200, list_page(keys, fmt::format("t{}", n)))};
    });
    auto backend = open_backend("s3://b/p/", fmt::format("http://127.0.0.1:{}", server.port()),
                                std::uint64_t{1} << 20);
    auto l = backend->list("p/");
    REQUIRE_FALSE(l);
    INFO(l.error().what());
    CHECK(l.error().code() == Errc::kResourceExhausted);
    CHECK(contains(l.error().what(), "1 MiB"));
    CHECK(contains(l.error().hint(), "narrower prefix"));
    CHECK(pages < 30);
  }
}

TEST_CASE("http listing: names that are no path segment are marked, not fetched; a redirect fails",
          "[http][hostile]") {
  const bool redirect = GENERATE(false, true);
  HttpTestServer server([&](const HttpTestRequest& r) {
    if (r.target == "/d/") {
      if (redirect) {
        return HttpTestReply{HttpTestServer::reply(302, "", {"Location: http://other.example/d/"})};
      }
      const std::string body = R"([
{ "name":"a.bin", "type":"file", "mtime":"x", "size":10 },
{ "name":"..", "type":"directory", "mtime":"x" },
{ "name":"../../etc/passwd", "type":"file", "mtime":"x", "size":10 },
{ "name":"http://evil.example/x", "type":"file", "mtime":"x", "size":10 },
{ "name":"a.bin", "type":"file", "mtime":"x", "size":10 }
])";
      const std::string type = "Content-Type: application/json";
      if (r.method == "HEAD")
        return HttpTestReply{
            fmt::format("HTTP/1.1 200 OK\r\n{}\r\nContent-Length: {}\r\n\r\n", type, body.size())};
      return HttpTestReply{HttpTestServer::reply(200, body, {type})};
    }
    return HttpTestReply{HttpTestServer::reply(404, "no")};
  });
  auto backend = open_backend(fmt::format("http://127.0.0.1:{}/d/", server.port()), "");
  auto l = backend->list("/d/");
  if (redirect) {
    REQUIRE_FALSE(l);
    INFO(l.error().what());
    CHECK(l.error().code() == Errc::kIo);  // not "no listing" (a usage error)
    CHECK(contains(l.error().what(), "a redirect to http://other.example/d/"));
    return;
  }
  REQUIRE(l);
  std::vector<std::string> inside, outside;
  for (const auto& o : *l) (o.outside ? outside : inside).push_back(o.key);
  CHECK(inside == std::vector<std::string>{"/d/a.bin"});
  CHECK(outside ==
        std::vector<std::string>{"/d/..", "/d/../../etc/passwd", "/d/http://evil.example/x"});
  for (const auto& r : server.requests()) CHECK(r.target.starts_with("/d/"));  // nothing above
}

TEST_CASE("http reads: an answer for other bytes fails the read naming the URL and the range",
          "[http][hostile][storage]") {
  const std::string obj = object_bytes(100'000);
  HttpTestServer server([&](const HttpTestRequest& r) {
    if (r.method == "HEAD") {
      return HttpTestReply{
          fmt::format("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", obj.size())};
    }
    if (r.target == "/moved.bin")
      return HttpTestReply{HttpTestServer::reply(307, "", {"Location: /new.bin"})};
    const auto [a, b] = range_of(r);
    return HttpTestReply{answer_206(obj, a + 1, std::min(b + 1, obj.size() - 1))};
  });
  auto backend = open_backend(fmt::format("http://127.0.0.1:{}/x.bin", server.port()), "");
  const std::string name = GENERATE(as<std::string>{}, "/x.bin", "/moved.bin");
  const bool polls = GENERATE(false, true);
  auto h = backend->open(name);
  REQUIRE(h);
  const storage::HttpQueueOptions http{.caller_mostly_polls = polls};
  auto q = backend->make_queue({.depth = 4, .http = &http});
  REQUIRE(q);
  std::vector<std::byte> buf(4096);
  storage::ReadOp op;
  op.object = h->get();
  op.offset = 8192;
  op.length = 4096;
  op.dst = buf;
  (*q)->submit(op);
  std::vector<storage::ReadOp*> done;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (done.empty() && std::chrono::steady_clock::now() < until)
    (*q)->poll(1, std::chrono::milliseconds(100), done);
  REQUIRE(done.size() == 1);
  REQUIRE_FALSE(op.result);
  INFO(op.result.error().what());
  CHECK(op.result.error().object() == fmt::format("http://127.0.0.1:{}{}", server.port(), name));
  CHECK(op.result.error().offset() == 8192u);
  if (name == "/x.bin") {
    CHECK(op.result.error().code() == Errc::kCorrupt);
    CHECK(contains(op.result.error().what(), "bytes 8192-12287"));
  } else {
    CHECK(op.result.error().code() == Errc::kIo);
    CHECK(contains(op.result.error().what(), fmt::format("HTTP 307, a redirect to "
                                                         "http://127.0.0.1:{}/new.bin",
                                                         server.port())));
  }
}
