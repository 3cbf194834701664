// nfs://server/export/path[?version=4&nfsport=N]: NFS from user space through libnfs (see
// transports/nfs_client.hpp for the connections, their threads and the reconnect rules).
#pragma once

#include "feedline/storage/registry.hpp"

namespace feedline::storage::detail {

// Connects and mounts (the export is the shortest leading part of the path the server accepts);
// the key is the rest of the path, inside the export ("/ds/shard-000000.tar"). Fails here, with
// the URL and what to check, when the server is unreachable or the export unknown.
Result<Resolved> open_nfs_url(const ParsedUrl& url, const BackendConfig& config);

}  // namespace feedline::storage::detail
