// Recycled sample buffers. A pipeline reading small files allocates one read buffer (and for
// zstd one output buffer) per sample; fresh allocations of a few dozen KiB cost page faults and
// zeroing on every sample. The pool keeps freed buffers by exact size (4 KiB multiples, so what
// the memory budget charged is what is held) up to a cap, and hands them out again. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "feedline/core/bytes.hpp"

namespace feedline::loader::detail {

class BufferPool {
 public:
  explicit BufferPool(std::uint64_t max_cached_bytes) : max_cached_(max_cached_bytes) {}

  // A 4 KiB-aligned buffer of align_up(size, 4 KiB) bytes.
  Result<AlignedBuffer> get(std::uint64_t size) {
    const std::uint64_t cls = align_up(std::max<std::uint64_t>(size, 1), kPageAlign);
    {
      std::lock_guard lock(mu_);
      auto it = free_.find(cls);
      if (it != free_.end() && !it->second.empty()) {
        AlignedBuffer b = std::move(it->second.back());
        it->second.pop_back();
        cached_ -= cls;
        return b;
      }
    }
    return AlignedBuffer::allocate(cls);
  }

  // Takes a buffer back (or frees it when the pool is full).
  void put(AlignedBuffer&& b) {
    if (b.empty() || b.size() % kPageAlign != 0) return;
    std::lock_guard lock(mu_);
    if (cached_ + b.size() > max_cached_) return;  // b is freed on return
    cached_ += b.size();
    free_[b.size()].push_back(std::move(b));
  }

 private:
  const std::uint64_t max_cached_;
  std::mutex mu_;
  std::unordered_map<std::uint64_t, std::vector<AlignedBuffer>> free_;
  std::uint64_t cached_ = 0;
};

}  // namespace feedline::loader::detail
