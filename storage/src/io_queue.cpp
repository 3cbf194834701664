#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "feedline/core/clock.hpp"
#include "feedline/core/units.hpp"
#include "feedline/storage/backend.hpp"
#include "feedline/storage/device_reads.hpp"
#include "feedline/storage/unknown_size_reads.hpp"

namespace feedline::storage {

void QueueStats::merge(const QueueStats& o) {
  ops += o.ops;
  bytes += o.bytes;
  errors += o.errors;
  cancelled += o.cancelled;
  short_reads += o.short_reads;
  retries += o.retries;
  bounced_ops += o.bounced_ops;
  bounced_bytes += o.bounced_bytes;
  slat.merge(o.slat);
  clat.merge(o.clat);
  lat.merge(o.lat);
  depth_ns += o.depth_ns;
  span_ns += o.span_ns;
  at_cap_ns += o.at_cap_ns;
  for (const auto& [name, v] : o.counters) counters[name] += v;
  for (const auto& [name, h] : o.histograms) histograms[name].merge(h);
}

void QueueStats::merge_measurements(const QueueStats& o) {
  retries += o.retries;
  bounced_ops += o.bounced_ops;
  bounced_bytes += o.bounced_bytes;
  for (const auto& [name, v] : o.counters) counters[name] += v;
  for (const auto& [name, h] : o.histograms) histograms[name].merge(h);
}

namespace {

// submit()'s checks, the same for every backend: the error, or nullopt for a good op.
// unknown: the queue's capability for reads of objects of unknown size, or null.
std::optional<Error> check(const ReadOp& op, std::uint64_t max_request,
                           const UnknownSizeReads* unknown) {
  if (op.object == nullptr) {
    return Error(Errc::kInvalidArgument, "the read names no object (ReadOp::object is null)")
        .with_offset(op.offset);
  }
  const bool size_unknown = reads_unknown_size(op);
  if (size_unknown && (unknown == nullptr || unknown->growth() == nullptr || op.offset != 0 ||
                       op.length == 0 || op.dst.empty())) {
    return Error(unknown ? Errc::kInvalidArgument : Errc::kUnsupported,
                 unknown ? "a read of unknown length must start at offset 0, guess at least a "
                           "byte, have room for one and the queue must know where a larger "
                           "object goes (UnknownSizeReads::set_growth)"
                         : "this storage cannot read an object of unknown size")
        .with_object(op.object->display_name())
        .with_offset(op.offset);
  }
  // A read of unknown length may land in less than its guess: the growth makes room for more.
  if (op.dst.size() < op.length && !size_unknown) {
    return Error(Errc::kInvalidArgument,
                 fmt::format("the destination holds {} bytes, the read wants {}", op.dst.size(),
                             op.length))
        .with_object(op.object->display_name())
        .with_offset(op.offset);
  }
  if (op.length > max_request) {
    return Error(Errc::kInvalidArgument,
                 fmt::format("a read of {} bytes exceeds this storage's per-request limit of {}",
                             op.length, format_bytes(static_cast<double>(max_request))))
        .with_object(op.object->display_name())
        .with_offset(op.offset)
        .with_hint("split the read");
  }
  return std::nullopt;
}

}  // namespace

void IoQueue::account_depth(std::uint64_t now) noexcept {
  if (depth_since_ns_ != 0 && now > depth_since_ns_) {
    const std::uint64_t dt = now - depth_since_ns_;
    stats_.depth_ns += static_cast<double>(in_flight_) * static_cast<double>(dt);
    stats_.span_ns += dt;
    if (in_flight_ >= depth_) stats_.at_cap_ns += dt;
  }
  depth_since_ns_ = now;
}

void IoQueue::submit(std::span<ReadOp* const> ops) {
  if (ops.empty()) return;
  const std::uint64_t now = now_ns();
  account_depth(now);
  std::size_t refused = 0;
  const UnknownSizeReads* const unknown = unknown_sizes();
  for (ReadOp* op : ops) {
    op->times = OpTimes{now, 0, 0};
    if (auto e = check(*op, max_request_, unknown)) {
      op->result = fail(std::move(*e));
      ++refused;
    } else {
      op->result = std::uint64_t{0};
    }
  }
  in_flight_ += ops.size();
  if (refused == 0) {
    do_submit(ops);
    return;
  }
  std::vector<ReadOp*> accepted;  // the rare path: a refused op allocates
  accepted.reserve(ops.size() - refused);
  for (ReadOp* op : ops) {
    if (op->result) {
      accepted.push_back(op);
    } else {
      early_.push_back(op);
    }
  }
  if (!accepted.empty()) do_submit(accepted);
}

void IoQueue::complete_at_next_poll(ReadOp& op, Result<std::uint64_t> result) noexcept {
  op.result = std::move(result);
  early_.push_back(&op);
}

std::size_t IoQueue::poll(std::size_t min_complete, std::chrono::nanoseconds timeout) {
  return poll_collecting(min_complete, timeout, nullptr);
}

std::size_t IoQueue::poll(std::size_t min_complete, std::chrono::nanoseconds timeout,
                          std::vector<ReadOp*>& completed) {
  return poll_collecting(min_complete, timeout, &completed);
}

std::size_t IoQueue::poll_collecting(std::size_t min_complete, std::chrono::nanoseconds timeout,
                                     std::vector<ReadOp*>* completed) {
  std::vector<ReadOp*>* const outer = std::exchange(collect_, completed);
  std::size_t n = 0;
  if (!early_.empty()) {
    // Completions may submit ops that are refused in turn: those wait for the next poll().
    std::vector<ReadOp*> now;
    now.swap(early_);
    for (ReadOp* op : now) complete(*op);
    n = now.size();
  }
  // What the early ops did not satisfy is waited for; beyond that, only what is ready is taken.
  n += n < min_complete ? do_poll(min_complete - n, timeout)
                        : do_poll(0, std::chrono::nanoseconds(0));
  collect_ = outer;
  return n;
}

const QueueStats& IoQueue::stats() const {
  const IoQueue* inner = forwards_to();
  if (inner == nullptr) return stats_;
  merged_ = stats_;
  merged_.merge_measurements(inner->stats());
  return merged_;
}

void IoQueue::complete(ReadOp& op, std::uint32_t retries) noexcept {
  const std::uint64_t now = now_ns();
  account_depth(now);
  --in_flight_;
  op.times.completed_ns = now;
  if (op.times.issued_ns == 0 || op.times.issued_ns < op.times.queued_ns) {
    op.times.issued_ns = op.times.queued_ns;
  }
  stats_.retries += retries;
  ++stats_.ops;
  // A short read is the object ending first. If it ends before the size it had when opened, it
  // shrank under the read (truncated, replaced): an error, not a fast read of fewer bytes, for
  // every backend and every caller alike.
  // (A read of unknown length reads its object whole, whatever its guess said.)
  const bool size_unknown = reads_unknown_size(op);
  if (op.result && *op.result < op.length && op.object && !size_unknown &&
      op.offset + *op.result < std::min(op.offset + op.length, op.object->size())) {
    op.result =
        fail(Error(Errc::kIo,
                   fmt::format("read {} of {} bytes: the object ends before the {} bytes it had "
                               "when opened (truncated or replaced while being read?)",
                               *op.result, op.length, op.object->size()))
                 .with_object(op.object->display_name())
                 .with_offset(op.offset + *op.result));
  }
  if (op.result) {
    stats_.bytes += *op.result;
    // A read of unknown length reads its whole object: fewer bytes than its guess is no short read.
    if (*op.result < op.length && !size_unknown) ++stats_.short_reads;
    stats_.slat.record(op.times.issued_ns - op.times.queued_ns);
    stats_.clat.record(now - op.times.issued_ns);
    stats_.lat.record(now - op.times.queued_ns);
  } else if (op.result.error().code() == Errc::kCancelled) {
    ++stats_.cancelled;
  } else {
    ++stats_.errors;
  }
  if (collect_) collect_->push_back(&op);
  if (op.done) op.done->on_read_complete(op);
}

Result<void> IoQueue::register_buffers(std::span<const MutableBytes>) {
  return fail(Errc::kUnsupported, "this queue has no registered buffers");
}

Result<void> IoQueue::register_object(const ObjectHandle&) {
  return fail(Errc::kUnsupported, "this queue has no registered objects");
}

Result<void> Backend::write(std::string_view key, ConstBytes data) {
  FEEDLINE_ASSIGN_OR_RETURN(auto writer, create(key));
  FEEDLINE_TRY(writer->append(data));
  return writer->commit();
}

std::string Backend::display_name(std::string_view key) const {
  return scheme() == "file" ? std::string(key) : fmt::format("{}://{}", scheme(), key);
}

void Backend::show_object(Error& e) const {
  if (e.object().empty() || e.object().find("://") != std::string::npos) return;
  e.with_object(display_name(e.object()));
}

}  // namespace feedline::storage

namespace feedline::storage {

Result<std::vector<ObjectInfo>> Backend::stat_many(std::span<const std::string> keys) {
  std::vector<ObjectInfo> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) {
    FEEDLINE_ASSIGN_OR_RETURN(ObjectInfo info, stat(k));
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace feedline::storage

namespace feedline::storage {

Result<void> Backend::host_memory_only(const QueueOptions& options) const {
  if (options.memory == QueueMemory::kHost) return {};
  return fail(
      Error(Errc::kUnsupported, fmt::format("{}:// cannot read into GPU memory", scheme()))
          .with_hint(
              "cuFile reads local files only; batches from this storage are copied to the GPU"));
}

}  // namespace feedline::storage
