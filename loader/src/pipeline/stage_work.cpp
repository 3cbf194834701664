#include "stage_work.hpp"

#include <fmt/format.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

#include "feedline/loader/digest.hpp"
#include "feedline/loader/tfrecord.hpp"
#include "unknown_size.hpp"

namespace feedline::loader::detail {

namespace {
constexpr std::size_t kMaxCachedHandles = 4096;
}  // namespace

HandleCache::HandleCache(storage::Backend& backend, const Dataset& dataset)
    : backend_(backend),
      dataset_(dataset),
      cached_(dataset.objects.size() <= kMaxCachedHandles ? dataset.objects.size() : 0) {}

Result<const storage::ObjectHandle*> HandleCache::get(
    std::uint32_t i, std::unique_ptr<storage::ObjectHandle>& hold) {
  if (!cached_.empty() && cached_[i]) return cached_[i].get();
  FEEDLINE_ASSIGN_OR_RETURN(auto h, backend_.open_known(dataset_.objects[i]));
  if (cached_.empty()) {
    hold = std::move(h);
    return hold.get();
  }
  cached_[i] = std::move(h);
  return cached_[i].get();
}

bool make_this_thread_nicer(int increment) noexcept {
  if (increment <= 0) return true;
  const auto tid = static_cast<id_t>(::gettid());
  errno = 0;
  const int now = ::getpriority(PRIO_PROCESS, tid);
  if (now == -1 && errno != 0) return false;
  return ::setpriority(PRIO_PROCESS, tid, std::min(19, now + increment)) == 0;
}

void spin_for(std::chrono::nanoseconds d, const std::atomic<bool>& stop) {
  if (d.count() <= 0) return;
  // The thread's own CPU time, not the wall's: a thread that loses its core meanwhile still owes
  // the work, as a real decoder would (on a wall clock, 4 threads on 2 cores finished a "1 ms"
  // sample on half a millisecond of CPU each).
  const std::uint64_t until = thread_cpu_ns() + static_cast<std::uint64_t>(d.count());
  while (thread_cpu_ns() < until && !stop.load(std::memory_order_relaxed)) {
  }
}

std::uint64_t decoded_slot_bytes(const Dataset& dataset, const Sample& s) {
  std::uint64_t pos = 0;
  for (const Member& m : dataset.members_of(s))
    pos = align_up(pos, kMemberAlign) + (m.zstd ? m.decoded_size : m.size);
  return pos;
}

namespace {

// The checks a member's bytes carry (MemberCheck), on the sample's bytes as read: a TFRecord
// record's length and both CRCs. Every data path that delivers host bytes comes through here
// (decode_sample); describe_on_device() refuses such members.
std::optional<Error> check_member(const Dataset& dataset, const Sample& smp, const Member& m,
                                  const InFlightSample& s) {
  if (m.check != MemberCheck::kTfRecordCrc) return std::nullopt;
  const std::uint64_t record = m.offset - kTfRecordHeaderBytes;  // open_dataset() put it there
  if (m.offset < kTfRecordHeaderBytes || m.offset + m.size + kTfRecordFooterBytes > s.raw_len) {
    return Error(Errc::kCorrupt,
                 fmt::format("TFRecord record '{}' runs past the sample's bytes", m.name))
        .with_object(dataset.objects[smp.object].key)
        .with_offset(smp.offset + m.offset);
  }
  auto ok = check_tfrecord(ConstBytes(s.bytes() + record, m.size + kTfRecordFramingBytes), m.size,
                           smp.offset + record, dataset.objects[smp.object].key);
  if (!ok) return std::move(ok).error();
  return std::nullopt;
}

// The digest and decoded size of s's members.
void digest_members(InFlightSample& s) {
  std::uint64_t digest = 0;
  std::uint64_t bytes = 0;
  for (const auto& mb : s.members) {
    digest += member_hash(ConstBytes(mb.data, mb.size));
    bytes += mb.size;
  }
  s.digest = digest;
  s.decoded_bytes = bytes;
}

// decode_sample's in-place half: every member into s's batch slot, at the offsets
// decoded_slot_bytes() lays out.
void decode_into_slot(const Dataset& dataset, InFlightSample& s, Decompressor& zstd) {
  const Sample& smp = dataset.samples[s.slot.sample];
  const std::string& object = dataset.objects[smp.object].key;
  std::byte* slot = s.decode_target();
  std::uint64_t pos = 0;
  s.copied_bytes = 0;
  for (const Member& m : dataset.members_of(smp)) {
    pos = align_up(pos, kMemberAlign);
    const ConstBytes stored(s.bytes() + m.offset, m.size);
    if (!m.zstd) {
      if (m.size) std::memcpy(slot + pos, stored.data(), m.size);
      s.copied_bytes += m.size;
      s.members.push_back({slot + pos, m.size});
      pos += m.size;
      continue;
    }
    // The slot holds exactly what the index says. A frame that declares another size (a stale
    // index) is refused before anything is written; one whose header lies cannot write past the
    // slot either (zstd stops at the destination's end and reports it).
    auto declared = Decompressor::content_size(stored);
    if (declared && *declared != m.decoded_size) {
      s.error =
          Error(Errc::kCorrupt,
                fmt::format("member '{}' decodes to {} bytes, the shard's index says {}", m.name,
                            *declared, m.decoded_size))
              .with_object(object)
              .with_offset(smp.offset + m.offset)
              .with_hint(
                  "the index is stale: delete the shard's .idx file (it is rebuilt by scanning)");
      return;
    }
    auto n = zstd.decompress(stored, MutableBytes(slot + pos, m.decoded_size));
    if (!n) {
      s.error = std::move(n).error().with_object(object).with_offset(smp.offset + m.offset);
      return;
    }
    s.members.push_back({slot + pos, *n});
    pos += m.decoded_size;
  }
}

}  // namespace

std::uint64_t decode_sample(const Dataset& dataset, InFlightSample& s, Decompressor& zstd,
                            BufferPool* pool, std::uint64_t max_decoded) {
  const Sample& smp = dataset.samples[s.slot.sample];
  const auto members = dataset.members_of(smp);
  const std::string& object = dataset.objects[smp.object].key;
  s.members.clear();
  s.members.reserve(members.size());
  for (const Member& m : members) {
    if (m.offset + stored_size(m, s) > s.raw_len) {
      s.error =
          Error(Errc::kCorrupt, fmt::format("member '{}' runs past the sample's bytes", m.name))
              .with_object(object)
              .with_offset(smp.offset + m.offset);
      return 0;
    }
    if (auto bad = check_member(dataset, smp, m, s)) {
      s.error = std::move(*bad);
      return 0;
    }
  }
  if (s.decode_in_place) {
    decode_into_slot(dataset, s, zstd);
    if (!s.error) digest_members(s);
    return 0;
  }
  std::uint64_t zstd_total = 0;
  std::uint64_t estimated = 0;
  for (const Member& m : members) {
    if (m.zstd) {
      auto size = Decompressor::content_size(ConstBytes(s.bytes() + m.offset, stored_size(m, s)));
      if (!size) {
        s.error = std::move(size).error().with_object(object).with_offset(smp.offset + m.offset);
        return 0;
      }
      zstd_total += align_up(std::min<std::uint64_t>(*size, ~std::uint64_t{0} / 2), kMemberAlign);
      estimated += m.decoded_size ? m.decoded_size : stored_size(m, s) * kZstdEstimate;
      if (max_decoded && zstd_total > max_decoded) {
        s.error =
            Error(
                Errc::kResourceExhausted,
                fmt::format(
                    "sample '{}': member '{}' declares {} decoded bytes, more than the {} bytes a "
                    "sample may take",
                    smp.key, m.name, *size, max_decoded))
                .with_object(object)
                .with_offset(smp.offset + m.offset)
                .with_hint(
                    "a corrupt or hostile frame (a zstd bomb?); --on-error skip leaves it out, "
                    "--max-sample-size or --memory-budget raise the limit if the data is right");
        return 0;
      }
    }
  }
  if (zstd_total > 0 && s.decoded.size() < zstd_total) {
    auto buf = pool ? pool->get(zstd_total) : AlignedBuffer::allocate(zstd_total);
    if (!buf) {
      s.error = std::move(buf).error();
      return 0;
    }
    s.decoded = std::move(*buf);
  }
  std::uint64_t zpos = 0;
  for (const Member& m : members) {
    const ConstBytes stored(s.bytes() + m.offset, stored_size(m, s));  // unknown_size.hpp
    if (!m.zstd) {
      s.members.push_back({stored.data(), stored.size()});
      continue;
    }
    const MutableBytes out(s.decoded.data() + zpos, s.decoded.size() - zpos);
    auto n = zstd.decompress(stored, out);
    if (!n) {
      s.error = std::move(n).error().with_object(object).with_offset(smp.offset + m.offset);
      return 0;
    }
    s.members.push_back({out.data(), *n});
    zpos += align_up(*n, kMemberAlign);
  }
  digest_members(s);
  return zstd_total > estimated ? zstd_total - estimated : 0;
}

void describe_on_device(const Dataset& dataset, InFlightSample& s) {
  const Sample& smp = dataset.samples[s.slot.sample];
  s.members.clear();
  std::uint64_t bytes = 0;
  for (const Member& m : dataset.members_of(smp)) {
    if (m.offset + m.size > s.raw_len) {
      s.error =
          Error(Errc::kCorrupt, fmt::format("member '{}' runs past the sample's bytes", m.name))
              .with_object(dataset.objects[smp.object].key)
              .with_offset(smp.offset + m.offset);
      return;
    }
    if (m.check != MemberCheck::kNone) {  // plan_data_path() never sends these to the GPU
      s.error = Error(Errc::kInternal,
                      fmt::format("member '{}' carries a CRC the host must check, but was read "
                                  "into GPU memory",
                                  m.name))
                    .with_object(dataset.objects[smp.object].key)
                    .with_offset(smp.offset + m.offset);
      return;
    }
    s.members.push_back({s.bytes() + m.offset, m.size});
    bytes += m.size;
  }
  s.digest = 0;
  s.decoded_bytes = bytes;
}

Result<std::uint64_t> fits_device_twin(const BatchBuffer& buffer, std::uint64_t size) {
  if (size <= buffer.device_size()) return std::uint64_t{0};
  return fail(Errc::kInternal,
              fmt::format("a batch needs {} bytes of GPU memory, its buffer has {}", size,
                          buffer.device_size()));
}

Result<std::uint64_t> ensure_room(BatchBuffer& buffer, std::uint64_t used, const InFlightSample& s,
                                  DeviceSink* sink, std::uint64_t* copied) {
  std::uint64_t need = used;
  for (const auto& m : s.members) need = align_up(need, kMemberAlign) + m.size;
  return buffer.grow_keeping(need, used, sink, copied);
}

BatchSample copy_into_batch(const Dataset& dataset, const InFlightSample& s, BatchBuffer& buffer,
                            std::uint64_t& used, std::vector<BatchMember>& members) {
  const Sample& smp = dataset.samples[s.slot.sample];
  const auto dm = dataset.members_of(smp);
  BatchSample bs;
  bs.key = smp.key;
  bs.sample = s.slot.sample;
  bs.first_member = static_cast<std::uint32_t>(members.size());
  bs.member_count = static_cast<std::uint32_t>(s.members.size());
  bs.offset = align_up(used, kMemberAlign);
  for (std::size_t i = 0; i < s.members.size(); ++i) {
    used = align_up(used, kMemberAlign);
    if (s.members[i].size) std::memcpy(buffer.data() + used, s.members[i].data, s.members[i].size);
    members.push_back({dm[i].name, used, s.members[i].size});
    used += s.members[i].size;
  }
  bs.size = used - bs.offset;
  return bs;
}

}  // namespace feedline::loader::detail

namespace feedline::loader::detail {

BatchSample place_in_batch(const Dataset& dataset, const InFlightSample& s,
                           std::vector<BatchMember>& members) {
  const Sample& smp = dataset.samples[s.slot.sample];
  const auto dm = dataset.members_of(smp);
  BatchSample bs;
  bs.key = smp.key;
  bs.sample = s.slot.sample;
  bs.first_member = static_cast<std::uint32_t>(members.size());
  bs.member_count = static_cast<std::uint32_t>(s.members.size());
  bs.offset = s.direct_offset;
  std::uint64_t end = s.direct_offset;
  for (std::size_t i = 0; i < s.members.size(); ++i) {
    const auto at = static_cast<std::uint64_t>(s.members[i].data - s.slot_base());
    members.push_back({dm[i].name, at, s.members[i].size});
    end = std::max(end, at + s.members[i].size);
  }
  bs.size = end - bs.offset;
  return bs;
}

}  // namespace feedline::loader::detail
