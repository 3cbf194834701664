#include "feedline/core/bytes.hpp"

#include <fmt/format.h>

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <utility>

namespace feedline {

Result<AlignedBuffer> AlignedBuffer::allocate(std::size_t size, std::size_t alignment) {
  if (size == 0) return AlignedBuffer();
  if (alignment < kPageAlign || (alignment & (alignment - 1)) != 0) {
    return fail(Errc::kInvalidArgument,
                fmt::format("alignment {} is not a power of two >= 4096", alignment));
  }
  void* p = nullptr;
  const int rc = posix_memalign(&p, alignment, align_up(size, kPageAlign));
  if (rc != 0) {
    return fail(Error::from_errno(rc, fmt::format("allocating {} aligned bytes", size)));
  }
  return AlignedBuffer(static_cast<std::byte*>(p), size);
}

void AlignedBuffer::prefault(std::size_t bytes) noexcept {
  bytes = std::min(bytes, size_);
  if (bytes == 0) return;
#ifdef MADV_POPULATE_WRITE
  if (::madvise(data_, align_up(bytes, kPageAlign), MADV_POPULATE_WRITE) == 0) return;
#endif
  for (std::size_t off = 0; off < bytes; off += kPageAlign)
    static_cast<volatile std::byte*>(data_)[off] = std::byte{0};
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace feedline
