// The HTTP client's retry policy and error mapping, without a socket: which outcomes are retried
// and under which reason, when retries stop and what the error then says, the backoff's bounds
// and its spread (seeded), the Range a broken transfer resumes with, and curl codes as Errc and
// hints. The same policy against a scripted server: test_http.cpp ("[http][retry]").
#include <catch2/catch.hpp>

#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "detail/retry.hpp"
#include "test_support.hpp"

using feedline::testing::contains;

using namespace feedline;
using namespace feedline::transports::detail;
using Next = AttemptVerdict::Next;
using std::chrono::milliseconds;

namespace {

RequestShape ranged_read(std::uint64_t length, bool whole = false) {
  RequestShape r;
  r.ranged = true;
  r.whole = whole;
  r.range_length = length;
  r.max_body = 16u << 20;
  return r;
}

AttemptOutcome answered(long status) { return AttemptOutcome{CURLE_OK, status, false, false, ""}; }
AttemptOutcome broken(CURLcode rc, std::string_view detail = "") {
  return AttemptOutcome{rc, 0, false, false, detail};
}

}  // namespace

TEST_CASE("http retry: 429 and 500/502/503/504 are retried, other statuses are answers",
          "[http][retry][unit]") {
  for (long s : {429L, 500L, 502L, 503L, 504L}) {
    INFO(s);
    CHECK(retryable_status(s));
    CHECK(retry_reason(CURLE_OK, s) == "http_" + std::to_string(s));
    const AttemptVerdict v = judge_attempt(answered(s), ranged_read(100), 1, 5);
    CHECK(v.next == Next::kRetry);
    CHECK(v.reason == "http_" + std::to_string(s));
    CHECK_FALSE(v.error);
  }
  // Answers the caller reads itself (a 404 is "not found", a 403 a signature problem): no retry.
  for (long s : {200L, 206L, 301L, 304L, 400L, 401L, 403L, 404L, 412L, 416L, 501L, 505L}) {
    INFO(s);
    CHECK_FALSE(retryable_status(s));
    CHECK(retry_reason(CURLE_OK, s).empty());
    const AttemptVerdict v = judge_attempt(answered(s), ranged_read(100), 1, 5);
    CHECK(v.next == Next::kSucceed);
    CHECK(v.reason.empty());
    CHECK_FALSE(v.error);
  }
}

TEST_CASE("http retry: broken transfers are retried under their reason; the rest fail at once",
          "[http][retry][unit]") {
  const std::vector<std::pair<CURLcode, std::string>> retried = {
      {CURLE_OPERATION_TIMEDOUT, "timeout"}, {CURLE_COULDNT_CONNECT, "connect"},
      {CURLE_RECV_ERROR, "reset"},           {CURLE_SEND_ERROR, "reset"},
      {CURLE_GOT_NOTHING, "reset"},          {CURLE_PARTIAL_FILE, "truncated"},
  };
  for (const auto& [rc, reason] : retried) {
    INFO(curl_easy_strerror(rc));
    CHECK(retry_reason(rc, 0) == reason);
    // The status of a broken transfer does not make it an answer.
    CHECK(retry_reason(rc, 200) == reason);
    const AttemptVerdict v = judge_attempt(broken(rc), ranged_read(100), 2, 5);
    CHECK(v.next == Next::kRetry);
    CHECK(v.reason == reason);
  }
  for (CURLcode rc :
       {CURLE_COULDNT_RESOLVE_HOST, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CONNECT_ERROR,
        CURLE_UNSUPPORTED_PROTOCOL, CURLE_URL_MALFORMAT, CURLE_WRITE_ERROR}) {
    INFO(curl_easy_strerror(rc));
    CHECK(retry_reason(rc, 0).empty());
    const AttemptVerdict v = judge_attempt(broken(rc), ranged_read(100), 1, 5);
    CHECK(v.next == Next::kFail);
    REQUIRE(v.error);
    CHECK(v.error->object().empty());  // the client names the object
  }
}

TEST_CASE("http retry: out of attempts, the error says how many and what to do",
          "[http][retry][unit]") {
  SECTION("a server that keeps throttling (503, 429)") {
    for (long s : {503L, 429L}) {
      const AttemptVerdict v = judge_attempt(answered(s), ranged_read(100), 5, 5);
      REQUIRE(v.next == Next::kFail);
      REQUIRE(v.error);
      CHECK(v.error->code() == Errc::kIo);
      CHECK(v.error->http_status() == s);
      CHECK(v.error->message() == fmt::format("HTTP {} after 5 attempts", s));
      CHECK(contains(v.error->hint(), "throttling"));
      CHECK(v.reason == fmt::format("http_{}", s));
    }
  }
  SECTION("a server error that persists (500)") {
    const AttemptVerdict v = judge_attempt(answered(500), ranged_read(100), 3, 3);
    REQUIRE(v.error);
    CHECK(v.error->message() == "HTTP 500 after 3 attempts");
    CHECK(contains(v.error->hint(), "check the server and the network"));
  }
  SECTION("connections that keep breaking: curl's words, the attempts, curl's hint") {
    const AttemptVerdict v =
        judge_attempt(broken(CURLE_RECV_ERROR, "Connection reset by peer"), ranged_read(100), 4, 4);
    REQUIRE(v.error);
    CHECK(v.error->code() == Errc::kIo);
    CHECK(v.error->message() ==
          fmt::format("Connection reset by peer (curl: {}) (gave up after 4 attempts)",
                      curl_easy_strerror(CURLE_RECV_ERROR)));
    CHECK(v.error->hint() == "check the URL and that the server is up");
  }
  SECTION("timeouts stay timeouts") {
    const AttemptVerdict v =
        judge_attempt(broken(CURLE_OPERATION_TIMEDOUT), ranged_read(100), 2, 2);
    REQUIRE(v.error);
    CHECK(v.error->code() == Errc::kTimeout);
    CHECK(contains(v.error->message(), "gave up after 2 attempts"));
    CHECK(contains(v.error->hint(), "did not answer in time"));
  }
  SECTION("one attempt allowed: no retry at all") {
    CHECK(judge_attempt(answered(503), ranged_read(100), 1, 1).next == Next::kFail);
    CHECK(judge_attempt(broken(CURLE_COULDNT_CONNECT), ranged_read(100), 1, 1).next == Next::kFail);
  }
  SECTION("attempts left: a retry, however many came before") {
    CHECK(judge_attempt(answered(503), ranged_read(100), 4, 5).next == Next::kRetry);
  }
}

TEST_CASE("http retry: refused bodies are errors that say why, never retried",
          "[http][retry][unit]") {
  SECTION("a 200 to a range past the start: the server ignores Range") {
    AttemptOutcome o{CURLE_WRITE_ERROR, 200, true, false, ""};
    const AttemptVerdict v = judge_attempt(o, ranged_read(100), 1, 5);
    REQUIRE(v.next == Next::kFail);
    REQUIRE(v.error);
    CHECK(v.error->code() == Errc::kIo);  // the server's fault: exit 1, as any other
    CHECK(v.error->http_status() == 200);
    CHECK(contains(v.error->message(), "ignored the Range header"));
    CHECK(contains(v.error->hint(), "Range support"));
  }
  SECTION("a whole-object GET answered with more than the listed size: the object changed") {
    AttemptOutcome o{CURLE_WRITE_ERROR, 200, false, true, ""};
    const AttemptVerdict v = judge_attempt(o, ranged_read(4096, true), 1, 5);
    REQUIRE(v.error);
    CHECK(v.error->code() == Errc::kCorrupt);
    CHECK(contains(v.error->message(), "larger than the 4096 bytes"));
    CHECK(contains(v.error->hint(), "must not change"));
  }
  SECTION("a 206 longer than the range asked for") {
    AttemptOutcome o{CURLE_WRITE_ERROR, 206, false, true, ""};
    const AttemptVerdict v = judge_attempt(o, ranged_read(4096, true), 1, 5);
    REQUIRE(v.error);
    CHECK(v.error->code() == Errc::kIo);
    CHECK(v.error->message() == "the server sent more than the 4096 bytes asked for");
  }
  SECTION("an un-ranged body past max_body") {
    RequestShape r;
    r.max_body = 1000;
    AttemptOutcome o{CURLE_WRITE_ERROR, 200, false, true, ""};
    const AttemptVerdict v = judge_attempt(o, r, 1, 5);
    REQUIRE(v.error);
    CHECK(v.error->message() == "the server sent more than the 1000 bytes asked for");
  }
}

TEST_CASE("http retry: curl codes map to an Errc and a hint the user can act on",
          "[http][retry][unit]") {
  struct Row {
    CURLcode rc;
    Errc code;
    std::string hint_part;
  };
  const std::vector<Row> rows = {
      {CURLE_COULDNT_RESOLVE_HOST, Errc::kIo, "does not resolve"},
      {CURLE_COULDNT_RESOLVE_PROXY, Errc::kIo, "does not resolve"},
      {CURLE_COULDNT_CONNECT, Errc::kIo, "nothing accepts connections"},
      {CURLE_OPERATION_TIMEDOUT, Errc::kTimeout, "did not answer in time"},
      {CURLE_PEER_FAILED_VERIFICATION, Errc::kPermissionDenied, "{ca_bundle}"},
      {CURLE_SSL_CACERT_BADFILE, Errc::kPermissionDenied, "{ca_bundle}"},
      {CURLE_SSL_CONNECT_ERROR, Errc::kPermissionDenied, "TLS verification failed"},
      {CURLE_UNSUPPORTED_PROTOCOL, Errc::kUnsupported, "cannot speak that protocol"},
      {CURLE_RECV_ERROR, Errc::kIo, "check the URL and that the server is up"},
      {CURLE_URL_MALFORMAT, Errc::kIo, "check the URL and that the server is up"},
  };
  for (const Row& row : rows) {
    INFO(curl_easy_strerror(row.rc));
    const Error e = curl_error(row.rc, "");
    CHECK(e.code() == row.code);
    CHECK(contains(e.hint(), row.hint_part));
    // Without curl's error buffer, its generic words stand in.
    CHECK(e.message() ==
          fmt::format("{} (curl: {})", curl_easy_strerror(row.rc), curl_easy_strerror(row.rc)));
    CHECK(e.object().empty());
  }
  const Error e = curl_error(CURLE_COULDNT_CONNECT,
                             "Failed to connect to 127.0.0.1 port 9: Connection refused");
  CHECK(e.message() ==
        fmt::format("Failed to connect to 127.0.0.1 port 9: Connection refused (curl: {})",
                    curl_easy_strerror(CURLE_COULDNT_CONNECT)));
}

TEST_CASE("http retry: the backoff doubles from base up to cap, exponent bounded",
          "[http][retry][unit]") {
  const Backoff b{milliseconds(50), milliseconds(2000)};
  CHECK(backoff_ceiling(b, 2) == milliseconds(50));  // the first retry
  CHECK(backoff_ceiling(b, 3) == milliseconds(100));
  CHECK(backoff_ceiling(b, 4) == milliseconds(200));
  CHECK(backoff_ceiling(b, 7) == milliseconds(1600));
  CHECK(backoff_ceiling(b, 8) == milliseconds(2000));
  CHECK(backoff_ceiling(b, 1000) == milliseconds(2000));
  // The exponent stops at 20: no overflow for any attempt count.
  const Backoff huge{milliseconds(1), milliseconds(1'000'000'000)};
  CHECK(backoff_ceiling(huge, 22) == milliseconds(1 << 20));
  CHECK(backoff_ceiling(huge, 4'000'000'000u) == milliseconds(1 << 20));
  // A zero base or cap still spreads retries over [0, 1] ms.
  CHECK(backoff_ceiling(Backoff{milliseconds(0), milliseconds(2000)}, 5) == milliseconds(1));
  CHECK(backoff_ceiling(Backoff{milliseconds(50), milliseconds(0)}, 5) == milliseconds(1));
}

TEST_CASE("http retry: full jitter is uniform over [0, ceiling] and repeatable from a seed",
          "[http][retry][unit]") {
  const Backoff b{milliseconds(10), milliseconds(2000)};
  constexpr unsigned kAttempt = 5;  // ceiling 80 ms
  REQUIRE(backoff_ceiling(b, kAttempt) == milliseconds(80));
  std::mt19937_64 rng(20240615);
  constexpr int kDraws = 40'000;
  std::array<int, 8> deciles{};  // [0,10), [10,20), ... [70,80]
  double sum = 0;
  std::int64_t lo = 1'000, hi = -1;
  for (int i = 0; i < kDraws; ++i) {
    const auto d = backoff_delay(b, kAttempt, rng).count();
    REQUIRE(d >= 0);
    REQUIRE(d <= 80);
    lo = std::min(lo, d);
    hi = std::max(hi, d);
    sum += static_cast<double>(d);
    ++deciles[std::min<std::size_t>(7, static_cast<std::size_t>(d / 10))];
  }
  // Both ends are reached (full jitter: a retry may go at once, or wait the whole ceiling).
  CHECK(lo == 0);
  CHECK(hi == 80);
  // Mean 40 ms; each eighth of the range holds ~1/8 of the draws (the last one 11 of 81 values).
  CHECK(sum / kDraws == Approx(40.0).margin(1.0));
  for (std::size_t k = 0; k < 7; ++k) {
    INFO(k);
    CHECK(deciles[k] == Approx(kDraws * 10.0 / 81).epsilon(0.08));
  }
  CHECK(deciles[7] == Approx(kDraws * 11.0 / 81).epsilon(0.08));

  // The same seed gives the same waits; retries of different requests do not move in lockstep.
  std::mt19937_64 a(7), c(7);
  std::vector<std::int64_t> wa, wc;
  for (int i = 0; i < 32; ++i) {
    wa.push_back(backoff_delay(b, 3, a).count());
    wc.push_back(backoff_delay(b, 3, c).count());
  }
  CHECK(wa == wc);
  CHECK(std::count(wa.begin(), wa.end(), wa.front()) < 8);
}

TEST_CASE("http retry: a broken transfer resumes with a Range for the missing bytes only",
          "[http][retry][unit]") {
  // A ranged GET of [1000, 1500): the first attempt asks for all of it, inclusive.
  CHECK(attempt_range(1000, 500, 0, false) == ByteRange{1000, 1499});
  // 120 bytes came before the connection broke: the retry asks for the other 380.
  CHECK(attempt_range(1000, 500, 120, false) == ByteRange{1120, 1499});
  // Only the last byte is missing.
  CHECK(attempt_range(1000, 500, 499, false) == ByteRange{1499, 1499});
  // A whole-object read: first a plain GET (no Range at all), then the rest as a range.
  CHECK_FALSE(attempt_range(0, 4096, 0, true).has_value());
  CHECK(attempt_range(0, 4096, 1024, true) == ByteRange{1024, 4095});
  // Far into a large object.
  CHECK(attempt_range(5'000'000'000ull, 8u << 20, 3u << 20, false) ==
        ByteRange{5'000'000'000ull + (3u << 20), 5'000'000'000ull + (8u << 20) - 1});
}
