// The pieces open_dataset()'s formats share (see open_common.hpp).
#include "open_common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "sequential_reader.hpp"

namespace feedline::loader::detail {

std::string_view key_of(std::string_view name) {
  const std::size_t slash = name.rfind('/');
  const std::size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  const std::size_t dot = name.find('.', base);
  return dot == std::string_view::npos ? name : name.substr(0, dot);
}

bool hidden(std::string_view rel) {
  std::size_t start = 0;
  while (start < rel.size()) {
    std::size_t slash = rel.find('/', start);
    if (slash == std::string_view::npos) slash = rel.size();
    const std::string_view part = rel.substr(start, slash - start);
    if (part.starts_with('.') && part != "." && part != "..") return true;
    start = slash + 1;
  }
  return false;
}

Error cancelled(std::string_view what) {
  return Error(Errc::kCancelled, fmt::format("stopped while opening the dataset ({})", what));
}

void SampleBuilder::add(std::uint32_t object, std::string_view name, std::uint64_t data_offset,
                        std::uint64_t size, std::uint64_t decoded_size,
                        std::optional<std::uint64_t> header_offset) {
  const std::string_view key = key_of(name);
  if (!open_ || object != cur_.object || key != cur_.key) {
    close();
    cur_.object = object;
    cur_.offset = header_offset.value_or(data_offset);
    cur_.length = 0;
    cur_.first_member = static_cast<std::uint32_t>(ds_.members.size());
    cur_.member_count = 0;
    cur_.key.assign(key);
    open_ = true;
  }
  Member& m = ds_.members.emplace_back();
  m.name.assign(name);
  m.offset = data_offset - cur_.offset;
  m.size = size;
  m.decoded_size = decoded_size;
  m.check = header_offset ? MemberCheck::kTarHeader : MemberCheck::kNone;
  ++cur_.member_count;
  cur_.length = data_offset + size - cur_.offset;
}

void SampleBuilder::close() {
  if (!open_) return;
  ds_.samples.push_back(cur_);
  open_ = false;
}

void SampleBuilder::add_sample(std::uint32_t object, std::string_view key, std::uint64_t offset,
                               std::uint64_t length, std::span<const MemberSpec> members) {
  close();
  Sample& s = ds_.samples.emplace_back();
  s.object = object;
  s.offset = offset;
  s.length = length;
  s.first_member = static_cast<std::uint32_t>(ds_.members.size());
  s.member_count = static_cast<std::uint32_t>(members.size());
  s.key.assign(key);
  for (const MemberSpec& spec : members) {
    Member& m = ds_.members.emplace_back();
    m.name = spec.name;
    m.offset = spec.offset - offset;
    m.size = spec.size;
    m.decoded_size = spec.size;
    m.check = spec.check;
  }
}

Result<std::string> read_object(storage::Backend& backend, storage::IoQueue& queue,
                                const storage::ObjectInfo& info, const std::stop_token& stop,
                                std::uint64_t max_bytes, std::string_view what) {
  if (info.size > max_bytes) {
    return fail(Error(Errc::kResourceExhausted,
                      fmt::format("{} bytes is too large for {}", info.size, what))
                    .with_object(info.key));
  }
  FEEDLINE_ASSIGN_OR_RETURN(auto handle, backend.open_known(info));
  const std::uint64_t align = std::max<std::uint64_t>(backend.caps().alignment, kPageAlign);
  FEEDLINE_ASSIGN_OR_RETURN(AlignedBuffer buf,
                            AlignedBuffer::allocate(static_cast<std::size_t>(
                                align_up(std::max<std::uint64_t>(handle->size(), 1), align))));
  FEEDLINE_ASSIGN_OR_RETURN(std::uint64_t n, read_sync(queue, *handle, 0, buf.span(), stop));
  return std::string(reinterpret_cast<const char*>(buf.data()), static_cast<std::size_t>(n));
}

Result<void> read_ranges(storage::IoQueue& queue, std::uint64_t align, std::span<RangeRead> reads,
                         const std::stop_token& stop) {
  align = std::max<std::uint64_t>({align, kPageAlign, 1});
  std::vector<storage::ReadOp*> ops;
  ops.reserve(reads.size());
  Countdown done;
  for (RangeRead& r : reads) {
    const std::uint64_t start = align_down(r.offset, align);
    const std::uint64_t end = align_up(r.offset + std::max<std::uint64_t>(r.length, 1), align);
    FEEDLINE_ASSIGN_OR_RETURN(r.buf,
                              AlignedBuffer::allocate(static_cast<std::size_t>(end - start)));
    r.op = storage::ReadOp{};
    r.op.object = r.object;
    r.op.offset = start;
    r.op.length = end - start;
    r.op.dst = r.buf.span();
    r.op.done = &done;
    ops.push_back(&r.op);
  }
  done.left = ops.size();
  if (!ops.empty()) queue.submit(ops);
  bool stopped = false;
  while (done.left > 0) {
    if (!stopped && stop.stop_requested()) {
      queue.cancel();  // every op still completes, with kCancelled or what it read
      stopped = true;
    }
    queue.poll(1, kOpenPollSlice);
  }
  if (stopped) return fail(cancelled("reading headers"));
  for (RangeRead& r : reads) {
    if (!r.op.result) {
      r.bytes = fail(r.op.result.error());
      continue;
    }
    const std::uint64_t got = *r.op.result, skip = r.offset - r.op.offset;
    const std::uint64_t n = got > skip ? std::min(got - skip, r.length) : 0;
    r.bytes = ConstBytes(r.buf.data() + skip, static_cast<std::size_t>(n));
  }
  return {};
}

}  // namespace feedline::loader::detail
