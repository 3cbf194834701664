// libFuzzer target: the .npy header parser. Over arbitrary bytes, and over the bytes as the dict
// text of a well-formed 1.0 prelude, it must never crash or allocate without bound, every error
// must name the array, and a header it accepts must describe at most its own bytes' header
// (header_bytes within the input) and a size that is exactly product(shape) x itemsize. An
// accepted header rendered again by format_npy_header() must parse to the same dtype and shape.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/loader/npy.hpp"

namespace {

using namespace feedline;
using namespace feedline::loader;

void check(ConstBytes input) {
  auto size = npy_header_size(input, "array 'f'");
  if (size && *size > kMaxNpyHeaderBytes + kNpyPreludeV2) __builtin_trap();
  auto h = parse_npy_header(input, "array 'f'");
  if (!h) {
    if (h.error().message().find("array 'f'") == std::string::npos) __builtin_trap();
    return;
  }
  if (!size || h->header_bytes != *size || h->header_bytes > input.size()) __builtin_trap();
  unsigned __int128 product = h->itemsize;
  for (const std::uint64_t d : h->shape) product *= d;  // cannot overflow 128 bits: checked below
  if (product != h->data_bytes) __builtin_trap();
  if (h->shape.size() > 64) __builtin_trap();
  const std::string again = format_npy_header(h->descr, h->shape);
  auto h2 = parse_npy_header(std::as_bytes(std::span(again.data(), again.size())), "array 'f'");
  if (!h2 || h2->descr != h->descr || h2->shape != h->shape || h2->data_bytes != h->data_bytes ||
      h2->header_bytes % 64 != 0) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ConstBytes input(reinterpret_cast<const std::byte*>(data), size);
  check(input);
  if (size <= 0xFFFF) {
    std::string framed(kNpyMagic);
    framed += '\x01';
    framed += '\x00';
    framed += static_cast<char>(size & 0xFF);
    framed += static_cast<char>(size >> 8);
    framed.append(reinterpret_cast<const char*>(data), size);
    check(std::as_bytes(std::span(framed.data(), framed.size())));
  }
  return 0;
}
