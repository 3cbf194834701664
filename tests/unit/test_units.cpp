#include <sys/mman.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "feedline/core/bytes.hpp"
#include "feedline/core/units.hpp"

using namespace feedline;
using namespace std::chrono_literals;

TEST_CASE("sizes parse with fio's binary meaning of k/m/g", "[core][units]") {
  CHECK(parse_size("4096").value() == 4096);
  CHECK(parse_size("4k").value() == 4096);
  CHECK(parse_size("4K").value() == 4096);
  CHECK(parse_size("4KB").value() == 4096);
  CHECK(parse_size("4KiB").value() == 4096);
  CHECK(parse_size("1MiB").value() == 1048576);
  CHECK(parse_size("1m").value() == 1048576);
  CHECK(parse_size("1G").value() == (1ull << 30));
  CHECK(parse_size("2t").value() == (2ull << 40));
  CHECK(parse_size("1.5k").value() == 1536);
  CHECK(parse_size("114.7KiB").value() == 117453);  // rounds to the nearest byte
  CHECK(parse_size(" 8 MiB ").value() == 8ull << 20);
  CHECK(parse_size("0").value() == 0);
  CHECK(parse_size("12B").value() == 12);
}

TEST_CASE("malformed sizes are rejected with the text in the message", "[core][units]") {
  for (const char* bad :
       {"4x", "", "k", "-1", "1.2.3", "4 kk", "0.3", "99999999999999999999", "20000000P", "1e3"}) {
    INFO(bad);
    auto r = parse_size(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kInvalidArgument);
    CHECK(r.error().message().find(std::string("'") + bad + "'") != std::string::npos);
  }
}

TEST_CASE("durations parse; a bare number is seconds", "[core][units]") {
  CHECK(parse_duration("500ms").value() == 500ms);
  CHECK(parse_duration("10s").value() == 10s);
  CHECK(parse_duration("10").value() == 10s);
  CHECK(parse_duration("2m").value() == 120s);
  CHECK(parse_duration("1h").value() == 3600s);
  CHECK(parse_duration("250us").value() == 250us);
  CHECK(parse_duration("75ns").value() == 75ns);
  CHECK(parse_duration("1.5s").value() == 1500ms);
  CHECK_FALSE(parse_duration("10parsecs"));
  CHECK_FALSE(parse_duration("s"));
  CHECK_FALSE(parse_duration("-5s"));
}

TEST_CASE("reports print readable units", "[core][units]") {
  CHECK(format_bytes(4096) == "4.00 KiB");
  CHECK(format_bytes(1536.0 * 1024 * 1024) == "1.50 GiB");
  CHECK(format_bytes(100) == "100 B");
  CHECK(format_rate(1.02e9) == "1.02 GB/s");
  CHECK(format_rate(850e6) == "850 MB/s");
  CHECK(format_duration_ns(812) == "812 ns");
  CHECK(format_duration_ns(1.25e6) == "1.25 ms");
  CHECK(format_count(58200) == "58.2k");
}

TEST_CASE("AlignedBuffer::prefault makes the asked-for pages resident, and no more", "[core]") {
  constexpr std::size_t kPages = 64;
  auto buf = AlignedBuffer::allocate(kPages * kPageAlign).value();
  auto resident = [&] {
    std::vector<unsigned char> vec(kPages);
    REQUIRE(::mincore(buf.data(), buf.size(), vec.data()) == 0);
    return static_cast<std::size_t>(
        std::count_if(vec.begin(), vec.end(), [](unsigned char v) { return v & 1; }));
  };
  // A fresh allocation of this size is mapped but not yet backed (glibc mmaps it).
  const std::size_t before = resident();
  buf.prefault(16 * kPageAlign + 1);  // 17 pages
  const std::size_t after = resident();
  CHECK(after >= 17);
  CHECK(after - before <= 17);
  buf.prefault(std::size_t{1} << 40);  // clamped to the buffer
  CHECK(resident() == kPages);
  AlignedBuffer().prefault(4096);  // empty: nothing to do
}
