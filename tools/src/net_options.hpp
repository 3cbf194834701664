// Command-line options of the network backends (s3://, http(s)://, nfs://), shared by
// `bench storage`, `gen` and `run`, and their translation into storage::BackendConfig (with the
// AWS environment and profile files for s3://).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "feedline/storage/registry.hpp"

namespace feedline::tools {

struct NetOptions {
  unsigned connections = 0;
  std::string endpoint;
  std::string region;
  std::string profile;
  bool no_sign_request = false;
  bool insecure = false;
  std::string ca_bundle;
  std::string part_size = "8MiB";
  unsigned http_loops = 0;
  unsigned max_attempts = 5;
  std::string connect_timeout = "10s";
  std::string stall_timeout = "30s";
};

void add_net_options(CLI::App& cmd, NetOptions& options);

// Fills the http, s3 and nfs sections. Throws UsageError for bad values. `notes` collects what
// the user should know (--insecure is on, where credentials came from) — never a secret.
// The AWS environment and files are read only for s3:// URLs.
void apply_net_options(const NetOptions& options, std::string_view url,
                       storage::BackendConfig& config, std::vector<std::string>& notes);

}  // namespace feedline::tools
