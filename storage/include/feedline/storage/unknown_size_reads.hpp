// Reads of objects of unknown size: a capability some queues have (HTTP's), not a part of every
// read (backend.hpp's ReadOp carries nothing for it).
//
// A listing that does not size its objects (Backend::stat_many_if_listed over a web server
// without one) gives them ObjectInfo::size = kUnknownSize, and the handles opened from it say so
// (ObjectHandle::size()). A read of such an object reads it whole: offset 0, `length` a guess
// (the most its first request asks for), dst the room for it (`length` bytes, or fewer, at least
// one: a batch slot of the typical size). A queue that can (IoQueue::unknown_sizes() is not null)
// asks for the first `length` bytes (HTTP: one GET with Range: bytes=0-(length-1)), learns the
// size from the answer and, for an object larger than dst, asks the queue's ReadGrowth for a
// destination that holds it (dst then names that one) and reads there what the first request did
// not bring. HTTP, where its event loop runs in poll() (HttpQueueOptions::caller_mostly_polls),
// asks as soon as the headers give the size and the body goes on there; elsewhere its first GET
// asks only for what dst holds. The op's result: the object's size, all of it in dst; fewer bytes
// than the guess is no short read.
//
// IoQueue::submit() refuses such a read with kUnsupported where the queue lacks the capability
// (every queue but HTTP's, decorators included), and with kInvalidArgument where it does not
// start at 0, guesses nothing, has no room or the queue has no ReadGrowth set.
#pragma once

#include <cstdint>

#include "feedline/core/bytes.hpp"
#include "feedline/core/error.hpp"
#include "feedline/storage/backend.hpp"

namespace feedline::storage {

// Where a read of unknown size gets room for an object larger than its destination. Called by
// the queue at most once per op, in the thread that called IoQueue::poll().
class ReadGrowth {
 public:
  // The object has `size` bytes, more than op.dst holds (or, when the answer did not say, it may
  // have up to `size`: the guess); its first `filled` bytes are in op.dst.
  // Returns a destination of at least `size` bytes whose first `filled` bytes are those (the
  // callee copies them: op.dst may be freed once it returns), or the error the op then fails with
  // (an object larger than the caller allows: nothing more is read).
  virtual Result<MutableBytes> grow(ReadOp& op, std::uint64_t size,
                                    std::uint64_t filled) noexcept = 0;

 protected:
  ~ReadGrowth() = default;
};

// What a queue that reads objects of unknown size offers (IoQueue::unknown_sizes()).
class UnknownSizeReads {
 public:
  // The room for objects larger than their read's destination: set before the first such read
  // is submitted, and outliving the queue's reads. One for the queue's reads: it tells them
  // apart by the op it gets (ReadOp::user).
  void set_growth(ReadGrowth* growth) noexcept { growth_ = growth; }
  ReadGrowth* growth() const noexcept { return growth_; }

 private:
  ReadGrowth* growth_ = nullptr;
};

// A read of an object of unknown size (its handle's size is kUnknownSize).
inline bool reads_unknown_size(const ReadOp& op) noexcept {
  return op.object != nullptr && op.object->size() == kUnknownSize;
}

}  // namespace feedline::storage
