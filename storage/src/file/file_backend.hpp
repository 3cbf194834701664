// file:// and plain paths: local files (and block devices) read through a transports::FileEngine
// (io_uring or the POSIX pread pool), with O_DIRECT on request.
#pragma once

#include "feedline/storage/registry.hpp"

namespace feedline::storage::detail {

// file:///abs/path, file://localhost/abs/path, or a plain (relative or absolute) path. The key is
// the path; the backend is rooted at "/" (relative paths resolve against the working directory).
Result<Resolved> open_file_url(const ParsedUrl& url, const BackendConfig& config);

}  // namespace feedline::storage::detail
