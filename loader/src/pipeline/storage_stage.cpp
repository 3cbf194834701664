// The storage stage: admits samples in sampler order (memory budget, window ahead of collate),
// lays out each batch's slots on the direct and decode-in-place paths, and keeps up to io_depth
// reads in flight. It may run on several threads, each with an IoQueue of its own and its share
// of io_depth: small local files cost CPU per sample (open, the page-cache copy, close: ~16 us
// for 64 KiB here), which one thread cannot spread over the cores. They take samples from one
// admission (a mutex held only to pick the next sample and its slot, never over an open or a
// read), so samples still enter in sampler order.
#include <fmt/format.h>

#include <deque>
#include <mutex>

#include "device_sink.hpp"
#include "feedline/core/units.hpp"
#include "feedline/storage/device_reads.hpp"
#include "stage_work.hpp"
#include "stages.hpp"
#include "unknown_size.hpp"

namespace feedline::loader::detail {
// Why admission stopped (StorageStage::Admitted::why): outside the anonymous namespace, as a
// member's type of a class with linkage.
enum class AdmissionLimit { kNone, kWindow, kBudget };

namespace {

struct ReadSlot {
  storage::ReadOp op;
  InFlightSample sample;
  std::unique_ptr<storage::ObjectHandle> own_handle;  // when handles are not cached
};

class ReadDone final : public storage::ReadCompletion {
 public:
  std::vector<ReadSlot*> done;
  void on_read_complete(storage::ReadOp& op) noexcept override {
    done.push_back(static_cast<ReadSlot*>(op.user));
  }
};

// Why admission stopped, timed: the window ahead of collate (downstream is slow) or the memory
// budget. The verdict uses these to tell "storage is slow" from "storage is held back".
class LimitTimer {
 public:
  using Limit = AdmissionLimit;
  using enum AdmissionLimit;
  LimitTimer(std::uint64_t& window_ns, std::uint64_t& budget_ns)
      : window_ns_(window_ns), budget_ns_(budget_ns) {}
  void set(Limit l) {
    if (l == limit_) return;
    const std::uint64_t t = now_ns();
    if (limit_ == kWindow) window_ns_ += t - since_;
    if (limit_ == kBudget) budget_ns_ += t - since_;
    limit_ = l;
    since_ = t;
  }

 private:
  std::uint64_t& window_ns_;
  std::uint64_t& budget_ns_;
  Limit limit_ = kNone;
  std::uint64_t since_ = now_ns();
};

}  // namespace

struct StorageStage::Admission {
  std::mutex mu;
  // The sampler's next sample (and, on the direct path, the rest of its batch, pulled at the
  // batch's first sample to lay out its slots).
  std::optional<SampleSlot> pending;
  std::deque<SampleSlot> ahead;
  // Direct path: the buffer the current batch is read into, and each slot's offset in it.
  BatchBuffer* batch_buf = nullptr;
  std::uint64_t laid_out_batch = ~std::uint64_t{0};
  std::vector<std::uint64_t> slot_offsets;
  std::uint64_t unknown_room = 0;  // the slot of each sample of unknown size in that batch
  std::uint64_t slots_end = 0;     // where that batch's slots end
  bool noted_growth = false;
  // Samples of unknown size: the slot size learned from those read (every thread's reads), and
  // how many outgrew their slot.
  bool unknown_sizes = false;
  std::optional<SlotSizer> slot_sizer;
  std::atomic<std::uint64_t> spilled{0};
  bool failed = false;  // the run failed while admitting: every thread stops
  // Over every thread's queue.
  std::atomic<std::uint64_t> bytes_in_flight{0};
  std::atomic<std::size_t> reads_in_flight{0};
  std::atomic<unsigned> exited{0};
  std::mutex merge_mu;  // the threads' counters, merged as each ends
};

// What admit() decided for the calling thread.
struct StorageStage::Admitted {
  enum Kind { kRead, kDeliver, kLimited, kEnd, kFailed } kind = kEnd;
  InFlightSample sample;  // kRead: to read; kDeliver: an error to hand on as it is
  LimitTimer::Limit why = LimitTimer::kNone;  // kLimited
};

StorageStage::StorageStage(RunState& run, Sampler& sampler, unsigned threads)
    : run_(run),
      sampler_(sampler),
      threads_(std::max(threads, 1u)),
      admission_(std::make_unique<Admission>()) {
  admission_->pending = sampler_.next();
  admission_->unknown_sizes = has_unknown_sizes(run_.dataset);
  admission_->slot_sizer.emplace(size_guess(run_.config));
}

StorageStage::~StorageStage() = default;

// The next sample this thread may read, under the admission lock: the window ahead of collate,
// a free batch buffer for a new batch (its slots laid out), the memory budget. A sample too large
// to admit comes back as kDeliver with its error.
StorageStage::Admitted StorageStage::admit(Worker& w) {
  const Dataset& dataset = run_.dataset;
  const LoaderConfig& config = run_.config;
  const PoolSizing& sizing = run_.sizing;
  const DataPath path = run_.plan.path;
  const bool direct = reads_into_slot(path);
  const bool device_reads = reads_into_device(path);
  const bool in_place = path == DataPath::kDecodeInPlace;
  const bool lays_out_batches = direct || in_place;
  Admission& a = *admission_;
  Admitted out;
  std::lock_guard lock(a.mu);
  if (a.failed) {
    out.kind = Admitted::kFailed;
    return out;
  }
  if (!a.pending) return out;  // kEnd
  auto next_slot = [&]() -> std::optional<SampleSlot> {
    if (a.ahead.empty()) return sampler_.next();
    const SampleSlot s = a.ahead.front();
    a.ahead.pop_front();
    return s;
  };
  const SampleSlot pending = *a.pending;
  if (pending.seq >= run_.collate_cursor.load(std::memory_order_acquire) + sizing.window) {
    out.kind = Admitted::kLimited;
    out.why = LimitTimer::kWindow;
    return out;
  }
  const Sample& smp = dataset.samples[pending.sample];
  if (lays_out_batches && pending.batch != a.laid_out_batch) {
    // A new batch: take a free buffer without blocking (reads in flight must be polled) and lay
    // out its slots, growing the buffer before anything lands in it.
    auto b = w.pop_for(run_.pool->free(), std::chrono::nanoseconds(0));
    if (!b) {
      out.kind = Admitted::kLimited;
      out.why = LimitTimer::kWindow;  // the consumer has not handed back a buffer yet
      return out;
    }
    while (a.ahead.size() + 1 < pending.batch_len) {
      auto more = sampler_.next();
      if (!more) break;
      a.ahead.push_back(*more);
    }
    a.slot_offsets.assign(pending.batch_len, 0);
    a.unknown_room = a.slot_sizer->slot();
    std::uint64_t off = 0;
    auto place = [&](const SampleSlot& sl) {
      a.slot_offsets[sl.slot] = off;
      const Sample& x = dataset.samples[sl.sample];
      if (sizing.footprints[sl.sample] > sizing.sample_limit) return;  // skipped below: no slot
      off += in_place ? align_up(decoded_slot_bytes(dataset, run_.plan.decode, x), kMemberAlign)
             : size_unknown(x) ? a.unknown_room
                               : align_up(std::max<std::uint64_t>(x.length, 1), kPageAlign);
    };
    place(pending);
    for (const auto& sl : a.ahead) place(sl);
    auto grown = device_reads ? fits_device_twin(**b, off) : (*b)->grow_empty(off, run_.sink.get());
    if (!grown) {
      run_.fail(std::move(grown).error());
      a.failed = true;
      out.kind = Admitted::kFailed;
      return out;
    }
    if (*grown) {
      run_.pool_grown_bytes += *grown;
      if (!a.noted_growth) {
        a.noted_growth = true;
        run_.note_path(
            a.unknown_sizes
                ? fmt::format("batch buffers grew past their start-up size for slots of {} per "
                              "object of unknown size (learned from the objects read)",
                              format_bytes(static_cast<double>(a.unknown_room)))
                : fmt::format("a batch buffer grew past its start-up size{}: raise "
                              "--memory-budget to size every buffer for the largest batch",
                              direct ? " (no longer a registered buffer)" : ""));
      }
    }
    a.batch_buf = *b;
    a.laid_out_batch = pending.batch;
    a.slots_end = off;
  }
  InFlightSample& s = out.sample;
  s.slot = pending;
  if (lays_out_batches) s.place.buffer = a.batch_buf;  // the batch's buffer travels with each
  // The direct path reserves nothing per sample (its slot in the batch buffer is charged with
  // the pool), but a sample too large for the budget is skipped all the same.
  const std::uint64_t need = direct ? 0 : sizing.footprints[pending.sample];
  if (sizing.footprints[pending.sample] > sizing.sample_limit) {  // only with on_error = skip
    s.error = sizing.footprints[pending.sample] == kOversized
                  ? larger_than_max(dataset, pending.sample,
                                    oversized(dataset, run_.plan.decode, smp, config), config)
                  : Error(Errc::kResourceExhausted,
                          fmt::format(
                              "sample '{}' needs {} bytes, more than the memory budget allows ({})",
                              smp.key, need, sizing.sample_limit))
                        .with_object(dataset.objects[smp.object].key)
                        .with_offset(smp.offset);
    a.pending = next_slot();
    out.kind = Admitted::kDeliver;
    return out;
  }
  // What a transform returns is held in the budget (ResultBytes): a sample of a batch after the
  // one collate fills is admitted with room for a result as large as the largest so far (none
  // before the first is known). The batch collate fills goes on whatever results hold once no
  // finished batch is queued for the consumer: the results held then are freed only by batches
  // the consumer has yet to get (flow control, pipeline.hpp).
  std::uint64_t result_room = 0, slack = 0;
  bool room_known = true;
  if (config.transform) {
    if (pending.seq - pending.slot <= run_.collate_cursor.load(std::memory_order_acquire)) {
      if (run_.batches.depth_now() == 0 && run_.device_batches.depth_now() == 0)
        slack = run_.results->held();
    } else {
      const auto largest = run_.results->largest();
      room_known = largest.has_value();
      result_room = largest.value_or(0);
    }
  }
  if (!room_known || !run_.budget.try_acquire(need + result_room, slack)) {
    out.sample = InFlightSample{};
    out.kind = Admitted::kLimited;
    out.why = LimitTimer::kBudget;
    return out;
  }
  s.reserved = need + result_room;
  s.result_room = result_room;
  if (lays_out_batches) {
    s.place.fill = device_reads ? SlotPlace::Fill::kReadDevice
                   : in_place   ? SlotPlace::Fill::kDecode
                                : SlotPlace::Fill::kRead;
    s.place.offset = a.slot_offsets[s.slot.slot];
    s.place.slots_end = a.slots_end;
    if (size_unknown(smp)) s.place.room = a.unknown_room;
  }
  a.pending = next_slot();
  out.kind = Admitted::kRead;
  return out;
}

void StorageStage::run(Worker& w) {
  const Dataset& dataset = run_.dataset;
  const LoaderConfig& config = run_.config;
  const PoolSizing& sizing = run_.sizing;
  const DataPath path = run_.plan.path;
  const bool direct = reads_into_slot(path);
  const bool device_reads = reads_into_device(path);
  const bool first_thread = w.index() == 0;
  // Samples that need no decoding, only their digest: taken here as each read lands, while its
  // bytes are fresh, and handed straight to collate. A trip through the decode threads cost a
  // hand-off and a cold read of the bytes on another core (64 KiB files: XXH3 took ~10 us there,
  // ~7 us here). Those read into their batch slot on the host, and objects of one sample each
  // that nothing decodes read into a sample buffer (HTTP objects of unknown size: their slot
  // cannot be laid out before they are read). A planted decode cost, or a transform, keeps the
  // stage.
  const bool inline_decode =
      !device_reads && !config.transform &&
      config.diagnostics.decode_cost == std::chrono::nanoseconds(0) &&
      (direct ||
       (path == DataPath::kBounce && one_sample_per_object(dataset) && !run_.plan.decode.any()));
  // The direct path has no members to decode: only their digest, through decode_sample.
  ThreadDecoders decoders(run_.plan.decode, config.sampler.seed);
  Admission& a = *admission_;
  // io_depth split between the threads (the first ones take the remainder).
  const unsigned depth =
      std::max(1u, config.io_depth / threads_ + (w.index() < config.io_depth % threads_ ? 1 : 0));
  storage::QueueOptions qo;
  qo.depth = depth;
  qo.single_thread = true;
  // Reads land in batch slots (no buffers to allocate here), or the thread has nothing to do but
  // take their digests: an HTTP queue's event loop then runs in this thread's poll().
  qo.caller_mostly_polls = direct || inline_decode;
  qo.coalesce = true;  // nearby reads (tar members in storage order) may share a request
  if (config.loaders_sharing_backend > 1) qo.shared_by = config.loaders_sharing_backend * threads_;
  if (device_reads) {
    qo.memory = storage::QueueMemory::kDevice;
    qo.device_reads = storage::make_device_reads(run_.cufile);
  }
  // The last thread out closes the reads queue behind it.
  auto exit_stage = [&](storage::IoQueue* queue, std::uint64_t bytes, std::uint64_t window_ns,
                        std::uint64_t budget_ns, std::uint64_t decoded, std::uint64_t polled) {
    {
      std::lock_guard lock(a.merge_mu);
      if (queue) {
        // The queues ran side by side: their depths add up over the longest span, and the time
        // at the cap is the mean of each queue's (all of io_depth in flight, roughly).
        const storage::QueueStats q = queue->stats();
        const double depth_ns = io_stats.depth_ns;
        const std::uint64_t span = io_stats.span_ns;
        const double mean = io_stats.mean_depth() + q.mean_depth();
        io_stats.merge(q);
        io_stats.span_ns = std::max(span, q.span_ns);
        io_stats.depth_ns =
            io_stats.span_ns ? mean * static_cast<double>(io_stats.span_ns) : depth_ns + q.depth_ns;
        io_stats.at_cap_ns = (io_stats.at_cap_ns - q.at_cap_ns) + q.at_cap_ns / threads_;
        if (engine.empty()) engine = queue->info().engine;
      }
      storage_bytes += bytes;
      decoded_inline += decoded;
      poll_wait_ns += polled;
      window_limited_ns += window_ns / threads_;
      budget_limited_ns += budget_ns / threads_;
    }
    if (++a.exited == threads_) {
      if (direct && a.unknown_sizes && a.slot_sizer->count() > 0) {
        run_.note_path(fmt::format(
            "objects of unknown size: slots of {} (learned); {} of {} outgrew theirs and were "
            "copied in after the batch's slots",
            format_bytes(static_cast<double>(a.slot_sizer->slot())),
            a.spilled.load(std::memory_order_relaxed), a.slot_sizer->count()));
      }
      run_.reads.close();
    }
  };
  auto queue_r = run_.backend.make_queue(qo);
  if (!queue_r) {
    run_.fail(std::move(queue_r).error());
    exit_stage(nullptr, 0, 0, 0, 0, 0);
    return;
  }
  std::unique_ptr<storage::IoQueue> queue = std::move(*queue_r);
  // Every storage thread of every loader on this backend keeps its own handles.
  HandleCache handles(run_.backend, dataset,
                      std::max(1u, config.loaders_sharing_backend) * threads_, depth);
  handles.use_queue(*queue);
  std::vector<ReadSlot> slots(depth);
  std::vector<ReadSlot*> free_slots;
  for (auto& s : slots) free_slots.push_back(&s);
  ReadDone done;
  // Reads of samples of unknown size get a larger buffer here when their object outgrows the guess.
  GrowUnknown grow_unknown(run_, [](storage::ReadOp& op) -> InFlightSample& {
    return static_cast<ReadSlot*>(op.user)->sample;
  });
  std::uint64_t bytes_in_flight = 0;  // this thread's
  std::uint64_t bytes_read = 0;
  std::uint64_t decoded_here = 0;      // digests taken inline
  std::uint64_t poll_ns = 0;           // in poll(): waiting for reads to complete
  std::uint64_t next_counters_ns = 0;  // the trace's next counters (trace.hpp), not before
  std::uint64_t next_publish_ns = 0;   // the queue's counters to RunState::live, not before
  CountersSeen published;              // the queue's counters as last seen
  if (direct) {
    // The pool's buffers become the queue's registered (io_uring fixed) buffers: O_DIRECT reads
    // then DMA into the batch slot without per-read page pinning. With reads into GPU memory,
    // the device twins are registered with cuFile instead.
    std::vector<MutableBytes> regions;
    for (const auto& b : run_.pool->buffers()) {
      regions.push_back(device_reads
                            ? MutableBytes(static_cast<std::byte*>(b->device()), b->device_size())
                            : b->span());
    }
    auto reg = queue->register_buffers(regions);
    if (first_thread) {
      if (device_reads) {
        run_.note_path(
            fmt::format("cuFile reads into 4 KiB-aligned slots of {} GPU batch buffers of {} bytes",
                        regions.size(), regions.front().size()));
      } else {
        const storage::BackendCaps caps = run_.backend.caps();
        run_.note_path(
            caps.alignment >= kPageAlign ? "O_DIRECT reads land in 4 KiB-aligned batch slots"
            : caps.networked ? "each answer's body lands in its batch slot (one copy, out of the "
                               "transport's receive buffer)"
                             : "buffered reads: the kernel copies from its page cache into the "
                               "batch slot (--direct makes it DMA)");
      }
      run_.note_path(reg ? fmt::format("{} batch buffers registered with the I/O queue{}",
                                       regions.size(),
                                       threads_ > 1 ? fmt::format(" (each of {})", threads_) : "")
                         : fmt::format("batch buffers not registered with the I/O queue: {}",
                                       reg.error().message()));
    }
  }
  if (first_thread && direct && a.unknown_sizes) {
    run_.note_path(
        "objects of unknown size (no listing) are read into batch slots of a size learned from "
        "those read (their largest, at most twice their mean); a larger one moves to a buffer of "
        "its own as its answer's headers give its size, in the same GET");
  }
  if (first_thread && inline_decode) {
    run_.note_path(
        "nothing to decode: the storage threads take each sample's digest as its read lands and "
        "hand it straight to collate");
  }
  if (first_thread && handles.opens_in_queue()) {
    run_.note_path(
        "each file opens in the io_uring ring with its read (an OPENAT into a direct descriptor, "
        "linked to the READ): no open or close system call per file");
  }
  if (first_thread && threads_ > 1) {
    run_.note_path(fmt::format("{} storage threads, each with its own I/O queue of depth {}",
                               threads_, depth));
  }
  std::vector<storage::ReadOp*> batch;
  std::vector<InFlightSample> finished;
  // O_DIRECT reads on one storage thread go to the device one by one, each as soon as its object
  // is open, as fio submits them; handed over in batches (one io_uring_enter per admission
  // round), 100,000 shuffled 4 KiB files read at 46-57k files/s against 60-87k one by one (5
  // alternating pairs of the same small io_uring program; fio 94k). With several threads the
  // others keep the device busy meanwhile, and batches cost less: 2 threads over the same files,
  // caches dropped, the same files/s in 15% less CPU (9 alternating pairs; every submission is a
  // doorbell, a VM exit on virtio). Page-cache reads stay batched: there the system call per read
  // is the cost, and the device is not involved.
  const bool submit_each = run_.backend.caps().alignment > 1 && !device_reads && threads_ == 1;
  const std::uint64_t align = run_.backend.caps().alignment;

  // Hands a finished (or failed) sample to decode; false when the run is over. A failed one goes
  // on too: collate meets its error in the order of delivery (after the batches before it).
  auto deliver = [&](InFlightSample&& s) { return w.push(run_.reads, s); };
  std::uint64_t window_ns = 0, budget_ns = 0;
  LimitTimer limits(window_ns, budget_ns);
  bool ended = false;  // the admission has nothing more for anyone

  while (!run_.stopping()) {
    batch.clear();
    bool limited = false;
    bool stop = false;
    LimitTimer::Limit why = LimitTimer::kNone;
    const std::uint64_t freed = run_.budget.freed();  // before admitting: see the wait below
    while (!free_slots.empty() &&
           a.bytes_in_flight.load(std::memory_order_relaxed) < config.io_max_bytes) {
      Admitted got = admit(w);
      if (got.kind == Admitted::kEnd) {
        ended = true;
        break;
      }
      if (got.kind == Admitted::kFailed) {
        stop = true;
        break;
      }
      if (got.kind == Admitted::kLimited) {
        limited = true;
        why = got.why;
        break;
      }
      InFlightSample& s = got.sample;
      if (got.kind == Admitted::kDeliver) {
        if (!deliver(std::move(s))) {
          stop = true;
          break;
        }
        continue;
      }
      const Sample& smp = dataset.samples[s.slot.sample];
      std::unique_ptr<storage::ObjectHandle> opened;
      auto handle = handles.get(smp.object, opened);
      if (!handle) {
        s.error = std::move(handle).error();
        run_.budget.release(s.reserved);
        s.reserved = 0;
        if (!deliver(std::move(s))) {
          stop = true;
          break;
        }
        continue;
      }
      MutableBytes dst;
      std::uint64_t read_offset = smp.offset;
      std::uint64_t read_len = read_length(smp, config);
      if (direct) {
        // A sample of unknown size: its slot may hold less than the read's guess (the queue
        // gives a larger object a buffer of its own: GrowUnknown).
        dst = MutableBytes(const_cast<std::byte*>(s.bytes()),
                           size_unknown(smp)
                               ? s.place.room
                               : align_up(std::max<std::uint64_t>(smp.length, 1), kPageAlign));
      } else {
        // Storage that reads only aligned ranges (O_DIRECT) gets the aligned cover of the sample
        // into the sample's buffer, not a bounce buffer of its own to copy out of: 146 MB npz
        // arrays at unaligned offsets had cost a fresh buffer's page faults and a copy each.
        if (align > 1 && !size_unknown(smp)) {
          s.raw_head = read_offset % align;
          read_offset -= s.raw_head;
          read_len = align_up(s.raw_head + read_len, align);
        }
        auto buf = run_.buffers.get(read_len);
        if (!buf) {
          run_.budget.release(s.reserved);
          run_.fail(std::move(buf).error());
          stop = true;
          break;
        }
        s.raw = std::move(*buf);
        dst = s.raw.span();
      }
      ReadSlot* slot = free_slots.back();
      free_slots.pop_back();
      slot->sample = std::move(s);
      slot->own_handle = std::move(opened);
      slot->op = storage::ReadOp{};
      slot->op.object = *handle;
      slot->op.offset = read_offset;
      slot->op.length = read_len;
      slot->op.dst = dst;
      slot->op.done = &done;
      slot->op.user = slot;
      mark_unknown_size(slot->op, smp, grow_unknown);
      bytes_in_flight += slot->op.length;
      a.bytes_in_flight.fetch_add(slot->op.length, std::memory_order_relaxed);
      a.reads_in_flight.fetch_add(1, std::memory_order_relaxed);
      batch.push_back(&slot->op);
      if (submit_each) {
        queue->submit(batch);
        batch.clear();
      }
    }
    // The window counts as "held back by downstream" only while most of it has already been
    // read (fewer than half its samples in flight); otherwise storage is still working on it.
    if (why == LimitTimer::kWindow &&
        a.reads_in_flight.load(std::memory_order_relaxed) * 2 >= sizing.window)
      why = LimitTimer::kNone;
    limits.set(why);
    if (!batch.empty()) queue->submit(batch);
    if (stop) break;
    if (queue->in_flight() == 0) {
      if (ended) break;  // everything read
      // Nothing in flight and nothing admissible: waiting on memory, on collate's window, or on
      // the other threads' reads in flight (io_max_bytes).
      w.blocked(
          [&] { run_.budget.wait_release(freed, std::chrono::milliseconds(limited ? 2 : 1)); });
      continue;
    }
    done.done.clear();
    const std::uint64_t poll0 = now_ns();
    w.working([&] { return queue->poll(1, std::chrono::milliseconds(20)); });
    const std::uint64_t polled = now_ns();
    poll_ns += polled - poll0;
    for (const ReadSlot* slot : done.done) {
      const storage::ReadOp& op = slot->op;
      const std::uint64_t end = op.times.completed_ns ? op.times.completed_ns : polled;
      run_.live.read_latency.record_ns(end > op.times.queued_ns ? end - op.times.queued_ns : 0);
      if (op.result) {
        run_.live.storage_bytes.fetch_add(*op.result, std::memory_order_relaxed);
      } else {
        run_.live.read_errors.fetch_add(1, std::memory_order_relaxed);
      }
    }
    run_.live.reads.fetch_add(done.done.size(), std::memory_order_relaxed);
    if (polled >= next_publish_ns) {
      next_publish_ns = polled + 100'000'000;
      publish_counters(*queue, w, polled, false, published);
    }
    if (TraceLane* lane = w.lane()) {
      for (const ReadSlot* slot : done.done) {
        const storage::ReadOp& op = slot->op;
        lane->async_span("io", "read", op.times.issued_ns ? op.times.issued_ns : op.times.queued_ns,
                         op.times.completed_ns ? op.times.completed_ns : polled,
                         static_cast<double>(op.length), true);
        if (!op.result) lane->instant("io", "read failed", polled, op.result.error().what());
      }
    }
    for (ReadSlot* slot : done.done) {
      InFlightSample s = std::move(slot->sample);
      const storage::ReadOp& op = slot->op;
      const Sample& smp = dataset.samples[s.slot.sample];
      bytes_in_flight -= op.length;
      a.bytes_in_flight.fetch_sub(op.length, std::memory_order_relaxed);
      a.reads_in_flight.fetch_sub(1, std::memory_order_relaxed);
      // The bytes of the sample's own range that arrived (an aligned read's head and tail left
      // out).
      const std::uint64_t got =
          op.result ? std::min(*op.result > s.raw_head ? *op.result - s.raw_head : 0,
                               size_unknown(smp) ? *op.result : smp.length)
                    : 0;
      if (!op.result) {
        s.error = handles.explain(op.result.error());
      } else if (got < expected_length(smp, op)) {
        s.error = Error(Errc::kCorrupt,
                        fmt::format("object ends after {} of the sample's {} bytes (truncated?)",
                                    got, smp.length))
                      .with_object(dataset.objects[smp.object].key)
                      .with_offset(smp.offset + got);
      } else {
        if (size_unknown(smp)) {
          finish_unknown_size(run_, smp, *op.result, s);
          if (direct) a.slot_sizer->saw(*op.result);
          if (s.spilled) a.spilled.fetch_add(1, std::memory_order_relaxed);
        }
        s.raw_len = got;
        bytes_read += *op.result;  // from the device: an aligned read's head and tail included
        w.count(1, got);
        if (inline_decode) {
          decode_sample(dataset, s, decoders, &run_.buffers, sizing.decode_limit);
          if (!s.error) ++decoded_here;
        }
      }
      slot->own_handle.reset();
      free_slots.push_back(slot);
      if (s.error) {
        run_.budget.release(s.reserved);
        s.reserved = 0;
        s.raw = AlignedBuffer();  // on to collate, which meets its error in delivery order
      }
      finished.push_back(std::move(s));
    }
    if (TraceLane* lane = w.lane(); lane && polled >= next_counters_ns) {
      // The stage's, from each of its threads at most once a millisecond.
      next_counters_ns = polled + 1'000'000;
      lane->counter("reads in flight", polled,
                    static_cast<double>(a.reads_in_flight.load(std::memory_order_relaxed)), true);
      lane->counter("bytes in memory", polled, static_cast<double>(run_.budget.used()), true);
    }
    // One hand-off for everything this poll completed (not one wake-up per sample).
    if (!finished.empty() &&
        !(inline_decode ? w.push_all(run_.decoded, finished, collate_awaits(run_))
                        : w.push_all(run_.reads, finished)))
      break;
    finished.clear();
  }
  if (queue->in_flight() > 0) {
    queue->cancel();
    while (queue->in_flight() > 0) queue->poll(1, std::chrono::milliseconds(100));
  }
  a.bytes_in_flight.fetch_sub(bytes_in_flight, std::memory_order_relaxed);
  limits.set(LimitTimer::kNone);
  if (device_reads && first_thread) {
    // How cuFile was driven (batch API or threads, handles registered) and any fallback, as run.
    const auto info = queue->info();
    run_.note_path(fmt::format("cuFile engine: {}", fmt::join(info.features, ", ")));
    for (const auto& n : info.notes) run_.note_path(n);
  }
  publish_counters(*queue, w, now_ns(), true, published);
  exit_stage(queue.get(), bytes_read, window_ns, budget_ns, decoded_here, poll_ns);
}

// The queue's counters (retries by reason, reconnects, HTTP statuses) for live readers (a
// metrics scrape), and for the run's trace an instant for each retry or reconnect since the last
// time, at the time they were seen (within the ~100 ms between two publications).
void StorageStage::publish_counters(const storage::IoQueue& queue, Worker& w, std::uint64_t now,
                                    bool last, CountersSeen& seen) {
  const storage::QueueStats& st = queue.stats();
  std::map<std::string, std::uint64_t, std::less<>> counters = st.counters;
  if (st.retries) counters["io_retries"] = st.retries;
  // Unchanged and out already: nothing to do (the thread's last figures go out whatever).
  if (counters == seen.counters && !seen.unpublished && !last) return;
  if (TraceLane* lane = w.lane()) {
    for (const auto& [name, v] : counters) {
      const bool retry = name.starts_with("http_retry_") || name == "nfs_retries" ||
                         name == "io_retries" || name == "reconnects";
      if (!retry) continue;
      const auto it = seen.counters.find(name);
      const std::uint64_t before = it == seen.counters.end() ? 0 : it->second;
      if (v <= before) continue;
      try {
        lane->instant("io", name == "reconnects" ? "reconnect" : "retry", now,
                      fmt::format("{} +{} ({} in all)", name, v - before, v));
      } catch (...) {  // the trace could not hold it: the counters still go out
      }
    }
  }
  seen.unpublished = !run_.live.counters.publish(w.index(), counters, last);
  seen.counters = std::move(counters);
}

}  // namespace feedline::loader::detail
