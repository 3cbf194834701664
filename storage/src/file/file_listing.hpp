// The local backend's listing of a directory tree: readdir and fstatat relative to each
// directory's descriptor, the stats of a large directory spread over the cores.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "feedline/storage/backend.hpp"

namespace feedline::storage::detail {

// Lists the files under the directory `root` (a path as given: the keys are root/name...), depth
// first, with their sizes; with a `stem`, only root's own entries whose names start with it, and
// no subdirectories. Hand-written over readdir and fstatat relative to each directory's
// descriptor, not std::filesystem: its directory iterator stats each entry by its whole path (a
// walk from the root per file), one after another, and allocates a path per step. Directories
// that cannot be read for permission are skipped; FIFOs, sockets and devices are listed as
// special (the dataset refuses them by name).
Result<void> list_tree(const std::string& root, std::string_view stem,
                       std::vector<ObjectInfo>& out);

}  // namespace feedline::storage::detail
