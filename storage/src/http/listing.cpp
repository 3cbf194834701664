// The bounds on s3:// and http(s):// listings (see listing.hpp).
#include "listing.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace feedline::storage::detail {

std::uint64_t listed_bytes(const ObjectInfo& info) noexcept {
  // A std::string keeps up to 15 characters in place (libstdc++); longer keys own a heap block
  // of capacity + 1 bytes, rounded up to malloc's 16-byte granule with its 8-byte header.
  const std::uint64_t heap =
      info.key.capacity() > 15 ? (info.key.capacity() + 1 + 8 + 15) / 16 * 16 : 0;
  return sizeof(ObjectInfo) + heap;
}

bool key_inside(std::string_view key, std::string_view prefix) noexcept {
  if (!key.starts_with(prefix)) return false;
  std::string_view rest = key.substr(prefix.size());
  while (!rest.empty()) {
    const std::size_t slash = rest.find('/');
    const std::string_view segment = rest.substr(0, slash);
    if (segment == "." || segment == "..") return false;
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  return true;
}

Result<void> ListingBudget::add(const ObjectInfo& info) {
  bytes_ += listed_bytes(info);
  ++objects_;
  if (bytes_ <= cap_) return {};
  return fail(Error(Errc::kResourceExhausted,
                    fmt::format("the listing passed {} of memory at {} objects: feedline holds "
                                "every key of a dataset in memory, and stops here rather than "
                                "grow without bound",
                                cap_ % (1u << 20) == 0 ? fmt::format("{} MiB", cap_ >> 20)
                                                       : fmt::format("{} bytes", cap_),
                                objects_))
                  .with_object(listing_)
                  .with_hint(how_));
}

Result<void> check_listed_size(const ObjectInfo& info, std::string_view shown) {
  if (info.size < kMaxObjectSize) return {};
  return fail(Error(Errc::kCorrupt,
                    fmt::format("the server gives the object a size of {} bytes, more than any "
                                "object store holds (1 PiB)",
                                info.size))
                  .with_object(std::string(shown))
                  .with_hint("the server's answer is broken: check its listing (`aws s3api "
                             "list-objects-v2`, the directory's JSON listing) or `curl -I URL`"));
}

void sort_and_dedupe(std::vector<ObjectInfo>& listing) {
  std::stable_sort(listing.begin(), listing.end(),
                   [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
  listing.erase(
      std::unique(listing.begin(), listing.end(),
                  [](const ObjectInfo& a, const ObjectInfo& b) { return a.key == b.key; }),
      listing.end());
}

}  // namespace feedline::storage::detail
