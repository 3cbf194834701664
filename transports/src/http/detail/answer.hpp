// What the headers of an answer say, and whether a ranged GET may take its body: pure functions,
// no socket, no curl handle.
//
// A ranged read trusts no answer it cannot place: a 206 must say which bytes it carries
// (Content-Range) and they must be the ones asked for, its Content-Length must agree, and the
// object's total, where the request knows the size (from a listing or a HEAD), must be that size.
// A 200 to a ranged GET (the server ignored Range; taken only from the object's first byte) must
// carry the object's known size. An answer that fails a check is refused at its headers, before
// a byte of its body lands, with a data error saying what was asked and what came (the caller
// names the object). Without these checks a server answering `bytes=0-99` with bytes 1-100
// (truthfully labelled) delivered wrong data with no error.
//
// Also here: Retry-After (seconds or an HTTP date), which a 429/503 may carry.
//
// Private to src/http/ (tests/unit/test_http_answer.cpp checks it without a server).
#pragma once

#include <chrono>
#include <cstdint>
#include <ctime>
#include <optional>
#include <string_view>

#include "feedline/core/error.hpp"

namespace feedline::transports::detail {

// "bytes FIRST-LAST/TOTAL", "bytes FIRST-LAST/*" or "bytes */TOTAL" (RFC 9110 14.4).
struct ContentRange {
  std::optional<std::uint64_t> first;  // with last; absent in "bytes */TOTAL"
  std::optional<std::uint64_t> last;
  std::optional<std::uint64_t> total;  // absent for "*"
};
// nullopt when the value is not one of those forms (or a number overflows, or last < first, or
// last >= total).
std::optional<ContentRange> parse_content_range(std::string_view value);
// A Content-Length: decimal digits only (no sign, no overflow). nullopt otherwise.
std::optional<std::uint64_t> parse_content_length(std::string_view value);

// The two headers a ranged answer is judged by, as the header callback saw them.
struct AnswerHeaders {
  long status = 0;
  bool has_range = false;               // a Content-Range header came
  std::optional<ContentRange> range;    // ... and it parsed
  bool has_length = false;              // a Content-Length header came
  std::optional<std::uint64_t> length;  // ... and it parsed
};

// What one attempt of a ranged GET asked for.
struct RangeAsked {
  std::uint64_t first = 0;  // the attempt's first byte (the request's offset + bytes already in)
  std::uint64_t last = 0;   // the request's last byte (inclusive)
  // The object's size as the caller knows it (HttpRequest::known_size); nullopt: not known.
  std::optional<std::uint64_t> size;
  // The attempt sent no Range header (the first attempt of a whole-object GET).
  bool plain = false;
};

// nullopt when the answer's body may be taken; else the error (kCorrupt: the answer contradicts
// the request or the object's known size; without an object: the caller adds it). Only 200 and
// 206 answers are judged; the rest pass (their status says what happened).
std::optional<Error> check_ranged_answer(const AnswerHeaders& answer, const RangeAsked& asked);

// A Retry-After value: delay-seconds ("120") or an HTTP date, as the wait from `now`; nullopt when
// it is neither (a date in the past is a wait of 0).
std::optional<std::chrono::seconds> parse_retry_after(std::string_view value, std::time_t now);

}  // namespace feedline::transports::detail
