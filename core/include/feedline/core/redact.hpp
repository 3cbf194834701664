// Secrets in URLs: the forms of a URL that may be shown (messages, reports, JSON) and the secret
// substrings themselves, so that a caller can also scrub them from any text as a last line of
// defence.
//
// A URL is "scheme://authority/path?query#fragment", the authority ending at the first '/' (as
// storage::parse_url splits it). Two kinds of secret are recognised:
//  - userinfo: everything before the LAST '@' of the authority. "user:password@" keeps the user
//    name (it says which account was used, which helps with a 401) and hides the password:
//    "user:***@". A userinfo without ':' is often a token on its own
//    ("https://ghp_...@host/"): it is hidden whole, "***@". The last '@' (not the first) so that
//    an unencoded '@' in a password ("user:p@ss@host") is hidden too.
//  - the values of credential-like query parameters (see is_credential_parameter()): "name=***".
// The fragment, the path and the other parameters are kept as written. Text that does not start
// with "scheme://" (a plain path, a file name with '?' or '@' in it) is returned unchanged.
//
// Pure functions on strings: no allocation beyond the result, no locale, thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace feedline {

// True for query parameter names whose values are credentials, compared case-insensitively
// after percent-decoding. Names that CONTAIN one of
//   token, secret, passw, signature, credential
// (X-Amz-Signature, X-Amz-Credential, X-Amz-Security-Token, X-Goog-Signature, Signature,
// access_token, refresh_token, id_token, client_secret, password, passwd, ...), and these exact
// names:
//   sig (Azure SAS), key, apikey, api_key, api-key (Google and other API keys), pwd, pass, auth,
//   authorization, awsaccesskeyid (S3 query-string auth v2).
// Left out on purpose: "code" (an OAuth code is short-lived and the name is too common in
// ordinary URLs) and S3's "uploadId"/"versionId" (identifiers, not credentials). Hiding a value
// that was not secret costs nothing but a less useful message; the list errs that way.
bool is_credential_parameter(std::string_view name);

// The URL as it may be shown: userinfo and credential parameter values replaced by "***".
//   redact_url("http://user:pw@host/x")             == "http://user:***@host/x"
//   redact_url("https://tok@host/x")                == "https://***@host/x"
//   redact_url("s3://b/k?X-Amz-Signature=ab&x=1")   == "s3://b/k?X-Amz-Signature=***&x=1"
//   redact_url("/data/a@b?token=1")                 == "/data/a@b?token=1"  (a path)
std::string redact_url(std::string_view text);

// The secrets redact_url() hides, each as written in the URL and, where it differs, also
// percent-decoded ("p%40ss" and "p@ss"): the password (or a userinfo without ':' whole) and the
// values of credential parameters. Empty values are left out; duplicates appear once. However
// short a secret is, it is returned: whether a one-character password is worth scrubbing from
// every output is the caller's choice.
std::vector<std::string> url_secrets(std::string_view text);

// Secrets shorter than this are not masked: "***" in place of every "ab" would garble text and
// hide nothing worth hiding.
inline constexpr std::size_t kMinMaskedSecret = 4;
// `text` with every occurrence of each secret (of kMinMaskedSecret bytes or more) replaced by
// "***": the last line of defence of a front end's output.
std::string mask_secrets(std::string_view text, const std::vector<std::string>& secrets);

// The authority "user:password@host:port" split for a client that sends credentials itself
// (never in the URL): user and password percent-decoded, host as written. has_userinfo is false
// (and user and password empty) when there is no '@'.
struct UrlUserinfo {
  bool has_userinfo = false;
  bool has_password = false;  // a ':' in the userinfo (the password may still be empty)
  std::string user;
  std::string password;
  std::string host;  // "host[:port]"
};
UrlUserinfo split_userinfo(std::string_view authority);

// "%41b+c" -> "Ab+c": %XX sequences decoded ('+' kept, as in paths and userinfo); a '%' not
// followed by two hex digits is kept as is.
std::string percent_decode(std::string_view text);

}  // namespace feedline
