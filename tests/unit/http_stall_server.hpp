// Servers that never let a request finish, for the tests of stopping (Ctrl-C) and cancel(): on
// 127.0.0.1, one thread per connection, test-only.
//  - kSilent: accepts, reads the request, never answers.
//  - kTrickleBody: answers the status line and headers at once (200, or 206 with a Content-Range
//    for a ranged request; a Content-Length of `size` or of the range), then one body byte per
//    `interval`.
//  - kTrickle: the same answer, every byte of it (status line and headers too) one per
//    `interval`: a HEAD gets no further than a GET.
// Everything ends when the server is destroyed (connections shut down, threads joined), and a
// connection thread ends when the client goes away.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace feedline::test {

class StallServer {
 public:
  enum class Mode { kSilent, kTrickleBody, kTrickle };

  explicit StallServer(Mode mode, std::uint64_t size = 1 << 20,
                       std::chrono::milliseconds interval = std::chrono::milliseconds(50))
      : mode_(mode), size_(size), interval_(interval) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 64);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~StallServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    acceptor_.join();
    std::lock_guard lock(mu_);
    for (int c : conns_) ::shutdown(c, SHUT_RDWR);
    for (auto& t : workers_) t.join();
    for (int c : conns_) ::close(c);  // closed here only: a descriptor is never used after close
  }

  int port() const { return port_; }
  int requests() const { return requests_.load(); }
  std::uint64_t bytes_sent() const { return sent_.load(); }

 private:
  void accept_loop() {
    while (!stop_) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::lock_guard lock(mu_);
      conns_.push_back(c);
      workers_.emplace_back([this, c] { serve(c); });
    }
  }

  // Waits up to `d` for the client to close (or the server to stop); true while all is well.
  bool pause(int c, std::chrono::milliseconds d) {
    const auto until = std::chrono::steady_clock::now() + d;
    while (!stop_ && std::chrono::steady_clock::now() < until) {
      pollfd p{c, POLLIN, 0};
      if (::poll(&p, 1, 10) > 0) {
        char b[512];
        if (::recv(c, b, sizeof b, MSG_DONTWAIT) <= 0) return false;  // the client went away
      }
    }
    return !stop_;
  }

  void serve(int c) {
    std::string head;
    char tmp[4096];
    while (head.find("\r\n\r\n") == std::string::npos) {
      const ssize_t n = ::recv(c, tmp, sizeof tmp, 0);
      if (n <= 0) return;
      head.append(tmp, static_cast<std::size_t>(n));
    }
    ++requests_;
    if (mode_ != Mode::kSilent) {
      // A ranged request gets a 206 for the range asked; bytes are all 'x'.
      std::uint64_t first = 0, last = size_ - 1;
      std::string lower = head;
      for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      const auto r = lower.find("range: bytes=");
      std::string status = "200 OK";
      std::string extra;
      if (r != std::string::npos) {
        first = std::stoull(lower.substr(r + 13));
        const auto dash = lower.find('-', r + 13);
        last = std::min<std::uint64_t>(size_ - 1, std::stoull(lower.substr(dash + 1)));
        status = "206 Partial Content";
        extra = "Content-Range: bytes " + std::to_string(first) + "-" + std::to_string(last) + "/" +
                std::to_string(size_) + "\r\n";
      }
      const std::string answer = "HTTP/1.1 " + status +
                                 "\r\nContent-Length: " + std::to_string(last - first + 1) +
                                 "\r\n" + extra + "\r\n";
      if (mode_ == Mode::kTrickleBody) {
        if (::send(c, answer.data(), answer.size(), MSG_NOSIGNAL) < 0) return;
      } else {
        for (char ch : answer) {
          if (!pause(c, interval_) || ::send(c, &ch, 1, MSG_NOSIGNAL) != 1) return;
          ++sent_;
        }
      }
      for (std::uint64_t i = first; i <= last; ++i) {
        if (!pause(c, interval_)) break;
        if (::send(c, "x", 1, MSG_NOSIGNAL) != 1) break;
        ++sent_;
      }
    } else {
      while (pause(c, std::chrono::milliseconds(100))) {
      }
    }
  }

  Mode mode_;
  std::uint64_t size_;
  std::chrono::milliseconds interval_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::atomic<std::uint64_t> sent_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> conns_;
  std::vector<std::thread> workers_;
};

}  // namespace feedline::test
