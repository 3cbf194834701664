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

}  // namespace feedline::storage
