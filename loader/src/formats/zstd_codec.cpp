// zstd through libzstd's stable API only (no ZSTD_STATIC_LINKING_ONLY), so any libzstd >= 1.4
// works. Without FEEDLINE_HAVE_ZSTD every entry point returns kUnsupported.
#include <fmt/format.h>

#include "feedline/loader/codec.hpp"

#ifdef FEEDLINE_HAVE_ZSTD
#include <zstd.h>
#include <zstd_errors.h>
#endif

namespace feedline::loader {

#ifdef FEEDLINE_HAVE_ZSTD

struct Decompressor::Context {
  ZSTD_DCtx* dctx = nullptr;
  ~Context() { ZSTD_freeDCtx(dctx); }
};

struct Compressor::Context {
  ZSTD_CCtx* cctx = nullptr;
  ~Context() { ZSTD_freeCCtx(cctx); }
};

bool zstd_available() noexcept { return true; }

ZstdLevelRange zstd_level_range() noexcept { return {ZSTD_minCLevel(), ZSTD_maxCLevel()}; }

namespace {
Error corrupt_frame(std::size_t code) {
  return Error(Errc::kCorrupt, fmt::format("corrupt zstd frame: {}", ZSTD_getErrorName(code)));
}
}  // namespace

Result<std::uint64_t> Decompressor::content_size(ConstBytes frame) {
  std::uint64_t total = 0;
  std::size_t pos = 0;
  do {  // an empty input is not a frame: the first pass reports it
    const void* src = frame.data() + pos;
    const std::size_t left = frame.size() - pos;
    const unsigned long long n = ZSTD_getFrameContentSize(src, left);
    if (n == ZSTD_CONTENTSIZE_ERROR) {
      return fail(Error(Errc::kCorrupt,
                        fmt::format("not a zstd frame: no valid frame header at byte {}", pos)));
    }
    if (n == ZSTD_CONTENTSIZE_UNKNOWN) {
      return fail(
          Error(Errc::kUnsupported, "the zstd frame does not record its decompressed size")
              .with_hint("compress with the zstd tool on files (not pipes), or with feedline gen"));
    }
    const std::size_t frame_len = ZSTD_findFrameCompressedSize(src, left);
    if (ZSTD_isError(frame_len)) return fail(corrupt_frame(frame_len));
    if (total + n < total) return fail(Error(Errc::kCorrupt, "zstd content sizes overflow"));
    total += n;
    pos += frame_len;
  } while (pos < frame.size());
  return total;
}

Decompressor::Decompressor() noexcept = default;
Decompressor::~Decompressor() = default;
Decompressor::Decompressor(Decompressor&&) noexcept = default;
Decompressor& Decompressor::operator=(Decompressor&&) noexcept = default;

Result<std::size_t> Decompressor::decompress(ConstBytes frame, MutableBytes out) {
  if (frame.empty()) return fail(Error(Errc::kCorrupt, "corrupt zstd frame: empty input"));
  if (!ctx_) {
    ZSTD_DCtx* d = ZSTD_createDCtx();
    if (!d)
      return fail(Error(Errc::kResourceExhausted, "cannot allocate a zstd decompression context"));
    ctx_ = std::make_unique<Context>();
    ctx_->dctx = d;
  }
  const std::size_t r =
      ZSTD_decompressDCtx(ctx_->dctx, out.data(), out.size(), frame.data(), frame.size());
  if (!ZSTD_isError(r)) {
    // A frame that records its size must decode to it (a damaged legacy-format frame was found
    // decoding to fewer bytes than it declares: fuzz_zstd_tar); a short result is corrupt data,
    // never a shorter member.
    if (auto declared = content_size(frame); declared && *declared != r) {
      return fail(Error(
          Errc::kCorrupt,
          fmt::format("corrupt zstd frame: it declares {} bytes and decodes to {}", *declared, r)));
    }
    return r;
  }
  if (ZSTD_getErrorCode(r) == ZSTD_error_dstSize_tooSmall) {
    if (auto declared = content_size(frame); declared && *declared > out.size()) {
      return fail(
          Error(Errc::kInvalidArgument,
                fmt::format("output buffer of {} bytes is smaller than the {} bytes the zstd "
                            "frame declares",
                            out.size(), *declared)));
    }
  }
  return fail(corrupt_frame(r));
}

Compressor::Compressor() noexcept = default;
Compressor::~Compressor() = default;
Compressor::Compressor(Compressor&&) noexcept = default;
Compressor& Compressor::operator=(Compressor&&) noexcept = default;

Result<std::size_t> Compressor::compress_append(ConstBytes data, int level,
                                                std::vector<std::byte>& out) {
  const ZstdLevelRange range = zstd_level_range();
  if (level < range.min || level > range.max) {
    return fail(Error(Errc::kInvalidArgument, fmt::format("zstd level {} is out of range [{}, {}]",
                                                          level, range.min, range.max)));
  }
  if (!ctx_) {
    ZSTD_CCtx* c = ZSTD_createCCtx();
    if (!c)
      return fail(Error(Errc::kResourceExhausted, "cannot allocate a zstd compression context"));
    ctx_ = std::make_unique<Context>();
    ctx_->cctx = c;
  }
  // Frames carry their content size (so readers size buffers up front) and a checksum (so a
  // damaged member is an error, not silently wrong data), as the zstd tool writes them.
  std::size_t r = ZSTD_CCtx_setParameter(ctx_->cctx, ZSTD_c_compressionLevel, level);
  if (!ZSTD_isError(r)) r = ZSTD_CCtx_setParameter(ctx_->cctx, ZSTD_c_checksumFlag, 1);
  if (!ZSTD_isError(r)) r = ZSTD_CCtx_setParameter(ctx_->cctx, ZSTD_c_contentSizeFlag, 1);
  const std::size_t at = out.size();
  if (!ZSTD_isError(r)) {
    out.resize(at + ZSTD_compressBound(data.size()));
    r = ZSTD_compress2(ctx_->cctx, out.data() + at, out.size() - at, data.data(), data.size());
  }
  if (ZSTD_isError(r)) {
    out.resize(at);
    return fail(
        Error(Errc::kInternal, fmt::format("zstd compression failed: {}", ZSTD_getErrorName(r))));
  }
  out.resize(at + r);
  return r;
}

// Streaming in chunks with the input's size pledged: the frame records its content size as the
// one-shot call's does (ZSTD_compress2 is itself ZSTD_compressStream2 with ZSTD_e_end).
Result<std::size_t> Compressor::compress_append(ConstBytes data, int level,
                                                std::vector<std::byte>& out,
                                                const std::stop_token& stop) {
  if (data.size() <= kStopChunk || !stop.stop_possible()) return compress_append(data, level, out);
  const std::size_t at = out.size();
  FEEDLINE_TRY(compress_append({}, level, out));  // sets up the context and its parameters
  out.resize(at);
  std::size_t r = ZSTD_CCtx_reset(ctx_->cctx, ZSTD_reset_session_only);
  if (!ZSTD_isError(r)) r = ZSTD_CCtx_setPledgedSrcSize(ctx_->cctx, data.size());
  // The output grows as it fills (reserved, not zero-filled at once: a GiB of page faults is
  // seconds on a loaded machine, deaf to the stop).
  out.reserve(at + ZSTD_compressBound(data.size()));
  std::size_t pos = at;
  std::size_t fed = 0;
  while (!ZSTD_isError(r)) {
    if (stop.stop_requested()) {
      out.resize(at);
      (void)ZSTD_CCtx_reset(ctx_->cctx, ZSTD_reset_session_only);
      return fail(Error(Errc::kCancelled, "compression stopped"));
    }
    const std::size_t n = std::min(kStopChunk, data.size() - fed);
    const bool last = fed + n == data.size();
    ZSTD_inBuffer ib{data.data() + fed, n, 0};
    do {
      if (out.size() - pos < ZSTD_compressBound(n) + 1) out.resize(pos + ZSTD_compressBound(n) + 1);
      ZSTD_outBuffer ob{out.data(), out.size(), pos};
      r = ZSTD_compressStream2(ctx_->cctx, &ob, &ib, last ? ZSTD_e_end : ZSTD_e_continue);
      pos = ob.pos;
    } while (!ZSTD_isError(r) && (ib.pos < ib.size || (last && r != 0)));
    fed += n;
    if (last) break;
  }
  if (ZSTD_isError(r)) {
    out.resize(at);
    return fail(
        Error(Errc::kInternal, fmt::format("zstd compression failed: {}", ZSTD_getErrorName(r))));
  }
  out.resize(pos);
  return pos - at;
}

#else  // !FEEDLINE_HAVE_ZSTD

struct Decompressor::Context {};
struct Compressor::Context {};

namespace {
std::unexpected<Error> no_zstd() {
  return fail(Error(Errc::kUnsupported, "built without zstd")
                  .with_hint("rebuild with -DFEEDLINE_WITH_ZSTD=ON (libzstd-dev)"));
}
}  // namespace

bool zstd_available() noexcept { return false; }
ZstdLevelRange zstd_level_range() noexcept { return {0, 0}; }

Decompressor::Decompressor() noexcept = default;
Decompressor::~Decompressor() = default;
Decompressor::Decompressor(Decompressor&&) noexcept = default;
Decompressor& Decompressor::operator=(Decompressor&&) noexcept = default;
Result<std::uint64_t> Decompressor::content_size(ConstBytes) { return no_zstd(); }
Result<std::size_t> Decompressor::decompress(ConstBytes, MutableBytes) { return no_zstd(); }

Compressor::Compressor() noexcept = default;
Compressor::~Compressor() = default;
Compressor::Compressor(Compressor&&) noexcept = default;
Compressor& Compressor::operator=(Compressor&&) noexcept = default;
Result<std::size_t> Compressor::compress_append(ConstBytes, int, std::vector<std::byte>&) {
  return no_zstd();
}
Result<std::size_t> Compressor::compress_append(ConstBytes, int, std::vector<std::byte>&,
                                                const std::stop_token&) {
  return no_zstd();
}

#endif  // FEEDLINE_HAVE_ZSTD

Result<std::vector<std::byte>> Compressor::compress(ConstBytes data, int level) {
  std::vector<std::byte> out;
  FEEDLINE_TRY(compress_append(data, level, out));
  return out;
}

Result<std::vector<std::byte>> zstd_compress(ConstBytes data, int level) {
  Compressor c;
  return c.compress(data, level);
}

}  // namespace feedline::loader
