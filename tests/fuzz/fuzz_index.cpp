// libFuzzer target: the tar index parser. It must never crash, every rejection must explain
// itself, and an index it accepts must obey the format's rules and survive a round trip through
// format_tar_index().
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "feedline/loader/tar_index.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace feedline::loader;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = parse_tar_index(text, "fuzz.idx");
  if (!r) {
    if (r.error().message().empty() || r.error().object() != "fuzz.idx") __builtin_trap();
    return 0;
  }
  std::uint64_t prev_end = 0;
  for (const TarIndexEntry& e : r->entries) {
    if (e.name.empty() || e.name.find('\n') != std::string::npos) __builtin_trap();
    if (e.header_offset < prev_end || e.data_offset < e.header_offset + 512) __builtin_trap();
    if (e.data_offset > r->shard_bytes || r->shard_bytes - e.data_offset < e.size) __builtin_trap();
    prev_end = e.data_offset + e.size;
  }
  auto text2 = format_tar_index(*r);
  if (!text2) __builtin_trap();
  auto again = parse_tar_index(*text2, "fuzz.idx");
  if (!again || again->shard_bytes != r->shard_bytes ||
      again->entries.size() != r->entries.size()) {
    __builtin_trap();
  }
  for (std::size_t i = 0; i < r->entries.size(); ++i) {
    const auto &a = r->entries[i], &b = again->entries[i];
    if (a.name != b.name || a.header_offset != b.header_offset || a.data_offset != b.data_offset ||
        a.size != b.size || a.decoded_size != b.decoded_size) {
      __builtin_trap();
    }
  }
  return 0;
}
