// zstd compression and decompression for dataset members (".zst" files and tar members).
//
// libzstd stays behind this header (zstd.h appears only in src/formats/zstd_codec.cpp). Built
// with -DFEEDLINE_WITH_ZSTD=OFF the same classes exist and every call returns kUnsupported
// "built without zstd"; zstd_available() says which build this is.
//
// Contexts are expensive to create (hundreds of KiB) and cheap to reuse, so each class owns one
// context, created on first use and kept until destruction. A Decompressor or Compressor is used
// by one thread at a time (the pipeline keeps one per decode thread); they are movable, not
// copyable. Errors carry no object name: the caller adds it (error.with_object(...)), since only
// it knows where the frame came from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stop_token>
#include <vector>

#include "feedline/core/bytes.hpp"
#include "feedline/core/error.hpp"

namespace feedline::loader {

// True when this build has zstd.
bool zstd_available() noexcept;

// Decompresses whole zstd frames (one, or several concatenated) into a caller-owned buffer.
class Decompressor {
 public:
  Decompressor() noexcept;
  ~Decompressor();
  Decompressor(Decompressor&&) noexcept;
  Decompressor& operator=(Decompressor&&) noexcept;
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;

  // Decompresses `frame` into `out` and returns the decoded size. Errors: kCorrupt with zstd's
  // error name for a damaged or truncated frame (or one that decodes to more than it declares);
  // kInvalidArgument when `out` is smaller than the content size the frame declares;
  // kResourceExhausted if the context cannot be allocated; kUnsupported without zstd.
  Result<std::size_t> decompress(ConstBytes frame, MutableBytes out);

  // The decoded size the frame(s) declare in their headers, summed over concatenated frames.
  // kCorrupt if `frame` is not (entirely) zstd frames; kUnsupported if a frame does not record
  // its size (zstd streaming output without --content-size) or without zstd.
  static Result<std::uint64_t> content_size(ConstBytes frame);

 private:
  struct Context;
  std::unique_ptr<Context> ctx_;
};

// Compresses buffers into single zstd frames that record their content size and a checksum
// (what the zstd tool writes by default: decompress() then detects damaged data).
class Compressor {
 public:
  Compressor() noexcept;
  ~Compressor();
  Compressor(Compressor&&) noexcept;
  Compressor& operator=(Compressor&&) noexcept;
  Compressor(const Compressor&) = delete;
  Compressor& operator=(const Compressor&) = delete;

  // Appends the frame for `data` at compression level `level` to `out` (its existing bytes are
  // kept; its capacity is reused) and returns the frame's size. kInvalidArgument for a level
  // outside zstd_level_range().
  Result<std::size_t> compress_append(ConstBytes data, int level, std::vector<std::byte>& out);
  // The same frame, with `stop` checked between chunks of kStopChunk input bytes: kCancelled
  // (out as it was) once it is requested, so that a GiB of input does not hold up a Ctrl-C for
  // seconds.
  static constexpr std::size_t kStopChunk = std::size_t{8} << 20;
  Result<std::size_t> compress_append(ConstBytes data, int level, std::vector<std::byte>& out,
                                      const std::stop_token& stop);

  // Convenience: a new vector holding the frame.
  Result<std::vector<std::byte>> compress(ConstBytes data, int level);

 private:
  struct Context;
  std::unique_ptr<Context> ctx_;
};

// One-shot convenience (creates a context per call; use a Compressor in loops).
Result<std::vector<std::byte>> zstd_compress(ConstBytes data, int level);

struct ZstdLevelRange {
  int min = 0;
  int max = 0;
};
// The levels this libzstd accepts (negative levels are its fast modes); {0, 0} without zstd.
ZstdLevelRange zstd_level_range() noexcept;

}  // namespace feedline::loader
