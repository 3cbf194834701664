// A scripted HTTP/1.1 server on 127.0.0.1 for transport tests: each request (method, target,
// headers) goes to a handler that returns the raw bytes to send and whether to close (or reset)
// the connection afterwards. Plain POSIX sockets, one thread per connection; test-only.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace feedline::test {

struct HttpTestRequest {
  std::string method;
  std::string target;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

struct HttpTestReply {
  std::string bytes;   // status line, headers and (part of) the body, exactly as sent
  bool close = false;  // close the connection after sending
  bool reset = false;  // ... with a TCP RST (SO_LINGER 0)
  // Sent after `bytes`, once `pause` has passed (bytes past a body's Content-Length that arrive
  // on their own, as the next answer's start would).
  std::string later = {};
  std::chrono::milliseconds pause = std::chrono::milliseconds(0);
};

class HttpTestServer {
 public:
  using Handler = std::function<HttpTestReply(const HttpTestRequest&)>;

  explicit HttpTestServer(Handler handler) : handler_(std::move(handler)) {
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

  ~HttpTestServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    acceptor_.join();
    std::unique_lock lock(mu_);
    for (int c : conns_) {
      if (c >= 0) ::shutdown(c, SHUT_RDWR);
    }
    lock.unlock();  // serve() takes it to close its connection
    for (auto& t : workers_) t.join();
  }

  int port() const { return port_; }
  // Connections accepted so far.
  std::size_t connections() const {
    std::lock_guard lock(mu_);
    return conns_.size();
  }
  std::vector<HttpTestRequest> requests() const {
    std::lock_guard lock(mu_);
    return seen_;
  }

  static std::string reply(int status, const std::string& body,
                           const std::vector<std::string>& headers = {}) {
    std::string out = "HTTP/1.1 " + std::to_string(status) +
                      " X\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    for (const auto& h : headers) out += h + "\r\n";
    return out + "\r\n" + body;
  }

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

  // Closes a connection and forgets its number: the destructor shuts down the connections still
  // open, and a closed number may already be another descriptor's (a client's socket, an event
  // loop's eventfd) in this process.
  void close_connection(int c) {
    std::lock_guard lock(mu_);
    std::replace(conns_.begin(), conns_.end(), c, -1);
    ::close(c);
  }

  void serve(int c) {
    std::string buf;
    char tmp[4096];
    for (;;) {
      std::size_t end;
      while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
        const ssize_t n = ::recv(c, tmp, sizeof tmp, 0);
        if (n <= 0) {
          close_connection(c);
          return;
        }
        buf.append(tmp, static_cast<std::size_t>(n));
      }
      HttpTestRequest req;
      std::string head = buf.substr(0, end);
      buf.erase(0, end + 4);
      std::size_t pos = head.find("\r\n");
      const std::string line = head.substr(0, pos);
      req.method = line.substr(0, line.find(' '));
      req.target = line.substr(line.find(' ') + 1, line.rfind(' ') - line.find(' ') - 1);
      while (pos != std::string::npos) {
        const std::size_t next = head.find("\r\n", pos + 2);
        const std::string h =
            head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
        const auto colon = h.find(':');
        if (colon != std::string::npos) {
          std::string name = h.substr(0, colon);
          for (char& ch : name)
            ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
          std::string value = h.substr(colon + 1);
          while (!value.empty() && value.front() == ' ') value.erase(0, 1);
          req.headers[name] = value;
        }
        pos = next;
      }
      // Request bodies (PUT): read and drop Content-Length bytes.
      if (auto cl = req.header("content-length"); !cl.empty()) {
        std::size_t want = std::stoul(cl);
        while (buf.size() < want) {
          const ssize_t n = ::recv(c, tmp, sizeof tmp, 0);
          if (n <= 0) break;
          buf.append(tmp, static_cast<std::size_t>(n));
        }
        buf.erase(0, std::min(want, buf.size()));
      }
      {
        std::lock_guard lock(mu_);
        seen_.push_back(req);
      }
      const HttpTestReply r = handler_(req);
      ::send(c, r.bytes.data(), r.bytes.size(), MSG_NOSIGNAL);
      if (!r.later.empty()) {
        std::this_thread::sleep_for(r.pause);
        ::send(c, r.later.data(), r.later.size(), MSG_NOSIGNAL);
      }
      if (r.reset) {
        linger l{1, 0};
        ::setsockopt(c, SOL_SOCKET, SO_LINGER, &l, sizeof l);
      }
      if (r.close || r.reset) {
        close_connection(c);
        return;
      }
    }
  }

  Handler handler_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<int> conns_;
  std::vector<std::thread> workers_;
  std::vector<HttpTestRequest> seen_;
};

// Test object bytes: a pattern no two nearby offsets share.
inline std::string object_bytes(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + i / 251) % 26);
  return s;
}

// Parses "bytes=A-B".
inline std::pair<std::size_t, std::size_t> range_of(const HttpTestRequest& r) {
  const std::string h = r.header("range");
  const auto eq = h.find('='), dash = h.find('-');
  return {std::stoul(h.substr(eq + 1, dash - eq - 1)), std::stoul(h.substr(dash + 1))};
}

// A 206 answer with obj's bytes for the request's range (cut at the object's end).
inline std::string partial(const std::string& obj, const HttpTestRequest& r) {
  auto [a, b] = range_of(r);
  b = std::min(b, obj.size() - 1);
  return HttpTestServer::reply(206, obj.substr(a, b - a + 1),
                               {"Content-Range: bytes " + std::to_string(a) + "-" +
                                std::to_string(b) + "/" + std::to_string(obj.size())});
}

}  // namespace feedline::test
