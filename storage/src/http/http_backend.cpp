// http(s)://host[:port]/path: any server with Range support (nginx, a CDN). HTTP has no listing:
// datasets name their objects with brace notation, or, where the server lists directories as
// JSON (nginx: autoindex on; autoindex_format json), a directory URL ending in '/' lists them,
// and a brace list takes its sizes from its directory's listing instead of a HEAD per object.
// Writes are HTTP PUTs (WebDAV servers accept them).
//
// Credentials in the URL (http://user:password@host/...) are split off when the URL is opened:
// curl sends them as HTTP Basic authentication (HttpClientOptions::basic_auth), the URLs given to
// curl carry the host alone, and every name shown (display_name, errors) is the URL as the user
// wrote it through redact_url: "http://user:***@host/path" (the user says which account a 401 is
// about), a presigned URL's signature or a token parameter hidden too.
#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <unordered_map>

#include "feedline/core/redact.hpp"
#include "feedline/storage/autoindex.hpp"
#include "listing.hpp"
#include "object_store.hpp"

namespace feedline::storage::detail {
namespace {

using transports::HttpClient;
using transports::HttpRequest;
using transports::HttpResponse;

class HttpBackend;

class PutWriter final : public ObjectWriter {
 public:
  PutWriter(HttpBackend& backend, std::string key) : backend_(backend), key_(std::move(key)) {}
  Result<void> append(ConstBytes data) override {
    buf_.insert(buf_.end(), data.begin(), data.end());
    return {};
  }
  Result<void> commit() override;

 private:
  HttpBackend& backend_;
  std::string key_;
  std::vector<std::byte> buf_;
};

class HttpBackend final : public ObjectStore {
 public:
  // authority: host[:port], without userinfo (credentials come as basic_auth); shown_base:
  // "scheme://[user:***@]host[:port]", the start of every name shown.
  HttpBackend(std::string scheme, std::string authority, std::string shown_base, HttpConfig http,
              std::stop_token stop, std::optional<transports::BasicAuth> basic_auth)
      : ObjectStore(std::move(http), std::nullopt, std::move(stop), std::move(basic_auth)),
        scheme_(std::move(scheme)),
        authority_(std::move(authority)),
        shown_base_(std::move(shown_base)) {}

  std::string_view scheme() const noexcept override { return scheme_; }

  // A directory (a prefix ending in '/') and every directory below it, through the server's JSON
  // directory listings; keys come back sorted, names percent-encoded.
  Result<std::vector<ObjectInfo>> list(std::string_view prefix) override {
    auto no_listing = [&](std::string why) {
      return fail(Error(Errc::kUnsupported, std::move(why))
                      .with_object(shown(prefix))
                      .with_hint(fmt::format(
                          "name the objects with brace notation, e.g. "
                          "{}://{}/train-{{000000..000127}}.tar, "
                          "or serve the directory with a JSON listing (nginx: autoindex on; "
                          "autoindex_format json;) and end the URL with '/'",
                          scheme_, authority_)));
    };
    if (!prefix.ends_with('/')) return no_listing("plain HTTP servers have no listing");
    ListingBudget budget(shown(prefix),
                         "point the URL at a directory lower down, name the objects with brace "
                         "notation, or pack small files into tar shards",
                         http_config().max_listing_bytes);
    std::vector<ObjectInfo> out;
    struct Dir {
      std::string key;
      unsigned depth;
    };
    std::deque<Dir> dirs{Dir{std::string(prefix), 0}};
    std::size_t visited = 0;
    while (!dirs.empty()) {
      const Dir d = std::move(dirs.front());
      const std::string& dir = d.key;
      dirs.pop_front();
      if (++visited > kMaxListedDirectories || d.depth > kMaxListedDepth) {
        return fail(
            Error(Errc::kResourceExhausted,
                  fmt::format(
                      "more than {} directories, or deeper than {}, under the dataset root (a "
                      "symbolic link that loops?)",
                      kMaxListedDirectories, kMaxListedDepth))
                .with_object(shown(dir))
                .with_hint("point the URL at a directory lower down, or name the objects with "
                           "brace notation"));
      }
      FEEDLINE_ASSIGN_OR_RETURN(auto listing, fetch_listing(dir, /*look_first=*/visited == 1));
      if (!listing) {
        if (visited == 1)
          return no_listing("the server answered the directory URL without a JSON listing");
        return fail(
            Error(Errc::kCorrupt, "the server answered a directory URL without a JSON listing")
                .with_object(shown(dir)));
      }
      for (const autoindex::Entry& e : *listing) {
        if (e.unsafe) {
          // A name that is no path segment of this directory ("..", "../../x", a URL): never
          // requested, said (the name as the server gave it).
          ObjectInfo refused{dir + e.name, 0};
          refused.outside = true;
          FEEDLINE_TRY(budget.add(refused));
          out.push_back(std::move(refused));
          continue;
        }
        std::string key = dir + autoindex::encode_segment(e.name);
        if (e.directory) {
          dirs.push_back(Dir{std::move(key) + "/", d.depth + 1});
        } else {
          ObjectInfo info{std::move(key), e.size};
          FEEDLINE_TRY(check_listed_size(info, shown(info.key)));
          FEEDLINE_TRY(budget.add(info));
          out.push_back(std::move(info));
        }
      }
    }
    sort_and_dedupe(out);
    return out;
  }

  // Sizes for a brace list: from the directory's JSON listing where the server has one and the
  // directory holds many of the keys (one GET instead of a HEAD each); HEADs for the rest.
  Result<std::vector<ObjectInfo>> stat_many(std::span<const std::string> keys) override {
    return size_keys(keys, /*head_the_rest=*/true);
  }
  // The same without the HEADs: what no listing sizes is read as an object of unknown size
  // (unknown_size_reads.hpp: a GET each, the size learned from its answer), so a server without
  // listings (a CDN, nginx without autoindex) costs one round trip per object, not two.
  Result<std::vector<ObjectInfo>> stat_many_if_listed(std::span<const std::string> keys) override {
    return size_keys(keys, /*head_the_rest=*/false);
  }

  Result<std::vector<ObjectInfo>> size_keys(std::span<const std::string> keys, bool head_the_rest) {
    std::map<std::string, std::vector<std::size_t>> by_dir;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const std::string& k = keys[i];
      const std::size_t slash = k.rfind('/');
      if (slash == std::string::npos || k.find_first_of("?#") != std::string::npos) continue;
      by_dir[k.substr(0, slash + 1)].push_back(i);
    }
    std::vector<ObjectInfo> out(keys.size());
    std::vector<bool> known(keys.size(), false);
    // Without the HEADs, still one for a name its directory's listing lacks: most likely a
    // missing object, said at once (a 404 naming it) as with the HEADs.
    std::vector<bool> head(keys.size(), head_the_rest);
    for (const auto& [dir, members] : by_dir) {
      if (members.size() < kListingMinKeys) continue;
      auto listing = fetch_listing(dir);  // no listing, or none to be had: HEADs as without one
      if (!listing && listing.error().code() == Errc::kCancelled)
        return fail(std::move(listing).error());
      if (!listing || !*listing) continue;
      std::unordered_map<std::string, std::uint64_t> sizes;
      sizes.reserve((*listing)->size());
      for (const autoindex::Entry& e : **listing) {
        if (!e.directory && !e.unsafe && e.size < kMaxObjectSize)
          sizes.emplace(autoindex::encode_segment(e.name), e.size);
      }
      for (const std::size_t i : members) {
        const auto it = sizes.find(keys[i].substr(dir.size()));
        if (it == sizes.end()) {  // not listed: its HEAD says what is there
          head[i] = true;
          continue;
        }
        out[i] = ObjectInfo{keys[i], it->second};
        known[i] = true;
      }
    }
    std::vector<std::string> rest;
    std::vector<std::size_t> rest_at;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (!known[i] && !head[i]) {
        out[i] = ObjectInfo{keys[i], kUnknownSize};
      } else if (!known[i]) {
        rest.push_back(keys[i]);
        rest_at.push_back(i);
      }
    }
    if (!rest.empty()) {
      FEEDLINE_ASSIGN_OR_RETURN(auto heads, ObjectStore::stat_many(rest));
      for (std::size_t j = 0; j < rest.size(); ++j) out[rest_at[j]] = std::move(heads[j]);
    }
    return out;
  }

  Result<std::unique_ptr<ObjectWriter>> create(std::string_view key) override {
    return std::unique_ptr<ObjectWriter>(std::make_unique<PutWriter>(*this, std::string(key)));
  }

  std::string url_for(std::string_view key) const override {
    return fmt::format("{}://{}{}", scheme_, authority_, key);
  }
  std::string shown(std::string_view key) const override {
    return redact_url(fmt::format("{}{}", shown_base_, key));
  }

  Result<void> put(std::string_view key, ConstBytes body) {
    FEEDLINE_ASSIGN_OR_RETURN(HttpClient * c, control());
    HttpRequest req;
    req.method = "PUT";
    req.url = url_for(key);
    req.shown = shown(key);
    req.upload = body;
    FEEDLINE_ASSIGN_OR_RETURN(HttpResponse r, c->perform(std::move(req)));
    if (r.status < 200 || r.status > 299) {
      Error e = http_error(r, shown(key), "PUT");
      if (r.status == 405 || r.status == 501) {
        // In place: `e = std::move(e).with_hint(...)` would move e onto itself.
        e.with_hint(
            "the server does not accept uploads (for nginx: dav_methods PUT); write with s3:// "
            "instead");
      }
      return fail(std::move(e));
    }
    return {};
  }

 private:
  static constexpr std::size_t kMaxListedDirectories = 100'000;
  static constexpr unsigned kMaxListedDepth = 32;
  static constexpr std::size_t kListingMinKeys = 32;  // fewer keys in a directory: HEADs cost less
  static constexpr std::size_t kMaxListingBodyBytes = std::size_t{256}
                                                      << 20;  // one directory's JSON

  // The directory's JSON listing; nullopt when the server answers without one (an HTML index, an
  // error page, nginx's 403 for a directory it does not list). An error for a directory that is
  // not there (404) and for what no answer explains (an unreachable server).
  Result<std::optional<std::vector<autoindex::Entry>>> fetch_listing(const std::string& dir,
                                                                     bool look_first = false) {
    FEEDLINE_ASSIGN_OR_RETURN(HttpClient * c, control());
    if (look_first) {
      // The dataset layer asks for root + '/' also when the root names one object, and some
      // servers answer "object/" with the object itself: a HEAD first, so that only a JSON
      // answer is fetched whole.
      HttpRequest head;
      head.method = "HEAD";
      head.url = url_for(dir);
      head.shown = shown(dir);
      FEEDLINE_ASSIGN_OR_RETURN(HttpResponse h, c->perform(std::move(head)));
      // Not there, or a redirect (a server's answer this client does not follow): an error that
      // says so, as for an object.
      if (h.status == 404 || is_redirect(h)) return fail(http_error(h, shown(dir), "HEAD"));
      const auto type = h.headers.find("content-type");
      if (h.status != 200 || type == h.headers.end() ||
          type->second.find("json") == std::string::npos) {
        return std::optional<std::vector<autoindex::Entry>>();
      }
    }
    HttpRequest req;
    req.method = "GET";
    req.url = url_for(dir);
    req.shown = shown(dir);
    req.max_body = kMaxListingBodyBytes;
    req.headers.push_back("Accept: application/json");
    FEEDLINE_ASSIGN_OR_RETURN(HttpResponse r, c->perform(std::move(req)));
    if (r.status == 404 || is_redirect(r)) return fail(http_error(r, shown(dir), "GET"));
    if (r.status != 200) return std::optional<std::vector<autoindex::Entry>>();
    return autoindex::parse_json(r.body);
  }

  static bool is_redirect(const HttpResponse& r) { return r.status >= 300 && r.status < 400; }

  std::string scheme_;
  std::string authority_;
  std::string shown_base_;
};

Result<void> PutWriter::commit() { return backend_.put(key_, buf_); }

}  // namespace

Result<Resolved> open_http_url(const ParsedUrl& url, const BackendConfig& config) {
  UrlUserinfo auth = split_userinfo(url.authority);
  if (auth.host.empty()) {
    return fail(
        Error(Errc::kInvalidArgument, "the URL names no host").with_object(redact_url(url.text)));
  }
  std::optional<transports::BasicAuth> basic;
  if (auth.has_userinfo)
    basic = transports::BasicAuth{std::move(auth.user), std::move(auth.password)};
  std::string key = url.path.empty() ? "/" : url.path;
  std::string shown_base = redact_url(fmt::format("{}://{}", url.scheme, url.authority));
  return Resolved{
      std::make_unique<HttpBackend>(url.scheme, std::move(auth.host), std::move(shown_base),
                                    config.http, config.stop, std::move(basic)),
      std::move(key)};
}

}  // namespace feedline::storage::detail
