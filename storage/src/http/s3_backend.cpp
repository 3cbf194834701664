// s3://bucket/prefix: ListObjectsV2, HEAD, ranged GET, PUT and multipart upload, signed by curl.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <unordered_set>

#include "feedline/core/markup.hpp"
#include "feedline/core/redact.hpp"
#include "feedline/storage/s3_xml.hpp"
#include "listing.hpp"
#include "object_store.hpp"

namespace feedline::storage::detail {
namespace {

using transports::HttpClient;
using transports::HttpRequest;
using transports::HttpResponse;
using transports::uri_encode;

// S3's smallest part (all parts but the last).
constexpr std::uint64_t kMinPart = 5ull << 20;
constexpr const char* kUnsignedPayload = "x-amz-content-sha256: UNSIGNED-PAYLOAD";

class S3Backend;

// Buffers a part at a time; small objects go as one PUT on commit, larger ones as a multipart
// upload (the object appears only on CompleteMultipartUpload; an abandoned upload is aborted).
class S3Writer final : public ObjectWriter {
 public:
  S3Writer(S3Backend& backend, std::string key, std::uint64_t part_size)
      : backend_(backend), key_(std::move(key)), part_size_(std::max(part_size, kMinPart)) {}
  ~S3Writer() override;
  Result<void> append(ConstBytes data) override;
  Result<void> commit() override;

 private:
  Result<void> flush_part();

  S3Backend& backend_;
  std::string key_;
  std::uint64_t part_size_;
  std::vector<std::byte> buf_;
  std::string upload_id_;
  std::vector<std::string> etags_;
  bool committed_ = false;
};

class S3Backend final : public ObjectStore {
 public:
  S3Backend(std::string bucket, HttpConfig http, const S3Config& s3, std::stop_token stop)
      : ObjectStore(std::move(http), sigv4_for(s3), std::move(stop)), bucket_(std::move(bucket)) {
    if (s3.endpoint.empty()) {
      // AWS itself: virtual-hosted style.
      bucket_url_ = fmt::format("https://{}.s3.{}.amazonaws.com", bucket_, s3.region);
      endpoint_ = bucket_url_;
    } else {
      std::string ep = s3.endpoint;
      while (ep.ends_with('/')) ep.pop_back();
      endpoint_ = ep;
      bucket_url_ = s3.path_style ? fmt::format("{}/{}", ep, uri_encode(bucket_, false)) : ep;
    }
  }

  std::string_view scheme() const noexcept override { return "s3"; }

  // Every page of ListObjectsV2 under the prefix. A server's listing is checked as it comes (see
  // listing.hpp): keys outside the prefix are marked, absurd sizes fail, the keys held are
  // bounded, and a listing that goes round in circles (a continuation token seen before, or
  // pages that bring no key past those already seen) stops with an error instead of asking for
  // ever (one such server drew 110,904 requests in 60 s).
  Result<std::vector<ObjectInfo>> list(std::string_view prefix) override {
    FEEDLINE_ASSIGN_OR_RETURN(HttpClient * c, control());
    const std::string listed = shown(prefix);
    ListingBudget budget(
        listed,
        fmt::format("list a narrower prefix, name the objects with brace notation "
                    "(s3://{}/{}train-{{000000..000999}}.tar), or pack small objects "
                    "into tar shards",
                    bucket_, prefix),
        http_config().max_listing_bytes);
    std::vector<ObjectInfo> out;
    std::string token;
    std::unordered_set<std::size_t> tokens;  // hashes of the tokens followed so far
    std::string greatest;                    // the greatest key seen
    unsigned pages = 0, stalled = 0;
    for (;;) {
      ++pages;
      // Query parameters in canonical (sorted) order and encoded as SigV4 wants them: curl 7.88
      // signs the query string as given.
      std::string query;
      if (!token.empty()) query += "continuation-token=" + uri_encode(token, false) + "&";
      query += "list-type=2&prefix=" + uri_encode(prefix, false);
      HttpRequest req;
      req.url = fmt::format("{}/?{}", bucket_url_, query);
      req.shown = listed;
      FEEDLINE_ASSIGN_OR_RETURN(HttpResponse r, c->perform(std::move(req)));
      if (r.status != 200) return fail(list_error(r, prefix));
      auto page = s3::parse_list_page(r.body);
      if (!page) return fail(Error(page.error()).with_object(listed));
      bool progress = false;
      for (auto& o : page->objects) {
        FEEDLINE_TRY(check_listed_size(o, shown(o.key)));
        o.outside = !key_inside(o.key, prefix);
        if (o.key > greatest) {
          greatest = o.key;
          progress = true;
        }
        FEEDLINE_TRY(budget.add(o));
        out.push_back(std::move(o));
      }
      if (!page->truncated) break;
      stalled = progress ? 0 : stalled + 1;
      if (!tokens.insert(std::hash<std::string>()(page->next_token)).second ||
          stalled > kMaxStalledPages) {
        return fail(
            Error(Errc::kIo,
                  fmt::format(
                      "the listing goes round in circles: page {} {} (after {} objects); "
                      "stopped instead of listing for ever",
                      pages,
                      stalled > kMaxStalledPages
                          ? fmt::format("is the {}th in a row that brings no new key", stalled)
                          : std::string("repeats a continuation token of an earlier page"),
                      out.size()))
                .with_object(listed)
                .with_hint("the server's ListObjectsV2 is broken: check it (`aws s3api "
                           "list-objects-v2 --bucket B --prefix P`), or name the objects with "
                           "brace notation"));
      }
      token = std::move(page->next_token);
    }
    sort_and_dedupe(out);
    return out;  // empty: nothing under the prefix (the caller may still stat one object)
  }

  Result<std::unique_ptr<ObjectWriter>> create(std::string_view key) override {
    if (key.empty() || key.ends_with('/')) {
      return fail(Error(Errc::kInvalidArgument, "an object key must not be empty or end in '/'")
                      .with_object(shown(key)));
    }
    return std::unique_ptr<ObjectWriter>(
        std::make_unique<S3Writer>(*this, std::string(key), http_config().part_size));
  }

  std::string url_for(std::string_view key) const override {
    return fmt::format("{}/{}", bucket_url_, uri_encode(key, true));
  }
  // Keys are the user's, and a query pasted into one ("?X-Amz-Signature=...") is hidden too.
  std::string shown(std::string_view key) const override {
    return redact_url(fmt::format("s3://{}/{}", bucket_, key));
  }

  // Control requests with a body or a query, for the writer.
  // cleaning_up: after a stop too (see ObjectStore::cleanup()).
  Result<HttpResponse> request(std::string method, std::string_view key, std::string query,
                               ConstBytes body, std::string_view what, bool cleaning_up = false) {
    FEEDLINE_ASSIGN_OR_RETURN(HttpClient * c, cleaning_up ? cleanup() : control());
    HttpRequest req;
    req.method = std::move(method);
    req.url = url_for(key) + (query.empty() ? "" : "?" + query);
    req.shown = shown(key);
    req.upload = body;
    req.headers.push_back(kUnsignedPayload);
    FEEDLINE_ASSIGN_OR_RETURN(HttpResponse r, c->perform(std::move(req)));
    if (r.status < 200 || r.status > 299) return fail(http_error(r, shown(key), what));
    return r;
  }

 private:
  static std::optional<transports::SigV4> sigv4_for(const S3Config& s3) {
    if (s3.access_key_id.empty()) return std::nullopt;  // anonymous (public buckets)
    return transports::SigV4{s3.access_key_id, s3.secret_access_key, s3.session_token, s3.region,
                             "s3"};
  }

  // A ListObjectsV2 answer other than 200. A server's fault (a redirect, a 5xx after its
  // retries, an error body) is a runtime failure; only an answer that is not S3's at all says the
  // endpoint is wrong (a usage error: --endpoint).
  Error list_error(const HttpResponse& r, std::string_view prefix) const {
    const auto e = s3::parse_error(r.body);
    if (!e && !(r.status >= 300 && r.status < 400) && r.status < 500) {
      return Error(
                 Errc::kInvalidArgument,
                 fmt::format("the endpoint {} does not answer like S3 (ListObjectsV2: HTTP {}, {})",
                             redact_url(endpoint_), r.status,
                             r.headers.contains("content-type") ? r.headers.at("content-type")
                                                                : "no content type"))
          .with_http_status(static_cast<int>(r.status))
          .with_object(shown(prefix))
          .with_hint("check {endpoint} / AWS_ENDPOINT_URL: it must be an S3-compatible server");
    }
    if (e && e->code == "NoSuchBucket") {  // the URL names no bucket there (as before: usage)
      return Error(Errc::kInvalidArgument, fmt::format("the bucket '{}' does not exist", bucket_))
          .with_http_status(static_cast<int>(r.status))
          .with_object(shown(prefix))
          .with_hint(
              "check the bucket name and the endpoint ({endpoint}); `aws s3 ls` lists "
              "buckets");
    }
    return http_error(r, shown(prefix), "ListObjectsV2");
  }

  // Truncated pages in a row that bring no key past the greatest seen (S3 lists in key order):
  // more than this, and the listing is taken to go round in circles.
  static constexpr unsigned kMaxStalledPages = 16;

  std::string bucket_;
  std::string bucket_url_;
  std::string endpoint_;
};

S3Writer::~S3Writer() {
  if (!committed_ && !upload_id_.empty()) {
    // Also after Ctrl-C: an upload left open keeps its parts (and their cost) on the server.
    (void)backend_.request("DELETE", key_, "uploadId=" + uri_encode(upload_id_, false), {},
                           "AbortMultipartUpload",
                           /*cleaning_up=*/true);
  }
}

Result<void> S3Writer::append(ConstBytes data) {
  while (!data.empty()) {
    const std::size_t room = static_cast<std::size_t>(part_size_ - buf_.size());
    const std::size_t n = std::min(room, data.size());
    buf_.insert(buf_.end(), data.begin(), data.begin() + static_cast<std::ptrdiff_t>(n));
    data = data.subspan(n);
    if (buf_.size() == part_size_) FEEDLINE_TRY(flush_part());
  }
  return {};
}

Result<void> S3Writer::flush_part() {
  if (upload_id_.empty()) {
    FEEDLINE_ASSIGN_OR_RETURN(
        HttpResponse r, backend_.request("POST", key_, "uploads=", {}, "CreateMultipartUpload"));
    FEEDLINE_ASSIGN_OR_RETURN(upload_id_, s3::parse_upload_id(r.body));
  }
  const std::size_t number = etags_.size() + 1;
  FEEDLINE_ASSIGN_OR_RETURN(HttpResponse r,
                            backend_.request("PUT", key_,
                                             fmt::format("partNumber={}&uploadId={}", number,
                                                         uri_encode(upload_id_, false)),
                                             buf_, "UploadPart"));
  const auto it = r.headers.find("etag");
  if (it == r.headers.end()) {
    return fail(Error(Errc::kCorrupt, fmt::format("no ETag in the answer to part {}", number))
                    .with_object(backend_.shown(key_)));
  }
  etags_.push_back(it->second);
  buf_.clear();
  return {};
}

Result<void> S3Writer::commit() {
  if (committed_) return fail(Errc::kInvalidArgument, "commit() called twice");
  if (upload_id_.empty()) {
    FEEDLINE_TRY(backend_.request("PUT", key_, "", buf_, "PutObject"));
    committed_ = true;
    return {};
  }
  if (!buf_.empty()) FEEDLINE_TRY(flush_part());
  std::string xml = "<CompleteMultipartUpload>";
  for (std::size_t i = 0; i < etags_.size(); ++i) {
    xml += fmt::format("<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>", i + 1,
                       markup_escape(etags_[i]));
  }
  xml += "</CompleteMultipartUpload>";
  FEEDLINE_ASSIGN_OR_RETURN(
      HttpResponse r,
      backend_.request("POST", key_, "uploadId=" + uri_encode(upload_id_, false),
                       ConstBytes(reinterpret_cast<const std::byte*>(xml.data()), xml.size()),
                       "CompleteMultipartUpload"));
  // S3 may answer 200 with an <Error> body when the completion fails late.
  if (auto e = s3::parse_error(r.body)) {
    return fail(
        Error(Errc::kIo, fmt::format("CompleteMultipartUpload: {}: {}", e->code, e->message))
            .with_object(backend_.shown(key_)));
  }
  committed_ = true;
  return {};
}

}  // namespace

Result<Resolved> open_s3_url(const ParsedUrl& url, const BackendConfig& config) {
  if (url.authority.empty()) {
    return fail(Error(Errc::kInvalidArgument, "an s3:// URL needs a bucket")
                    .with_object(redact_url(url.text))
                    .with_hint("s3://bucket/prefix"));
  }
  if (url.authority.find('@') != std::string::npos) {
    return fail(Error(Errc::kInvalidArgument, "an s3:// URL names a bucket, not credentials")
                    .with_object(redact_url(url.text))
                    .with_hint("give the keys the AWS way (AWS_ACCESS_KEY_ID and "
                               "AWS_SECRET_ACCESS_KEY, or {profile}), "
                               "and write s3://bucket/prefix"));
  }
  std::string key = url.path;
  while (key.starts_with('/')) key.erase(0, 1);
  return Resolved{std::make_unique<S3Backend>(url.authority, config.http, config.s3, config.stop),
                  std::move(key)};
}

}  // namespace feedline::storage::detail
