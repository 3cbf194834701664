// libcurl multi-socket <-> Boost.Asio (see detail/curl_reactor.hpp).
#include "detail/curl_reactor.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "feedline/core/thread_name.hpp"

namespace feedline::transports::detail {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

Result<void> CurlReactor::open(unsigned max_connections, bool driven, TransferSink& sink) {
  sink_ = &sink;
  multi_.reset(curl_multi_init());
  if (!multi_) return fail(Errc::kResourceExhausted, "curl_multi_init failed");
  CURLM* m = multi_.get();
  curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, &CurlReactor::on_socket);
  curl_multi_setopt(m, CURLMOPT_SOCKETDATA, this);
  curl_multi_setopt(m, CURLMOPT_TIMERFUNCTION, &CurlReactor::on_timer);
  curl_multi_setopt(m, CURLMOPT_TIMERDATA, this);
  curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS,
                    static_cast<long>(std::max(1u, max_connections)));
  curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, static_cast<long>(std::max(1u, max_connections) * 2));
  if (!driven) {
    thread_ = std::thread([this] {
      name_this_thread("fl-http");
      run_loop();
    });
  }
  return {};
}

void CurlReactor::run_loop() {
  while (!io_.stopped()) {
    if (fire_timer()) continue;
    if (deadline_ == Clock::time_point::max()) {
      io_.run_one();
    } else {
      io_.run_one_until(deadline_);
    }
  }
}

bool CurlReactor::fire_timer() {
  if (deadline_ == Clock::time_point::max() || Clock::now() < deadline_ || !multi_) return false;
  deadline_ = Clock::time_point::max();  // curl sets the next one (on_timer) if it wants one
  socket_action(CURL_SOCKET_TIMEOUT, 0);
  return true;
}

std::size_t CurlReactor::run_for(std::chrono::nanoseconds timeout) {
  std::size_t n = fire_timer() ? 1 : 0;
  if (n == 0) {
    // Wait no longer than curl's timeout.
    if (deadline_ != Clock::time_point::max()) {
      timeout = std::min<std::chrono::nanoseconds>(
          timeout, std::max<std::chrono::nanoseconds>(deadline_ - Clock::now(), {}));
    }
    n = timeout.count() > 0 ? io_.run_one_for(timeout) : io_.poll_one();
  }
  if (n > 0) n += io_.poll();  // and whatever else is ready, in one go
  return n + (fire_timer() ? 1 : 0);
}

void CurlReactor::close() {
  deadline_ = Clock::time_point::max();
  multi_.reset();  // closes cached connections through on_close_socket
  // What curl closed without the callback, or left open: closed only where still ours.
  for (auto& [fd, sock] : socks_) close_if_still_ours(*sock, fd);
  socks_.clear();
  io_.stop();
}

void CurlReactor::join() {
  work_.reset();
  if (thread_.joinable()) thread_.join();
}

void CurlReactor::socket_action(curl_socket_t fd, int events) {
  int running = 0;
  curl_multi_socket_action(multi_.get(), fd, events, &running);
  check_done();
}

void CurlReactor::check_done() {
  int pending = 0;
  while (CURLMsg* m = curl_multi_info_read(multi_.get(), &pending)) {
    if (m->msg != CURLMSG_DONE) continue;
    Transfer* t = nullptr;
    curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &t);
    const CURLcode rc = m->data.result;
    curl_multi_remove_handle(multi_.get(), m->easy_handle);
    sink_->attempt_done(t, rc);
  }
}

curl_socket_t CurlReactor::on_open_socket(void* ud, curlsocktype purpose, curl_sockaddr* addr) {
  auto* self = static_cast<CurlReactor*>(ud);
  if (purpose != CURLSOCKTYPE_IPCXN || (addr->family != AF_INET && addr->family != AF_INET6)) {
    return CURL_SOCKET_BAD;
  }
  const int fd = ::socket(addr->family, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
  if (fd < 0) return CURL_SOCKET_BAD;
  // A Sock already under this number is one curl closed itself (the kernel gave the number
  // again): let it go without closing, which would close this new socket.
  if (auto old = self->socks_.find(fd); old != self->socks_.end()) {
    boost::system::error_code ec;
    old->second->want = 0;
    (void)old->second->socket.release(ec);
    self->socks_.erase(old);
    --self->open_;
  }
  auto s = std::make_shared<Sock>(self->io_);
  struct stat st {};
  if (::fstat(fd, &st) == 0) {
    s->dev = st.st_dev;
    s->ino = st.st_ino;
  }
  boost::system::error_code ec;
  s->socket.assign(addr->family == AF_INET ? tcp::v4() : tcp::v6(), fd, ec);
  if (ec) {
    ::close(fd);
    return CURL_SOCKET_BAD;
  }
  self->socks_[fd] = std::move(s);
  ++self->opened_;
  const auto open = ++self->open_;
  if (open > self->max_open_) self->max_open_ = open;
  return fd;
}

void CurlReactor::close_if_still_ours(Sock& s, curl_socket_t fd) {
  boost::system::error_code ec;
  s.want = 0;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_dev == s.dev && st.st_ino == s.ino) {
    s.socket.close(ec);  // its waits end too
  } else {
    (void)s.socket.release(ec);  // the waits end; the number is someone else's now
  }
}

int CurlReactor::on_close_socket(void* ud, curl_socket_t fd) {
  auto* self = static_cast<CurlReactor*>(ud);
  auto it = self->socks_.find(fd);
  if (it == self->socks_.end()) return ::close(fd);
  boost::system::error_code ec;
  it->second->want = 0;
  it->second->socket.close(ec);  // aborts pending waits; their handlers hold the Sock
  self->socks_.erase(it);
  --self->open_;
  return 0;
}

int CurlReactor::on_socket(CURL* easy, curl_socket_t fd, int what, void* ud, void*) {
  auto* self = static_cast<CurlReactor*>(ud);
  if (Transfer* t = nullptr;
      curl_easy_getinfo(easy, CURLINFO_PRIVATE, &t) == CURLE_OK && t != nullptr) {
    t->fd = what == CURL_POLL_REMOVE ? CURL_SOCKET_BAD : fd;
  }
  auto it = self->socks_.find(fd);
  if (it == self->socks_.end()) return 0;
  std::shared_ptr<Sock> s = it->second;
  s->want = what == CURL_POLL_REMOVE ? 0 : what;
  // curl now waits for an answer here: ACK its bytes at once whichever call reads them first.
  // A read wake-up (on_ready) alone is not enough: curl often reads the first bytes of an
  // answer in the same call that sent the request (a timer action, no wake-up), and the ACK
  // for them was then delayed: 1 in 100 tar-member ranges over nginx took 40 ms longer
  // (transfer p99 45 ms; 6 ms with this, and ~10% more samples/s).
  if (s->want & CURL_POLL_IN) ack_at_once(fd);
  if ((s->want & CURL_POLL_IN) && !s->reading) self->wait(s, fd, true);
  if ((s->want & CURL_POLL_OUT) && !s->writing) self->wait(s, fd, false);
  return 0;
}

// Asio's reactor watches sockets edge-triggered and async_wait is never speculative: bytes
// that arrived while no wait was pending (or that curl left unread) raise no new edge, and
// the wait sat until the next timer: 40 ms stalls on 1 in 200 small GETs. So a read wait first
// asks the kernel whether bytes are already there, and if so runs curl at once.
void CurlReactor::wait(const std::shared_ptr<Sock>& s, curl_socket_t fd, bool in) {
  (in ? s->reading : s->writing) = true;
  if (in) {
    boost::system::error_code aec;
    if (s->socket.available(aec) > 0 && !aec) {
      asio::post(io_, [this, s, fd] { on_ready(s, fd, true, {}); });
      return;
    }
  }
  s->socket.async_wait(
      in ? tcp::socket::wait_read : tcp::socket::wait_write,
      [this, s, fd, in](const boost::system::error_code& ec) { on_ready(s, fd, in, ec); });
}

void CurlReactor::on_ready(const std::shared_ptr<Sock>& s, curl_socket_t fd, bool in,
                           const boost::system::error_code& ec) {
  (in ? s->reading : s->writing) = false;
  if (ec || !s->socket.is_open()) return;
  const int flag = in ? CURL_POLL_IN : CURL_POLL_OUT;
  if (!(s->want & flag) || !multi_) return;
  socket_action(fd, in ? CURL_CSELECT_IN : CURL_CSELECT_OUT);
  // Still wanted (and still the same socket): wait again.
  if ((s->want & flag) && s->socket.is_open() && !(in ? s->reading : s->writing)) wait(s, fd, in);
}

// The loop calls curl back once the deadline passes (0: "now", after the handler that is running:
// never from inside this callback, which curl forbids); -1 takes it away.
int CurlReactor::on_timer(CURLM*, long timeout_ms, void* ud) {
  auto* self = static_cast<CurlReactor*>(ud);
  self->deadline_ = timeout_ms < 0 ? Clock::time_point::max()
                                   : Clock::now() + std::chrono::milliseconds(timeout_ms);
  return 0;
}

}  // namespace feedline::transports::detail
