// Settings of the HTTP transport, shared by the s3:// and http(s):// drivers (src/http/).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace feedline::storage {

struct HttpConfig {
  unsigned connections = 0;              // connections per queue; 0 = one per in-flight request
  bool insecure = false;                 // skip TLS certificate verification (--insecure)
  std::string ca_bundle;                 // CA file; empty = the system's
  std::uint64_t part_size = 8ull << 20;  // large reads go as parallel range parts of this size
  unsigned loops = 0;         // event loops per queue for parts >= 1 MiB; 0 = one per core, <= 4
  unsigned max_attempts = 5;  // per request, the first try included
  std::chrono::milliseconds connect_timeout{10'000};
  std::chrono::milliseconds stall_timeout{30'000};  // no byte for this long fails the attempt
  std::vector<std::string> connect_to;  // "HOST:PORT:TO-HOST:TO-PORT", like curl --connect-to
  // The most memory a listing (S3 ListObjectsV2 pages, JSON directory listings) may hold in keys
  // before it stops with an error: about 10 M keys of 40 characters at 1 GiB.
  std::uint64_t max_listing_bytes = std::uint64_t{1} << 30;
};

// How the caller uses one queue of an s3:// or http(s):// backend (QueueOptions::http, read by
// make_queue()): its event loops and connections follow it. Other backends never see it.
struct HttpQueueOptions {
  // The caller's thread does little besides submit() and poll() (bench storage; the pipeline
  // when reads land in their batch slots and nothing is decoded). The queue then runs its event
  // loop inside poll() on that thread: no hand-over per response (on 2 cores, 5,000 64 KiB GETs
  // took ~30% less CPU). Otherwise it keeps a thread of its own, so the caller's other work
  // (allocating sample buffers, handing them to decode) does not delay the sockets: tar members
  // with decode over HTTP ran ~20% faster that way.
  bool caller_mostly_polls = false;
  // Queues that read through this backend at once and share its connections: the I/O queues of
  // the loaders of one host (N accelerators), as one process's would. 0: the queue has
  // connections of its own. N >= 1: it reads through the backend's one connection pool, made by
  // the first such queue for up to N queues of this depth (HttpConfig::connections in all where
  // set, else N x depth) and kept while the backend lives: a connection one queue opened serves
  // the others, and the host opens at most the pool's count. The pool's event loops have threads
  // of their own (caller_mostly_polls has no effect).
  unsigned shared_by = 0;
};

}  // namespace feedline::storage
