// Shared helpers for the unit tests: scratch files on a real disk, deterministic content, tests
// that say they were skipped, and one test case per row of a table.
#pragma once

#include <fcntl.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

namespace feedline::testing {

// Seconds of the steady clock since t0.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// True when `part` occurs in `text`.
inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The bytes of a whole file (a failed test when it cannot be opened).
inline std::vector<std::byte> read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  if (!c.empty()) std::memcpy(out.data(), c.data(), c.size());
  return out;
}

namespace detail {
// The reasons skip_test() gave in the test case now running; test_skip.cpp's listener reads and
// clears them when the case ends.
inline std::vector<std::string>& skip_reasons() {
  static std::vector<std::string> reasons;
  return reasons;
}
}  // namespace detail

// skip_test(reason): this test case, or a part of it, cannot run here (a build without the
// feature, a kernel or a machine that refuses it); the caller returns (or moves on) after it.
// Catch2 2.13 has no SKIP(): when the case ends without a failure, the listener in test_skip.cpp
// prints "SKIPPED: <reason>", which CTest's SKIP_REGULAR_EXPRESSION (tests/unit/CMakeLists.txt)
// reports as Skipped. A case that also fails prints no such line and stays a failure.
//   if (!zstd_available()) return testing::skip_test("built without zstd");
inline void skip_test(std::string reason) { detail::skip_reasons().push_back(std::move(reason)); }

namespace detail {
struct FunctionInvoker final : Catch::ITestInvoker {
  explicit FunctionInvoker(std::function<void()> body) : body_(std::move(body)) {}
  void invoke() const override { body_(); }
  std::function<void()> body_;
};
}  // namespace detail

// register_test(name, tags, body): a Catch test case made at static-initialisation time, for
// tables whose every row should be its own test case (and so its own CTest line: a row that
// skips or fails shows alone, not folded into its neighbours). Call it from a namespace-scope
// initialiser, after the table it reads:
//   const bool kRegistered = [] { for (const Row& r : kTable) register_test(...); return true; }();
inline void register_test(const std::string& name, const std::string& tags,
                          std::function<void()> body,
                          const std::source_location where = std::source_location::current()) {
  // Catch keeps the invoker (in a shared_ptr) and copies the name and tags.
  const Catch::AutoReg registration(new detail::FunctionInvoker(std::move(body)),
                                    Catch::SourceLineInfo(where.file_name(), where.line()),
                                    Catch::StringRef(), Catch::NameAndTags{name, tags});
}

inline std::filesystem::path scratch_dir(const std::string& name) {
  auto dir =
      std::filesystem::path(FEEDLINE_TEST_TMPDIR) / (name + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::vector<std::byte> pattern_bytes(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> out(n);
  std::mt19937_64 rng(seed);
  for (auto& b : out) b = static_cast<std::byte>(rng() & 0xff);
  return out;
}

inline void write_file(const std::filesystem::path& p, const std::vector<std::byte>& bytes) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + p.string());
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) throw std::runtime_error("cannot write " + p.string());
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

}  // namespace feedline::testing
