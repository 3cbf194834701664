// NFS from user space through libnfs: no mount, no root, several TCP connections per server.
//
// Two kinds of object live here, and libnfs stays inside src/nfs/ (nfs_session.cpp,
// nfs_connection.cpp, nfs_util.{hpp,cpp}):
//
// - NfsSession: one connection for metadata and writes (stat, directory walk, create, rename,
//   mkdir). Its calls block the caller and are bounded by NfsOptions::timeout; it is thread-safe
//   (one mutex) and reconnects on its own when the server went away. They are libnfs's
//   asynchronous calls driven on the caller's thread in slices of 100 ms (libnfs's synchronous
//   ones cannot be interrupted): once NfsOptions::stop is requested, the call in progress (a
//   mount, an RPC, a retry's backoff) gives up within about 100 ms with kCancelled
//   ("interrupted"), its context is dropped (the next call would reconnect), and later calls
//   fail at once.
//
// - NfsConnection: one connection that reads, with many reads in flight. It owns one libnfs
//   context and ONE thread that runs poll() on the context's socket and an eventfd, then
//   nfs_service(). Why a dedicated thread per connection and not the Asio reactor of the HTTP
//   transport: a libnfs context is not thread-safe, so each must be driven by one thread anyway;
//   one thread per connection spreads nconnect-style connections over several cores with no
//   locking around libnfs; and Asio would only wrap the same poll() on the same descriptor.
//   Reads are posted to the thread through a mutex-protected inbox (woken by the eventfd), and
//   completed reads are handed to the read's NfsReadSink from that thread.
//
// libnfs 4.0 (Debian 12) hands the data of a READ to its callback in its own buffer: the
// connection copies it into NfsRead::dst there (NfsRead::copied counts it).
//
// Server loss: libnfs's own auto-reconnect is switched off. It would hide the outage from us,
// and an NFSv4 reconnect must also reopen the files (new stateids), which it does not do. Instead
// a connection that breaks (socket error, or an RPC with no answer for NfsOptions::timeout)
// destroys its context, reconnects with backoff, reopens files lazily and re-sends the reads that
// were in flight; a read fails with kTimeout once max_attempts attempts are spent or its deadline
// (timeout x max_attempts after submission) passes, so nothing waits forever. A read whose
// caller cancelled it (NfsRead::cancel_epoch) fails with kCancelled within about 100 ms, also
// while it is on the wire or waits for a (re)connection: its answer, if one comes, is dropped.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/error.hpp"

namespace feedline::transports {

// nfs://server/path[?version=3|4&nfsport=N&mountport=N&uid=N&gid=N] (libnfs's URL form). The
// path holds the export and the path inside it. Everything is checked here, with kInvalidArgument
// and a message saying what to write: a port after the host (libnfs takes it only as
// ?nfsport=N), user:password@ (NFS has none), an unknown parameter (the message lists the known
// ones), a value that is not a number in range ("nfsport must be a number from 1 to 65535"), a
// parameter given twice. Errors show the URL through redact_url.
struct NfsUrl {
  std::string text;    // as given
  std::string server;  // host name or address ([v6] in brackets), no port
  std::string path;    // "/export/dir/file", no trailing slash except for "/"
  std::string query;   // "version=4&nfsport=20490" (without '?'), passed on to libnfs
  int version = 3;     // from version=, libnfs's default 3
};
Result<NfsUrl> parse_nfs_url(std::string_view text);

struct NfsOptions {
  std::chrono::milliseconds timeout{10'000};  // one RPC, or one connect + mount attempt
  unsigned max_attempts = 5;                  // per read or metadata call, the first included
  // Ends NfsSession's calls (see above); reads end by their cancel_epoch instead.
  std::stop_token stop;
};

struct NfsStat {
  std::uint64_t size = 0;
  bool is_dir = false;
  bool is_regular = false;
};

struct NfsDirEntry {
  std::string name;
  std::uint64_t size = 0;
  bool is_dir = false;
  bool is_regular = false;
};

// Metadata and writes on one connection. Paths are inside the export ("/dir/file").
class NfsSession {
 public:
  // Connects and mounts. The export is the shortest leading part of url.path that the server
  // accepts ("/export" for "/export/ds/x"); the rest is the path inside it (see export_path()).
  // Fails with kTimeout/kIo for an unreachable server, kNotFound for an unknown export.
  static Result<std::unique_ptr<NfsSession>> connect(const NfsUrl& url, const NfsOptions& options);
  ~NfsSession();
  NfsSession(const NfsSession&) = delete;
  NfsSession& operator=(const NfsSession&) = delete;

  const std::string& export_path() const noexcept { return export_; }
  const NfsUrl& url() const noexcept { return url_; }
  std::uint64_t readmax() const noexcept { return readmax_; }
  std::uint64_t reconnects() const noexcept { return reconnects_.load(); }

  Result<NfsStat> stat(const std::string& path);
  // The entries of one directory, without "." and "..", in no particular order.
  Result<std::vector<NfsDirEntry>> list_dir(const std::string& path);
  Result<void> mkdir_p(const std::string& dir);  // creates missing parents; existing is fine
  // Writes `size` bytes at `offset` of `path`, creating/truncating it when `truncate`.
  Result<void> write_at(const std::string& path, std::uint64_t offset, const void* data,
                        std::uint64_t size, bool truncate);
  Result<void> rename(const std::string& from, const std::string& to);
  Result<void> unlink(const std::string& path);

 private:
  struct State;
  NfsSession(NfsUrl url, NfsOptions options);
  NfsUrl url_;
  NfsOptions options_;
  std::string export_;
  std::uint64_t readmax_ = 1 << 20;
  std::atomic<std::uint64_t> reconnects_{0};
  std::unique_ptr<State> state_;
};

struct NfsRead;

// Told about finished reads, from the connection's thread. Must not block for long.
class NfsReadSink {
 public:
  virtual void on_nfs_read(NfsRead& read) noexcept = 0;

 protected:
  ~NfsReadSink() = default;
};

// One read of at most the server's readmax bytes. Owned by the caller, untouched from submit()
// until the sink was told.
struct NfsRead {
  std::string path;  // inside the export; each connection opens it once and keeps it open
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::byte* dst = nullptr;
  NfsReadSink* sink = nullptr;
  void* user = nullptr;
  // The caller's cancellation: when *cancel_epoch > epoch at the time the read would be sent, it
  // fails with kCancelled instead (reads already on the wire finish normally).
  const std::atomic<std::uint64_t>* cancel_epoch = nullptr;
  std::uint64_t epoch = 0;
  // Filled in by the connection:
  std::uint64_t sent_ns = 0;          // first time on the wire
  std::uint64_t done = 0;             // bytes read (fewer than length at end of file)
  std::uint64_t copied = 0;           // bytes copied from libnfs's buffer into dst
  std::uint32_t attempts = 0;         // times sent
  std::vector<std::uint64_t> rtt_ns;  // per RPC answered
  std::unique_ptr<Error> error;       // null on success
  // Internal:
  std::uint64_t deadline_ns = 0;
};

class NfsConnection {
 public:
  // Starts the thread, which connects and mounts `export_path` (from an NfsSession). Reads
  // submitted before the mount finishes wait for it.
  static Result<std::unique_ptr<NfsConnection>> start(const NfsUrl& url, std::string export_path,
                                                      const NfsOptions& options, unsigned index);
  // Fails whatever is queued or in flight with kCancelled (telling the sinks) and joins.
  ~NfsConnection();
  NfsConnection(const NfsConnection&) = delete;
  NfsConnection& operator=(const NfsConnection&) = delete;

  void submit(NfsRead* read);
  std::uint64_t readmax() const noexcept;
  std::uint64_t reconnects() const noexcept;
  std::uint64_t retries() const noexcept;  // reads re-sent after a reconnect

  class Impl;

 private:
  explicit NfsConnection(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace feedline::transports
