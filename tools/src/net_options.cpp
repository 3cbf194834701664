#include "net_options.hpp"

#include <fmt/format.h>

#include "aws_config.hpp"
#include "cli_checks.hpp"
#include "cli_error.hpp"
#include "feedline/core/redact.hpp"
#include "feedline/core/units.hpp"
#include "output.hpp"

namespace feedline::tools {

void add_net_options(CLI::App& cmd, NetOptions& o) {
  const char* group = "Network storage (s3://, http(s)://, nfs://)";
  cmd.add_option(
         "--connections", o.connections,
         "Connections per job (HTTP: concurrent keep-alive connections, 0 = one per request in "
         "flight; NFS: TCP connections to the server, like nconnect)")
      ->group(group)
      ->check(whole_number(0, 4096));
  cmd.add_option("--endpoint", o.endpoint,
                 "S3 endpoint URL (overrides AWS_ENDPOINT_URL), e.g. http://127.0.0.1:9000")
      ->group(group)
      ->check(non_empty());
  cmd.add_option("--region", o.region, "S3 region (overrides AWS_REGION / AWS_DEFAULT_REGION)")
      ->group(group)
      ->check(non_empty());
  cmd.add_option("--profile", o.profile,
                 "AWS profile in ~/.aws/credentials and ~/.aws/config (overrides AWS_PROFILE)")
      ->group(group)
      ->check(non_empty());
  cmd.add_flag(
         "--no-sign-request", o.no_sign_request,
         "Send S3 requests unsigned, for public buckets, even where credentials are configured "
         "(as aws --no-sign-request)")
      ->group(group);
  cmd.add_flag("--insecure", o.insecure, "Do not verify TLS certificates (says so in the report)")
      ->group(group);
  cmd.add_option("--ca-bundle", o.ca_bundle, "CA certificates file for TLS verification")
      ->group(group)
      ->check(readable_file());
  cmd.add_option("--part-size", o.part_size,
                 "Large reads are split into parallel range requests of this size")
      ->group(group)
      ->check(non_empty());
  cmd.add_option(
         "--http-loops", o.http_loops,
         "HTTP event-loop threads per job that share parts of 1 MiB and more, so that receiving "
         "large objects uses more than one core (0 = one per core, at most 4; 1 = a single loop)")
      ->group(group)
      ->check(whole_number(0, 64));
  cmd.add_option("--max-attempts", o.max_attempts,
                 "Attempts per request, the first included (retries back off with jitter)")
      ->group(group)
      ->check(whole_number(1, 100));
  cmd.add_option("--connect-timeout", o.connect_timeout, "Give up connecting after this long")
      ->group(group)
      ->check(non_empty());
  cmd.add_option("--stall-timeout", o.stall_timeout,
                 "Fail an attempt that receives no byte for this long")
      ->group(group)
      ->check(non_empty());
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
    if (!o.endpoint.empty() || !o.profile.empty() || !o.region.empty() || o.no_sign_request) {
      throw UsageError("--endpoint, --region, --profile and --no-sign-request are for s3:// URLs");
    }
    return;
  }
  auto aws = load_aws_settings(process_env(), o.profile);
  if (!aws) throw UsageError(aws.error().what());
  if (o.no_sign_request) {
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
