// http(s)://host[:port]/path: any server with Range support (nginx, a CDN). No listing: datasets
// name their objects with brace notation. Writes are HTTP PUTs (WebDAV servers accept them).
#include <fmt/format.h>

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
  HttpBackend(std::string scheme, std::string authority, HttpConfig http)
      : ObjectStore(std::move(http), std::nullopt), scheme_(std::move(scheme)), authority_(std::move(authority)) {}

  std::string_view scheme() const noexcept override { return scheme_; }

  Result<std::vector<ObjectInfo>> list(std::string_view prefix) override {
    return fail(Error(Errc::kUnsupported, "plain HTTP servers have no listing")
                    .with_object(shown(prefix))
                    .with_hint(fmt::format("name the objects with brace notation, e.g. {}://{}/train-{{000000..000127}}.tar",
                                           scheme_, authority_)));
  }

  Result<std::unique_ptr<ObjectWriter>> create(std::string_view key) override {
    return std::unique_ptr<ObjectWriter>(std::make_unique<PutWriter>(*this, std::string(key)));
  }

  std::string url_for(std::string_view key) const override { return fmt::format("{}://{}{}", scheme_, authority_, key); }
  std::string shown(std::string_view key) const override { return url_for(key); }

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
        e = std::move(e).with_hint("the server does not accept uploads (for nginx: dav_methods PUT); write with s3:// instead");
      }
      return fail(std::move(e));
    }
    return {};
  }

 private:
  std::string scheme_;
  std::string authority_;
};

Result<void> PutWriter::commit() { return backend_.put(key_, buf_); }

}  // namespace

Result<Resolved> open_http_url(const ParsedUrl& url, const BackendConfig& config) {
  if (url.authority.empty()) {
    return fail(Error(Errc::kInvalidArgument, "the URL names no host").with_object(url.text));
  }
  std::string key = url.path.empty() ? "/" : url.path;
  return Resolved{std::make_unique<HttpBackend>(url.scheme, url.authority, config.http), std::move(key)};
}

}  // namespace feedline::storage::detail
