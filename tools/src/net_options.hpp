// Command-line options of the network backends (s3://, http(s)://, nfs://), shared by
// `bench storage`, `gen` and `run`, and their translation into storage::BackendConfig (with the
// AWS environment and profile files for s3://).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "feedline/loader/settings.hpp"
#include "feedline/storage/registry.hpp"

namespace feedline::tools {

// The network settings (the library's table: feedline/loader/settings.hpp, section "network").
using NetOptions = loader::NetSettings;

// Their flags (setting_flags.hpp), bound to s.net.
void add_net_options(CLI::App& cmd, loader::LoaderSettings& s);

// Fills the http, s3 and nfs sections. Throws UsageError for bad values. `notes` collects what
// the user should know (--insecure is on, where credentials came from) — never a secret.
// The AWS environment and files are read only for s3:// URLs.
void apply_net_options(const NetOptions& options, std::string_view url,
                       storage::BackendConfig& config, std::vector<std::string>& notes);

}  // namespace feedline::tools
