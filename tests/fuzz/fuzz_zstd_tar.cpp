// libFuzzer target: zstd frames inside tar members, the way the decode stage meets them. The input
// is read as a tar archive in memory; every regular member named *.zst is asked its declared size
// (Decompressor::content_size), and decompressed into a buffer of exactly that size when it is
// under kCap. The declared size is untrusted: nothing here ever allocates what a frame declares
// beyond the cap (that is the point; a 64 KiB frame may declare 2 GiB). The raw input is also fed
// directly as a frame. It must never crash; a frame that decodes must decode to what it declares,
// a buffer one byte short must be refused, and a frame that records no size decodes into a small
// buffer or fails, without writing past it (ASan watches every buffer).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "feedline/loader/codec.hpp"
#include "feedline/loader/tar.hpp"

namespace {

using feedline::ConstBytes;
using feedline::MutableBytes;
using feedline::loader::Decompressor;
namespace tar = feedline::loader::tar;

constexpr std::uint64_t kCap = std::uint64_t{64} << 20;
constexpr std::size_t kUnknownSizeBuffer = 64 * 1024;

// One context for every frame, as a decode thread keeps one (reuse after errors included).
Decompressor& decompressor() {
  static Decompressor d;
  return d;
}

// A buffer of n bytes, left uninitialised (a 64 MiB vector would be zeroed on every run).
std::unique_ptr<std::byte[]> buffer(std::size_t n) {
  return std::unique_ptr<std::byte[]>(new std::byte[n]);
}

void frame(ConstBytes f) {
  auto declared = Decompressor::content_size(f);
  if (!declared) {
    if (declared.error().message().empty()) __builtin_trap();
    if (declared.error().code() == feedline::Errc::kUnsupported) {  // no size recorded
      auto out = buffer(kUnknownSizeBuffer);
      auto r = decompressor().decompress(f, MutableBytes(out.get(), kUnknownSizeBuffer));
      if (r && *r > kUnknownSizeBuffer) __builtin_trap();
    }
    return;
  }
  if (*declared > kCap) return;  // a real reader refuses it by its budget; never allocate it
  const auto n = static_cast<std::size_t>(*declared);
  auto out = buffer(std::max<std::size_t>(n, 1));
  auto r = decompressor().decompress(f, MutableBytes(out.get(), n));
  if (r) {
    if (*r != n) __builtin_trap();  // decodes to what it declares, or fails
    if (n > 0) {
      auto short_r = decompressor().decompress(f, MutableBytes(out.get(), n - 1));
      if (short_r) __builtin_trap();
    }
  } else if (r.error().message().empty()) {
    __builtin_trap();
  }
}

void archive(ConstBytes input) {
  tar::Reader reader("fuzz.tar", input.size(), tar::memory_reader(input));
  tar::Entry e;
  for (std::size_t n = 0; n <= input.size() / tar::kBlockSize + 1; ++n) {
    auto r = reader.next(e);
    if (!r || !*r) return;
    if (!e.regular() || !e.name.ends_with(".zst")) continue;
    if (e.data_offset > input.size() || input.size() - e.data_offset < e.size) __builtin_trap();
    frame(input.subspan(static_cast<std::size_t>(e.data_offset), static_cast<std::size_t>(e.size)));
  }
}

// Mutated headers rarely keep a valid checksum; to reach the members, the archive is also read
// with every block's checksum made valid (as fuzz_tar does).
std::vector<std::byte> with_valid_checksums(ConstBytes input) {
  std::vector<std::byte> v(input.begin(), input.end());
  for (std::size_t off = 0; off + tar::kBlockSize <= v.size(); off += tar::kBlockSize) {
    auto* h = reinterpret_cast<unsigned char*>(v.data() + off);
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (std::size_t i = 0; i < tar::kBlockSize; ++i) sum += h[i];
    char field[8];
    std::snprintf(field, sizeof field, "%06o", sum & 0777777u);
    std::memcpy(h + 148, field, 7);
  }
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ConstBytes input(reinterpret_cast<const std::byte*>(data), size);
  frame(input);
  archive(input);
  const auto fixed = with_valid_checksums(input);
  archive(fixed);
  return 0;
}
