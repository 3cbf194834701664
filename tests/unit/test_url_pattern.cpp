// WebDataset brace notation for dataset URLs.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "feedline/storage/url_pattern.hpp"

using namespace feedline;

TEST_CASE("brace patterns expand like WebDataset's", "[url]") {
  using storage::expand_braces;
  auto v = expand_braces("s3://b/train-{000..003}.tar");
  REQUIRE(v);
  CHECK(*v == std::vector<std::string>{"s3://b/train-000.tar", "s3://b/train-001.tar", "s3://b/train-002.tar",
                                       "s3://b/train-003.tar"});
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
  for (const char* bad : {"{1..2", "1..2}", "{}", "{a}", "{1..x}", "{{1..2}}", "{0..99999999999}"}) {
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

