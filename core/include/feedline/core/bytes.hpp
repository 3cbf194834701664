// Byte spans and 4 KiB-aligned buffers.
//
// Every read buffer in feedline is 4 KiB-aligned: O_DIRECT needs it, and on common CPUs memcpy and
// page-cache reads into misaligned buffers run 3-6x slower.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "feedline/core/error.hpp"

namespace feedline {

using MutableBytes = std::span<std::byte>;
using ConstBytes = std::span<const std::byte>;

inline constexpr std::size_t kPageAlign = 4096;

constexpr std::uint64_t align_down(std::uint64_t v, std::uint64_t a) noexcept {
  return v & ~(a - 1);
}
constexpr std::uint64_t align_up(std::uint64_t v, std::uint64_t a) noexcept {
  return (v + a - 1) & ~(a - 1);
}
inline bool is_aligned(const void* p, std::size_t a) noexcept {
  return (reinterpret_cast<std::uintptr_t>(p) & (a - 1)) == 0;
}

// Owns size bytes aligned to kPageAlign (or more). Movable, not copyable. Contents start
// uninitialised; allocated with posix_memalign.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  static Result<AlignedBuffer> allocate(std::size_t size, std::size_t alignment = kPageAlign);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  MutableBytes span() const noexcept { return {data_, size_}; }
  bool empty() const noexcept { return size_ == 0; }
  // Faults in the first `bytes` (at most size()) now, so that later writes there take no page
  // fault: benchmarks call it before their clock starts. One madvise(MADV_POPULATE_WRITE) on
  // Linux 5.14+ (no trap per 4 KiB page), else a write to each page. Contents stay unspecified.
  void prefault(std::size_t bytes) noexcept;

 private:
  AlignedBuffer(std::byte* data, std::size_t size) : data_(data), size_(size) {}
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace feedline
