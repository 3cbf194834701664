// zstd: round trips, frames from the zstd tool, damaged frames, content sizes, and the
// "built without zstd" answers of a build that lacks it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "feedline/loader/codec.hpp"
#include "test_support.hpp"

using namespace feedline;
using namespace feedline::loader;
namespace fs = std::filesystem;

namespace {

// Runs of 64 random bytes and 64 repeated bytes: compresses to about half.
std::vector<std::byte> half_compressible(std::size_t n, std::uint64_t seed) {
  auto v = testing::pattern_bytes(n, seed);
  for (std::size_t i = 0; i < n; ++i) {
    if ((i / 64) % 2 == 1) v[i] = std::byte{'a'};
  }
  return v;
}

}  // namespace

TEST_CASE("zstd: a build without zstd says so", "[codec][formats]") {
  if (zstd_available()) {
    CHECK(zstd_level_range().max >= 19);
    return;
  }
  const std::vector<std::byte> some(100, std::byte{1});
  std::vector<std::byte> out(100);
  Decompressor d;
  auto r = d.decompress(some, out);
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::kUnsupported);
  CHECK(r.error().what().find("built without zstd") != std::string::npos);
  CHECK(Decompressor::content_size(some).error().code() == Errc::kUnsupported);
  CHECK(zstd_compress(some, 3).error().code() == Errc::kUnsupported);
}

TEST_CASE("zstd: round trips and content sizes", "[codec][formats]") {
  if (!zstd_available())
    return testing::skip_test("built without zstd (the test above checks that build)");
  Compressor c;
  Decompressor d;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{4096}, std::size_t{1} << 20,
                        (std::size_t{3} << 20) + 7}) {
    INFO("size " << n);
    const auto raw = half_compressible(n, n);
    auto frame = c.compress(raw, 3);
    REQUIRE(frame);
    auto size = Decompressor::content_size(*frame);
    REQUIRE(size);
    CHECK(*size == n);
    std::vector<std::byte> out(n + 16);
    auto got = d.decompress(*frame, out);  // the same context, reused
    REQUIRE(got);
    CHECK(*got == n);
    CHECK(std::equal(raw.begin(), raw.end(), out.begin()));
    if (n >= 4096) CHECK(frame->size() < n * 6 / 10);
  }
}

TEST_CASE("zstd: concatenated frames decode as one, sizes summed", "[codec][formats]") {
  if (!zstd_available()) return testing::skip_test("built without zstd");
  const auto a = testing::pattern_bytes(5000, 1), b = testing::pattern_bytes(7000, 2);
  Compressor c;
  std::vector<std::byte> frames;
  REQUIRE(c.compress_append(a, 1, frames));
  const std::size_t first = frames.size();
  REQUIRE(c.compress_append(b, 19, frames));
  CHECK(frames.size() > first);
  CHECK(Decompressor::content_size(frames).value() == 12000);
  std::vector<std::byte> out(12000);
  Decompressor d;
  REQUIRE(d.decompress(frames, out).value() == 12000);
  CHECK(std::memcmp(out.data(), a.data(), 5000) == 0);
  CHECK(std::memcmp(out.data() + 5000, b.data(), 7000) == 0);
}

TEST_CASE("zstd: damaged frames are corrupt, with zstd's reason", "[codec][formats]") {
  if (!zstd_available()) return testing::skip_test("built without zstd");
  const auto raw = half_compressible(100000, 3);
  auto frame = zstd_compress(raw, 3).value();
  std::vector<std::byte> out(raw.size());
  Decompressor d;

  SECTION("a flipped byte in the middle (caught by the frame checksum at the latest)") {
    auto bad = frame;
    bad[bad.size() / 2] ^= std::byte{0x5a};
    auto r = d.decompress(bad, out);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kCorrupt);
    CHECK(r.error().message().starts_with("corrupt zstd frame: "));
    CHECK(r.error().message().size() > std::string("corrupt zstd frame: ").size());
  }
  SECTION("a truncated frame") {
    auto bad = std::vector<std::byte>(frame.begin(), frame.begin() + frame.size() / 3);
    auto r = d.decompress(bad, out);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kCorrupt);
    CHECK(Decompressor::content_size(bad).error().code() == Errc::kCorrupt);
  }
  SECTION("not zstd at all") {
    const auto junk = testing::pattern_bytes(1000, 9);
    auto r = d.decompress(junk, out);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kCorrupt);
    CHECK(r.error().what().find("Unknown frame descriptor") != std::string::npos);
    auto cs = Decompressor::content_size(junk);
    REQUIRE_FALSE(cs);
    CHECK(cs.error().code() == Errc::kCorrupt);
    CHECK(cs.error().message().find("not a zstd frame") != std::string::npos);
  }
  SECTION("empty input") {
    CHECK(d.decompress({}, out).error().code() == Errc::kCorrupt);
    CHECK(Decompressor::content_size({}).error().code() == Errc::kCorrupt);
  }
  SECTION("an output buffer smaller than the declared size is the caller's mistake") {
    std::vector<std::byte> small(raw.size() - 1);
    auto r = d.decompress(frame, small);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kInvalidArgument);
    CHECK(r.error().message().find(std::to_string(raw.size())) != std::string::npos);
  }
  SECTION("a frame that decodes to fewer bytes than it declares is corrupt (fuzz_zstd_tar)") {
    // A damaged zstd v0.7 (legacy) frame: libzstd decodes it "successfully" to fewer bytes than
    // its header declares. A member cut short without an error would be silently wrong data.
    const unsigned char legacy[] = {0x27, 0xb5, 0x2f, 0xfd, 0x24, 0x99, 0xe9, 0xd8, 0x51};
    const ConstBytes f(reinterpret_cast<const std::byte*>(legacy), sizeof legacy);
    std::vector<std::byte> buf(64 * 1024);
    if (auto declared = Decompressor::content_size(f); declared && *declared <= buf.size()) {
      buf.resize(static_cast<std::size_t>(*declared));
      auto r = d.decompress(f, buf);
      REQUIRE_FALSE(r);
      CHECK(r.error().code() == Errc::kCorrupt);
    } else {
      CHECK_FALSE(d.decompress(f, buf));  // a libzstd without legacy support refuses it outright
    }
  }
  SECTION("the context still works after errors") {
    auto bad = frame;
    bad[bad.size() / 2] ^= std::byte{0x5a};
    REQUIRE_FALSE(d.decompress(bad, out));
    REQUIRE(d.decompress(frame, out).value() == raw.size());
    CHECK(out == raw);
  }
}

TEST_CASE("zstd: compression levels are checked", "[codec][formats]") {
  if (!zstd_available()) return testing::skip_test("built without zstd");
  const auto raw = testing::pattern_bytes(100, 1);
  const ZstdLevelRange r = zstd_level_range();
  CHECK(zstd_compress(raw, r.max).has_value());
  CHECK(zstd_compress(raw, r.min).has_value());
  CHECK(zstd_compress(raw, r.max + 1).error().code() == Errc::kInvalidArgument);
}

TEST_CASE("zstd: frames written by the zstd tool", "[codec][formats]") {
  if (!zstd_available()) return testing::skip_test("built without zstd");
  if (std::system("zstd --version >/dev/null 2>&1") != 0) {
    return testing::skip_test("the zstd tool is not installed: no interoperability check");
  }
  const fs::path dir = testing::scratch_dir("codec");
  const auto raw = half_compressible(300000, 4);
  testing::write_file(dir / "x.bin", raw);
  const std::string x = (dir / "x.bin").string();
  REQUIRE(std::system(("zstd -q -f -5 '" + x + "' -o '" + x + ".zst'").c_str()) == 0);
  // From a pipe, the tool cannot know the size and leaves it out of the frame header.
  REQUIRE(std::system(("zstd -q -c < '" + x + "' > '" + x + ".piped.zst'").c_str()) == 0);

  const auto frame = testing::read_file(x + ".zst");
  CHECK(Decompressor::content_size(frame).value() == raw.size());
  std::vector<std::byte> out(raw.size());
  Decompressor d;
  REQUIRE(d.decompress(frame, out).value() == raw.size());
  CHECK(out == raw);

  const auto piped = testing::read_file(x + ".piped.zst");
  auto cs = Decompressor::content_size(piped);
  REQUIRE_FALSE(cs);
  CHECK(cs.error().code() == Errc::kUnsupported);
  REQUIRE(d.decompress(piped, out).value() ==
          raw.size());  // still decodes into a big-enough buffer
  CHECK(out == raw);
}
