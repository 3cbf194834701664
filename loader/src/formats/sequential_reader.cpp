#include "sequential_reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "open_common.hpp"

namespace feedline::loader::detail {

Result<std::uint64_t> read_sync(storage::IoQueue& queue, const storage::ObjectHandle& object,
                                std::uint64_t offset, MutableBytes dst, std::stop_token stop) {
  storage::ReadOp op;
  op.object = &object;
  op.offset = offset;
  op.length = dst.size();
  op.dst = dst;
  queue.submit(op);
  bool cancelled = false;
  // Other ops of the queue may complete here too (their completions run): wait for this one.
  for (std::vector<storage::ReadOp*> done;
       std::find(done.begin(), done.end(), &op) == done.end();) {
    if (!cancelled && stop.stop_requested()) {
      queue.cancel();  // the op still completes (kCancelled, or with what it got)
      cancelled = true;
    }
    queue.poll(1, kOpenPollSlice, done);
  }
  return op.result;
}

SequentialReader::SequentialReader(storage::IoQueue& queue, const storage::ObjectHandle& object,
                                   std::uint64_t alignment, std::size_t chunk, std::stop_token stop)
    : queue_(queue),
      object_(object),
      stop_(std::move(stop)),
      align_(std::max<std::uint64_t>({alignment, kPageAlign, 1})),
      chunk_(
          static_cast<std::size_t>(align_up(std::max<std::uint64_t>(chunk, 2 * align_), align_))) {}

SequentialReader::~SequentialReader() {
  while (ahead_in_flight_ && !ahead_done_) poll_ahead();
}

void SequentialReader::poll_ahead() {
  if (!cancelled_ && stop_.stop_requested()) {
    queue_.cancel();
    cancelled_ = true;
  }
  queue_.poll(1, kOpenPollSlice);
}

void SequentialReader::on_read_complete(storage::ReadOp&) noexcept { ahead_done_ = true; }

void SequentialReader::start_ahead(std::uint64_t offset) {
  if (ahead_.buf.empty()) {
    auto b = AlignedBuffer::allocate(chunk_);
    if (!b) return;  // readahead is an optimisation: go without
    ahead_.buf = std::move(*b);
  }
  ahead_.valid = false;
  ahead_.offset = offset;
  ahead_op_ = storage::ReadOp{};
  ahead_op_.object = &object_;
  ahead_op_.offset = offset;
  ahead_op_.length = chunk_;
  ahead_op_.dst = ahead_.buf.span();
  ahead_op_.done = this;
  ahead_in_flight_ = true;
  ahead_done_ = false;
  queue_.submit(ahead_op_);
}

void SequentialReader::wait_ahead() {
  while (!ahead_done_) poll_ahead();
  ahead_in_flight_ = false;
  ++reads_;
  // A failed readahead is dropped: the synchronous read that follows reports the error.
  if (ahead_op_.result) {
    ahead_.length = *ahead_op_.result;
    ahead_.valid = true;
    bytes_read_ += ahead_.length;
  }
}

bool SequentialReader::serves(const Chunk& c, std::uint64_t offset,
                              std::uint64_t end) const noexcept {
  return c.valid && offset >= c.offset && end <= c.offset + c.length;
}

Result<ConstBytes> SequentialReader::read(std::uint64_t offset, std::size_t length) {
  if (length > max_length()) {
    return fail(
        Error(Errc::kInternal, fmt::format("sequential read of {} bytes exceeds the {}-byte "
                                           "limit",
                                           length, max_length()))
            .with_object(object_.key())
            .with_offset(offset));
  }
  const std::uint64_t size = object_.size();
  if (offset >= size) return ConstBytes{};
  const std::uint64_t end = std::min<std::uint64_t>(offset + length, size);
  auto view = [&](const Chunk& c) {
    const std::uint64_t stop = std::min(end, c.offset + c.length);
    if (offset < c.offset || offset >= stop) return ConstBytes{};
    return ConstBytes(c.buf.data() + (offset - c.offset), static_cast<std::size_t>(stop - offset));
  };
  if (serves(cur_, offset, end)) return view(cur_);

  // A miss. Sequential if it lands within a chunk past the current one (or nothing is read yet).
  const bool sequential =
      !cur_.valid || (offset >= cur_.offset && offset < cur_.offset + cur_.length + chunk_);
  if (ahead_in_flight_) wait_ahead();
  if (serves(ahead_, offset, end)) {
    std::swap(cur_, ahead_);
    ahead_.valid = false;
  } else {
    if (cur_.buf.empty()) {
      FEEDLINE_ASSIGN_OR_RETURN(cur_.buf, AlignedBuffer::allocate(chunk_));
    }
    cur_.valid = false;
    cur_.offset = align_down(offset, align_);
    FEEDLINE_ASSIGN_OR_RETURN(cur_.length,
                              read_sync(queue_, object_, cur_.offset, cur_.buf.span(), stop_));
    cur_.valid = true;
    ++reads_;
    bytes_read_ += cur_.length;
  }
  const std::uint64_t next = cur_.offset + cur_.length;
  if (sequential && cur_.length == chunk_ && next < size) start_ahead(next);
  return view(cur_);  // shorter than asked only if the object ends (or shrank) first
}

}  // namespace feedline::loader::detail
