#include "feedline/core/redact.hpp"

#include <algorithm>
#include <array>
#include <cctype>

#include "feedline/core/text.hpp"

namespace feedline {
namespace {

constexpr std::string_view kHidden = "***";

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The parts of a URL redaction looks at, as offsets into the text. npos where absent.
struct Parts {
  bool url = false;                            // starts with "scheme://"
  std::size_t authority = 0;                   // first character after "://"
  std::size_t at = std::string_view::npos;     // the last '@' of the authority
  std::size_t query = std::string_view::npos;  // the '?' that starts the query
  std::size_t query_end = 0;                   // the '#' of the fragment, or the end
};

Parts split(std::string_view text) {
  Parts p;
  const std::size_t sep = text.find("://");
  if (sep == std::string_view::npos || sep == 0) return p;
  if (!std::isalpha(static_cast<unsigned char>(text[0]))) return p;
  for (std::size_t i = 1; i < sep; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (!std::isalnum(c) && c != '+' && c != '-' && c != '.') return p;
  }
  p.url = true;
  p.authority = sep + 3;
  const std::size_t slash = text.find('/', p.authority);
  const std::string_view authority = text.substr(
      p.authority, slash == std::string_view::npos ? std::string_view::npos : slash - p.authority);
  if (const std::size_t at = authority.rfind('@'); at != std::string_view::npos)
    p.at = p.authority + at;
  const std::size_t after = p.at == std::string_view::npos ? p.authority : p.at + 1;
  const std::size_t hash = text.find('#', after);
  p.query_end = hash == std::string_view::npos ? text.size() : hash;
  const std::size_t q = text.find('?', after);
  if (q != std::string_view::npos && q < p.query_end) p.query = q;
  return p;
}

// Calls fn(name_begin, value_begin, value_end) for each "name=value" of the query in [begin, end).
template <typename Fn>
void each_parameter(std::string_view text, std::size_t begin, std::size_t end, Fn&& fn) {
  std::size_t pos = begin;
  while (pos < end) {
    std::size_t amp = text.find('&', pos);
    if (amp == std::string_view::npos || amp > end) amp = end;
    const std::size_t eq = text.find('=', pos);
    if (eq != std::string_view::npos && eq < amp) fn(pos, eq + 1, amp);
    pos = amp + 1;
  }
}

void add_secret(std::vector<std::string>& out, std::string_view raw) {
  if (raw.empty()) return;
  auto add = [&out](std::string s) {
    if (!s.empty() && std::find(out.begin(), out.end(), s) == out.end())
      out.push_back(std::move(s));
  };
  add(std::string(raw));
  add(percent_decode(raw));
}

}  // namespace

std::string percent_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      const int hi = hex_value(text[i + 1]), lo = hex_value(text[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

bool is_credential_parameter(std::string_view name) {
  const std::string n = ascii_lower(percent_decode(name));
  if (n.empty()) return false;
  static constexpr std::array<std::string_view, 5> kContains = {"token", "secret", "passw",
                                                                "signature", "credential"};
  for (std::string_view c : kContains) {
    if (n.find(c) != std::string::npos) return true;
  }
  static constexpr std::array<std::string_view, 10> kExact = {
      "sig", "key",  "apikey", "api_key",       "api-key",
      "pwd", "pass", "auth",   "authorization", "awsaccesskeyid"};
  return std::find(kExact.begin(), kExact.end(), n) != kExact.end();
}

std::string redact_url(std::string_view text) {
  const Parts p = split(text);
  if (!p.url) return std::string(text);
  std::string out;
  out.reserve(text.size());
  std::size_t pos = 0;
  if (p.at != std::string_view::npos) {
    const std::string_view userinfo = text.substr(p.authority, p.at - p.authority);
    out.append(text.substr(0, p.authority));
    if (const std::size_t colon = userinfo.find(':'); colon != std::string_view::npos) {
      out.append(userinfo.substr(0, colon + 1));
    }
    out.append(kHidden);
    pos = p.at;  // from the '@' on
  }
  if (p.query == std::string_view::npos) {
    out.append(text.substr(pos));
    return out;
  }
  out.append(text.substr(pos, p.query + 1 - pos));
  pos = p.query + 1;
  each_parameter(
      text, p.query + 1, p.query_end, [&](std::size_t name, std::size_t value, std::size_t end) {
        if (value == end || !is_credential_parameter(text.substr(name, value - 1 - name))) return;
        out.append(text.substr(pos, value - pos));
        out.append(kHidden);
        pos = end;
      });
  out.append(text.substr(pos));
  return out;
}

std::vector<std::string> url_secrets(std::string_view text) {
  std::vector<std::string> out;
  const Parts p = split(text);
  if (!p.url) return out;
  if (p.at != std::string_view::npos) {
    const std::string_view userinfo = text.substr(p.authority, p.at - p.authority);
    const std::size_t colon = userinfo.find(':');
    add_secret(out, colon == std::string_view::npos ? userinfo : userinfo.substr(colon + 1));
  }
  if (p.query != std::string_view::npos) {
    each_parameter(text, p.query + 1, p.query_end,
                   [&](std::size_t name, std::size_t value, std::size_t end) {
                     if (is_credential_parameter(text.substr(name, value - 1 - name)))
                       add_secret(out, text.substr(value, end - value));
                   });
  }
  return out;
}

UrlUserinfo split_userinfo(std::string_view authority) {
  UrlUserinfo u;
  const std::size_t at = authority.rfind('@');
  if (at == std::string_view::npos) {
    u.host = std::string(authority);
    return u;
  }
  u.has_userinfo = true;
  const std::string_view userinfo = authority.substr(0, at);
  const std::size_t colon = userinfo.find(':');
  u.has_password = colon != std::string_view::npos;
  u.user = percent_decode(userinfo.substr(0, colon));
  if (u.has_password) u.password = percent_decode(userinfo.substr(colon + 1));
  u.host = std::string(authority.substr(at + 1));
  return u;
}

std::string mask_secrets(std::string_view text, const std::vector<std::string>& secrets) {
  std::string out(text);
  for (const std::string& secret : secrets) {
    if (secret.size() < kMinMaskedSecret) continue;
    for (std::size_t at = out.find(secret); at != std::string::npos;
         at = out.find(secret, at + 3)) {
      out.replace(at, secret.size(), "***");
    }
  }
  return out;
}

}  // namespace feedline
