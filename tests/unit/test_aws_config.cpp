// AWS settings: the INI parser of ~/.aws/credentials and ~/.aws/config, and the precedence of the
// environment, the credentials file and the config file (as the AWS CLI applies it).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "feedline/storage/aws_config.hpp"
#include "test_support.hpp"

using feedline::Errc;
using feedline::storage::AwsSettings;
using feedline::storage::EnvLookup;
using feedline::storage::IniFile;
using feedline::storage::load_aws_settings;
using feedline::storage::parse_aws_ini;

namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// A fresh HOME with .aws/credentials and .aws/config (an empty text: no file).
struct FakeHome {
  std::filesystem::path home;
  FakeHome(const std::string& name, const std::string& credentials, const std::string& config) {
    home = feedline::testing::scratch_dir("aws-" + name);
    std::filesystem::remove_all(home);
    std::filesystem::create_directories(home / ".aws");
    if (!credentials.empty()) std::ofstream(home / ".aws/credentials") << credentials;
    if (!config.empty()) std::ofstream(home / ".aws/config") << config;
  }
  ~FakeHome() {
    std::error_code ec;
    std::filesystem::remove_all(home, ec);
  }
  FakeHome(const FakeHome&) = delete;
  FakeHome& operator=(const FakeHome&) = delete;
};

const char* kCredentials =
    "# credentials\n"
    "[default]\n"
    "aws_access_key_id = AKIDDEFAULT\n"
    "aws_secret_access_key = secret-default-123\n"
    "\n"
    "[dev]\n"
    "aws_access_key_id=AKIDDEV\n"
    "aws_secret_access_key=secret-dev-456\n"
    "aws_session_token = token-dev\n";

const char* kConfig =
    "[default]\n"
    "region = eu-west-1\n"
    "endpoint_url = http://127.0.0.1:9000\n"
    "s3 =\n"
    "    max_concurrent_requests = 20\n"
    "    addressing_style = path\n"
    "\n"
    "[profile dev]\n"
    "region = us-west-2\n"
    "\n"
    "[profile cfgonly]\n"
    "aws_access_key_id = AKIDCFG\n"
    "aws_secret_access_key = secret-cfg-789\n"
    "region = ap-south-1\n"
    "\n"
    "[sso-session corp]\n"
    "sso_region = us-east-1\n";

}  // namespace

TEST_CASE("parse_aws_ini reads sections, keys, comments and whitespace", "[aws]") {
  const std::string text =
      "\xEF\xBB\xBF# a comment\r\n"
      "; another comment\n"
      "  [default]  \n"
      "Aws_Access_Key_Id   =   AKID  \n"
      "aws_secret_access_key=abc=def==\n"
      "empty =\n"
      "colon: value: with colon\n"
      "\t# indented comment\n"
      "[profile  x ]\n"
      "region = us-east-2\r\n"
      "s3 =\n"
      "  max_concurrent_requests = 10\n"
      "  multipart_chunksize = 8MB\n"
      "after = nested\n"
      "[default]\n"
      "extra = 1";
  auto ini = parse_aws_ini(text, "/tmp/credentials");
  REQUIRE(ini);
  REQUIRE(ini->size() == 2);
  const auto& d = ini->at("default");
  CHECK(d.at("aws_access_key_id") == "AKID");
  CHECK(d.at("aws_secret_access_key") == "abc=def==");
  CHECK(d.at("empty").empty());
  CHECK(d.at("colon") == "value: with colon");
  CHECK(d.at("extra") == "1");  // a repeated section adds to the first
  const auto& x = ini->at("profile  x");
  CHECK(x.at("region") == "us-east-2");
  CHECK(x.at("s3") == "\nmax_concurrent_requests = 10\nmultipart_chunksize = 8MB");
  CHECK(x.at("after") == "nested");
  CHECK(x.count("max_concurrent_requests") == 0);
}

TEST_CASE("parse_aws_ini: keys indented alike are separate keys, not continuations", "[aws]") {
  auto ini = parse_aws_ini("[default]\n  a = 1\n  b = 2\n    c = 3\n", "f");
  REQUIRE(ini);
  CHECK(ini->at("default").at("a") == "1");
  CHECK(ini->at("default").at("b") == "2\nc = 3");
}

TEST_CASE("parse_aws_ini: empty text and comments only", "[aws]") {
  auto a = parse_aws_ini("", "f");
  REQUIRE(a);
  CHECK(a->empty());
  auto b = parse_aws_ini("# nothing\n\n   \n;x\n", "f");
  REQUIRE(b);
  CHECK(b->empty());
}

TEST_CASE("parse_aws_ini: malformed lines name the file and line, never the text", "[aws]") {
  struct Case {
    const char* text;
    const char* line;
  };
  const Case cases[] = {
      {"[default]\naws_secret_access_key SUPERSECRET\n", "line 2"},
      {"aws_secret_access_key = SUPERSECRET\n[default]\n", "line 1"},
      {"[default]\n[broken SUPERSECRET\n", "line 2"},
      {"# x\n[]\n", "line 2"},
      {"[default] SUPERSECRET\n", "line 1"},
      {"[default]\n= SUPERSECRET\n", "line 2"},
  };
  for (const auto& c : cases) {
    std::string_view text = c.text;
    INFO(text);
    auto r = parse_aws_ini(text, "/home/u/.aws/credentials");
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kInvalidArgument);
    const auto what = r.error().what();
    CHECK_THAT(what, Catch::Contains("/home/u/.aws/credentials"));
    CHECK_THAT(what, Catch::Contains(c.line));
    CHECK_THAT(what, !Catch::Contains("SUPERSECRET"));
  }
  const std::string with_nul("[default]\na = b\0SUPERSECRET\n", 28);
  auto nul = parse_aws_ini(with_nul, "f");
  REQUIRE_FALSE(nul);
  CHECK_THAT(nul.error().what(), Catch::Contains("line 2") && !Catch::Contains("SUPERSECRET"));
}

TEST_CASE("load_aws_settings: environment keys come first", "[aws]") {
  FakeHome h("env", kCredentials, kConfig);
  auto s = load_aws_settings(env_of({{"HOME", h.home.string()},
                                     {"AWS_ACCESS_KEY_ID", "AKIDENV"},
                                     {"AWS_SECRET_ACCESS_KEY", "secret-env"},
                                     {"AWS_SESSION_TOKEN", "tok-env"}}),
                             "");
  REQUIRE(s);
  CHECK(s->access_key_id == "AKIDENV");
  CHECK(s->secret_access_key == "secret-env");
  CHECK(s->session_token == "tok-env");
  CHECK(s->credentials_source == "environment");
  CHECK(s->profile == "default");
  CHECK(s->region == "eu-west-1");  // still from the config file
  CHECK(s->endpoint == "http://127.0.0.1:9000");
}

TEST_CASE("load_aws_settings: the default profile from the files", "[aws]") {
  FakeHome h("default", kCredentials, kConfig);
  auto s = load_aws_settings(env_of({{"HOME", h.home.string()}}), "");
  REQUIRE(s);
  CHECK(s->access_key_id == "AKIDDEFAULT");
  CHECK(s->secret_access_key == "secret-default-123");
  CHECK(s->session_token.empty());
  CHECK_THAT(s->credentials_source,
             Catch::Contains("profile 'default'") && Catch::Contains(".aws/credentials"));
  CHECK(s->region == "eu-west-1");
  CHECK(s->endpoint == "http://127.0.0.1:9000");
}

TEST_CASE("load_aws_settings: AWS_PROFILE and the profile argument", "[aws]") {
  FakeHome h("named", kCredentials, kConfig);
  auto by_env = load_aws_settings(env_of({{"HOME", h.home.string()}, {"AWS_PROFILE", "dev"}}), "");
  REQUIRE(by_env);
  CHECK(by_env->profile == "dev");
  CHECK(by_env->access_key_id == "AKIDDEV");
  CHECK(by_env->session_token == "token-dev");
  CHECK(by_env->region == "us-west-2");
  CHECK(by_env->endpoint.empty());  // [profile dev] has none; [default]'s does not apply

  // The argument beats AWS_PROFILE.
  auto by_arg =
      load_aws_settings(env_of({{"HOME", h.home.string()}, {"AWS_PROFILE", "dev"}}), "default");
  REQUIRE(by_arg);
  CHECK(by_arg->access_key_id == "AKIDDEFAULT");

  // A profile with keys only in the config file.
  auto cfg = load_aws_settings(env_of({{"HOME", h.home.string()}}), "cfgonly");
  REQUIRE(cfg);
  CHECK(cfg->access_key_id == "AKIDCFG");
  CHECK(cfg->secret_access_key == "secret-cfg-789");
  CHECK(cfg->region == "ap-south-1");
  CHECK_THAT(cfg->credentials_source, Catch::Contains(".aws/config"));
}

TEST_CASE("load_aws_settings: environment keys beat AWS_PROFILE, a profile argument beats them",
          "[aws]") {
  FakeHome h("envprof", kCredentials, kConfig);
  std::map<std::string, std::string> vars{{"HOME", h.home.string()},
                                          {"AWS_PROFILE", "dev"},
                                          {"AWS_ACCESS_KEY_ID", "AKIDENV"},
                                          {"AWS_SECRET_ACCESS_KEY", "secret-env"}};
  auto s = load_aws_settings(env_of(vars), "");
  REQUIRE(s);
  CHECK(s->access_key_id == "AKIDENV");
  CHECK(s->region == "us-west-2");  // the profile still gives the region
  auto explicit_profile = load_aws_settings(env_of(vars), "dev");
  REQUIRE(explicit_profile);
  CHECK(explicit_profile->access_key_id == "AKIDDEV");
  // As in botocore, a profile named explicitly takes the environment's keys out of the chain: a
  // profile without keys has no credentials (requests go unsigned), even with keys in the
  // environment.
  FakeHome h2("envprof2", "", "[profile nokeys]\nregion = sa-east-1\n");
  vars["HOME"] = h2.home.string();
  auto nokeys = load_aws_settings(env_of(vars), "nokeys");
  REQUIRE(nokeys);
  CHECK(nokeys->access_key_id.empty());
  CHECK(nokeys->credentials_source == "none");
  CHECK(nokeys->region == "sa-east-1");
}

TEST_CASE("load_aws_settings: region and endpoint precedence", "[aws]") {
  FakeHome h("region", kCredentials, kConfig);
  auto both = load_aws_settings(env_of({{"HOME", h.home.string()},
                                        {"AWS_REGION", "r-env"},
                                        {"AWS_DEFAULT_REGION", "r-default"},
                                        {"AWS_ENDPOINT_URL", "http://env:1"}}),
                                "");
  REQUIRE(both);
  CHECK(both->region == "r-env");
  CHECK(both->endpoint == "http://env:1");
  auto dflt = load_aws_settings(
      env_of({{"HOME", h.home.string()}, {"AWS_DEFAULT_REGION", "r-default"}}), "");
  REQUIRE(dflt);
  CHECK(dflt->region == "r-default");
  auto s3 = load_aws_settings(env_of({{"HOME", h.home.string()},
                                      {"AWS_ENDPOINT_URL", "http://env:1"},
                                      {"AWS_ENDPOINT_URL_S3", "http://s3:2"}}),
                              "");
  REQUIRE(s3);
  CHECK(s3->endpoint == "http://s3:2");
}

TEST_CASE("load_aws_settings: AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE move the files",
          "[aws]") {
  FakeHome h("moved", "", "");
  const auto creds = h.home / "my-creds";
  const auto conf = h.home / "my-conf";
  std::ofstream(creds) << "[ci]\naws_access_key_id = AKIDCI\naws_secret_access_key = s-ci\n";
  std::ofstream(conf) << "[profile ci]\nregion = ca-central-1\n";
  auto s = load_aws_settings(env_of({{"HOME", "/nonexistent-home"},
                                     {"AWS_SHARED_CREDENTIALS_FILE", creds.string()},
                                     {"AWS_CONFIG_FILE", conf.string()},
                                     {"AWS_PROFILE", "ci"}}),
                             "");
  REQUIRE(s);
  CHECK(s->access_key_id == "AKIDCI");
  CHECK(s->region == "ca-central-1");
  // "~/" in the variables means HOME.
  auto tilde = load_aws_settings(env_of({{"HOME", h.home.string()},
                                         {"AWS_SHARED_CREDENTIALS_FILE", "~/my-creds"},
                                         {"AWS_CONFIG_FILE", "~/my-conf"}}),
                                 "ci");
  REQUIRE(tilde);
  CHECK(tilde->access_key_id == "AKIDCI");
}

TEST_CASE("load_aws_settings: nothing configured is not an error", "[aws]") {
  FakeHome h("none", "", "");
  auto s = load_aws_settings(env_of({{"HOME", h.home.string()}}), "");
  REQUIRE(s);
  CHECK(s->access_key_id.empty());
  CHECK(s->credentials_source == "none");
  CHECK(s->region.empty());
  auto no_home = load_aws_settings(env_of({}), "");
  REQUIRE(no_home);
  CHECK(no_home->credentials_source == "none");
}

TEST_CASE("load_aws_settings: a named profile found nowhere is an error", "[aws]") {
  FakeHome h("missing", kCredentials, kConfig);
  auto by_arg = load_aws_settings(env_of({{"HOME", h.home.string()}}), "nosuch");
  REQUIRE_FALSE(by_arg);
  CHECK(by_arg.error().code() == Errc::kNotFound);
  CHECK_THAT(by_arg.error().what(), Catch::Contains("'nosuch'") && Catch::Contains("{profile}") &&
                                        Catch::Contains(".aws/credentials"));
  auto by_env =
      load_aws_settings(env_of({{"HOME", h.home.string()}, {"AWS_PROFILE", "nosuch"}}), "");
  REQUIRE_FALSE(by_env);
  CHECK_THAT(by_env.error().what(), Catch::Contains("AWS_PROFILE"));
  // "[sso-session corp]" is not a profile; "[dev]" in the config file would not be either.
  CHECK_FALSE(load_aws_settings(env_of({{"HOME", h.home.string()}}), "corp"));
}

TEST_CASE("load_aws_settings: errors never carry a secret", "[aws]") {
  SECTION("a malformed credentials file") {
    FakeHome h("malformed",
               "[default]\naws_access_key_id = AKID\naws_secret_access_key SECRETXYZ\n", "");
    auto s = load_aws_settings(env_of({{"HOME", h.home.string()}}), "");
    REQUIRE_FALSE(s);
    CHECK_THAT(s.error().what(), Catch::Contains("credentials") && Catch::Contains("line 3"));
    CHECK_THAT(s.error().what(), !Catch::Contains("SECRETXYZ"));
  }
  SECTION("half a key pair in a file") {
    FakeHome h("half", "[default]\naws_secret_access_key = SECRETXYZ\n", "");
    auto s = load_aws_settings(env_of({{"HOME", h.home.string()}}), "");
    REQUIRE_FALSE(s);
    CHECK_THAT(s.error().what(), Catch::Contains("aws_access_key_id"));
    CHECK_THAT(s.error().what(), !Catch::Contains("SECRETXYZ"));
  }
  SECTION("half a key pair in the environment") {
    FakeHome h("halfenv", "", "");
    auto s = load_aws_settings(
        env_of({{"HOME", h.home.string()}, {"AWS_SECRET_ACCESS_KEY", "SECRETXYZ"}}), "");
    REQUIRE_FALSE(s);
    CHECK_THAT(s.error().what(), Catch::Contains("AWS_ACCESS_KEY_ID"));
    CHECK_THAT(s.error().what(), !Catch::Contains("SECRETXYZ"));
  }
}

TEST_CASE("load_aws_settings: an unreadable settings file is an error", "[aws]") {
  FakeHome h("unreadable", "", "");
  std::filesystem::create_directories(h.home / ".aws/credentials");  // a directory
  auto s = load_aws_settings(env_of({{"HOME", h.home.string()}}), "");
  REQUIRE_FALSE(s);
  CHECK_THAT(s.error().what(), Catch::Contains(".aws/credentials"));
}

TEST_CASE("load_aws_settings: a settings file it may not read is kPermissionDenied", "[aws]") {
  FakeHome h2("noperm", "[default]\nregion = x\n", "");
  const auto credentials = h2.home / ".aws/credentials";
  REQUIRE(::chmod(credentials.c_str(), 0) == 0);
  if (::access(credentials.c_str(), R_OK) == 0) {
    return feedline::testing::skip_test(
        "a mode-000 file is still readable here (root, or CAP_DAC_OVERRIDE)");
  }
  auto p = load_aws_settings(env_of({{"HOME", h2.home.string()}}), "");
  REQUIRE_FALSE(p);
  CHECK(p.error().code() == Errc::kPermissionDenied);
}
