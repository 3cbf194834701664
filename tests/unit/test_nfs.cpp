// nfs:// without a server: URL parsing (every parameter checked, a port where libnfs takes none,
// credentials), the registry's answer in builds with and without libnfs, an unreachable server
// failing fast with an error that says what to check, and a server that accepts and never answers
// ending with kCancelled within a second of the stop token. The tests against a real server are
// the conformance suite ("conformance: nfs") and tests/cli/nfs.sh.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <stop_token>
#include <string>
#include <thread>

#include "feedline/storage/registry.hpp"

#if FEEDLINE_HAVE_NFS
#include "feedline/transports/nfs_client.hpp"
#include "http_stall_server.hpp"
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

TEST_CASE("nfs URL: every query parameter is checked, with a message saying what to write",
          "[nfs]") {
  struct Bad {
    const char* url;
    const char* says;
  };
  for (const Bad& b : std::initializer_list<Bad>{
           {"nfs://host/export/x?nfsport=abc",
            "nfsport must be a number from 1 to 65535, not 'abc'"},
           {"nfs://host/export/x?nfsport=0", "nfsport must be a number"},
           {"nfs://host/export/x?nfsport=65536", "nfsport must be a number"},
           {"nfs://host/export/x?nfsport=-1", "nfsport must be a number"},
           {"nfs://host/export/x?nfsport=", "nfsport needs a value"},
           {"nfs://host/export/x?nfsport", "nfsport needs a value"},
           {"nfs://host/export/x?mountport=x1", "mountport must be a number"},
           {"nfs://host/export/x?uid=root",
            "uid must be a number from 0 to 2147483647, not 'root'"},
           {"nfs://host/export/x?gid=-5", "gid must be a number"},
           {"nfs://host/export/x?uid=99999999999", "uid must be a number"},
           {"nfs://host/export/x?version=5", "version must be 3 or 4, not '5'"},
           {"nfs://host/export/x?version=four", "version must be 3 or 4"},
           {"nfs://host/export/x?version=4&version=3", "version is given twice"},
           {"nfs://host/export/x?verison=4",
            "unknown parameter 'verison' in the query (known: version, nfsport, mountport, uid, "
            "gid)"},
           {"nfs://host/export/x?debug=9", "unknown parameter 'debug'"},
       }) {
    INFO(b.url);
    auto u = transports::parse_nfs_url(b.url);
    REQUIRE_FALSE(u);
    CHECK(u.error().code() == Errc::kInvalidArgument);
    CHECK(u.error().message().find(b.says) != std::string::npos);
    CHECK(u.error().object() == b.url);
  }
  for (const char* good :
       {"nfs://host/export/x?version=4&nfsport=2049&mountport=635&uid=0&gid=2147483647",
        "nfs://host/export/x?", "nfs://host/export/x?version=3&",
        "nfs://host/export/x?uid=1000&&gid=1000"}) {
    INFO(good);
    CHECK(transports::parse_nfs_url(good));
  }
}

TEST_CASE("nfs URL: a port after the host belongs in ?nfsport=; credentials are refused and hidden",
          "[nfs]") {
  auto port = transports::parse_nfs_url("nfs://127.0.0.1:1/x");
  REQUIRE_FALSE(port);
  CHECK(port.error().code() == Errc::kInvalidArgument);
  CHECK(port.error().message().find("the port belongs in ?nfsport=1") != std::string::npos);
  CHECK(port.error().hint() == "write nfs://127.0.0.1/x?nfsport=1");
  auto with_query = transports::parse_nfs_url("nfs://filer:2049/export/ds/?version=4");
  REQUIRE_FALSE(with_query);
  CHECK(with_query.error().hint() == "write nfs://filer/export/ds/?version=4&nfsport=2049");
  auto v6 = transports::parse_nfs_url("nfs://[fd00::1]:2049/export");
  REQUIRE_FALSE(v6);
  CHECK(v6.error().hint() == "write nfs://[fd00::1]/export?nfsport=2049");
  auto not_a_port = transports::parse_nfs_url("nfs://host:abc/export");
  REQUIRE_FALSE(not_a_port);
  CHECK(not_a_port.error().code() == Errc::kInvalidArgument);

  auto creds = transports::parse_nfs_url("nfs://root:hunter22@filer/export");
  REQUIRE_FALSE(creds);
  CHECK(creds.error().code() == Errc::kInvalidArgument);
  CHECK(creds.error().message().find("no user name or password") != std::string::npos);
  CHECK(creds.error().hint().find("?uid=") != std::string::npos);
  CHECK(creds.error().what().find("hunter22") == std::string::npos);
  CHECK(creds.error().object() == "nfs://root:***@filer/export");
}

TEST_CASE("nfs: a bad URL fails at open before any connection", "[nfs]") {
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  storage::BackendConfig config;
  config.nfs.timeout =
      std::chrono::seconds(30);  // a connection attempt would show in the time taken
  const auto t0 = std::chrono::steady_clock::now();
  for (const char* url : {"nfs://127.0.0.1:1/x", "nfs://127.0.0.1/export/x?nfsport=abc",
                          "nfs://127.0.0.1/x?nosuch=1"}) {
    INFO(url);
    auto r = registry.open(url, config);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kInvalidArgument);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
}

TEST_CASE(
    "nfs: a server that accepts and never answers: the stop token ends the mount within a second",
    "[nfs][stop]") {
  test::StallServer server(test::StallServer::Mode::kSilent);
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  std::stop_source stop;
  storage::BackendConfig config;
  config.nfs.timeout = std::chrono::seconds(30);
  config.stop = stop.get_token();
  const std::string url =
      "nfs://127.0.0.1/export/ds?version=4&nfsport=" + std::to_string(server.port());
  // The time to end counts from the stop (a loaded machine may wake the stopping thread late).
  std::atomic<std::chrono::steady_clock::rep> stopped_at{0};
  std::jthread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    stopped_at = std::chrono::steady_clock::now().time_since_epoch().count();
    stop.request_stop();
  });
  auto r = registry.open(url, config);
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  REQUIRE_FALSE(r);
  INFO(r.error().what());
  CHECK(r.error().code() == Errc::kCancelled);
  CHECK(r.error().message() == "interrupted");
  REQUIRE(stopped_at != 0);  // it waited for the stop
  CHECK(std::chrono::steady_clock::duration(now - stopped_at) < std::chrono::seconds(1));
  CHECK(server.requests() == 0);  // it never saw an HTTP request: the NFS client is what waited
}

TEST_CASE("nfs: a server that never answers fails after the timeout, not later", "[nfs]") {
  test::StallServer server(test::StallServer::Mode::kSilent);
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  storage::BackendConfig config;
  config.nfs.timeout = std::chrono::seconds(1);
  config.nfs.max_attempts = 1;
  const std::string url =
      "nfs://127.0.0.1/export/ds?version=4&nfsport=" + std::to_string(server.port());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = registry.open(url, config);
  const auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE_FALSE(r);
  INFO(r.error().what());
  CHECK((r.error().code() == Errc::kTimeout || r.error().code() == Errc::kIo));
  CHECK(r.error().what().find(url) != std::string::npos);
  CHECK(took < std::chrono::seconds(4));
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
