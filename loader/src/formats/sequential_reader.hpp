// Reading an object front to back in large chunks through an IoQueue, for the tar header scan.
//
// A tar scan asks for 512-byte headers at increasing offsets. Issuing one small read per header
// would cost a syscall (locally) or a round trip (object stores) per member; instead this reader
// fetches 1 MiB aligned chunks and serves the headers out of them, and while the access pattern
// stays sequential it keeps the next chunk in flight, so storage latency overlaps the parsing.
// When the caller jumps far ahead (members larger than a chunk), it reads a chunk at the new
// offset and stops reading ahead until the pattern is sequential again, so member data is not
// fetched for nothing.
//
// Private to the formats module. Lifetimes: the queue and the object handle must outlive the
// reader; the reader owns its two chunk buffers and waits for its readahead in its destructor.
// One thread at a time.
#pragma once

#include <cstdint>
#include <stop_token>

#include "feedline/core/bytes.hpp"
#include "feedline/core/error.hpp"
#include "feedline/storage/backend.hpp"

namespace feedline::loader::detail {

// Reads [offset, offset + dst.size()) of object into dst and waits for it; returns the bytes
// read (fewer only where the object ends). Once stop is requested the read is cancelled (a
// throttled or stalled read returns kCancelled within a poll slice, 100 ms).
Result<std::uint64_t> read_sync(storage::IoQueue& queue, const storage::ObjectHandle& object,
                                std::uint64_t offset, MutableBytes dst, std::stop_token stop = {});

class SequentialReader final : private storage::ReadCompletion {
 public:
  static constexpr std::size_t kDefaultChunk = std::size_t{1} << 20;

  // alignment: the backend's (BackendCaps::alignment); chunks start at multiples of it (and of
  // 4 KiB) so O_DIRECT reads go straight into the buffers. Buffers are allocated on first read.
  // stop: as read_sync's, for every read and the readahead.
  SequentialReader(storage::IoQueue& queue, const storage::ObjectHandle& object,
                   std::uint64_t alignment, std::size_t chunk = kDefaultChunk,
                   std::stop_token stop = {});
  ~SequentialReader();
  SequentialReader(const SequentialReader&) = delete;
  SequentialReader& operator=(const SequentialReader&) = delete;

  // A view of up to `length` bytes at `offset`, fewer only where the object ends; valid until
  // the next call. `length` may be at most max_length().
  Result<ConstBytes> read(std::uint64_t offset, std::size_t length);
  std::size_t max_length() const noexcept { return chunk_ - static_cast<std::size_t>(align_); }

  std::uint64_t bytes_read() const noexcept { return bytes_read_; }
  std::uint64_t reads() const noexcept { return reads_; }

 private:
  struct Chunk {
    AlignedBuffer buf;
    std::uint64_t offset = 0;
    std::uint64_t length = 0;  // valid bytes
    bool valid = false;
  };

  void on_read_complete(storage::ReadOp& op) noexcept override;
  void start_ahead(std::uint64_t offset);
  void wait_ahead();
  bool serves(const Chunk& c, std::uint64_t offset, std::uint64_t end) const noexcept;

  // Polls for the readahead, cancelling it once stop is requested.
  void poll_ahead();

  storage::IoQueue& queue_;
  const storage::ObjectHandle& object_;
  std::stop_token stop_;
  bool cancelled_ = false;
  std::uint64_t align_;
  std::size_t chunk_;
  Chunk cur_, ahead_;
  storage::ReadOp ahead_op_;
  bool ahead_in_flight_ = false;
  bool ahead_done_ = false;
  std::uint64_t bytes_read_ = 0;
  std::uint64_t reads_ = 0;
};

}  // namespace feedline::loader::detail
