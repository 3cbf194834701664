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
// walk from the root per file), one after another, and allocates a path per step. Links to files
// are followed (as stat() does); links to directories are not (as find and tar do not: their files
// could list twice, or loop). What is not an object is listed with ObjectInfo::left_out saying
// why, so the dataset can name it: FIFOs, sockets and devices, links to directories, links to
// nothing, directories that cannot be read for permission (their key ends in '/').
Result<void> list_tree(const std::string& root, std::string_view stem,
                       std::vector<ObjectInfo>& out);

}  // namespace feedline::storage::detail
