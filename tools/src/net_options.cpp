#include "net_options.hpp"

#include <fmt/format.h>

#include "aws_config.hpp"
#include "cli_checks.hpp"
#include "cli_error.hpp"
#include "feedline/core/redact.hpp"
#include "feedline/core/units.hpp"
#include "output.hpp"
#include "setting_flags.hpp"

namespace feedline::tools {

void add_net_options(CLI::App& cmd, loader::LoaderSettings& s) {
  add_setting_flags(cmd, s, {"network"});
}

void apply_net_options(const NetOptions& o, std::string_view url, storage::BackendConfig& c,
                       std::vector<std::string>& notes) {
  // Whatever the URL carries that is secret (a password, a signature) is never printed.
  for (std::string& secret : url_secrets(url)) out::add_secret(std::move(secret));
  auto duration = [](const std::string& text, const char* flag) {
    auto r = parse_duration(text);
    if (!r) throw UsageError(fmt::format("{}: {}", flag, r.error().message()));
    if (r->count() <= 0) throw UsageError(fmt::format("{} must be positive", flag));
    return std::chrono::duration_cast<std::chrono::milliseconds>(*r);
  };
  auto part = parse_size(o.part_size);
  if (!part) throw UsageError(fmt::format("--part-size: {}", part.error().message()));
  if (*part < 4096) throw UsageError("--part-size must be at least 4 KiB");
  if (o.max_attempts == 0) throw UsageError("--max-attempts must be at least 1");

  c.http.connections = o.connections;
  c.http.insecure = o.insecure;
  c.http.ca_bundle = o.ca_bundle;
  c.http.part_size = *part;
  c.http.loops = o.http_loops;
  c.http.max_attempts = o.max_attempts;
  c.http.connect_timeout = duration(o.connect_timeout, "--connect-timeout");
  c.http.stall_timeout = duration(o.stall_timeout, "--stall-timeout");
  if (o.insecure) notes.push_back("--insecure: TLS certificates are NOT verified");

  c.nfs.connections = o.connections == 0 ? 1 : o.connections;
  c.nfs.max_attempts = o.max_attempts;
  c.nfs.timeout = c.http.connect_timeout;

  if (!url.starts_with("s3://") && !url.starts_with("S3://")) {
    if (!o.endpoint.empty() || !o.profile.empty() || !o.region.empty() || !o.sign_request) {
      throw UsageError("--endpoint, --region, --profile and --no-sign-request are for s3:// URLs");
    }
    return;
  }
  auto aws = load_aws_settings(process_env(), o.profile);
  if (!aws) throw UsageError(aws.error().what());
  if (!o.sign_request) {
    notes.push_back("--no-sign-request: S3 requests are not signed (public buckets only)");
  } else {
    c.s3.access_key_id = aws->access_key_id;
    c.s3.secret_access_key = aws->secret_access_key;
    c.s3.session_token = aws->session_token;
    out::add_secret(aws->secret_access_key);
    out::add_secret(aws->session_token);
  }
  if (!aws->region.empty()) c.s3.region = aws->region;
  if (!o.region.empty()) c.s3.region = o.region;
  c.s3.endpoint = o.endpoint.empty() ? aws->endpoint : o.endpoint;
  if (!c.s3.endpoint.empty() && !c.s3.endpoint.starts_with("http://") &&
      !c.s3.endpoint.starts_with("https://")) {
    throw UsageError(fmt::format("{}: the S3 endpoint must be an http:// or https:// URL, got '{}'",
                                 o.endpoint.empty() ? "AWS_ENDPOINT_URL" : "--endpoint",
                                 c.s3.endpoint));
  }
  // Custom endpoints (MinIO, s3rver, Ceph) want the bucket in the path; AWS takes both.
  c.s3.path_style = !c.s3.endpoint.empty();
}

}  // namespace feedline::tools
