// Settings of the local-file driver (file:// and plain paths; src/file/).
#pragma once

#include "feedline/transports/file_engine.hpp"

namespace feedline::storage {

struct FileConfig {
  transports::EngineKind engine = transports::EngineKind::kAuto;
  bool direct = false;           // O_DIRECT: bypass the page cache
  bool sqpoll = false;           // io_uring submission-queue polling thread
  bool register_buffers = true;  // try io_uring registered buffers (falls back when refused)
  unsigned posix_threads = 0;    // pread pool size per queue; 0 = one per depth slot
};

}  // namespace feedline::storage
