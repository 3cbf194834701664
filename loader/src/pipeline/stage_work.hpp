// The work each stage does to one sample, shared by the pipeline and by the stage-alone
// measurements (stage_bench.cpp), so "decode alone" measures exactly the pipeline's decode.
#pragma once

#include <atomic>
#include <chrono>

#include "buffer_pool.hpp"
#include "feedline/core/cpus.hpp"
#include "feedline/loader/codec.hpp"
#include "feedline/loader/decoder.hpp"
#include "run_state.hpp"

namespace feedline::loader::detail {

inline constexpr std::uint64_t kMemberAlign = 64;  // members start on cache lines in a batch
// Members to decode whose decoded size is not known before reading (a zstd frame the index does
// not size, an image at its own size) are reserved at this many times their stored size; a
// larger one is admitted anyway and counted as budget overshoot.
inline constexpr std::uint64_t kDecodeEstimate = 4;

// The bytes member `index` (m) is reserved at once decoded.
inline std::uint64_t decoded_estimate(const DecodePlan& plan, std::size_t index, const Member& m) {
  if (auto known = plan.known_size(index, m)) return *known;
  return m.size * kDecodeEstimate;
}

// One member on its way through its chain (decode_sample): the steps before the last have run
// into the thread's scratch buffers, leaving the last step's input; the digest's bytes are found
// on the way.
struct MemberRun {
  const DecodePlan::Chain* chain = nullptr;
  DecodeContext ctx;
  ConstBytes last_input;       // the last step's input
  ConstBytes digested;         // what the digest covers, when known before the last step
  bool digest_output = false;  // ... else: the last step's output
  std::uint64_t declared = 0;  // the size the last step declares
};

// One decode thread's decoders: a DecoderState per decoder the plan uses (made on first use),
// and scratch buffers for the outputs of a chain's steps before its last (a ".jpg.zst" member's
// JPEG bytes), reused sample after sample (each as large as the largest it held: at most the
// run's decode limit).
class ThreadDecoders {
 public:
  ThreadDecoders(const DecodePlan& plan, std::uint64_t seed) : plan_(plan), seed_(seed) {}
  const DecodePlan& plan() const noexcept { return plan_; }
  std::uint64_t seed() const noexcept { return seed_; }
  DecoderState& state(const Decoder& d);
  std::vector<std::byte>& scratch(std::size_t i);
  std::vector<MemberRun>& runs() noexcept { return runs_; }  // decode_sample's, reused

 private:
  const DecodePlan& plan_;
  const std::uint64_t seed_;
  std::vector<std::pair<const Decoder*, std::unique_ptr<DecoderState>>> states_;
  std::vector<std::vector<std::byte>> scratch_;
  std::vector<MemberRun> runs_;
};

// Object handles for the storage stage: kept open for datasets of up to 4,096 objects (tar
// shards, a few big files), opened per read beyond that (100,000 small files would exhaust file
// descriptors). The handles kept open are bounded by the process's descriptor limit too
// (RLIMIT_NOFILE): every cache in the process (`caches`: the storage threads of every loader
// sharing the backend, a host's accelerators) keeps at most its share of half the limit, the
// rest left to the reads in flight (each may hold an object open: `depth` a cache) and to what
// else the process has open. An open that fails for want of descriptors (EMFILE, ENFILE) says
// what the run holds and what to change. Used from one thread.
class HandleCache {
 public:
  HandleCache(storage::Backend& backend, const Dataset& dataset, unsigned caches = 1,
              unsigned depth = 1);
  // Per-read handles leave the open to `queue` where it opens objects with their reads
  // (IoQueue::opens_objects(): io_uring links the open to the read).
  void use_queue(const storage::IoQueue& queue) noexcept { deferred_ = queue.opens_objects(); }
  // Each read's object is opened by the queue, with the read.
  bool opens_in_queue() const noexcept { return deferred_ && cached_.empty(); }
  // The handle for object i; `hold` keeps a per-read handle alive until the read is done.
  Result<const storage::ObjectHandle*> get(std::uint32_t i,
                                           std::unique_ptr<storage::ObjectHandle>& hold);
  // A read's error, with what the run holds open and what to change where it is one of running
  // out of descriptors (the queue's own opens, linked to their reads, fail so); e otherwise.
  Error explain(Error e) const;

 private:
  storage::Backend& backend_;
  const Dataset& dataset_;
  unsigned caches_;
  unsigned depth_;
  std::vector<std::unique_ptr<storage::ObjectHandle>> cached_;
  bool deferred_ = false;
};

// The process's limit on open descriptors (RLIMIT_NOFILE's soft limit; a large number when
// unlimited).
std::uint64_t descriptor_limit() noexcept;

// Busy CPU work for d of the calling thread's CPU time (the decode/collate cost knobs): burns CPU
// like a real decoder would (a thread that loses its core takes longer), and
// ends early once `stop` is set (a planted cost of an hour must not outlive Ctrl-C).
void spin_for(std::chrono::nanoseconds d, const std::atomic<bool>& stop);

// Makes the calling thread `increment` nicer (Linux: nice is per thread), at most 19. False when
// the kernel refused.
bool make_this_thread_nicer(int increment) noexcept;

using feedline::usable_cores;  // core/cpus.hpp

// For pushes to the decoded queue: whether collate, if it waits, can go on with s. It takes
// samples in seq order and publishes the one it needs (collate_cursor) before it waits.
inline auto collate_awaits(const RunState& run) {
  return [&run](const InFlightSample& s) {
    return s.slot.seq == run.collate_cursor.load(std::memory_order_acquire);
  };
}

// True when each sample is an object of its own (files, HTTP objects), not one of many in a shard:
// then every sample costs its own open or request, the host's work.
inline bool one_sample_per_object(const Dataset& dataset) noexcept {
  return dataset.objects.size() >= dataset.samples.size();
}

// Bytes a sample takes in a batch after decoding: its members' decoded sizes, each started on a
// kMemberAlign boundary (what decode in place writes and collate packs). Needs every member's
// decoded size known (DecodePlan::known_size).
std::uint64_t decoded_slot_bytes(const Dataset& dataset, const DecodePlan& plan, const Sample& s);

// Cuts s's members out of its raw bytes, checks what members carry (MemberCheck: a TFRecord
// record's CRCs, on every path, the in-place one and the storage threads' inline one included),
// runs each member through its decoders (the plan's chain: zstd, JPEG, ...) into s.decoded (or,
// with s.decodes_in_place(), writes every member into s's batch slot as decoded_slot_bytes lays it
// out: a member whose decoded size differs from the one planned, a stale index's, is an error)
// and computes the digest (decoder.hpp: over each member's bytes after its exact steps). On
// failure sets s.error (naming object and offset). Returns the bytes by which the decoded size
// exceeded the reservation's estimate (0 normally). The output buffer comes from pool when given
// (s.decoded is reused when already large enough).
//
// Declared sizes are untrusted: a member whose header declares more than `max_decoded` bytes
// (0: no limit; zstd frames, a JPEG's dimensions), or a sample whose members do in all, fails
// with kResourceExhausted naming the sample, the member and the offset, before anything is
// allocated for it.
std::uint64_t decode_sample(const Dataset& dataset, InFlightSample& s, ThreadDecoders& decoders,
                            BufferPool* pool = nullptr, std::uint64_t max_decoded = 0);

// decode_sample for a sample read into GPU memory (s.on_device()): its members are its stored
// bytes (the direct path has no zstd), located but never touched; digest 0 (nothing on the host
// could hash them). A member with a MemberCheck never gets here (plan_data_path); one that did is
// a kInternal error, never delivered unchecked.
void describe_on_device(const Dataset& dataset, InFlightSample& s);

// Makes room in buffer for s's members after `used` bytes (BatchBuffer::grow_keeping). Returns the
// bytes the buffer grew by; the `used` bytes copied into the bigger buffer are added to *copied.
Result<std::uint64_t> ensure_room(BatchBuffer& buffer, std::uint64_t used, const InFlightSample& s,
                                  DeviceSink* sink = nullptr, std::uint64_t* copied = nullptr);

// The GPU twin of buffer is never regrown (it is registered with cuFile): 0 when `size` bytes
// fit, kInternal otherwise (start() sizes it for the largest batch).
Result<std::uint64_t> fits_device_twin(const BatchBuffer& buffer, std::uint64_t size);

// Copies s's members into buffer at `used` (advanced), appends their BatchMembers and returns
// the sample's BatchSample.
BatchSample copy_into_batch(const Dataset& dataset, const InFlightSample& s, BatchBuffer& buffer,
                            std::uint64_t& used, std::vector<BatchMember>& members);

// The direct path's collate: s was read straight into its slot of s.place.buffer; appends its
// BatchMembers (pointing at that slot) and returns its BatchSample. Copies nothing.
BatchSample place_in_batch(const Dataset& dataset, const InFlightSample& s,
                           std::vector<BatchMember>& members);

}  // namespace feedline::loader::detail
