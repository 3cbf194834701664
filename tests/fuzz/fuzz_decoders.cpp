// libFuzzer target: the decoder seam (decoder.hpp) as the decode stage drives it. The first byte
// picks a decoder (zstd; JPEG at its own size, or cropped and resized with each crop, with and
// without DCT scaling); the rest is the member. output_size() is untrusted: an output is
// allocated only under kCap (a real run refuses more by its budget, as ctx.max_bytes does here),
// then decode() must stay inside it and, where the output's size is fixed, fill it exactly; an
// output one byte short must be refused. Each decoder keeps one state for every input, as a
// decode thread does, errors included. It must never crash, hang or leak (ASan watches).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "feedline/loader/decoder.hpp"
#include "feedline/loader/image.hpp"

namespace {

using namespace feedline;
using namespace feedline::loader;

constexpr std::uint64_t kCap = std::uint64_t{64} << 20;

struct Subject {
  std::shared_ptr<const Decoder> decoder;
  std::unique_ptr<DecoderState> state;
};

std::vector<Subject>& subjects() {
  static std::vector<Subject> all = [] {
    std::vector<Subject> s;
    s.push_back({zstd_decoder(), nullptr});
    if (jpeg_available()) {
      auto add = [&](unsigned size, Crop crop, bool dct) {
        ImageConfig c;
        c.decode = true;
        c.size = size;
        c.crop = crop;
        c.dct_scaling = dct;
        s.push_back({jpeg_decoder(c).value(), nullptr});
      };
      add(0, Crop::kNone, true);
      add(32, Crop::kCenter, true);
      add(32, Crop::kRandomResized, true);
      add(17, Crop::kNone, false);
      add(224, Crop::kRandomResized, false);
    }
    for (auto& x : s) x.state = x.decoder->make_state();
    return s;
  }();
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  auto& all = subjects();
  Subject& s = all[data[0] % all.size()];
  const ConstBytes in(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  const DecodeContext ctx{"fuzz.member", data[0], static_cast<std::uint32_t>(size), 7, kCap};
  auto n = s.state->output_size(in, ctx);
  if (!n) {
    if (n.error().message().empty()) __builtin_trap();
    return 0;
  }
  if (*n > kCap) __builtin_trap();  // max_bytes is the decoder's to enforce
  const std::uint64_t fixed = s.decoder->fixed_output_size();
  if (fixed && *n != fixed) __builtin_trap();
  std::vector<std::byte> out(static_cast<std::size_t>(*n));
  auto r = s.state->decode(in, MutableBytes(out.data(), out.size()), ctx);
  if (r) {
    if (r->bytes > out.size()) __builtin_trap();
    if (fixed && r->bytes != fixed) __builtin_trap();
    if (r->shape.image() && r->shape.bytes() != r->bytes) __builtin_trap();
    if (*n > 0) {
      std::vector<std::byte> small(static_cast<std::size_t>(*n - 1));
      if (s.state->decode(in, MutableBytes(small.data(), small.size()), ctx)) __builtin_trap();
    }
  } else if (r.error().message().empty()) {
    __builtin_trap();
  }
  return 0;
}
