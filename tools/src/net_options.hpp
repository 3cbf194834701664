// Command-line options of the network backends (s3://, http(s)://, nfs://), shared by
// `bench storage`, `gen` and `run`, and their translation into storage::BackendConfig (the
// library's: feedline/loader/run_plan.hpp, with the AWS environment and profile files for s3://).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "feedline/loader/settings.hpp"
#include "feedline/storage/aws_config.hpp"
#include "feedline/storage/registry.hpp"

namespace feedline::tools {

// The network settings (the library's table: feedline/loader/settings.hpp, section "network").
using NetOptions = loader::NetSettings;

// Their flags (setting_flags.hpp), bound to s.net.
void add_net_options(CLI::App& cmd, loader::LoaderSettings& s);

// This process's environment (std::getenv), for the library's plan: the launcher's rank and world
// size, the AWS variables and files.
storage::EnvLookup process_env();

// Fills the http, s3 and nfs sections (loader::apply_net_settings). Throws UsageError for bad
// values, in flag words. `notes` collects what the user should know (--insecure is on), in flag
// words — never a secret; the secrets it found (the URL's, the S3 keys) are never printed
// (out::add_secret). The AWS environment and files are read only for s3:// URLs.
void apply_net_options(const NetOptions& options, std::string_view url,
                       storage::BackendConfig& config, std::vector<std::string>& notes);

}  // namespace feedline::tools
