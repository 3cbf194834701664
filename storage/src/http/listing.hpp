// What s3:// and http(s):// listings may hand on: keys that stay under the prefix listed, sizes an
// object can have, and a bounded amount of memory. A listing comes from a server, and a server's
// answer is not trusted to be sane:
//  - A key outside the prefix, or with a "." or ".." path segment ("prefix/../../etc/passwd"),
//    is not read: over HTTP, a server or a proxy in front of it resolves such segments to another
//    object (even with the path sent as written). It stays in the listing marked
//    ObjectInfo::outside, so that the dataset layer says it left it out.
//  - A size over kMaxObjectSize is no object's (a broken listing): an error, not a sample that
//    asks for exabytes of memory.
//  - The keys held are counted (ListingBudget): past HttpConfig::max_listing_bytes (1 GiB, about
//    10 M keys of 40 characters; docs/CLI.md) the listing stops with an error that says what to
//    do, rather than growing without bound (3 M keys held ~800 MB).
//  - Keys the listing names twice are delivered once (dedupe()).
// Private to storage/src/http/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/error.hpp"
#include "feedline/storage/backend.hpp"

namespace feedline::storage::detail {

// No object store holds an object of 1 PiB or more (S3: 5 TiB; others less).
inline constexpr std::uint64_t kMaxObjectSize = std::uint64_t{1} << 50;

// The memory one listed object holds: its entry in the listing's vector and its key's heap
// bytes (none for keys within the string's own buffer).
std::uint64_t listed_bytes(const ObjectInfo& info) noexcept;

// True when `key` lies under `prefix` with no "." or ".." segment after it (the prefix is the
// user's: its own segments are taken as written).
bool key_inside(std::string_view key, std::string_view prefix) noexcept;

// Counts a listing's memory as it grows.
class ListingBudget {
 public:
  // listing: how errors name it ("s3://bucket/prefix/"); how: what to do instead, for the hint;
  // cap: the most bytes it may hold.
  ListingBudget(std::string listing, std::string how, std::uint64_t cap)
      : listing_(std::move(listing)), how_(std::move(how)), cap_(cap) {}
  // Counts one entry; kResourceExhausted once the listing holds more than the cap.
  Result<void> add(const ObjectInfo& info);
  std::uint64_t bytes() const noexcept { return bytes_; }
  std::uint64_t objects() const noexcept { return objects_; }

 private:
  std::string listing_;
  std::string how_;
  std::uint64_t cap_;
  std::uint64_t bytes_ = 0;
  std::uint64_t objects_ = 0;
};

// kCorrupt naming the object when the size a server gave (listing, HEAD) is kMaxObjectSize or more.
Result<void> check_listed_size(const ObjectInfo& info, std::string_view shown);

// Sorts by key and leaves each key once (the first entry of it).
void sort_and_dedupe(std::vector<ObjectInfo>& listing);

}  // namespace feedline::storage::detail
