// nfs:// without a server: URL parsing, the registry's answer in builds with and without libnfs,
// and an unreachable server failing fast with an error that says what to check. The tests against
// a real server are the conformance suite ("conformance: nfs") and tests/cli/nfs.sh.
#include <catch2/catch.hpp>

#include <chrono>

#include "feedline/storage/registry.hpp"

#if FEEDLINE_HAVE_NFS
#include "feedline/transports/nfs_client.hpp"
#endif

using namespace feedline;

#if FEEDLINE_HAVE_NFS
TEST_CASE("nfs URL: server, path and version", "[nfs]") {
  auto u = transports::parse_nfs_url("nfs://10.1.2.3/export/ds/?version=4&nfsport=20490");
  REQUIRE(u);
  CHECK(u->server == "10.1.2.3");
  CHECK(u->path == "/export/ds/");
  CHECK(u->query == "version=4&nfsport=20490");
  CHECK(u->version == 4);
  auto v3 = transports::parse_nfs_url("nfs://filer/vol");
  REQUIRE(v3);
  CHECK(v3->version == 3);
  CHECK(v3->path == "/vol");
  auto root = transports::parse_nfs_url("nfs://filer");
  REQUIRE(root);
  CHECK(root->path == "/");
}

TEST_CASE("nfs URL: malformed ones are invalid arguments naming the URL", "[nfs]") {
  for (const char* bad : {"nfs:///export/x", "nfs://h/x?version=5", "http://h/x"}) {
    INFO(bad);
    auto u = transports::parse_nfs_url(bad);
    REQUIRE_FALSE(u);
    CHECK(u.error().code() == Errc::kInvalidArgument);
    CHECK(u.error().what().find(bad) != std::string::npos);
  }
}

TEST_CASE("nfs: an unreachable server fails at open with the URL and what to check", "[nfs]") {
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  storage::BackendConfig config;
  config.nfs.timeout = std::chrono::seconds(2);
  config.nfs.max_attempts = 1;
  // Port 1 on loopback: nothing listens, the connection is refused at once.
  const std::string url = "nfs://127.0.0.1/export/ds?version=4&nfsport=1";
  auto r = registry.open(url, config);
  REQUIRE_FALSE(r);
  CHECK(r.error().what().find(url) != std::string::npos);
  CHECK(r.error().hint().find("is the server up?") != std::string::npos);
}
#else
TEST_CASE("nfs: a build without libnfs says so", "[nfs]") {
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto r = registry.open("nfs://127.0.0.1/export/ds", {});
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::kUnsupported);
  CHECK(r.error().what().find("built without the NFS backend") != std::string::npos);
}
#endif
