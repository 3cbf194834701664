#include "feedline/storage/registry.hpp"

#include <fmt/format.h>

#include "feedline/core/redact.hpp"
#include "file/file_backend.hpp"
#if FEEDLINE_HAVE_HTTP
#include "http/object_store.hpp"
#endif
#include "mem/mem_backend.hpp"
#if FEEDLINE_HAVE_NFS
#include "nfs/nfs_backend.hpp"
#endif

namespace feedline::storage {

Result<ParsedUrl> parse_url(std::string_view text) {
  ParsedUrl url;
  url.text = std::string(text);
  if (text.empty()) return fail(Errc::kInvalidArgument, "empty URL or path");
  const auto sep = text.find("://");
  // A plain path: no "scheme://", or something before "://" that is not a scheme name.
  auto is_scheme = [](std::string_view s) {
    if (s.empty() || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
    for (char c : s) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.')
        return false;
    }
    return true;
  };
  if (sep == std::string_view::npos || !is_scheme(text.substr(0, sep))) {
    url.scheme = "file";
    url.path = std::string(text);
    return url;
  }
  url.scheme = std::string(text.substr(0, sep));
  for (char& c : url.scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string_view rest = text.substr(sep + 3);
  const auto slash = rest.find('/');
  url.authority = std::string(rest.substr(0, slash));
  url.path = slash == std::string_view::npos ? "" : std::string(rest.substr(slash));
  return url;
}

void Registry::add(std::string scheme, Opener opener) {
  unavailable_.erase(scheme);
  openers_[std::move(scheme)] = std::move(opener);
}

void Registry::add_unavailable(std::string scheme, std::string reason) {
  if (!openers_.contains(scheme)) unavailable_[std::move(scheme)] = std::move(reason);
}

std::vector<std::string> Registry::schemes() const {
  std::vector<std::string> out;
  for (const auto& [s, _] : openers_) out.push_back(s);
  return out;
}

Result<Resolved> Registry::open(std::string_view text, const BackendConfig& config) const {
  FEEDLINE_ASSIGN_OR_RETURN(ParsedUrl url, parse_url(text));
  if (auto it = openers_.find(url.scheme); it != openers_.end()) return it->second(url, config);
  if (auto it = unavailable_.find(url.scheme); it != unavailable_.end()) {
    return fail(
        Error(Errc::kUnsupported, fmt::format("the '{}' scheme is not available in this build: {}",
                                              url.scheme, it->second))
            .with_object(redact_url(url.text)));
  }
  return fail(Error(Errc::kInvalidArgument, fmt::format("unknown URL scheme '{}'", url.scheme))
                  .with_object(redact_url(url.text))
                  .with_hint(fmt::format("supported: {}:// or a plain path",
                                         fmt::join(schemes(), "://, "))));
}

void register_builtin_backends(Registry& registry) {
  registry.add("file", detail::open_file_url);
  registry.add("mem", detail::open_mem_url);
#if FEEDLINE_HAVE_HTTP
  registry.add("s3", detail::open_s3_url);
  registry.add("http", detail::open_http_url);
  registry.add("https", detail::open_http_url);
#else
  for (const char* s : {"s3", "http", "https"}) {
    registry.add_unavailable(s, "built without the HTTP object-store backend (libcurl)");
  }
#endif
#if FEEDLINE_HAVE_NFS
  registry.add("nfs", detail::open_nfs_url);
#else
  registry.add_unavailable("nfs", "built without the NFS backend (libnfs)");
#endif
}

}  // namespace feedline::storage
