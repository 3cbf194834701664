// URL schemes -> backends.
//
// A Registry maps a scheme ("file", "mem", later "s3", "http", "nfs") to an opener that validates
// its own URL and returns a backend plus the key the URL names in it. Nothing registers itself:
// call register_builtin_backends() (the memory driver in src/mem/ is the worked example of a
// driver). A scheme known to feedline but compiled out of this build, or not written yet, is
// registered as unavailable, so the user gets "built without X" instead of "unknown scheme".
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <stop_token>
#include <string_view>
#include <vector>

#include "feedline/core/error.hpp"
#include "feedline/storage/backend.hpp"
#include "feedline/transports/file_engine.hpp"

namespace feedline::storage {

// Settings of the local-file backend (file:// and plain paths).
struct FileConfig {
  transports::EngineKind engine = transports::EngineKind::kAuto;
  bool direct = false;            // O_DIRECT: bypass the page cache
  bool sqpoll = false;            // io_uring submission-queue polling thread
  bool register_buffers = true;   // try io_uring registered buffers (falls back when refused)
  unsigned posix_threads = 0;     // pread pool size per queue; 0 = one per depth slot
};

// Settings of the HTTP transport, shared by s3:// and http(s)://.
struct HttpConfig {
  unsigned connections = 0;                 // connections per queue; 0 = one per in-flight request
  bool insecure = false;                    // skip TLS certificate verification (--insecure)
  std::string ca_bundle;                    // CA file; empty = the system's
  std::uint64_t part_size = 8ull << 20;     // large reads go as parallel range parts of this size
  unsigned loops = 0;                       // event loops per queue for parts >= 1 MiB; 0 = one per core, <= 4
  unsigned max_attempts = 5;                // per request, the first try included
  std::chrono::milliseconds connect_timeout{10'000};
  std::chrono::milliseconds stall_timeout{30'000};  // no byte for this long fails the attempt
  std::vector<std::string> connect_to;  // "HOST:PORT:TO-HOST:TO-PORT", like curl --connect-to
};

// S3 endpoint and credentials, resolved by tools/ the AWS way (environment, ~/.aws files,
// --endpoint). Empty keys mean unsigned (anonymous) requests.
struct S3Config {
  std::string endpoint;  // scheme://host[:port]; empty = https://s3.<region>.amazonaws.com
  std::string region = "us-east-1";
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  bool path_style = true;  // bucket in the path (custom endpoints); false = virtual-hosted
};

// Settings of the NFS backend (libnfs).
struct NfsConfig {
  unsigned connections = 1;  // TCP connections per server (like nconnect)
  unsigned max_attempts = 5;
  std::chrono::milliseconds timeout{10'000};
};

// Every backend's settings, one section each. Libraries never read argv or the environment:
// tools/ fills this in.
struct BackendConfig {
  FileConfig file;
  HttpConfig http;
  S3Config s3;
  NfsConfig nfs;
  // Ends every blocking control call (stat, list, open, writes: HEADs, LISTs, PUTs, NFS RPCs)
  // within about a second once stop is requested (Ctrl-C); they fail with kCancelled. Reads
  // through an IoQueue are ended by IoQueue::cancel() instead.
  std::stop_token stop;
};

struct ParsedUrl {
  std::string text;       // as given
  std::string scheme;     // "file" for plain paths
  std::string authority;  // host[:port] or bucket; empty for file
  std::string path;       // everything after the authority
};
Result<ParsedUrl> parse_url(std::string_view text);

// A backend and the key the URL names inside it.
struct Resolved {
  std::unique_ptr<Backend> backend;
  std::string key;
};

class Registry {
 public:
  using Opener = std::function<Result<Resolved>(const ParsedUrl&, const BackendConfig&)>;

  void add(std::string scheme, Opener opener);
  void add_unavailable(std::string scheme, std::string reason);

  // kInvalidArgument for an unknown scheme (listing the known ones), kUnsupported for a scheme
  // this build lacks (with the reason).
  Result<Resolved> open(std::string_view url, const BackendConfig& config) const;
  std::vector<std::string> schemes() const;

 private:
  std::map<std::string, Opener, std::less<>> openers_;
  std::map<std::string, std::string, std::less<>> unavailable_;
};

// file://, plain paths and mem://, plus the schemes not in this build.
void register_builtin_backends(Registry& registry);

}  // namespace feedline::storage
