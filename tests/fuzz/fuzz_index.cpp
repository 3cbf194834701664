// libFuzzer target: the tar index parser and the probe check. The parser must never crash, every
// rejection must explain itself, and an index it accepts must obey the format's rules and survive
// a round trip through format_tar_index() (which writes version 2, whatever was read); an edit of
// any byte of a version 2 index must be refused. check_tar_index_probe() must never crash on any
// bytes as a shard's header region, and its probes must be in range.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "feedline/loader/tar_index.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace feedline::loader;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // The bytes as the header region of a member the index would name.
  {
    const feedline::ConstBytes region(reinterpret_cast<const std::byte*>(data), size);
    TarIndexEntry e{"000000.bin", 0, 512, size > 512 ? size - 512 : 0, 0};
    auto p = check_tar_index_probe(e, size + 1024, region, "fuzz.tar");
    if (!p && p.error().message().empty()) __builtin_trap();
  }
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
  if (r->version != 1 && r->version != 2) __builtin_trap();
  const auto probes = tar_index_probes(r->entries.size());
  if (probes.size() > kTarIndexProbes || probes.size() > r->entries.size()) __builtin_trap();
  for (std::size_t i = 0; i < probes.size(); ++i) {
    if (probes[i] >= r->entries.size() || (i > 0 && probes[i] <= probes[i - 1])) __builtin_trap();
  }
  auto text2 = format_tar_index(*r);
  if (!text2) __builtin_trap();
  auto again = parse_tar_index(*text2, "fuzz.idx");
  if (!again || again->version != 2 || again->shard_bytes != r->shard_bytes ||
      again->entries.size() != r->entries.size()) {
    __builtin_trap();
  }
  // Flipping a byte of the rendered text is refused (the checksum, or the grammar, catches it).
  if (!text2->empty()) {
    std::string flipped = *text2;
    flipped[size % flipped.size()] ^= 0x01;
    if (parse_tar_index(flipped, "fuzz.idx")) __builtin_trap();
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
