// A FileEngine made of worker threads that each run one blocking read at a time (private to
// transports/src). The POSIX engine (pread) and the cuFile engine (cuFileRead into GPU memory)
// differ only in that read; the queueing, wake-ups, cancellation and reaping are shared.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "feedline/transports/file_engine.hpp"

namespace feedline::transports::detail {

// Reads r whole (looping over short reads) or until end of file, setting r.done, r.error and
// r.resubmits. Runs on a worker thread; must be safe to call from several at once.
using BlockingRead = std::function<void(FileRead& r)>;

// `threads` workers (at least 1, at most 256). info() reports `name`, "threads=N" and `notes`.
// register_buffers/register_file are refused (a wrapping engine adds its own).
std::unique_ptr<FileEngine> make_pool_engine(std::string name, unsigned threads, BlockingRead read,
                                             std::vector<std::string> notes);

}  // namespace feedline::transports::detail
