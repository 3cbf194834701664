// UniqueFd: the one owner of a file descriptor. Move-only; the destructor closes it (errors of that
// close are lost, as they must be in a destructor: a writer that needs to see them calls close()).
#pragma once

#include <unistd.h>

#include <cerrno>
#include <utility>

namespace feedline {

class UniqueFd {
 public:
  UniqueFd() noexcept = default;
  // Takes ownership of fd (-1: owns nothing).
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  ~UniqueFd() { reset(); }

  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }

  // Gives the descriptor up without closing it.
  int release() noexcept { return std::exchange(fd_, -1); }
  // Closes what it owns (ignoring close's error) and takes fd.
  void reset(int fd = -1) noexcept {
    const int old = std::exchange(fd_, fd);
    if (old >= 0) ::close(old);
  }
  // Closes now and says how it went: 0, or the errno of close() (a write-back error on NFS, a
  // full disk). Owns nothing afterwards, whatever the outcome (the descriptor is gone on Linux).
  int close() noexcept {
    const int old = release();
    if (old < 0) return 0;
    return ::close(old) == 0 ? 0 : errno;
  }

 private:
  int fd_ = -1;
};

}  // namespace feedline
