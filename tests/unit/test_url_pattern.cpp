// WebDataset brace notation for dataset URLs.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "feedline/storage/url_pattern.hpp"

using namespace feedline;

TEST_CASE("brace patterns expand like WebDataset's", "[url]") {
  using storage::expand_braces;
  auto v = expand_braces("s3://b/train-{000..003}.tar");
  REQUIRE(v);
  CHECK(*v == std::vector<std::string>{"s3://b/train-000.tar", "s3://b/train-001.tar",
                                       "s3://b/train-002.tar", "s3://b/train-003.tar"});
  auto w = expand_braces("x{a,b}-{9..11}");
  REQUIRE(w);
  CHECK(*w == std::vector<std::string>{"xa-9", "xa-10", "xa-11", "xb-9", "xb-10", "xb-11"});
  auto down = expand_braces("{3..1}");
  REQUIRE(down);
  CHECK(*down == std::vector<std::string>{"3", "2", "1"});
  auto literal = expand_braces("a\\{b\\}");
  REQUIRE(literal);
  CHECK(*literal == std::vector<std::string>{"a{b}"});
  CHECK_FALSE(storage::has_brace_pattern("plain/path.tar"));
  CHECK(storage::has_brace_pattern("p/{1..2}"));
  for (const char* bad :
       {"{1..2", "1..2}", "{}", "{a}", "{1..x}", "{{1..2}}", "{0..99999999999}"}) {
    INFO(bad);
    auto r = expand_braces(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kInvalidArgument);
  }
  CHECK_FALSE(expand_braces("{0..9}{0..9}{0..9}", 999));
  // A descending range far over the limit fails before anything is allocated (libFuzzer found the
  // old check sized only against a fixed 100M, which ran it out of memory under a 4,096 limit).
  auto huge = expand_braces("{088888888..00002}.tar", 4096);
  REQUIRE_FALSE(huge);
  CHECK(huge.error().message().find("more than 4096") != std::string::npos);
}

namespace {

std::string repeat(std::string_view s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

}  // namespace

TEST_CASE("brace patterns are counted before anything is expanded", "[url]") {
  using storage::expand_braces;
  const auto t0 = std::chrono::steady_clock::now();
  // 2^24 names from two ranges, from many small groups, and from one group of comma alternatives
  // (1,048,577 of them): refused with the count, naming the pattern.
  struct Case {
    std::string pattern;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"s3://b/x-{0..4095}{0..4095}.tar",
       "'{0..4095}{0..4095}' names 16777216 objects, more than 1000000"},
      {"p/" + repeat("{0,1}", 24), "names 16777216 objects, more than 1000000"},
      {"x{0..255}{0..255}{0..255}",
       "'{0..255}{0..255}{0..255}' names 16777216 objects, more than 1000000"},
      {"{" + repeat("a,", 1 << 20) + "a}", "names 1048577 objects, more than 1000000"},
  };
  for (const auto& c : cases) {
    INFO(c.pattern.substr(0, 80));
    auto r = expand_braces(c.pattern);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kInvalidArgument);
    CHECK(r.error().message().find(c.says) != std::string::npos);
    CHECK(r.error().object().starts_with(c.pattern.substr(0, 40)));
    CHECK(r.error().what().size() < 1000);  // a 2 MB pattern is shown abbreviated
  }
  // A limit just below a 2^36 product: an expansion that built the names group by group, checking
  // as it went, would hold 2^24 names (gigabytes) before noticing.
  const std::string p36 = "{0..4095}{0..4095}{0..4095}";
  auto c36 = storage::count_brace_names(p36);
  REQUIRE(c36);
  CHECK(*c36 == std::uint64_t{1} << 36);
  auto r36 = expand_braces(p36, (std::size_t{1} << 36) - 1, std::size_t{1} << 62);
  REQUIRE_FALSE(r36);
  CHECK(r36.error().message().find("names 68719476736 objects, more than 68719476735") !=
        std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 <
        std::chrono::seconds(2));  // expanding them takes minutes
}

TEST_CASE("brace pattern counts that overflow 64 bits are refused", "[url]") {
  auto c63 = storage::count_brace_names(repeat("{0,1}", 63));
  REQUIRE(c63);
  CHECK(*c63 == std::uint64_t{1} << 63);
  for (const std::string& p : {repeat("{0,1}", 64), repeat("{0..65535}", 4), repeat("{0..4095}", 6),
                               std::string("{0..999999999999999999}{0..999999999999999999}")}) {
    INFO(p);
    auto c = storage::count_brace_names(p);
    REQUIRE_FALSE(c);
    CHECK(c.error().code() == Errc::kInvalidArgument);
    auto r = storage::expand_braces(p, SIZE_MAX, SIZE_MAX);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kInvalidArgument);
    CHECK(r.error().message().find("more than 2^64 objects") != std::string::npos);
  }
  CHECK(storage::count_brace_names("plain/name.tar") == std::uint64_t{1});
  CHECK(storage::count_brace_names("{a,b}{1..3}") == std::uint64_t{6});
  CHECK_FALSE(storage::count_brace_names("{1..2"));
}

TEST_CASE("brace patterns up to the limit expand, in order", "[url]") {
  using storage::expand_braces;
  auto million = expand_braces("s/{000..999}{000..999}");  // exactly kMaxBraceNames
  REQUIRE(million);
  REQUIRE(million->size() == storage::kMaxBraceNames);
  CHECK(million->front() == "s/000000");
  CHECK((*million)[1] == "s/000001");
  CHECK((*million)[1000] == "s/001000");
  CHECK(million->back() == "s/999999");
  REQUIRE_FALSE(expand_braces("s/{000..999}{000..999}{0,1}"));

  CHECK(expand_braces("{0..9}{0..9}{0..9}", 1000).value().size() == 1000);
  CHECK(expand_braces("{a,b}{2..1}{x,}-\\{z\\}") ==
        std::vector<std::string>{"a2x-{z}", "a2-{z}", "a1x-{z}", "a1-{z}", "b2x-{z}", "b2-{z}",
                                 "b1x-{z}", "b1-{z}"});
  CHECK(expand_braces("{010..008}") == std::vector<std::string>{"010", "009", "008"});
  CHECK(expand_braces("") == std::vector<std::string>{""});
}

TEST_CASE("brace patterns whose names would take too much memory are refused", "[url]") {
  using storage::expand_braces;
  // 100 KB of common prefix times 10,000 names is a gigabyte of names.
  const std::string prefix(100'000, 'a');
  auto r = expand_braces(prefix + "{0000..9999}");
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::kInvalidArgument);
  CHECK(r.error().message().find("names 10000 objects taking") != std::string::npos);
  CHECK(r.error().message().find("more than 256") != std::string::npos);
  CHECK(r.error().what().size() < 1000);
  // The same under a cap of its own size is accepted; a byte less is not.
  const std::size_t need = 10 * (sizeof(std::string) + 3 + 1);  // "x" + one digit + ".t"
  CHECK(expand_braces("x{0..9}.t", 100, need).value().size() == 10);
  CHECK_FALSE(expand_braces("x{0..9}.t", 100, need - 1));
}
