// Shared helpers for the unit tests: scratch files on a real disk and deterministic content.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace feedline::testing {

inline std::filesystem::path scratch_dir(const std::string& name) {
  auto dir = std::filesystem::path(FEEDLINE_TEST_TMPDIR) / (name + "-" + std::to_string(::getpid()));
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
