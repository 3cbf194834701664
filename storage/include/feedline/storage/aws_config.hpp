// AWS settings the way the AWS CLI and SDKs find them: environment variables first
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION / AWS_DEFAULT_REGION,
// AWS_ENDPOINT_URL, AWS_PROFILE), then the profile's entries in ~/.aws/credentials and
// ~/.aws/config (AWS_SHARED_CREDENTIALS_FILE / AWS_CONFIG_FILE move them). The library never reads
// the process's environment itself: the front end (the CLI, the Python module) passes it as an
// EnvLookup. The result fills S3Config (the run plan does: feedline/loader/run_plan.hpp).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "feedline/core/error.hpp"

namespace feedline::storage {

struct AwsSettings {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  std::string region;
  std::string endpoint;
  std::string profile;  // the profile whose settings were read ("default" when none was named)
  std::string credentials_source;  // "environment", "profile 'x' in /root/.aws/credentials", "none"
};

// Looks up one environment variable (std::getenv in a front end, a map in tests).
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;

// An INI file as the AWS tools read it: [section] headers ("[profile x]" in config files),
// key = value lines, '#'/';' comments. Sections map to key -> value.
using IniFile = std::map<std::string, std::map<std::string, std::string>, std::less<>>;
Result<IniFile> parse_aws_ini(std::string_view text, std::string_view file_name);

// profile: --profile if given, else AWS_PROFILE, else "default". A missing file is not an error;
// an unreadable or malformed one is, and so is a named profile that exists nowhere.
// Precedence, as in the AWS CLI: credentials from AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY
// (+ AWS_SESSION_TOKEN), then the profile in the credentials file, then in the config file (a
// profile passed as the argument, like --profile, skips the environment's keys); region from
// AWS_REGION, AWS_DEFAULT_REGION, then the profile's `region`; endpoint from AWS_ENDPOINT_URL_S3,
// AWS_ENDPOINT_URL, then the profile's `endpoint_url`. Files: AWS_SHARED_CREDENTIALS_FILE /
// AWS_CONFIG_FILE, else $HOME/.aws/{credentials,config}, all looked up through `env`.
// No error message ever contains a secret.
Result<AwsSettings> load_aws_settings(const EnvLookup& env, std::string_view profile);

}  // namespace feedline::storage
