// URL schemes -> backends.
//
// A Registry maps a scheme ("file", "mem", "s3", "http", "https", "nfs") to an opener that
// validates its own URL and returns a backend plus the key the URL names in it. Nothing registers
// itself: call register_builtin_backends() (the memory driver in src/mem/ is the worked example of
// a driver). A scheme known to feedline but compiled out of this build is registered as
// unavailable, so the user gets "built without X" instead of "unknown scheme". Each driver's
// settings live beside it (file_config.hpp, http_config.hpp, s3_config.hpp, nfs_config.hpp);
// BackendConfig gathers them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/error.hpp"
#include "feedline/storage/backend.hpp"
#include "feedline/storage/file_config.hpp"
#include "feedline/storage/http_config.hpp"
#include "feedline/storage/nfs_config.hpp"
#include "feedline/storage/s3_config.hpp"

namespace feedline::storage {

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
