// mem:// — objects held in memory. The reference driver: the smallest complete Backend, and the
// one to copy when writing a new driver. Reads complete at the next poll() with a memcpy.
#pragma once

#include "feedline/storage/registry.hpp"

namespace feedline::storage::detail {

// mem://NAME/KEY: every URL opens a fresh, empty store (tests and benchmarks fill it with
// create()/write() through the same backend object).
Result<Resolved> open_mem_url(const ParsedUrl& url, const BackendConfig& config);

}  // namespace feedline::storage::detail
