// One HTTP request on its way: the easy handle's set-up (options, headers, the Range of each
// attempt, Basic or SigV4 credentials) and the callbacks that move its bytes (the status line and
// headers, the body into the caller's buffer or scattered over its segments, an upload's body).
//
// A Transfer lives from HttpClient::start() to its completion callback, on the client's loop
// thread; its easy handle comes from an EasyPool and goes back to it when the request completes.
// Every curl callback of the transfer gets the Transfer itself (CURLOPT_PRIVATE, WRITEDATA, ...).
//
// Private to src/http/ (curl/curl.h and Asio stay inside this module).
#pragma once

#include <curl/curl.h>

#include <boost/asio/steady_timer.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "answer.hpp"
#include "feedline/core/error.hpp"
#include "feedline/transports/http_client.hpp"
#include "retry.hpp"

namespace feedline::transports::detail {

// ---- RAII for curl's handles ----

struct EasyCleanup {
  void operator()(CURL* easy) const noexcept { curl_easy_cleanup(easy); }
};
using EasyHandle = std::unique_ptr<CURL, EasyCleanup>;

struct SlistFree {
  void operator()(curl_slist* list) const noexcept { curl_slist_free_all(list); }
};
using Slist = std::unique_ptr<curl_slist, SlistFree>;

// Appends a copy of `line`; the list stays as it was when curl cannot allocate.
void append(Slist& list, const char* line);

// Easy handles of finished transfers, for the next ones: curl_easy_init/cleanup per request
// costs more than the request itself on a fast server (measured). configure() resets a handle
// (curl_easy_reset) before each use. One thread only.
class EasyPool {
 public:
  static constexpr std::size_t kMaxKept = 1024;
  // A kept handle, else a new one; null when curl_easy_init fails.
  EasyHandle acquire();
  // Keeps the handle for the next acquire() (at most kMaxKept; beyond that it is cleaned up).
  void release(EasyHandle easy);
  // Cleans up every kept handle.
  void clear() noexcept { free_.clear(); }

 private:
  std::vector<EasyHandle> free_;
};

// ---- what every transfer of one client shares ----

// The client's sockets: curl opens and closes every connection through these (see CurlReactor).
struct SocketHooks {
  curl_opensocket_callback open = nullptr;
  curl_closesocket_callback close = nullptr;
  void* data = nullptr;
};

// Built once per client from its options; must outlive its transfers.
struct TransferSetup {
  explicit TransferSetup(const HttpClientOptions& options);
  const HttpClientOptions& options;
  Slist connect_to;         // CURLOPT_CONNECT_TO, from options.connect_to
  std::string sigv4_param;  // "aws:amz:REGION:SERVICE" when signing
  SocketHooks sockets;
};

// ---- one request ----

struct Transfer {
  HttpRequest req;
  HttpCallback done;
  HttpResponse resp;
  std::uint64_t received = 0;  // into dst, all attempts
  std::size_t segment = 0;     // scatter: the first segment not yet filled
  std::size_t upload_pos = 0;
  long status = 0;  // of the current attempt, from its status line
  // The connection's socket, as curl last named it for this transfer (CurlReactor::on_socket);
  // for ACKs (see ack_at_once).
  curl_socket_t fd = CURL_SOCKET_BAD;
  bool range_ignored = false;
  bool overflow = false;
  // size_unknown: a 200 (Range ignored) filled dst; the rest of its body was refused on purpose.
  bool filled = false;
  std::uint64_t attempt_bytes = 0;  // body bytes of this attempt stored (range_ignored's test)
  // A ranged GET: the answer's Content-Range and Content-Length as its headers came (this
  // attempt's), judged once they end (check_ranged_answer).
  AnswerHeaders answer;
  // ... the answer its headers made us refuse: the attempt fails with this error (no retry).
  std::optional<Error> refused;
  std::unique_ptr<boost::asio::steady_timer> backoff;  // a retry's wait, on the client's loop
  char errbuf[CURL_ERROR_SIZE] = {};
  // Last: destroyed first (the header list, then the handle that points to it and to errbuf).
  EasyHandle easy;
  Slist headers;

  bool ranged() const { return req.range_offset.has_value(); }
  // What this attempt of a ranged GET asks for (check_ranged_answer's view of the request).
  RangeAsked asked() const {
    return {*req.range_offset + received, *req.range_offset + req.range_length - 1, req.known_size,
            req.whole && received == 0};
  }
  // The object for messages: the caller's name for it, else the URL without its secrets.
  std::string shown() const;
  // Clears what an attempt leaves behind (its status, flags, headers; the body of an un-ranged
  // request), before the next one is handed to curl. What a ranged GET received stays: the
  // next attempt asks only for the rest (attempt_range).
  void begin_attempt();
  // What the end of an attempt depends on (detail::judge_attempt).
  RequestShape shape() const {
    return {ranged(), req.whole, req.range_length, req.max_body, req.size_unknown};
  }
  // Puts `len` body bytes that start `received` bytes into the range where they belong: into
  // dst, or over the scatter segments (bytes between segments are dropped).
  void store(const char* data, std::size_t len);
  // size_unknown with a dst smaller than the range (HttpRequest::grow_dst): room for `len` more
  // body bytes, asked of grow_dst once; false when it refused.
  bool make_room(std::size_t len);
};

// Checks the request's range and segments, then sets up its (reset) easy handle: URL, timeouts,
// TLS, the client's sockets, the callbacks above, the headers and this attempt's Range, the
// method, and credentials. kInvalidArgument for a request that cannot be sent as asked.
Result<void> configure(Transfer& t, const TransferSetup& setup);

// Makes the kernel ACK what arrived on `fd` at once (TCP_QUICKACK; see transfer.cpp for why and
// when). One setsockopt.
void ack_at_once(curl_socket_t fd) noexcept;

}  // namespace feedline::transports::detail
