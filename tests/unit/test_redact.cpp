// Secrets in URLs (core/redact.hpp): what may be shown of a URL, and the secrets themselves for
// scrubbing any output. Many shapes: no userinfo, a user alone, user:password, '@' in the
// password or the path, percent-encoding, several query parameters, fragments, s3:// and nfs://,
// plain paths (never touched).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "feedline/core/redact.hpp"

using namespace feedline;

namespace {

using Strings = std::vector<std::string>;

struct Case {
  const char* text;
  const char* shown;
  Strings secrets;
};

}  // namespace

TEST_CASE("redact_url hides userinfo and credential parameters; url_secrets names them",
          "[redact]") {
  const std::vector<Case> cases = {
      // No secret at all: unchanged.
      {"http://host/x", "http://host/x", {}},
      {"https://host:8443/a/b.tar?x=1&y=2#top", "https://host:8443/a/b.tar?x=1&y=2#top", {}},
      {"http://host", "http://host", {}},
      // Userinfo: a user alone is hidden whole (often a token), user:password keeps the user.
      {"http://user@host/x", "http://***@host/x", {"user"}},
      {"https://ghp_abcdef123@github.example/x", "https://***@github.example/x", {"ghp_abcdef123"}},
      {"http://user:pass@host/x", "http://user:***@host/x", {"pass"}},
      {"http://user:pass@host", "http://user:***@host", {"pass"}},
      {"http://user:pass@host:8080/dir/", "http://user:***@host:8080/dir/", {"pass"}},
      {"http://user:@host/x", "http://user:***@host/x", {}},
      {"http://:pass@host/x", "http://:***@host/x", {"pass"}},
      // An unencoded '@' in the password: the last '@' of the authority ends the userinfo.
      {"http://user:p@ss@host/x", "http://user:***@host/x", {"p@ss"}},
      // Percent-encoded: both the written and the decoded form are secrets.
      {"http://user:p%40ss%3Aw@host/x", "http://user:***@host/x", {"p%40ss%3Aw", "p@ss:w"}},
      // '@' in the path or the query is not userinfo.
      {"http://host/a@b/c.tar", "http://host/a@b/c.tar", {}},
      {"http://host/x?mail=a@b", "http://host/x?mail=a@b", {}},
      {"http://user:pw@host/a@b", "http://user:***@host/a@b", {"pw"}},
      // Query parameters: only the credential ones, case-insensitively, the rest kept in order.
      {"https://bucket.s3.amazonaws.com/"
       "k.tar?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAX%2F20240101%2Fus-east-1"
       "&X-Amz-Date=20240101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature="
       "deadbeef01",
       "https://bucket.s3.amazonaws.com/k.tar?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=***"
       "&X-Amz-Date=20240101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature=**"
       "*",
       {"AKIAX%2F20240101%2Fus-east-1", "AKIAX/20240101/us-east-1", "deadbeef01"}},
      {"http://h/x?token=abc&a=1&SIG=zz&Key=kk",
       "http://h/x?token=***&a=1&SIG=***&Key=***",
       {"abc", "zz", "kk"}},
      {"http://h/x?access_token=t1&client_secret=s1&password=p1&apikey=a1",
       "http://h/x?access_token=***&client_secret=***&password=***&apikey=***",
       {"t1", "s1", "p1", "a1"}},
      {"http://h/x?AWSAccessKeyId=AKIA1&Expires=1&Signature=c2ln",
       "http://h/x?AWSAccessKeyId=***&Expires=1&Signature=***",
       {"AKIA1", "c2ln"}},
      // A percent-encoded parameter name is still recognised.
      {"http://h/x?X%2DAmz%2DSignature=ab12", "http://h/x?X%2DAmz%2DSignature=***", {"ab12"}},
      // No value, or an empty one: nothing to hide.
      {"http://h/x?token&sig=", "http://h/x?token&sig=", {}},
      // Fragments: a query ends there; a '?' inside the fragment is no query.
      {"http://h/x?sig=abc#frag", "http://h/x?sig=***#frag", {"abc"}},
      {"http://h/x#?token=abc", "http://h/x#?token=abc", {}},
      // Userinfo and query together; a query right after the authority.
      {"http://u:pw@h?token=tok9#f", "http://u:***@h?token=***#f", {"pw", "tok9"}},
      {"http://u:pw@h/x?a=1&token=tok9", "http://u:***@h/x?a=1&token=***", {"pw", "tok9"}},
      // The same value twice is one secret.
      {"http://u:same@h/x?token=same", "http://u:***@h/x?token=***", {"same"}},
      // s3:// and nfs:// go through the same rules.
      {"s3://bucket/prefix/k.tar", "s3://bucket/prefix/k.tar", {}},
      {"s3://bucket/k?X-Amz-Security-Token=FQoG%2Bz",
       "s3://bucket/k?X-Amz-Security-Token=***",
       {"FQoG%2Bz", "FQoG+z"}},
      {"nfs://10.0.0.1/export/ds/?version=4&nfsport=2049&uid=1000&gid=1000",
       "nfs://10.0.0.1/export/ds/?version=4&nfsport=2049&uid=1000&gid=1000",
       {}},
      {"nfs://root:pw@filer/export", "nfs://root:***@filer/export", {"pw"}},
      {"HTTP://User:Pw@Host/X", "HTTP://User:***@Host/X", {"Pw"}},
      // Plain paths and things that are not "scheme://": unchanged, no secrets.
      {"/data/user:pass@host/x?token=abc", "/data/user:pass@host/x?token=abc", {}},
      {"relative/dir?sig=1", "relative/dir?sig=1", {}},
      {"user:pass@host:/export", "user:pass@host:/export", {}},
      {"1http://user:pass@host/x", "1http://user:pass@host/x", {}},
      {"://user:pass@host/x", "://user:pass@host/x", {}},
      {"", "", {}},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    CHECK(redact_url(c.text) == c.shown);
    CHECK(url_secrets(c.text) == c.secrets);
    // Whatever the shape, the shown form holds none of the secrets.
    for (const std::string& s : url_secrets(c.text))
      CHECK(redact_url(c.text).find(s) == std::string::npos);
  }
}

TEST_CASE("redact_url is idempotent and keeps URLs with nothing secret byte for byte", "[redact]") {
  for (const char* text :
       {"http://u:pw@h/x?token=t&a=1#f", "https://h/a%20b/{000..009}.tar", "s3://b/p/"}) {
    INFO(text);
    const std::string once = redact_url(text);
    CHECK(redact_url(once) == once);
  }
  CHECK(redact_url("https://h/train-{000000..000127}.tar") ==
        "https://h/train-{000000..000127}.tar");
}

TEST_CASE("credential parameter names: the documented list, case-insensitive", "[redact]") {
  for (const char* name : {"X-Amz-Signature",
                           "x-amz-credential",
                           "X-Amz-Security-Token",
                           "X-Goog-Signature",
                           "X-Goog-Credential",
                           "Signature",
                           "sig",
                           "SIG",
                           "token",
                           "access_token",
                           "refresh_token",
                           "id_token",
                           "sessionToken",
                           "password",
                           "passwd",
                           "pwd",
                           "pass",
                           "secret",
                           "client_secret",
                           "key",
                           "apikey",
                           "api_key",
                           "api-key",
                           "AWSAccessKeyId",
                           "auth",
                           "Authorization"}) {
    INFO(name);
    CHECK(is_credential_parameter(name));
  }
  for (const char* name : {"X-Amz-Date", "X-Amz-Expires", "X-Amz-Algorithm", "X-Amz-SignedHeaders",
                           "Expires", "prefix", "list-type", "uploadId", "partNumber", "versionId",
                           "version", "nfsport", "uid", "code", "keys", "monkey", "", "x"}) {
    INFO(name);
    CHECK_FALSE(is_credential_parameter(name));
  }
}

TEST_CASE("split_userinfo: credentials decoded for the client, the host as written", "[redact]") {
  auto plain = split_userinfo("host:8080");
  CHECK_FALSE(plain.has_userinfo);
  CHECK(plain.host == "host:8080");
  CHECK(plain.user.empty());

  auto both = split_userinfo("us%65r:p%3Aw%40d@127.0.0.1:80");
  CHECK(both.has_userinfo);
  CHECK(both.has_password);
  CHECK(both.user == "user");
  CHECK(both.password == "p:w@d");
  CHECK(both.host == "127.0.0.1:80");

  auto at_in_password = split_userinfo("u:p@ss@h");
  CHECK(at_in_password.user == "u");
  CHECK(at_in_password.password == "p@ss");
  CHECK(at_in_password.host == "h");

  auto user_only = split_userinfo("tok@h");
  CHECK(user_only.has_userinfo);
  CHECK_FALSE(user_only.has_password);
  CHECK(user_only.user == "tok");
  CHECK(user_only.host == "h");

  auto empty_password = split_userinfo("u:@h");
  CHECK(empty_password.has_password);
  CHECK(empty_password.password.empty());
}

TEST_CASE("percent_decode: %XX decoded, anything else kept", "[redact]") {
  CHECK(percent_decode("a%41%62c") == "aAbc");
  CHECK(percent_decode("100%") == "100%");
  CHECK(percent_decode("%4") == "%4");
  CHECK(percent_decode("%zz%2") == "%zz%2");
  CHECK(percent_decode("a+b") == "a+b");
  CHECK(percent_decode("%00x").size() == 2);
}
