// The HTTP client's retry policy and error mapping (see detail/retry.hpp).
#include "detail/retry.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace feedline::transports::detail {

bool retryable_status(long status) noexcept {
  return status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
}

std::string retry_reason(CURLcode rc, long status) {
  switch (rc) {
    case CURLE_OK:
      return retryable_status(status) ? fmt::format("http_{}", status) : std::string();
    case CURLE_OPERATION_TIMEDOUT:
      return "timeout";
    case CURLE_COULDNT_CONNECT:
      return "connect";
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
      return "reset";
    case CURLE_PARTIAL_FILE:
      return "truncated";
    default:
      return {};
  }
}

std::chrono::milliseconds backoff_ceiling(const Backoff& backoff, unsigned attempt) noexcept {
  const unsigned shift = std::min(20u, attempt < 2 ? 0u : attempt - 2);
  const std::int64_t base = std::max<std::int64_t>(0, backoff.base.count());
  const std::int64_t exp = std::min<std::int64_t>(backoff.cap.count(), base << shift);
  return std::chrono::milliseconds(std::max<std::int64_t>(exp, 1));
}

std::chrono::milliseconds backoff_delay(const Backoff& backoff, unsigned attempt,
                                        std::mt19937_64& rng) {
  std::uniform_int_distribution<std::int64_t> pick(0, backoff_ceiling(backoff, attempt).count());
  return std::chrono::milliseconds(pick(rng));
}

std::optional<ByteRange> attempt_range(std::uint64_t offset, std::uint64_t length,
                                       std::uint64_t received, bool whole) noexcept {
  if (whole && received == 0) return std::nullopt;
  return ByteRange{offset + received, offset + length - 1};
}

namespace {

AttemptVerdict failed(Error error) {
  AttemptVerdict v;
  v.next = AttemptVerdict::Next::kFail;
  v.error.emplace(std::move(error));
  return v;
}

}  // namespace

AttemptVerdict judge_attempt(const AttemptOutcome& outcome, const RequestShape& request,
                             unsigned attempts, unsigned max_attempts) {
  const long status = outcome.status;
  // A 200 to a read of unknown size filled its destination: what it holds is the object's start,
  // and the answer's Content-Length says how much more there is (the caller reads it).
  if (outcome.rc == CURLE_WRITE_ERROR && outcome.filled && request.size_unknown) return {};
  // The body callback refused the bytes (CURLE_WRITE_ERROR): why it did decides the error.
  if (outcome.rc == CURLE_WRITE_ERROR && outcome.range_ignored) {
    // A server's answer met while reading, as any other fault of its: a runtime failure (kIo),
    // wherever it shows (a tar index read before the run, or a read during it).
    return failed(
        Error(Errc::kIo, "the server ignored the Range header (answered 200 with the whole object)")
            .with_http_status(static_cast<int>(status))
            .with_hint(
                "feedline reads byte ranges; serve the data from a server with Range support "
                "(nginx, S3, MinIO)"));
  }
  if (outcome.rc == CURLE_WRITE_ERROR && outcome.overflow) {
    if (request.whole && status == 200) {
      return failed(Error(Errc::kCorrupt,
                          fmt::format("the object is larger than the {} bytes it had when the "
                                      "dataset was opened (did it change?)",
                                      request.range_length))
                        .with_hint("datasets must not change while they are read"));
    }
    return failed(
        Error(Errc::kIo, fmt::format("the server sent more than the {} bytes asked for",
                                     request.ranged ? request.range_length : request.max_body)));
  }
  AttemptVerdict v;
  v.reason = retry_reason(outcome.rc, status);
  if (v.reason.empty()) {
    if (outcome.rc == CURLE_OK) return v;  // an answer, whatever its status: the caller reads it
    return failed(curl_error(outcome.rc, outcome.detail, outcome.reused_connection));
  }
  if (attempts < max_attempts) {
    v.next = AttemptVerdict::Next::kRetry;
    return v;
  }
  // Out of attempts.
  const bool answered = outcome.rc == CURLE_OK;
  Error err = answered
                  ? Error(Errc::kIo, fmt::format("HTTP {} after {} attempts", status, attempts))
                  : curl_error(outcome.rc, outcome.detail);
  std::string msg = answered
                        ? err.message()
                        : fmt::format("{} (gave up after {} attempts)", err.message(), attempts);
  std::string hint =
      status == 503 || status == 429
          ? "the server is throttling: lower {io_depth}/{connections}, or raise {max_attempts}"
      : !answered && !err.hint().empty()
          ? err.hint()
          : "check the server and the network; {max_attempts} and {stall_timeout} bound the wait";
  AttemptVerdict out = failed(Error(err.code(), std::move(msg))
                                  .with_http_status(static_cast<int>(status))
                                  .with_hint(std::move(hint)));
  out.reason = std::move(v.reason);
  return out;
}

Error curl_error(CURLcode rc, std::string_view detail, bool reused_connection) {
  Errc code = Errc::kIo;
  std::string hint = "check the URL and that the server is up";
  const char* words = curl_easy_strerror(rc);
  // curl's words for an answer that does not start with an HTTP status line.
  if (detail.find("HTTP/0.9") != std::string_view::npos) {
    if (reused_connection) {
      return Error(Errc::kIo,
                   fmt::format("the server sent more bytes than its Content-Length: bytes past the "
                               "end of an earlier answer on this connection were read as this "
                               "answer's start (curl: {})",
                               detail))
          .with_hint(
              "the server (or a proxy in front of it) sends bodies longer than it says; fix its "
              "Content-Length");
    }
    return Error(Errc::kIo, fmt::format("the server's answer is not HTTP (curl: {})", detail))
        .with_hint("check that the URL's host and port are an HTTP server's");
  }
  switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
      code = Errc::kIo;  // the endpoint is unusable, not an object that is missing
      hint = "the host name does not resolve: check the URL or {endpoint} (DNS)";
      break;
    case CURLE_COULDNT_CONNECT:
      hint =
          "nothing accepts connections there: check the host, the port and that the server is "
          "running";
      break;
    case CURLE_OPERATION_TIMEDOUT:
      code = Errc::kTimeout;
      hint = "the server did not answer in time ({connect_timeout}, {stall_timeout})";
      break;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CONNECT_ERROR:
      code = Errc::kPermissionDenied;
      hint =
          "TLS verification failed: pass the server's CA with {ca_bundle} (or {insecure} to skip "
          "checks)";
      break;
    case CURLE_UNSUPPORTED_PROTOCOL:
      code = Errc::kUnsupported;
      hint = "this libcurl cannot speak that protocol";
      break;
    case CURLE_WEIRD_SERVER_REPLY:
      hint =
          "the server's answer breaks HTTP (a malformed status line or header): check the server, "
          "or a proxy in front of it";
      break;
    default:
      break;
  }
  return Error(code, fmt::format("{} (curl: {})", detail.empty() ? std::string_view(words) : detail,
                                 words))
      .with_hint(std::move(hint));
}

}  // namespace feedline::transports::detail
