// The HTTP client's retry policy and error mapping: pure functions of one attempt's outcome.
//
// No sockets, no clock, no curl handle: what an attempt ended with (curl's code, the HTTP status,
// what the body callback refused) goes in; out come the next step (hand the response back, try
// again under a reason name, or fail with an Error and its hint), the wait before a retry (full
// jitter from a caller's random generator) and the bytes a retry asks for. The client
// (curl_client.cpp) applies them; tests/unit/test_http_retry.cpp checks them without a server.
//
// Private to src/http/ (curl/curl.h stays inside this module).
#pragma once

#include <curl/curl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "feedline/core/error.hpp"

namespace feedline::transports::detail {

// HTTP statuses worth another attempt: 429 (throttled), 500, 502, 503, 504.
bool retryable_status(long status) noexcept;

// The name a failed attempt is retried and counted under (HttpResponse::retries): "http_<status>"
// for a retryable status of a transfer that worked (rc == CURLE_OK), else "timeout", "connect",
// "reset" (received or sent nothing more: RECV/SEND_ERROR, GOT_NOTHING) or "truncated" (a body
// shorter than its Content-Length). "" when the outcome is final: a success, a 404, a TLS failure.
std::string retry_reason(CURLcode rc, long status);

// Exponential backoff with full jitter: the wait before attempt `attempt` (2 is the first retry)
// is uniform over [0, ceiling] ms with ceiling = min(cap, base * 2^(attempt - 2)) (the exponent
// stops at 20), and at least 1 ms, so a zero base still spreads retries a little.
struct Backoff {
  std::chrono::milliseconds base{50};
  std::chrono::milliseconds cap{2'000};
};
std::chrono::milliseconds backoff_ceiling(const Backoff& backoff, unsigned attempt) noexcept;
std::chrono::milliseconds backoff_delay(const Backoff& backoff, unsigned attempt,
                                        std::mt19937_64& rng);

// The bytes one attempt of a ranged GET asks for, as a Range header writes them (inclusive).
struct ByteRange {
  std::uint64_t first = 0;
  std::uint64_t last = 0;
  bool operator==(const ByteRange&) const = default;
};
// A range [offset, offset + length) of which `received` bytes already arrived (earlier attempts
// of the same request): the rest of it, so a broken transfer resumes where it stopped. nullopt:
// no Range header, the first attempt of a whole-object GET (a plain GET of the object). length > 0.
std::optional<ByteRange> attempt_range(std::uint64_t offset, std::uint64_t length,
                                       std::uint64_t received, bool whole) noexcept;

// What one attempt ended with, as the transfer saw it.
struct AttemptOutcome {
  CURLcode rc = CURLE_OK;
  long status = 0;                 // the answer's HTTP status (0: none came)
  bool range_ignored = false;      // the body callback refused a 200 to a range that starts past 0
  bool overflow = false;           // ... refused bytes past what was asked for (or past max_body)
  std::string_view detail;         // curl's error buffer for this attempt ("" when curl wrote none)
  bool filled = false;             // the body callback refused the rest of a 200 once dst was full
  bool reused_connection = false;  // the attempt ran on a connection an earlier request opened
};

// The request, as far as what happens after an attempt depends on it.
struct RequestShape {
  bool ranged = false;  // HttpRequest::range_offset set
  bool whole = false;   // HttpRequest::whole
  std::uint64_t range_length = 0;
  std::size_t max_body = 0;
  bool size_unknown = false;  // HttpRequest::size_unknown
};

// The step after an attempt.
struct AttemptVerdict {
  enum class Next : std::uint8_t { kSucceed, kRetry, kFail };
  Next next = Next::kSucceed;
  std::string reason;          // kRetry: counted under it (see retry_reason)
  std::optional<Error> error;  // kFail: the error, without its object (the caller names it)
};

// `attempts` made so far, this one included; at most `max_attempts` in all. Retryable outcomes
// fail once the attempts are spent, saying how many were made (and, for 429/503, that the server
// throttles).
AttemptVerdict judge_attempt(const AttemptOutcome& outcome, const RequestShape& request,
                             unsigned attempts, unsigned max_attempts);

// A failed transfer as an Error: the code (resolve/connect/other: kIo; timeouts: kTimeout; TLS:
// kPermissionDenied; a protocol this libcurl lacks: kUnsupported), curl's words ("<detail> (curl:
// <curl_easy_strerror>)", detail falling back to the latter) and a hint saying what to check. No
// object: the caller adds it. An answer that is not HTTP ("Received HTTP/0.9", a reply curl calls
// weird) is the server's fault (kIo); on a reused connection, what curl read as this answer's
// start was bytes an earlier answer sent past its Content-Length, and the message says so.
Error curl_error(CURLcode rc, std::string_view detail, bool reused_connection = false);

}  // namespace feedline::transports::detail
