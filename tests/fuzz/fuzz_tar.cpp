// libFuzzer target: the tar header parser over arbitrary bytes. It must never crash or hang, every
// error must name the object and explain itself, and every entry it reports must lie within the
// input (header before data, data inside the object).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "feedline/loader/tar.hpp"

namespace {

using feedline::loader::tar::Entry;
using feedline::loader::tar::kBlockSize;
using feedline::loader::tar::Reader;

// Walks the archive; `claimed` is the object size the reader is told (it may exceed the bytes the
// read function can actually deliver, as when an object shrinks under the reader).
void walk(feedline::ConstBytes input, std::uint64_t claimed) {
  Reader reader("fuzz.tar", claimed, feedline::loader::tar::memory_reader(input));
  Entry e;
  std::uint64_t last_end = 0;
  for (std::size_t n = 0;; ++n) {
    if (n > claimed / kBlockSize + 1) __builtin_trap();  // every entry consumes a block
    auto r = reader.next(e);
    if (!r) {
      if (r.error().message().empty() || r.error().object() != "fuzz.tar") __builtin_trap();
      if (reader.next(e)) __builtin_trap();  // errors are sticky
      return;
    }
    if (!*r) return;
    if (e.header_offset % kBlockSize != 0 || e.header_offset < last_end) __builtin_trap();
    if (e.data_offset < e.header_offset + kBlockSize) __builtin_trap();
    if (e.data_offset > claimed || claimed - e.data_offset < e.size) __builtin_trap();
    if (!e.regular() && e.type != feedline::loader::tar::EntryType::kSparse &&
        e.type != feedline::loader::tar::EntryType::kOther &&
        e.type != feedline::loader::tar::EntryType::kDirectory && e.size != 0) {
      __builtin_trap();  // links, devices and fifos carry no data
    }
    last_end = e.data_offset + e.size;
  }
}

// Random bytes almost never carry a valid header checksum; to reach the code past the checksum
// check, the fuzzer also sees the input with every block's checksum field made valid.
std::vector<std::byte> with_valid_checksums(feedline::ConstBytes input) {
  std::vector<std::byte> v(input.begin(), input.end());
  for (std::size_t off = 0; off + kBlockSize <= v.size(); off += kBlockSize) {
    auto* h = reinterpret_cast<unsigned char*>(v.data() + off);
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (std::size_t i = 0; i < kBlockSize; ++i) sum += h[i];
    char field[8];
    std::snprintf(field, sizeof field, "%06o", sum & 0777777u);
    std::memcpy(h + 148, field, 7);
  }
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const feedline::ConstBytes input(reinterpret_cast<const std::byte*>(data), size);
  walk(input, size);
  walk(input.first(size / 2), size);  // a reader that gets fewer bytes than the object claims
  const auto fixed = with_valid_checksums(input);
  walk(fixed, fixed.size());
  return 0;
}
