// The work each stage does to one sample (stage_work.hpp): the handle cache, planted CPU costs,
// the decode of a sample's members (into a sample buffer or its batch slot, or described in GPU
// memory), and placing or copying a sample into its batch.
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
#include "feedline/loader/tar.hpp"
#include "feedline/loader/tar_index.hpp"
#include "feedline/loader/tfrecord.hpp"
#include "unknown_size.hpp"

namespace feedline::loader::detail {

namespace {
constexpr std::size_t kMaxCachedHandles = 4096;
}  // namespace

std::uint64_t descriptor_limit() noexcept {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return 1u << 20;
  return r.rlim_cur;
}

namespace {

// The handles one of `caches` caches may keep open: its share of half the descriptor limit.
std::size_t cache_bound(unsigned caches) {
  const std::uint64_t share = descriptor_limit() / 2 / std::max(1u, caches);
  return static_cast<std::size_t>(std::min<std::uint64_t>(kMaxCachedHandles, share));
}

bool out_of_descriptors_errno(int e) { return e == EMFILE || e == ENFILE; }

}  // namespace

HandleCache::HandleCache(storage::Backend& backend, const Dataset& dataset, unsigned caches,
                         unsigned depth)
    : backend_(backend),
      dataset_(dataset),
      caches_(std::max(1u, caches)),
      depth_(std::max(1u, depth)),
      cached_(dataset.objects.size() <= cache_bound(caches) ? dataset.objects.size() : 0) {}

Error HandleCache::explain(Error e) const {
  if (!out_of_descriptors_errno(e.sys_errno())) return e;
  rlimit r{};
  ::getrlimit(RLIMIT_NOFILE, &r);
  const std::uint64_t held =
      cached_.empty() ? std::uint64_t{caches_} * depth_ : std::uint64_t{caches_} * cached_.size();
  const bool at_system = e.sys_errno() == ENFILE;
  Error out(
      e.code(),
      fmt::format(
          "{}: {}; this process may hold {} open files (ulimit -n; hard limit "
          "{}), and its {} storage queue(s) hold up to {} at once ({})",
          e.message(),
          at_system ? "the system's table of open files is full"
                    : "this process has run out of file descriptors",
          r.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : std::to_string(r.rlim_cur),
          r.rlim_max == RLIM_INFINITY ? std::string("unlimited") : std::to_string(r.rlim_max),
          caches_, held, cached_.empty() ? "one per read in flight" : "every object kept open"));
  if (!e.object().empty()) out.with_object(e.object());
  if (e.offset()) out.with_offset(*e.offset());
  out.with_sys_errno(e.sys_errno());
  out.with_hint(
      "raise the limit (ulimit -n), or run fewer accelerators or a lower {io_depth} on this "
      "host");
  return out;
}

Result<const storage::ObjectHandle*> HandleCache::get(
    std::uint32_t i, std::unique_ptr<storage::ObjectHandle>& hold) {
  if (!cached_.empty() && cached_[i]) return cached_[i].get();
  if (cached_.empty() && deferred_) {
    auto h = backend_.open_deferred(dataset_.objects[i]);
    if (!h && out_of_descriptors_errno(h.error().sys_errno())) {
      return fail(explain(std::move(h).error()));
    }
    FEEDLINE_ASSIGN_OR_RETURN(hold, std::move(h));
    return hold.get();
  }
  auto opened = backend_.open_known(dataset_.objects[i]);
  if (!opened && out_of_descriptors_errno(opened.error().sys_errno())) {
    return fail(explain(std::move(opened).error()));
  }
  FEEDLINE_ASSIGN_OR_RETURN(auto h, std::move(opened));
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

DecoderState& ThreadDecoders::state(const Decoder& d) {
  for (auto& [decoder, state] : states_) {
    if (decoder == &d) return *state;
  }
  states_.emplace_back(&d, d.make_state());
  return *states_.back().second;
}

std::vector<std::byte>& ThreadDecoders::scratch(std::size_t i) {
  if (scratch_.size() <= i) scratch_.resize(i + 1);
  return scratch_[i];
}

std::uint64_t decoded_slot_bytes(const Dataset& dataset, const DecodePlan& plan, const Sample& s) {
  std::uint64_t pos = 0;
  for (std::uint32_t i = 0; i < s.member_count; ++i) {
    const std::size_t index = s.first_member + i;
    pos = align_up(pos, kMemberAlign) + plan.known_size(index, dataset.members[index]).value_or(0);
  }
  return pos;
}

namespace {

// The checks a member's bytes carry (MemberCheck), on the sample's bytes as read: a TFRecord
// record's length and both CRCs; a tar member's header, for a member an index listed. Every data
// path that delivers host bytes comes through here (decode_sample); describe_on_device() refuses
// such members.
std::optional<Error> check_member(const Dataset& dataset, const Sample& smp, const Member& m,
                                  const InFlightSample& s) {
  if (m.check == MemberCheck::kNone) return std::nullopt;
  if (m.check == MemberCheck::kTarHeader) {
    // Its header blocks lie between the previous member's padded end (the range's start for the
    // first member; offsets from the range's start, which is 512-aligned in the shard) and its
    // data.
    const Member* first = dataset.members.data() + smp.first_member;
    const std::uint64_t from =
        &m == first ? 0 : align_up((&m - 1)->offset + (&m - 1)->size, tar::kBlockSize);
    if (from > m.offset || m.offset > s.raw_len) {
      return Error(Errc::kCorrupt,
                   fmt::format("tar member '{}' has no room for its header in the sample's bytes",
                               m.name))
          .with_object(dataset.objects[smp.object].key)
          .with_offset(smp.offset + m.offset);
    }
    auto ok = check_tar_member_header(
        ConstBytes(s.bytes() + from, static_cast<std::size_t>(m.offset - from)), smp.offset + from,
        m.name, m.size, dataset.objects[smp.object].key);
    if (!ok) return std::move(ok).error();
    return std::nullopt;
  }
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

// Runs the steps of m's chain before its last on `stored`. `next_scratch` numbers the thread's
// scratch buffers this sample used so far.
Result<MemberRun> run_prefix(const DecodePlan::Chain& chain, ConstBytes stored,
                             const DecodeContext& ctx, ThreadDecoders& t,
                             std::size_t& next_scratch) {
  MemberRun run;
  run.chain = &chain;
  run.ctx = ctx;
  ConstBytes in = stored;
  if (chain.digest_after == 0) run.digested = stored;
  for (std::size_t i = 0; i + 1 < chain.steps.size(); ++i) {
    DecoderState& st = t.state(*chain.steps[i]);
    FEEDLINE_ASSIGN_OR_RETURN(std::uint64_t size, st.output_size(in, ctx));
    std::vector<std::byte>& buf = t.scratch(next_scratch++);
    buf.resize(static_cast<std::size_t>(size));
    FEEDLINE_ASSIGN_OR_RETURN(Decoded d, st.decode(in, MutableBytes(buf.data(), buf.size()), ctx));
    in = ConstBytes(buf.data(), std::min<std::uint64_t>(d.bytes, buf.size()));
    if (chain.digest_after == i + 1) run.digested = in;
  }
  run.last_input = in;
  run.digest_output = chain.digest_after == chain.steps.size();
  return run;
}

// The last step of run into out (at least its output size); the member's bytes and digest.
Result<MemberBytes> run_last(const MemberRun& run, MutableBytes out, ThreadDecoders& t,
                             std::uint64_t& digest) {
  DecoderState& st = t.state(*run.chain->steps.back());
  FEEDLINE_ASSIGN_OR_RETURN(Decoded d, st.decode(run.last_input, out, run.ctx));
  if (d.bytes > out.size()) {
    return fail(
        Error(Errc::kInternal, fmt::format("decoder {} wrote {} bytes into an output of {}",
                                           run.chain->steps.back()->name(), d.bytes, out.size())));
  }
  const MemberBytes mb{out.data(), d.bytes, d.shape};
  digest += member_hash(run.digest_output ? ConstBytes(mb.data, mb.size) : run.digested);
  return mb;
}

// decode_sample's in-place half: every member into s's batch slot, at the offsets
// decoded_slot_bytes() lays out.
void decode_into_slot(const Dataset& dataset, InFlightSample& s, ThreadDecoders& t,
                      std::uint64_t max_decoded) {
  const DecodePlan& plan = t.plan();
  const Sample& smp = dataset.samples[s.slot.sample];
  const std::string& object = dataset.objects[smp.object].key;
  std::byte* slot = s.decode_target();
  std::uint64_t pos = 0, digest = 0, bytes = 0;
  std::size_t scratch = 0;
  s.copied_bytes = 0;
  for (std::uint32_t i = 0; i < smp.member_count; ++i) {
    const std::size_t index = smp.first_member + i;
    const Member& m = dataset.members[index];
    pos = align_up(pos, kMemberAlign);
    const ConstBytes stored(s.bytes() + m.offset, m.size);
    const DecodePlan::Chain& chain = plan.chain_of(index);
    auto fail_with = [&](Error e) {
      s.error = std::move(e).with_object(object).with_offset(smp.offset + m.offset);
    };
    if (chain.steps.empty()) {
      if (m.size) std::memcpy(slot + pos, stored.data(), m.size);
      s.copied_bytes += m.size;
      s.members.push_back({slot + pos, m.size, {}});
      digest += member_hash(stored);
      bytes += m.size;
      pos += m.size;
      continue;
    }
    const std::uint64_t planned = plan.known_size(index, m).value_or(0);
    const DecodeContext ctx{m.name, s.slot.sample, s.slot.epoch, t.seed(), max_decoded};
    auto run = run_prefix(chain, stored, ctx, t, scratch);
    if (!run) return fail_with(std::move(run).error());
    // The slot holds exactly what was planned. A member that declares another size (a stale
    // index) is refused before anything is written; one whose header lies cannot write past the
    // slot either (the decoder stops at its output's end and reports it).
    auto declared = t.state(*chain.steps.back()).output_size(run->last_input, ctx);
    if (!declared) return fail_with(std::move(declared).error());
    if (*declared != planned) {
      const bool indexed = chain.steps.size() == 1 && chain.steps.front()->sized_by_index();
      return fail_with(
          Error(Errc::kCorrupt,
                fmt::format("member '{}' decodes to {} bytes, {} says {}", m.name, *declared,
                            indexed ? "the shard's index" : "its decoder", planned))
              .with_hint(indexed ? "the index is stale: delete the shard's .idx file (it is "
                                   "rebuilt by scanning)"
                                 : ""));
    }
    auto mb = run_last(*run, MutableBytes(slot + pos, planned), t, digest);
    if (!mb) return fail_with(std::move(mb).error());
    s.members.push_back(*mb);
    bytes += mb->size;
    pos += planned;
  }
  s.digest = digest;
  s.decoded_bytes = bytes;
}

// Every member of s lies within the bytes read and carries what it should (check_member): false,
// with s.error set, otherwise.
bool members_in_bounds(const Dataset& dataset, const Sample& smp, InFlightSample& s) {
  for (const Member& m : dataset.members_of(smp)) {
    if (m.offset + stored_size(m, s) > s.raw_len) {
      s.error =
          Error(Errc::kCorrupt, fmt::format("member '{}' runs past the sample's bytes", m.name))
              .with_object(dataset.objects[smp.object].key)
              .with_offset(smp.offset + m.offset);
      return false;
    }
    if (auto bad = check_member(dataset, smp, m, s)) {
      s.error = std::move(*bad);
      return false;
    }
  }
  return true;
}

}  // namespace

std::uint64_t decode_sample(const Dataset& dataset, InFlightSample& s, ThreadDecoders& t,
                            BufferPool* pool, std::uint64_t max_decoded) {
  const DecodePlan& plan = t.plan();
  const Sample& smp = dataset.samples[s.slot.sample];
  const auto members = dataset.members_of(smp);
  const std::string& object = dataset.objects[smp.object].key;
  s.members.clear();
  s.members.reserve(members.size());
  if (!members_in_bounds(dataset, smp, s)) return 0;
  if (s.decodes_in_place()) {
    decode_into_slot(dataset, s, t, max_decoded);
    return 0;
  }
  // The steps before each member's last, then the sizes the last ones declare: the output buffer
  // holds them all, each on a kMemberAlign boundary.
  std::vector<MemberRun>& runs = t.runs();
  runs.clear();
  std::uint64_t total = 0;
  std::uint64_t estimated = 0;
  std::size_t scratch = 0;
  for (std::uint32_t i = 0; i < smp.member_count; ++i) {
    const std::size_t index = smp.first_member + i;
    const Member& m = members[i];
    const DecodePlan::Chain& chain = plan.chain_of(index);
    if (chain.steps.empty()) continue;
    const ConstBytes stored(s.bytes() + m.offset, stored_size(m, s));  // unknown_size.hpp
    const DecodeContext ctx{m.name, s.slot.sample, s.slot.epoch, t.seed(), max_decoded};
    auto run = run_prefix(chain, stored, ctx, t, scratch);
    std::optional<Error> e;
    if (run) {
      auto size = t.state(*chain.steps.back()).output_size(run->last_input, ctx);
      if (size) {
        run->declared = *size;
        total += align_up(std::min<std::uint64_t>(*size, ~std::uint64_t{0} / 4), kMemberAlign);
        estimated += decoded_estimate(plan, index, m);
        if (max_decoded && total > max_decoded) {
          e = Error(Errc::kResourceExhausted,
                    fmt::format("sample '{}': its members declare {} decoded bytes, more than "
                                "the {} bytes a sample may take (member '{}' declares {})",
                                smp.key, total, max_decoded, m.name, *size))
                  .with_hint(
                      "a corrupt or hostile header (a zstd bomb?); {on_error=skip} leaves it "
                      "out, {max_sample_size} or {memory_budget} raise the limit if the data is "
                      "right");
        }
      } else {
        e = std::move(size).error();
      }
      if (!e) runs.push_back(std::move(*run));
    } else {
      e = std::move(run).error();
    }
    if (e) {
      s.error = std::move(*e).with_object(object).with_offset(smp.offset + m.offset);
      return 0;
    }
  }
  if (total > 0 && s.decoded.size() < total) {
    auto buf = pool ? pool->get(total) : AlignedBuffer::allocate(total);
    if (!buf) {
      s.error = std::move(buf).error();
      return 0;
    }
    s.decoded = std::move(*buf);
  }
  std::uint64_t digest = 0, bytes = 0, zpos = 0;
  std::size_t next_run = 0;
  for (std::uint32_t i = 0; i < smp.member_count; ++i) {
    const std::size_t index = smp.first_member + i;
    const Member& m = members[i];
    const ConstBytes stored(s.bytes() + m.offset, stored_size(m, s));
    if (!plan.decodes(index)) {
      s.members.push_back({stored.data(), stored.size(), {}});
      digest += member_hash(stored);
      bytes += stored.size();
      continue;
    }
    const MemberRun& run = runs[next_run++];
    const MutableBytes out(s.decoded.data() + zpos, run.declared);
    auto mb = run_last(run, out, t, digest);
    if (!mb) {
      s.error = std::move(mb).error().with_object(object).with_offset(smp.offset + m.offset);
      return 0;
    }
    s.members.push_back(*mb);
    bytes += mb->size;
    zpos += align_up(run.declared, kMemberAlign);
  }
  s.digest = digest;
  s.decoded_bytes = bytes;
  return total > estimated ? total - estimated : 0;
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
    s.members.push_back({s.bytes() + m.offset, m.size, {}});
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
    members.push_back({dm[i].name, used, s.members[i].size, s.members[i].shape});
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
  bs.offset = s.place.offset;
  std::uint64_t end = s.place.offset;
  for (std::size_t i = 0; i < s.members.size(); ++i) {
    const auto at = static_cast<std::uint64_t>(s.members[i].data - s.slot_base());
    members.push_back({dm[i].name, at, s.members[i].size, s.members[i].shape});
    end = std::max(end, at + s.members[i].size);
  }
  bs.size = end - bs.offset;
  return bs;
}

}  // namespace feedline::loader::detail
