// libcurl's multi-socket interface driven by one Boost.Asio io_context: the event loop of an
// HttpClient.
//
// One thread runs the io_context: the reactor's own (threaded), or the owner's inside run_for()
// (driven). curl tells us which sockets to watch (CURLMOPT_SOCKETFUNCTION) and when to call back
// for timeouts (CURLMOPT_TIMERFUNCTION); Asio waits on the sockets (async_wait, no reading: curl
// reads) and calls curl_multi_socket_action. curl's timeout is a deadline the loop itself keeps
// (it bounds the loop's wait), not an Asio timer: Boost 1.74's epoll reactor reprograms its
// timerfd, a syscall, each time a timer is set, and curl moves its timeout about twice per
// transfer. Sockets are created and closed by us
// (CURLOPT_OPENSOCKETFUNCTION / CLOSESOCKETFUNCTION, through socket_hooks()) as
// asio::ip::tcp::socket objects, so a pending wait can never outlive its descriptor. Every curl
// call happens on the loop thread; other threads only post().
//
// The reactor knows transfers only as easy handles whose CURLOPT_PRIVATE is a Transfer: it hands
// each finished one to its TransferSink and keeps nothing about requests, retries or errors.
//
// Private to src/http/ (curl/curl.h and Asio stay inside this module).
#pragma once

#include <sys/types.h>

#include <curl/curl.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <unordered_map>
#include <utility>

#include "feedline/core/error.hpp"
#include "feedline/transports/http_client.hpp"
#include "transfer.hpp"

namespace feedline::transports::detail {

// Where a finished attempt goes: called on the loop thread, the handle already removed from
// the multi handle.
class TransferSink {
 public:
  virtual void attempt_done(Transfer* t, CURLcode rc) = 0;

 protected:
  ~TransferSink() = default;
};

struct MultiCleanup {
  void operator()(CURLM* multi) const noexcept { curl_multi_cleanup(multi); }
};
using MultiHandle = std::unique_ptr<CURLM, MultiCleanup>;

class CurlReactor {
 public:
  CurlReactor() : work_(io_.get_executor()) {}
  CurlReactor(const CurlReactor&) = delete;
  CurlReactor& operator=(const CurlReactor&) = delete;
  // join() must have run (the owner's destructor calls it before its own members go).
  ~CurlReactor() { join(); }

  // Creates the multi handle (at most max_connections per host, twice that cached) and, unless
  // driven, the loop's thread ("fl-http"). Finished attempts go to `sink`, which must outlive
  // the loop.
  Result<void> open(unsigned max_connections, bool driven, TransferSink& sink);

  // For easy handles: curl opens and closes their connections through this reactor.
  SocketHooks socket_hooks() noexcept {
    return {&CurlReactor::on_open_socket, &CurlReactor::on_close_socket, this};
  }

  // Loop thread only. add() hands an easy handle to curl (false when curl refuses it); remove()
  // takes it back, harmless for one not added.
  bool add(CURL* easy) { return curl_multi_add_handle(multi_.get(), easy) == CURLM_OK; }
  void remove(CURL* easy) { curl_multi_remove_handle(multi_.get(), easy); }

  // Runs `f` on the loop thread (threaded: soon; driven: in a run_for()).
  template <typename F>
  void post(F&& f) {
    boost::asio::post(io_, std::forward<F>(f));
  }
  boost::asio::io_context& io() noexcept { return io_; }

  // Driven: runs the loop on the calling thread until a handler ran or the timeout passed, then
  // every handler already ready. Returns the handlers run.
  std::size_t run_for(std::chrono::nanoseconds timeout);

  // Loop thread: closes the multi handle (curl closes its cached connections), every socket curl
  // left open (ending their waits) and stops the loop; handlers still queued are dropped, not
  // run, so the loop ends even if one of them would have re-armed something. Easy handles must
  // have been removed and cleaned up first.
  void close();
  // Not on the loop thread: lets a threaded loop end (after close()) and waits for its thread.
  void join();

  HttpClientStats stats() const { return {opened_.load(), max_open_.load(), open_.load()}; }

 private:
  struct Sock {
    explicit Sock(boost::asio::io_context& io) : socket(io) {}
    boost::asio::ip::tcp::socket socket;
    // The socket's identity (fstat): curl sometimes closes a socket itself, without the close
    // callback, and the number then soon names another descriptor of the process (a socket of
    // another client, an event loop's eventfd). Only a number that still names this socket is
    // closed here; the others are let go (release()), unclosed.
    dev_t dev = 0;
    ino_t ino = 0;
    int want = 0;  // CURL_POLL_IN / OUT / INOUT, 0 = nothing (removed)
    bool reading = false;
    bool writing = false;
  };

  using Clock = std::chrono::steady_clock;

  void socket_action(curl_socket_t fd, int events);
  void check_done();
  // curl's timeout, if it is due: tells curl and returns true.
  bool fire_timer();
  // The threaded loop: handlers and curl's timeouts until close() stops it.
  void run_loop();
  void wait(const std::shared_ptr<Sock>& s, curl_socket_t fd, bool in);
  void on_ready(const std::shared_ptr<Sock>& s, curl_socket_t fd, bool in,
                const boost::system::error_code& ec);

  // Closes s's descriptor if it is still s's socket; lets it go unclosed otherwise.
  static void close_if_still_ours(Sock& s, curl_socket_t fd);
  static curl_socket_t on_open_socket(void* ud, curlsocktype purpose, curl_sockaddr* addr);
  static int on_close_socket(void* ud, curl_socket_t fd);
  static int on_socket(CURL* easy, curl_socket_t fd, int what, void* ud, void* socket_ud);
  static int on_timer(CURLM* multi, long timeout_ms, void* ud);

  boost::asio::io_context io_;
  Clock::time_point deadline_ = Clock::time_point::max();  // curl's timeout; loop thread only
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  MultiHandle multi_;
  TransferSink* sink_ = nullptr;
  std::unordered_map<curl_socket_t, std::shared_ptr<Sock>> socks_;
  std::atomic<std::uint64_t> opened_{0}, open_{0}, max_open_{0};
  std::thread thread_;
};

}  // namespace feedline::transports::detail
