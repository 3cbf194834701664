// URL schemes -> backends.
//
// A Registry maps a scheme ("file", "mem", later "s3", "http", "nfs") to an opener that validates
// its own URL and returns a backend plus the key the URL names in it. Nothing registers itself:
// call register_builtin_backends() (the memory driver in src/mem/ is the worked example of a
// driver). A scheme known to feedline but compiled out of this build, or not written yet, is
// registered as unavailable, so the user gets "built without X" instead of "unknown scheme".
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

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

// Every backend's settings, one section each. Libraries never read argv or the environment:
// tools/ fills this in.
struct BackendConfig {
  FileConfig file;
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
