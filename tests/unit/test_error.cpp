#include <catch2/catch.hpp>

#include <cerrno>

#include "feedline/core/error.hpp"

using feedline::Errc;
using feedline::Error;

TEST_CASE("errors render as one line with object, offset and hint", "[core][error]") {
  Error e = Error::from_errno(ENOENT, "opening for read")
                .with_object("/data/x.bin")
                .with_offset(4096)
                .with_hint("check the path");
  CHECK(e.code() == Errc::kNotFound);
  CHECK(e.sys_errno() == ENOENT);
  CHECK(e.what() ==
        "not found: /data/x.bin at offset 4096: opening for read: No such file or directory (check "
        "the path)");
  CHECK(e.what().find('\n') == std::string::npos);
}

TEST_CASE("errno maps to codes users can branch on", "[core][error]") {
  CHECK(Error::from_errno(EACCES, "x").code() == Errc::kPermissionDenied);
  CHECK(Error::from_errno(EISDIR, "x").code() == Errc::kIsDirectory);
  CHECK(Error::from_errno(EIO, "x").code() == Errc::kIo);
  CHECK(Error::from_errno(ENOMEM, "x").code() == Errc::kResourceExhausted);
}

TEST_CASE("retryable() classifies transient failures", "[core][error]") {
  CHECK(Error::from_errno(EAGAIN, "read").retryable());
  CHECK(Error::from_errno(ECONNRESET, "recv").retryable());
  CHECK(Error(Errc::kTimeout, "no answer").retryable());
  CHECK(Error(Errc::kIo, "server busy").with_http_status(503).retryable());
  CHECK(Error(Errc::kIo, "throttled").with_http_status(429).retryable());
  CHECK_FALSE(Error(Errc::kNotFound, "gone").with_http_status(404).retryable());
  CHECK_FALSE(Error::from_errno(ENOENT, "open").retryable());
  CHECK_FALSE(Error::from_errno(EIO, "read").retryable());
}

namespace {
feedline::Result<int> half(int v) {
  if (v % 2) return feedline::fail(Errc::kInvalidArgument, "odd");
  return v / 2;
}
feedline::Result<int> quarter(int v) {
  FEEDLINE_ASSIGN_OR_RETURN(int h, half(v));
  return half(h);
}
}  // namespace

TEST_CASE("FEEDLINE_ASSIGN_OR_RETURN propagates the first error", "[core][error]") {
  REQUIRE(quarter(8).value() == 2);
  auto r = quarter(6);
  REQUIRE_FALSE(r);
  CHECK(r.error().message() == "odd");
  CHECK_FALSE(quarter(7));
}
