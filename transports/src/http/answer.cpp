// The checks of a ranged answer's headers, and Retry-After (see detail/answer.hpp).
#include "detail/answer.hpp"

#include <curl/curl.h>

#include <fmt/format.h>

#include <charconv>
#include <limits>
#include <string>

namespace feedline::transports::detail {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

// Digits only, the whole of `s`, no overflow.
std::optional<std::uint64_t> digits(std::string_view s) {
  if (s.empty() || s.front() < '0' || s.front() > '9') return std::nullopt;
  std::uint64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

constexpr const char* kRangeHint =
    "the server (or a cache or proxy in front of it) answers ranged GETs wrongly: check it with "
    "`curl -s -D - -o /dev/null -r FIRST-LAST URL`";

Error corrupt(std::string message, const char* hint = kRangeHint) {
  return Error(Errc::kCorrupt, std::move(message)).with_hint(hint);
}

}  // namespace

std::optional<ContentRange> parse_content_range(std::string_view value) {
  value = trim(value);
  constexpr std::string_view kUnit = "bytes ";
  if (!value.starts_with(kUnit)) return std::nullopt;
  value.remove_prefix(kUnit.size());
  const std::size_t slash = value.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  const std::string_view span = value.substr(0, slash);
  const std::string_view total = value.substr(slash + 1);
  ContentRange r;
  if (total != "*") {
    r.total = digits(total);
    if (!r.total) return std::nullopt;
  }
  if (span == "*") {
    if (!r.total) return std::nullopt;  // "bytes */*" says nothing
    return r;
  }
  const std::size_t dash = span.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  r.first = digits(span.substr(0, dash));
  r.last = digits(span.substr(dash + 1));
  if (!r.first || !r.last || *r.last < *r.first) return std::nullopt;
  if (r.total && *r.last >= *r.total) return std::nullopt;
  return r;
}

std::optional<std::uint64_t> parse_content_length(std::string_view value) {
  return digits(trim(value));
}

std::optional<Error> check_ranged_answer(const AnswerHeaders& a, const RangeAsked& asked) {
  const std::string want = fmt::format("bytes {}-{}", asked.first, asked.last);
  if (a.status == 200) {
    // The server ignored Range (or none was sent): the body is the object. From a later byte
    // the body callback refuses it (not the bytes asked for).
    if (asked.first != 0) return std::nullopt;
    if (a.has_length && !a.length) {
      return corrupt(
          fmt::format("the answer (200) to a GET of {} has an unreadable Content-Length", want));
    }
    if (asked.size && a.length && *a.length != *asked.size) {
      return corrupt(fmt::format("the server answered a GET of {} with an object of {} bytes "
                                 "(200, the whole object), not the {} bytes it had when listed",
                                 want, *a.length, *asked.size),
                     "datasets must not change while they are read; if it did not, the server or "
                     "a proxy in front of it sends the wrong object");
    }
    return std::nullopt;
  }
  if (a.status != 206) return std::nullopt;
  if (!a.has_range) {
    return corrupt(
        fmt::format("the server answered a GET of {} with 206 and no Content-Range: "
                    "which bytes it sent is unknown",
                    want));
  }
  if (!a.range || !a.range->first) {
    return corrupt(fmt::format(
        "the server answered a GET of {} with 206 and an unreadable Content-Range", want));
  }
  const std::uint64_t first = *a.range->first;
  const std::uint64_t last = *a.range->last;
  const std::string got = fmt::format("bytes {}-{}", first, last);
  if (first != asked.first || last > asked.last) {
    return corrupt(fmt::format("the server answered a GET of {} with {} (206)", want, got));
  }
  if (a.has_length && (!a.length || *a.length != last - first + 1)) {
    return corrupt(
        a.length ? fmt::format("the server answered a GET of {} with {} (206) and a Content-Length "
                               "of {}: they disagree",
                               want, got, *a.length)
                 : fmt::format("the server answered a GET of {} with {} (206) and an unreadable "
                               "Content-Length",
                               want, got));
  }
  if (asked.size && a.range->total && *a.range->total != *asked.size) {
    return corrupt(fmt::format("the server answered a GET of {} with {} of an object of {} bytes "
                               "(206), not the {} bytes it had when listed",
                               want, got, *a.range->total, *asked.size),
                   "datasets must not change while they are read; if it did not, the server or a "
                   "proxy in front of it sends another object's bytes");
  }
  const std::optional<std::uint64_t> end = a.range->total ? a.range->total : asked.size;
  if (end && last >= *end) {
    return corrupt(
        fmt::format("the server answered a GET of {} with {} (206), past the object's "
                    "end at {} bytes",
                    want, got, *end));
  }
  if (last < asked.last && end && last + 1 < *end) {
    return corrupt(
        fmt::format("the server answered a GET of {} with only {} (206) of an object "
                    "of {} bytes",
                    want, got, *end));
  }
  return std::nullopt;
}

std::optional<std::chrono::seconds> parse_retry_after(std::string_view value, std::time_t now) {
  value = trim(value);
  if (value.empty()) return std::nullopt;
  if (value.front() >= '0' && value.front() <= '9') {
    // Delay-seconds; more digits than fit are a very long wait, not an unreadable one.
    const auto v = digits(value);
    if (!v && value.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
    constexpr std::uint64_t kMax = std::numeric_limits<std::int32_t>::max();
    return std::chrono::seconds(static_cast<std::int64_t>(v ? std::min(*v, kMax) : kMax));
  }
  const std::string text(value);
  const std::time_t at = curl_getdate(text.c_str(), &now);
  if (at == -1) return std::nullopt;
  return std::chrono::seconds(at > now ? at - now : 0);
}

}  // namespace feedline::transports::detail
