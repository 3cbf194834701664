// Plain HTTP directory listings (nginx's autoindex_format json): the parser, and the http://
// backend listing a directory URL and taking a brace list's sizes from one listing instead of a
// HEAD per object, falling back to HEADs where the server has no listing.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "feedline/storage/autoindex.hpp"
#include "feedline/storage/registry.hpp"
#include "http_test_server.hpp"

namespace feedline::storage {
namespace {

using test::HttpTestReply;
using test::HttpTestRequest;
using test::HttpTestServer;

TEST_CASE("autoindex: nginx's JSON listing parses; anything else is no listing",
          "[http][storage]") {
  const auto entries = autoindex::parse_json(R"([
{ "name":"000001.bin", "type":"file", "mtime":"Tue, 01 Dec 2026 02:00:00 GMT", "size":65536 },
{ "name":"sub", "type":"directory", "mtime":"Tue, 01 Dec 2026 02:00:00 GMT" },
{ "name":"sock", "type":"other", "mtime":"Tue, 01 Dec 2026 02:00:00 GMT" },
{ "name":"a \"q\" b.bin", "type":"file", "mtime":"x", "size":0 }
])");
  REQUIRE(entries);
  REQUIRE(entries->size() == 3);  // "other" left out
  CHECK(entries->at(0).name == "000001.bin");
  CHECK(entries->at(0).size == 65536);
  CHECK_FALSE(entries->at(0).directory);
  CHECK(entries->at(1).name == "sub");
  CHECK(entries->at(1).directory);
  CHECK(entries->at(2).name == "a \"q\" b.bin");
  CHECK(autoindex::parse_json(" []\n")->empty());

  for (const char* bad :
       {"", "<html><body><a href=\"a.bin\">a.bin</a></body></html>", "{\"name\":\"a\"}",
        "[{\"name\":\"a\",\"type\":\"file\"}]",               // a file without a size
        "[{\"name\":\"a\",\"type\":\"file\",\"size\":-1}]",   // a negative size
        "[{\"name\":\"a\",\"type\":\"file\",\"size\":1.5}]",  // not a whole number
        "[{\"name\":\"\",\"type\":\"file\",\"size\":1}]",     // no name
        "[{\"type\":\"file\",\"size\":1}]", "[1, 2]",
        "[{\"name\":\"a\",\"type\":\"file\",\"size\":1}",
        "[{\"name\":7,\"type\":\"file\",\"size\":1}]"}) {
    INFO(bad);
    CHECK_FALSE(autoindex::parse_json(bad));
  }
  // Names that are no path segment (a way up, a path, a URL): kept, marked, for the caller to
  // leave out and say so; the rest of the listing stands.
  const auto unsafe = autoindex::parse_json(R"([
{ "name":"..", "type":"directory" }, { "name":"a/b", "type":"file", "size":1 },
{ "name":"http://evil.example/x", "type":"file", "size":1 }, { "name":".", "type":"directory" },
{ "name":"ok", "type":"file", "size":2 }
])");
  REQUIRE(unsafe);
  REQUIRE(unsafe->size() == 5);
  for (std::size_t i = 0; i < 4; ++i) CHECK(unsafe->at(i).unsafe);
  CHECK_FALSE(unsafe->at(4).unsafe);
}

TEST_CASE("autoindex: names that are not UTF-8 parse and keep their bytes", "[http][storage]") {
  // nginx writes a Linux name's bytes into its JSON as they are: Latin-1 "\xE9", a lone
  // continuation byte, a truncated sequence, an overlong '/', a surrogate, and (valid UTF-8) the
  // code points feedline marks such bytes with while parsing, and a plain accent.
  const std::vector<std::string> names = {"caf\xE9.bin",
                                          "a\x80"
                                          "b",
                                          "trunc\xE2\x82",
                                          "\xC0\xAF",
                                          "\xED\xA0\x80x",
                                          "\xF4\x8F\xBE\x80\xF4\x8F\xBF\xBF",
                                          "caf\xC3\xA9.bin"};
  std::string body = "[";
  for (const std::string& n : names)
    body += fmt::format("{}{{ \"name\":\"{}\", \"type\":\"file\", \"size\":7 }}",
                        body.size() > 1 ? "," : "", n);
  body += ",{ \"name\":\"d\\u00e9\", \"type\":\"directory\" }]";
  const auto entries = autoindex::parse_json(body);
  REQUIRE(entries);
  REQUIRE(entries->size() == names.size() + 1);
  for (std::size_t i = 0; i < names.size(); ++i) {
    CHECK(entries->at(i).name == names[i]);
    CHECK(entries->at(i).size == 7);
    CHECK_FALSE(entries->at(i).unsafe);
  }
  CHECK(entries->back().name == "d\xC3\xA9");  // a JSON escape: UTF-8, as before
  CHECK(entries->back().directory);
  // The request names the bytes, percent-encoded.
  CHECK(autoindex::encode_segment(entries->at(0).name) == "caf%E9.bin");
  // Still no listing: invalid JSON around such names, a raw byte outside a string.
  CHECK_FALSE(autoindex::parse_json("[{ \"name\":\"caf\xE9\", \"type\":\"file\", \"size\":7 }"));
  CHECK_FALSE(autoindex::parse_json("[\xE9]"));
}

TEST_CASE("autoindex: names become percent-encoded path segments", "[http][storage]") {
  CHECK(autoindex::encode_segment("train-000001.tar") == "train-000001.tar");
  CHECK(autoindex::encode_segment("a b%c~d_e") == "a%20b%25c~d_e");
  CHECK(autoindex::encode_segment("\xc3\xa9t\xc3\xa9") == "%C3%A9t%C3%A9");
}

// A server with /d/ holding f00..f39 (f<i> of i * 10 + 1 bytes), "a b.bin" (7 bytes) and sub/x.bin
// (3 bytes); its directories list as nginx's JSON (or as HTML with html_index).
struct Site {
  bool html_index = false;
  std::string listing(const std::string& dir) const {
    std::string out = "[\n";
    auto add = [&](const std::string& e) { out += (out.size() > 2 ? ",\n" : "") + e; };
    if (dir == "/d/") {
      for (int i = 0; i < 40; ++i) {
        add(fmt::format(R"({{ "name":"f{:02}", "type":"file", "mtime":"x", "size":{} }})", i,
                        i * 10 + 1));
      }
      add(R"({ "name":"a b.bin", "type":"file", "mtime":"x", "size":7 })");
      add(R"({ "name":"sub", "type":"directory", "mtime":"x" })");
    } else {
      add(R"({ "name":"x.bin", "type":"file", "mtime":"x", "size":3 })");
    }
    return out + "\n]\n";
  }
  std::uint64_t size_of(const std::string& path) const {
    if (path == "/d/a%20b.bin") return 7;
    if (path == "/d/sub/x.bin") return 3;
    if (path.size() == 6 && path.starts_with("/d/f") && std::stoul(path.substr(4)) < 40) {
      return std::stoul(path.substr(4)) * 10 + 1;
    }
    return ~std::uint64_t{0};
  }
  HttpTestReply answer(const HttpTestRequest& r) const {
    if (r.target.starts_with("/loop/") && r.target.ends_with('/')) {  // a symbolic link to itself
      const std::string body = R"([{ "name":"x", "type":"directory", "mtime":"x" }])";
      if (r.method == "HEAD")
        return {fmt::format(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.size())};
      return {HttpTestServer::reply(200, body, {"Content-Type: application/json"})};
    }
    if (r.target == "/d/" || r.target == "/d/sub/") {
      const std::string body =
          html_index ? "<html><body>Index of /d/</body></html>" : listing(r.target);
      const std::string type =
          html_index ? "Content-Type: text/html" : "Content-Type: application/json";
      if (r.method == "HEAD")
        return {
            fmt::format("HTTP/1.1 200 OK\r\n{}\r\nContent-Length: {}\r\n\r\n", type, body.size())};
      return {HttpTestServer::reply(200, body, {type})};
    }
    // Like some servers, "object/" answers with the object.
    std::string path = r.target;
    if (path.size() > 1 && path.ends_with('/')) path.pop_back();
    const std::uint64_t size = size_of(path);
    if (size == ~std::uint64_t{0}) return {HttpTestServer::reply(404, "not found")};
    if (r.method == "HEAD")
      return {fmt::format("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", size)};
    return {HttpTestServer::reply(200, std::string(size, 'x'))};
  }
};

struct Counts {
  std::size_t listings = 0, heads = 0;
};
Counts count(const HttpTestServer& server) {
  Counts c;
  for (const auto& r : server.requests()) {
    if (r.method == "HEAD") ++c.heads;
    if (r.method == "GET" && r.target.ends_with('/')) ++c.listings;
  }
  return c;
}

std::unique_ptr<Backend> open_site(const HttpTestServer& server) {
  Registry registry;
  register_builtin_backends(registry);
  auto r = registry.open(fmt::format("http://127.0.0.1:{}/d/", server.port()), BackendConfig{});
  REQUIRE(r);
  return std::move(r->backend);
}

std::vector<std::string> keys_f(int n) {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back(fmt::format("/d/f{:02}", i));
  return keys;
}

TEST_CASE("http listing: a directory URL lists through the server's JSON listings",
          "[http][storage]") {
  Site site;
  HttpTestServer server([&](const HttpTestRequest& r) { return site.answer(r); });
  auto backend = open_site(server);
  auto listing = backend->list("/d/");
  REQUIRE(listing);
  REQUIRE(listing->size() == 42);
  CHECK(std::is_sorted(listing->begin(), listing->end(),
                       [](const auto& a, const auto& b) { return a.key < b.key; }));
  CHECK(listing->front().key == "/d/a%20b.bin");  // encoded: the key is a URL path
  CHECK(listing->front().size == 7);
  CHECK(listing->at(1).key == "/d/f00");
  CHECK(listing->at(40).key == "/d/f39");
  CHECK(listing->at(40).size == 391);
  CHECK(listing->back().key == "/d/sub/x.bin");  // directories below are listed too
  CHECK(listing->back().size == 3);
  CHECK(count(server).listings == 2);

  // A directory that is not there.
  auto missing = backend->list("/nope/");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code() == Errc::kNotFound);
  CHECK(missing.error().object().find("/nope/") != std::string::npos);

  // Directories without end (a symbolic link to itself): a bounded walk, an error that says so.
  auto loop = backend->list("/loop/");
  REQUIRE_FALSE(loop);
  CHECK(loop.error().code() == Errc::kResourceExhausted);
  CHECK(loop.error().message().find("loops") != std::string::npos);

  // Not a directory: no listing to ask for.
  auto file = backend->list("/d/f01");
  REQUIRE_FALSE(file);
  CHECK(file.error().code() == Errc::kUnsupported);
  // "object/" answered with the object: seen by a HEAD, never fetched.
  auto object = backend->list("/d/f01/");
  REQUIRE_FALSE(object);
  CHECK(object.error().code() == Errc::kUnsupported);
  for (const auto& r : server.requests()) CHECK_FALSE((r.method == "GET" && r.target == "/d/f01/"));

  // A server whose directories answer with HTML: no listing, and the hint says what to do.
  site.html_index = true;
  auto html = backend->list("/d/");
  REQUIRE_FALSE(html);
  CHECK(html.error().code() == Errc::kUnsupported);
  CHECK(html.error().hint().find("brace") != std::string::npos);
  CHECK(html.error().hint().find("autoindex_format json") != std::string::npos);
}

TEST_CASE("http listing: a brace list takes its sizes from one listing, HEADs only for the rest",
          "[http][storage]") {
  Site site;
  HttpTestServer server([&](const HttpTestRequest& r) { return site.answer(r); });
  auto backend = open_site(server);

  SECTION("every key listed: one GET, no HEAD") {
    auto keys = keys_f(40);
    keys.push_back("/d/a%20b.bin");
    auto sizes = backend->stat_many(keys);
    REQUIRE(sizes);
    REQUIRE(sizes->size() == 41);
    for (int i = 0; i < 40; ++i) {
      CHECK(sizes->at(i).key == keys[i]);
      CHECK(sizes->at(i).size == static_cast<std::uint64_t>(i * 10 + 1));
    }
    CHECK(sizes->back().size == 7);
    CHECK(count(server).listings == 1);
    CHECK(count(server).heads == 0);
  }
  SECTION("a key the listing lacks: its HEAD, and the 404 names it") {
    auto keys = keys_f(40);
    keys.push_back("/d/f99");
    auto sizes = backend->stat_many(keys);
    REQUIRE_FALSE(sizes);
    CHECK(sizes.error().code() == Errc::kNotFound);
    CHECK(sizes.error().object().find("/d/f99") != std::string::npos);
    CHECK(count(server).listings == 1);
    CHECK(count(server).heads == 1);
  }
  SECTION("no listing (an HTML index): a HEAD per key, same sizes") {
    site.html_index = true;
    auto sizes = backend->stat_many(keys_f(40));
    REQUIRE(sizes);
    for (int i = 0; i < 40; ++i) CHECK(sizes->at(i).size == static_cast<std::uint64_t>(i * 10 + 1));
    CHECK(count(server).listings == 1);
    CHECK(count(server).heads == 40);
  }
  SECTION("a few keys: HEADs, no listing asked for") {
    auto sizes = backend->stat_many(keys_f(5));
    REQUIRE(sizes);
    CHECK(sizes->at(4).size == 41);
    CHECK(count(server).listings == 0);
    CHECK(count(server).heads == 5);
  }
}

}  // namespace
}  // namespace feedline::storage
