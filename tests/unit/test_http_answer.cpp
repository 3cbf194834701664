// What a ranged GET's answer headers must say before its body is taken (Content-Range, its
// Content-Length, the object's known size), Retry-After, and curl's words for answers that are
// not HTTP, without a socket. The same checks against a scripted server: test_http_hostile.cpp.
#include <catch2/catch.hpp>

#include <curl/curl.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "detail/answer.hpp"
#include "detail/retry.hpp"
#include "test_support.hpp"

using feedline::testing::contains;

using namespace feedline;
using namespace feedline::transports::detail;

namespace {

AnswerHeaders answer_206(std::string_view range, std::optional<std::uint64_t> length = {}) {
  AnswerHeaders a;
  a.status = 206;
  a.has_range = true;
  a.range = parse_content_range(range);
  a.has_length = length.has_value();
  a.length = length;
  return a;
}

AnswerHeaders answer_200(std::optional<std::uint64_t> length) {
  AnswerHeaders a;
  a.status = 200;
  a.has_length = length.has_value();
  a.length = length;
  return a;
}

}  // namespace

TEST_CASE("http answer: Content-Range and Content-Length parse strictly", "[http][unit]") {
  const auto r = parse_content_range("bytes 100-199/1000\r\n");
  REQUIRE(r);
  CHECK(*r->first == 100);
  CHECK(*r->last == 199);
  CHECK(*r->total == 1000);
  const auto star = parse_content_range(" bytes 0-9/*");
  REQUIRE(star);
  CHECK_FALSE(star->total);
  const auto unsatisfied = parse_content_range("bytes */0");
  REQUIRE(unsatisfied);
  CHECK_FALSE(unsatisfied->first);
  CHECK(*unsatisfied->total == 0);
  for (const char* bad :
       {"", "bytes", "bytes 1-2", "items 0-9/10", "bytes 9-0/10", "bytes 0-10/10", "bytes -1-5/10",
        "bytes 0-5/x", "bytes */*", "bytes 0-99999999999999999999/*", "bytes 0 -9/10"}) {
    INFO(bad);
    CHECK_FALSE(parse_content_range(bad));
  }
  CHECK(parse_content_length(" 4096\r\n") == 4096u);
  CHECK_FALSE(parse_content_length("-5"));
  CHECK_FALSE(parse_content_length("99999999999999999999"));  // past 2^64
  CHECK_FALSE(parse_content_length("12abc"));
  CHECK_FALSE(parse_content_length(""));
}

TEST_CASE(
    "http answer: a 206 must carry exactly the bytes asked for, of an object of the known size",
    "[http][unit]") {
  const RangeAsked asked{100, 199, 1000, false};
  SECTION("the bytes asked for: taken") {
    CHECK_FALSE(check_ranged_answer(answer_206("bytes 100-199/1000", 100), asked));
    CHECK_FALSE(check_ranged_answer(answer_206("bytes 100-199/1000"), asked));  // chunked
  }
  SECTION("shifted by one, truthfully labelled: a data error naming both ranges") {
    const auto e = check_ranged_answer(answer_206("bytes 101-200/1000", 100), asked);
    REQUIRE(e);
    CHECK(e->code() == Errc::kCorrupt);
    CHECK(contains(e->message(), "bytes 100-199"));
    CHECK(contains(e->message(), "bytes 101-200"));
    CHECK_FALSE(e->hint().empty());
  }
  SECTION("no Content-Range, or one that does not parse") {
    AnswerHeaders none;
    none.status = 206;
    const auto e = check_ranged_answer(none, asked);
    REQUIRE(e);
    CHECK(e->code() == Errc::kCorrupt);
    CHECK(contains(e->message(), "no Content-Range"));
    const auto unreadable = check_ranged_answer(answer_206("bytes hundred-199/1000"), asked);
    REQUIRE(unreadable);
    CHECK(contains(unreadable->message(), "unreadable Content-Range"));
    CHECK(check_ranged_answer(answer_206("bytes */1000"), asked));  // no range at all
  }
  SECTION("a total that is not the object's known size: it changed, or another object") {
    const auto e = check_ranged_answer(answer_206("bytes 100-199/2000", 100), asked);
    REQUIRE(e);
    CHECK(e->code() == Errc::kCorrupt);
    CHECK(contains(e->message(), "2000"));
    CHECK(contains(e->message(), "1000 bytes it had when listed"));
  }
  SECTION("a Content-Length that disagrees with the range, or does not parse") {
    const auto e = check_ranged_answer(answer_206("bytes 100-199/1000", 101), asked);
    REQUIRE(e);
    CHECK(contains(e->message(), "Content-Length of 101"));
    AnswerHeaders huge = answer_206("bytes 100-199/1000");
    huge.has_length = true;  // "99999999999999999999": no number
    const auto h = check_ranged_answer(huge, asked);
    REQUIRE(h);
    CHECK(contains(h->message(), "unreadable Content-Length"));
  }
  SECTION("more than asked for, or fewer before the object's end") {
    CHECK(check_ranged_answer(answer_206("bytes 100-299/1000"), asked));
    const auto fewer = check_ranged_answer(answer_206("bytes 100-149/1000"), asked);
    REQUIRE(fewer);
    CHECK(contains(fewer->message(), "only bytes 100-149"));
  }
  SECTION("fewer because the object ends there: a short read, taken") {
    const RangeAsked tail{900, 1099, 1000, false};
    CHECK_FALSE(check_ranged_answer(answer_206("bytes 900-999/1000", 100), tail));
    // ... with a total of "*": the known size says where the object ends.
    CHECK_FALSE(check_ranged_answer(answer_206("bytes 900-999/*"), tail));
    CHECK(check_ranged_answer(answer_206("bytes 900-949/*"), tail));
  }
  SECTION("the size unknown (a read that learns it): the range alone is checked") {
    const RangeAsked guess{0, 1023, std::nullopt, false};
    CHECK_FALSE(check_ranged_answer(answer_206("bytes 0-99/100"), guess));
    CHECK_FALSE(check_ranged_answer(answer_206("bytes 0-99/*"), guess));
    CHECK(check_ranged_answer(answer_206("bytes 1-100/101"), guess));
    CHECK(check_ranged_answer(answer_206("bytes 0-99/5000"), guess));  // fewer, and more to come
  }
}

TEST_CASE("http answer: a 200 to a ranged GET from offset 0 must carry the object's known size",
          "[http][unit]") {
  const RangeAsked first{0, 4095, 100000, false};
  CHECK_FALSE(check_ranged_answer(answer_200(100000), first));
  CHECK_FALSE(
      check_ranged_answer(answer_200(std::nullopt), first));  // chunked: counted as it comes
  const auto e = check_ranged_answer(answer_200(100001), first);
  REQUIRE(e);
  CHECK(e->code() == Errc::kCorrupt);
  CHECK(contains(e->message(), "100001 bytes"));
  CHECK(contains(e->message(), "100000 bytes it had when listed"));
  AnswerHeaders unreadable = answer_200(std::nullopt);
  unreadable.has_length = true;
  CHECK(check_ranged_answer(unreadable, first));
  // Size unknown: any Content-Length is the object's.
  CHECK_FALSE(check_ranged_answer(answer_200(5), RangeAsked{0, 4095, std::nullopt, false}));
  // Other statuses say what happened themselves.
  AnswerHeaders other;
  other.status = 503;
  CHECK_FALSE(check_ranged_answer(other, first));
}

TEST_CASE("http answer: Retry-After as seconds or an HTTP date", "[http][unit]") {
  const std::time_t now = 1'700'000'000;  // 2023-11-14T22:13:20Z
  CHECK(parse_retry_after("120", now) == std::chrono::seconds(120));
  CHECK(parse_retry_after(" 0\r\n", now) == std::chrono::seconds(0));
  // A year, or more digits than fit: a long wait (the client caps it), not an unreadable one.
  CHECK(parse_retry_after("31536000", now) == std::chrono::seconds(31'536'000));
  CHECK(parse_retry_after("99999999999999999999999", now) >= std::chrono::seconds(31'536'000));
  CHECK(parse_retry_after("Tue, 14 Nov 2023 22:15:20 GMT", now) == std::chrono::seconds(120));
  CHECK(parse_retry_after("Tue, 14 Nov 2023 22:00:00 GMT", now) == std::chrono::seconds(0));
  CHECK_FALSE(parse_retry_after("soon", now));
  CHECK_FALSE(parse_retry_after("-5", now));
  CHECK_FALSE(parse_retry_after("12abc", now));
  CHECK_FALSE(parse_retry_after("", now));
}

TEST_CASE("http answer: an answer that is not HTTP is the server's fault, said in its words",
          "[http][retry][unit]") {
  const std::string curl_words = "Received HTTP/0.9 when not allowed";
  // On a reused connection: the bytes an earlier answer sent past its Content-Length.
  const Error reused = curl_error(CURLE_UNSUPPORTED_PROTOCOL, curl_words, true);
  CHECK(reused.code() == Errc::kIo);
  CHECK(contains(reused.message(), "more bytes than its Content-Length"));
  CHECK(contains(reused.message(), curl_words));
  CHECK(contains(reused.hint(), "Content-Length"));
  // On a new connection: whatever answers there does not speak HTTP.
  const Error fresh = curl_error(CURLE_WEIRD_SERVER_REPLY, curl_words, false);
  CHECK(fresh.code() == Errc::kIo);
  CHECK(contains(fresh.message(), "not HTTP"));
  // A malformed header (a negative Content-Length): curl's words, a hint that names the server.
  const Error weird = curl_error(CURLE_WEIRD_SERVER_REPLY, "Invalid Content-Length: value");
  CHECK(weird.code() == Errc::kIo);
  CHECK(contains(weird.message(), "Invalid Content-Length"));
  CHECK(contains(weird.hint(), "breaks HTTP"));
  // Judged as an attempt: failed at once (no retry), exit 1's code.
  AttemptOutcome o{CURLE_UNSUPPORTED_PROTOCOL, 0, false, false, curl_words};
  o.reused_connection = true;
  RequestShape r;
  r.ranged = true;
  r.range_length = 4096;
  const AttemptVerdict v = judge_attempt(o, r, 1, 5);
  REQUIRE(v.next == AttemptVerdict::Next::kFail);
  CHECK(v.error->code() == Errc::kIo);
  CHECK(contains(v.error->message(), "more bytes than its Content-Length"));
}
