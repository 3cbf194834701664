#include "feedline/storage/aws_config.hpp"

#include <sys/stat.h>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace feedline::storage {

namespace {

constexpr std::string_view kSpace = " \t\r\f\v";

std::string_view trim(std::string_view s) {
  auto b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  auto e = s.find_last_not_of(kSpace);
  return s.substr(b, e - b + 1);
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

Error ini_error(std::string_view file_name, std::size_t line, std::string_view what) {
  // Never quote the line itself: it may hold a secret key.
  return Error(Errc::kInvalidArgument, fmt::format("line {}: {}", line, what))
      .with_object(std::string(file_name))
      .with_hint("fix the file, or point AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE elsewhere");
}

}  // namespace

// The AWS tools read these files with Python's configparser: "[section]" headers, "key = value"
// or "key: value" (the first '=' or ':' splits), keys case-insensitive, full-line '#'/';' comments,
// and indented lines continue the previous value (that is how nested "s3 =" settings are written).
Result<IniFile> parse_aws_ini(std::string_view text, std::string_view file_name) {
  IniFile ini;
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // UTF-8 BOM
  std::map<std::string, std::string>* section = nullptr;
  std::string* last_value = nullptr;  // the value a more indented line continues
  std::size_t last_indent = 0;        // the indentation of that value's key
  std::size_t line_no = 0;
  while (!text.empty() || line_no == 0) {
    ++line_no;
    auto nl = text.find('\n');
    std::string_view raw = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (raw.find('\0') != std::string_view::npos) {
      return fail(ini_error(file_name, line_no, "a NUL byte: this is not a text file"));
    }
    std::string_view line = trim(raw);
    if (line.empty()) {
      if (text.empty()) break;
      continue;
    }
    if (line.front() == '#' || line.front() == ';') continue;
    const std::size_t indent = raw.find_first_not_of(kSpace);
    if (last_value != nullptr && indent > last_indent) {
      // A continuation line, e.g. "  max_concurrent_requests = 20" under "s3 =": kept in the
      // parent's value, one line each.
      last_value->push_back('\n');
      last_value->append(line);
      continue;
    }
    if (line.front() == '[') {
      auto close = line.find(']');
      if (close == std::string_view::npos) {
        return fail(ini_error(file_name, line_no, "a section header without its closing ']'"));
      }
      auto rest = trim(line.substr(close + 1));
      if (!rest.empty() && rest.front() != '#' && rest.front() != ';') {
        return fail(ini_error(file_name, line_no, "text after a section header's ']'"));
      }
      auto name = trim(line.substr(1, close - 1));
      if (name.empty()) return fail(ini_error(file_name, line_no, "an empty section name '[]'"));
      section = &ini[std::string(name)];  // a repeated section adds to the first
      last_value = nullptr;
      continue;
    }
    auto delim = line.find_first_of("=:");
    if (delim == std::string_view::npos) {
      return fail(ini_error(file_name, line_no,
                            "expected 'key = value', a '[section]' header or a comment"));
    }
    auto key = trim(line.substr(0, delim));
    if (key.empty()) return fail(ini_error(file_name, line_no, "a value without a key"));
    if (section == nullptr) {
      return fail(ini_error(file_name, line_no, "a setting before the first '[section]' header"));
    }
    auto& slot = (*section)[lower(key)];
    slot = std::string(trim(line.substr(delim + 1)));
    last_value = &slot;
    last_indent = indent;
  }
  return ini;
}

namespace {

struct LoadedFile {
  std::string path;
  IniFile ini;
  bool present = false;
};

// "~/x" -> "$HOME/x" (the AWS tools expand '~' in AWS_CONFIG_FILE and friends).
std::optional<std::string> expand_home(const std::string& path, const EnvLookup& env) {
  if (path == "~" || path.starts_with("~/")) {
    auto home = env("HOME");
    if (!home || home->empty()) return std::nullopt;
    return *home + path.substr(1);
  }
  return path;
}

// The file named by OVERRIDE_VAR, else $HOME/.aws/DEFAULT_NAME; no HOME: no file.
std::optional<std::string> aws_file_path(const EnvLookup& env, const char* override_var,
                                         const char* default_name) {
  if (auto p = env(override_var); p && !p->empty()) return expand_home(*p, env);
  auto home = env("HOME");
  if (!home || home->empty()) return std::nullopt;
  std::string dir = *home;
  if (!dir.ends_with('/')) dir += '/';
  return dir + ".aws/" + default_name;
}

Result<LoadedFile> load_file(std::optional<std::string> path) {
  LoadedFile f;
  if (!path) return f;
  f.path = *path;
  struct stat st {};
  if (::stat(path->c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return f;  // no file: nothing configured there
    return fail(Error::from_errno(errno, "cannot read the AWS settings file").with_object(*path));
  }
  if (S_ISDIR(st.st_mode)) {
    return fail(
        Error(Errc::kIsDirectory, "the AWS settings file is a directory").with_object(*path));
  }
  std::ifstream in(*path, std::ios::binary);
  if (!in) {
    return fail(Error::from_errno(errno != 0 ? errno : EACCES, "cannot read the AWS settings file")
                    .with_object(*path));
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad())
    return fail(Error(Errc::kIo, "cannot read the AWS settings file").with_object(*path));
  auto ini = parse_aws_ini(buf.str(), *path);
  if (!ini) return fail(std::move(ini).error());
  f.ini = std::move(*ini);
  f.present = true;
  return f;
}

const std::map<std::string, std::string>* find_section(const IniFile& ini,
                                                       const std::string& name) {
  auto it = ini.find(name);
  return it == ini.end() ? nullptr : &it->second;
}

// A profile's section: "[name]" in the credentials file; "[profile name]" in the config file,
// where the default profile may also be "[default]" (and botocore accepts "[profile default]").
const std::map<std::string, std::string>* config_section(const IniFile& ini,
                                                         const std::string& profile) {
  for (const auto& [section, values] : ini) {
    std::string_view s = section;
    if (s.starts_with("profile") && s.size() > 7 && kSpace.find(s[7]) != std::string_view::npos) {
      if (trim(s.substr(7)) == profile) return &values;
    }
  }
  if (profile == "default") return find_section(ini, "default");
  return nullptr;
}

std::string value_of(const std::map<std::string, std::string>* section, const char* key) {
  if (section == nullptr) return {};
  auto it = section->find(key);
  return it == section->end() ? std::string{} : std::string(trim(it->second));
}

// Keys from one section: both or neither (a lone half is an error naming the key that is missing,
// never the value that is there).
Result<bool> take_keys(const std::map<std::string, std::string>* section, const std::string& where,
                       AwsSettings& s) {
  auto id = value_of(section, "aws_access_key_id");
  auto secret = value_of(section, "aws_secret_access_key");
  if (id.empty() && secret.empty()) return false;
  if (id.empty() || secret.empty()) {
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("{} has {} but no {}", where,
                                  id.empty() ? "aws_secret_access_key" : "aws_access_key_id",
                                  id.empty() ? "aws_access_key_id" : "aws_secret_access_key"))
                    .with_hint("add the missing key, or remove the other"));
  }
  s.access_key_id = std::move(id);
  s.secret_access_key = std::move(secret);
  s.session_token = value_of(section, "aws_session_token");
  s.credentials_source = where;
  return true;
}

}  // namespace

Result<AwsSettings> load_aws_settings(const EnvLookup& env, std::string_view profile_arg) {
  auto get = [&env](const char* name) {
    auto v = env(name);
    return v ? *v : std::string{};
  };
  AwsSettings s;
  const bool explicit_arg = !profile_arg.empty();
  std::string profile(profile_arg);
  if (profile.empty()) profile = get("AWS_PROFILE");
  if (profile.empty()) profile = "default";
  s.profile = profile;

  auto creds_file = load_file(aws_file_path(env, "AWS_SHARED_CREDENTIALS_FILE", "credentials"));
  if (!creds_file) return fail(std::move(creds_file).error());
  auto config_file = load_file(aws_file_path(env, "AWS_CONFIG_FILE", "config"));
  if (!config_file) return fail(std::move(config_file).error());

  const auto* creds_section = find_section(creds_file->ini, profile);
  const auto* config_sec = config_section(config_file->ini, profile);
  if (profile != "default" && creds_section == nullptr && config_sec == nullptr) {
    std::string looked;
    if (creds_file->path.empty() && config_file->path.empty()) {
      looked = "no AWS settings files (HOME is not set)";
    } else {
      looked =
          fmt::format("{} ({}) and {} ({})",
                      creds_file->path.empty() ? "no credentials file" : creds_file->path,
                      creds_file->present ? fmt::format("no [{}]", profile) : "missing",
                      config_file->path.empty() ? "no config file" : config_file->path,
                      config_file->present ? fmt::format("no [profile {}]", profile) : "missing");
    }
    return fail(
        Error(Errc::kNotFound,
              fmt::format("the AWS profile '{}' is not configured: looked in {}", profile, looked))
            .with_hint(explicit_arg ? "check {profile}" : "check AWS_PROFILE"));
  }

  // Credentials: environment, then the credentials file, then the config file. As in the AWS CLI
  // and SDKs, a profile named explicitly (--profile, not AWS_PROFILE) takes precedence over the
  // environment's keys.
  bool found = false;
  if (!explicit_arg) {
    auto id = get("AWS_ACCESS_KEY_ID");
    auto secret = get("AWS_SECRET_ACCESS_KEY");
    if (!id.empty() || !secret.empty()) {
      if (id.empty() || secret.empty()) {
        return fail(Error(Errc::kInvalidArgument,
                          fmt::format("{} is set in the environment but {} is not",
                                      id.empty() ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID",
                                      id.empty() ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY"))
                        .with_hint("set both, or unset both to use the AWS profile"));
      }
      s.access_key_id = std::move(id);
      s.secret_access_key = std::move(secret);
      s.session_token = get("AWS_SESSION_TOKEN");
      s.credentials_source = "environment";
      found = true;
    }
  }
  if (!found) {
    auto r =
        take_keys(creds_section, fmt::format("profile '{}' in {}", profile, creds_file->path), s);
    if (!r) return fail(std::move(r).error());
    found = *r;
  }
  if (!found) {
    auto r =
        take_keys(config_sec, fmt::format("profile '{}' in {}", profile, config_file->path), s);
    if (!r) return fail(std::move(r).error());
    found = *r;
  }
  if (!found) s.credentials_source = "none";

  s.region = get("AWS_REGION");
  if (s.region.empty()) s.region = get("AWS_DEFAULT_REGION");
  if (s.region.empty()) s.region = value_of(config_sec, "region");

  s.endpoint = get("AWS_ENDPOINT_URL_S3");
  if (s.endpoint.empty()) s.endpoint = get("AWS_ENDPOINT_URL");
  if (s.endpoint.empty()) s.endpoint = value_of(config_sec, "endpoint_url");
  return s;
}

}  // namespace feedline::storage
