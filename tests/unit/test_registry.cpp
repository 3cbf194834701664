#include <catch2/catch.hpp>

#include "feedline/storage/registry.hpp"
#include "feedline/transports/http_client.hpp"

using namespace feedline;
using namespace feedline::storage;

TEST_CASE("URLs split into scheme, authority and path; plain paths are files",
          "[storage][registry]") {
  auto u = parse_url("s3://bucket/train/shard-0.tar").value();
  CHECK(u.scheme == "s3");
  CHECK(u.authority == "bucket");
  CHECK(u.path == "/train/shard-0.tar");
  auto f = parse_url("/data/x.bin").value();
  CHECK(f.scheme == "file");
  CHECK(f.path == "/data/x.bin");
  auto rel = parse_url("data/x.bin").value();
  CHECK(rel.scheme == "file");
  CHECK(rel.path == "data/x.bin");
  auto weird = parse_url("./odd:name://x").value();  // not a scheme: a path with a colon
  CHECK(weird.scheme == "file");
  CHECK(parse_url("FILE:///tmp/x").value().scheme == "file");
  CHECK_FALSE(parse_url(""));
}

TEST_CASE("the registry opens known schemes and explains the others", "[storage][registry]") {
  Registry registry;
  register_builtin_backends(registry);
  auto file = registry.open("file:///tmp/x.bin", {});
  REQUIRE(file);
  CHECK(file->key == "/tmp/x.bin");
  CHECK(file->backend->scheme() == "file");
  auto mem = registry.open("mem://bucket/key", {});
  REQUIRE(mem);
  CHECK(mem->key == "bucket/key");

  auto unknown = registry.open("foo://x/y", {});
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().code() == Errc::kInvalidArgument);
  CHECK(unknown.error().what().find("foo") != std::string::npos);
  CHECK(unknown.error().what().find("file://") != std::string::npos);  // lists what works

  auto s3 = registry.open("s3://bucket/key", {});
  if (transports::http_compiled_in()) {
    REQUIRE(s3);  // opening makes no request: the key is checked when it is used
    CHECK(s3->backend->scheme() == "s3");
    CHECK(s3->key == "key");
  } else {
    REQUIRE_FALSE(s3);
    CHECK(s3.error().code() == Errc::kUnsupported);
    CHECK(s3.error().what().find("not available in this build") != std::string::npos);
  }

  auto remote = registry.open("file://otherhost/x", {});
  REQUIRE_FALSE(remote);
  CHECK(remote.error().code() == Errc::kInvalidArgument);
}
