// Private to the NFS transport: libnfs helpers shared by the session (nfs_session.cpp) and the
// connections (nfs_connection.cpp). libnfs's header is included here and in those files only.
#pragma once

#include <sys/time.h>  // libnfs.h uses struct timeval without including it

// clang-format off
#include <nfsc/libnfs.h>
// clang-format on

#include <cstdint>
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
Result<nfs_context*> make_context(const NfsUrl& url, const NfsOptions& options, const std::string& client);
// A distinct NFSv4 client name per context: contexts sharing one would take over each other's state.
std::string client_name(std::string_view role, unsigned index, unsigned generation);
inline std::uint64_t io_max(std::uint64_t reported) { return reported == 0 ? kDefaultIoMax : reported; }

}  // namespace feedline::transports::detail
