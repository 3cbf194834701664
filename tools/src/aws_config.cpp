#include "aws_config.hpp"

#include <cstdlib>

namespace feedline::tools {

EnvLookup process_env() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

Result<IniFile> parse_aws_ini(std::string_view, std::string_view) { return IniFile{}; }

// Environment only for now; the ~/.aws files come next.
Result<AwsSettings> load_aws_settings(const EnvLookup& env, std::string_view) {
  AwsSettings s;
  auto get = [&env](const char* name) { return env(name).value_or(""); };
  s.access_key_id = get("AWS_ACCESS_KEY_ID");
  s.secret_access_key = get("AWS_SECRET_ACCESS_KEY");
  s.session_token = get("AWS_SESSION_TOKEN");
  s.region = get("AWS_REGION");
  if (s.region.empty()) s.region = get("AWS_DEFAULT_REGION");
  s.endpoint = get("AWS_ENDPOINT_URL");
  s.credentials_source = s.access_key_id.empty() ? "none" : "environment";
  return s;
}

}  // namespace feedline::tools
