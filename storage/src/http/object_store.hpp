// What s3:// and http(s):// share: objects addressed by URL, sizes from HEAD, reads as ranged GETs
// through transports::HttpClient (large reads split into parallel parts), and the mapping of HTTP
// and S3 error answers to errors a user can act on.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "feedline/storage/backend.hpp"
#include "feedline/storage/registry.hpp"
#include "feedline/transports/http_client.hpp"
#include "http_queue.hpp"

namespace feedline::storage::detail {

class HttpObject final : public ObjectHandle {
 public:
  HttpObject(std::string key, std::uint64_t size, std::string url, std::string shown)
      : ObjectHandle(std::move(key), size), url_(std::move(url)), shown_(std::move(shown)) {}
  const std::string& url() const noexcept { return url_; }
  const std::string& shown() const noexcept { return shown_; }
  std::string display_name() const override { return shown_; }

 private:
  std::string url_;
  std::string shown_;
};

class ObjectStore : public Backend {
 public:
  Result<ObjectInfo> stat(std::string_view key) override;
  Result<std::vector<ObjectInfo>> stat_many(std::span<const std::string> keys) override;
  Result<std::unique_ptr<ObjectHandle>> open(std::string_view key) override;
  Result<std::unique_ptr<ObjectHandle>> open_known(const ObjectInfo& info) override {
    return std::unique_ptr<ObjectHandle>(
        std::make_unique<HttpObject>(info.key, info.size, url_for(info.key), shown(info.key)));
  }
  Result<std::unique_ptr<IoQueue>> make_queue(const QueueOptions& options) override;
  BackendCaps caps() const override;
  // Event loops per I/O queue (HttpConfig::loops; 0 = one per core, at most 4).
  unsigned event_loops() const;
  std::string display_name(std::string_view key) const override { return shown(key); }

 protected:
  // stop: BackendConfig::stop, for the control requests (HEAD, LIST, PUT; see control()).
  // basic_auth: http://user:password@ credentials, sent by curl (never in a URL).
  ObjectStore(HttpConfig http, std::optional<transports::SigV4> sigv4, std::stop_token stop,
              std::optional<transports::BasicAuth> basic_auth = std::nullopt);

  virtual std::string url_for(std::string_view key) const = 0;
  // How the user names the object ("s3://bucket/key", "http://host/path"); never a secret (it
  // goes through redact_url: no userinfo, no signature or token in a query).
  virtual std::string shown(std::string_view key) const = 0;

  // For I/O queues: these requests end by IoQueue::cancel(), not by the stop token.
  transports::HttpClientOptions client_options(unsigned connections) const;
  // The client for control requests (HEAD, LIST, PUT), made on first use. Its requests fail
  // with kCancelled within about 100 ms of the stop token (Ctrl-C).
  Result<transports::HttpClient*> control();
  // For clean-up after a stop (aborting a multipart upload, so that nothing is left behind on
  // the server): not ended by the stop token, one attempt, at most a few seconds.
  Result<transports::HttpClient*> cleanup();
  // Maps a non-2xx answer (with its S3 error body, if any) to an error naming the object.
  Error http_error(const transports::HttpResponse& r, std::string_view object,
                   std::string_view what) const;

  const HttpConfig& http_config() const noexcept { return http_; }

 private:
  // http_error() for the reads of this backend's queues.
  AnswerError answer_error() const;

  HttpConfig http_;
  std::optional<transports::SigV4> sigv4_;
  std::stop_token stop_;
  std::optional<transports::BasicAuth> basic_auth_;
  // The connection pool of queues made with HttpQueueOptions::shared_by (see there): its event
  // loops, each with its share of the pool's connections, made by the first such queue.
  struct SharedPool {
    std::vector<std::shared_ptr<transports::HttpClient>> loops;
    unsigned connections = 0;
    unsigned queues = 0;  // made over it so far: each starts on the next loop
  };
  Result<std::unique_ptr<IoQueue>> make_shared_queue(unsigned depth, bool coalesce,
                                                     unsigned shared_by);

  std::mutex control_mu_;
  std::unique_ptr<transports::HttpClient> control_;
  std::unique_ptr<transports::HttpClient> cleanup_;
  std::mutex pool_mu_;
  std::optional<SharedPool> pool_;
};

Result<Resolved> open_s3_url(const ParsedUrl& url, const BackendConfig& config);
Result<Resolved> open_http_url(const ParsedUrl& url, const BackendConfig& config);

}  // namespace feedline::storage::detail
