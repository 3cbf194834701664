// Private to the NFS transport: libnfs helpers shared by the session (nfs_session.cpp) and the
// connections (nfs_connection.cpp). libnfs's header is included here and in those files only.
#pragma once

#include <sys/time.h>  // libnfs.h uses struct timeval without including it

// clang-format off
#include <nfsc/libnfs.h>
// clang-format on

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "feedline/transports/nfs_client.hpp"

namespace feedline::transports::detail {

inline constexpr std::uint64_t kDefaultIoMax = 1 << 20;  // libnfs 4.0 reports 0 for NFSv4 readmax
// libnfs 4.0 encodes an NFSv4 WRITE into a fixed buffer of about 4 KiB: larger writes fail with
// "ZDR error: Failed to encode COMPOUND4args" (fixed in later libnfs with an allocation hint).
// Writes (dataset generation only) therefore go in 2 KiB pieces over NFSv4: slow, but correct.
inline constexpr std::uint64_t kNfs4WriteMax = 2048;

// What to check for an error of this code ("is the server up? ..." for kIo/kTimeout).
std::string hint_for(Errc code, int version);
// Transport failures, as libnfs 4.0 reports them (see the definition), as opposed to errors the
// server answered with.
bool is_transport_error(int rc, std::string_view detail);
// A negative errno and libnfs's message -> an Error with a hint.
Error make_error(int rc, std::string_view what, std::string_view detail, int version);
// libnfs's last error on a context ("" when none).
std::string error_text(nfs_context* nfs);
// A context with the URL's arguments applied, libnfs's reconnect off, RPC timeouts on.
Result<nfs_context*> make_context(const NfsUrl& url, const NfsOptions& options,
                                  const std::string& client);
// A distinct NFSv4 client name per context: contexts sharing one would take over each other's
// state.
std::string client_name(std::string_view role, unsigned index, unsigned generation);
inline std::uint64_t io_max(std::uint64_t reported) {
  return reported == 0 ? kDefaultIoMax : reported;
}

// One asynchronous libnfs call (a mount, an RPC) run to its end on the calling thread, which
// polls the context's socket in slices of 100 ms: libnfs's synchronous calls block in poll() until
// the answer or libnfs's timeout, and nothing can interrupt them.
//
// start(nfs, cb, private_data) queues the call (one of libnfs's *_async functions); on_done(err,
// data) runs inside libnfs's callback when the call succeeded (err >= 0; `data` is libnfs's,
// valid only there: copy out what is needed). Returns the call's result: err >= 0, or a negative
// errno with `detail` set (libnfs's message). And three ends of its own, which destroy the context
// (nfs becomes nullptr; libnfs cancels what was queued and calls back during the destruction,
// while everything the callback touches still lives):
//   -ECANCELED  give_up() returned true (checked every slice): detail "interrupted"
//   -ETIMEDOUT  no answer within `timeout` (libnfs's own RPC timeout usually ends it first)
//   -EIO        the socket failed (nfs_service() < 0): detail libnfs's message
// -1 when the call could not be queued (libnfs's synchronous calls return the same).
using NfsStart = std::function<int(nfs_context*, nfs_cb, void*)>;
using NfsDone = std::function<void(int, void*)>;
int run_async(nfs_context*& nfs, std::chrono::milliseconds timeout,
              const std::function<bool()>& give_up, std::string& detail, const NfsStart& start,
              const NfsDone& on_done = {});

}  // namespace feedline::transports::detail
