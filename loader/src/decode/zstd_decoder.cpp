// The zstd decoder (".zst") behind the decoder seam: codec.hpp's Decompressor, one per thread.
#include <fmt/format.h>

#include "feedline/loader/codec.hpp"
#include "feedline/loader/decoder.hpp"

namespace feedline::loader {
namespace {

class ZstdState final : public DecoderState {
 public:
  Result<std::uint64_t> output_size(ConstBytes in, const DecodeContext& ctx) override {
    FEEDLINE_ASSIGN_OR_RETURN(std::uint64_t n, Decompressor::content_size(in));
    if (ctx.max_bytes && n > ctx.max_bytes) {
      return fail(Error(Errc::kResourceExhausted,
                        fmt::format("member '{}' declares {} decoded bytes, more than the {} "
                                    "bytes a sample may take",
                                    ctx.member, n, ctx.max_bytes))
                      .with_hint("a corrupt or hostile frame (a zstd bomb?); {on_error=skip} "
                                 "leaves it out, {max_sample_size} or {memory_budget} raise the "
                                 "limit if the data is right"));
    }
    return n;
  }

  Result<Decoded> decode(ConstBytes in, MutableBytes out, const DecodeContext&) override {
    FEEDLINE_ASSIGN_OR_RETURN(std::size_t n, zstd_.decompress(in, out));
    return Decoded{n, {}};
  }

 private:
  Decompressor zstd_;
};

class ZstdDecoder final : public Decoder {
 public:
  std::string_view name() const noexcept override { return "zstd"; }
  bool sized_by_index() const noexcept override { return true; }
  std::unique_ptr<DecoderState> make_state() const override {
    return std::make_unique<ZstdState>();
  }
};

}  // namespace

std::shared_ptr<const Decoder> zstd_decoder() { return std::make_shared<const ZstdDecoder>(); }

}  // namespace feedline::loader
