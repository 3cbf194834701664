// The storage stage: admits samples in sampler order (memory budget, window ahead of collate),
// lays out each batch's slots on the direct and decode-in-place paths, and keeps up to io_depth
// reads in flight on one IoQueue owned by its thread.
#include <fmt/format.h>

#include <deque>

#include "device_sink.hpp"
#include "feedline/storage/device_reads.hpp"
#include "stage_work.hpp"
#include "stages.hpp"

namespace feedline::loader::detail {
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
  enum Limit { kNone = 0, kWindow = 1, kBudget = 2 };
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

void StorageStage::run(Worker& w) {
  const Dataset& dataset = run_.dataset;
  const LoaderConfig& config = run_.config;
  const PoolSizing& sizing = run_.sizing;
  const DataPath path = run_.plan.path;
  const bool direct = reads_into_slot(path);
  const bool device_reads = reads_into_device(path);
  const bool in_place = path == DataPath::kDecodeInPlace;
  const bool lays_out_batches = direct || in_place;
  storage::QueueOptions qo;
  qo.depth = config.io_depth;
  qo.single_thread = true;
  qo.caller_mostly_polls = direct;  // reads land in batch slots: no buffers to allocate here
  qo.coalesce = true;  // nearby reads (tar members in storage order) may share a request
  if (device_reads) {
    qo.memory = storage::QueueMemory::kDevice;
    qo.device_reads = storage::make_device_reads(run_.cufile);
  }
  auto queue_r = run_.backend.make_queue(qo);
  if (!queue_r) {
    run_.fail(std::move(queue_r).error());
    run_.reads.close();
    return;
  }
  std::unique_ptr<storage::IoQueue> queue = std::move(*queue_r);
  engine = queue->info().engine;
  HandleCache handles(run_.backend, dataset);
  std::vector<ReadSlot> slots(config.io_depth);
  std::vector<ReadSlot*> free_slots;
  for (auto& s : slots) free_slots.push_back(&s);
  ReadDone done;
  std::uint64_t bytes_in_flight = 0;
  // Direct path: the rest of the current batch, pulled from the sampler at the batch's first
  // sample to lay out its slots; the buffer it is read into, and each slot's offset.
  std::deque<SampleSlot> ahead;
  auto next_slot = [&]() -> std::optional<SampleSlot> {
    if (ahead.empty()) return sampler_.next();
    const SampleSlot s = ahead.front();
    ahead.pop_front();
    return s;
  };
  BatchBuffer* batch_buf = nullptr;
  std::uint64_t laid_out_batch = ~std::uint64_t{0};
  std::vector<std::uint64_t> slot_offsets;
  bool noted_growth = false;
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
    if (device_reads) {
      run_.note_path(
          fmt::format("cuFile reads into 4 KiB-aligned slots of {} GPU batch buffers of {} bytes",
                      regions.size(), regions.front().size()));
    } else {
      run_.note_path(
          run_.backend.caps().alignment >= kPageAlign
              ? "O_DIRECT reads land in 4 KiB-aligned batch slots"
              : "buffered reads: the kernel copies from its page cache into the batch slot "
                "(--direct makes it DMA)");
    }
    run_.note_path(
        reg ? fmt::format("{} batch buffers registered with the I/O queue", regions.size())
            : fmt::format("batch buffers not registered with the I/O queue: {}",
                          reg.error().message()));
  }
  std::optional<SampleSlot> pending = next_slot();
  std::vector<storage::ReadOp*> batch;
  std::vector<InFlightSample> finished;

  // Hands a finished (or failed) sample to decode; false when the run is over.
  auto deliver = [&](InFlightSample&& s) {
    if (s.error && config.on_error == OnError::kFail) {
      run_.fail(*s.error);
      return false;
    }
    return w.push(run_.reads, s);
  };
  LimitTimer limits(window_limited_ns, budget_limited_ns);

  while (!run_.stopping()) {
    batch.clear();
    bool limited = false;
    LimitTimer::Limit why = LimitTimer::kNone;
    while (pending && !free_slots.empty() && bytes_in_flight < config.io_max_bytes) {
      if (pending->seq >= run_.collate_cursor.load(std::memory_order_acquire) + sizing.window) {
        limited = true;
        why = LimitTimer::kWindow;
        break;
      }
      const Sample& smp = dataset.samples[pending->sample];
      if (lays_out_batches && pending->batch != laid_out_batch) {
        // A new batch: take a free buffer without blocking (reads in flight must be polled) and
        // lay out its slots, growing the buffer before anything lands in it.
        auto b = w.pop_for(run_.pool->free(), std::chrono::nanoseconds(0));
        if (!b) {
          limited = true;
          why = LimitTimer::kWindow;  // the consumer has not handed back a buffer yet
          break;
        }
        while (ahead.size() + 1 < pending->batch_len) {
          auto more = sampler_.next();
          if (!more) break;
          ahead.push_back(*more);
        }
        slot_offsets.assign(pending->batch_len, 0);
        std::uint64_t off = 0;
        auto place = [&](const SampleSlot& sl) {
          slot_offsets[sl.slot] = off;
          const Sample& x = dataset.samples[sl.sample];
          if (sizing.footprints[sl.sample] > sizing.sample_limit) return;  // skipped below: no slot
          off += in_place ? align_up(decoded_slot_bytes(dataset, x), kMemberAlign)
                          : align_up(std::max<std::uint64_t>(x.length, 1), kPageAlign);
        };
        place(*pending);
        for (const auto& sl : ahead) place(sl);
        auto grown =
            device_reads ? fits_device_twin(**b, off) : (*b)->grow_empty(off, run_.sink.get());
        if (!grown) {
          run_.fail(std::move(grown).error());
          break;
        }
        if (*grown) {
          run_.pool_grown_bytes += *grown;
          if (!noted_growth) {
            noted_growth = true;
            run_.note_path(
                fmt::format("a batch buffer grew past its start-up size{}: raise --memory-budget "
                            "to size every buffer for the largest batch",
                            direct ? " (no longer a registered buffer)" : ""));
          }
        }
        batch_buf = *b;
        laid_out_batch = pending->batch;
      }
      // The direct path reserves nothing per sample (its slot in the batch buffer is charged with
      // the pool), but a sample too large for the budget is skipped all the same.
      const std::uint64_t need = direct ? 0 : sizing.footprints[pending->sample];
      if (sizing.footprints[pending->sample] > sizing.sample_limit) {  // only with on_error = skip
        InFlightSample s;
        s.slot = *pending;
        s.direct_buffer =
            lays_out_batches ? batch_buf : nullptr;  // the batch's buffer travels with every sample
        s.error =
            sizing.footprints[pending->sample] == kOversized
                ? larger_than_max(dataset, pending->sample, oversized(dataset, smp, config), config)
                : Error(Errc::kResourceExhausted,
                        fmt::format(
                            "sample '{}' needs {} bytes, more than the memory budget allows ({})",
                            smp.key, need, sizing.sample_limit))
                      .with_object(dataset.objects[smp.object].key)
                      .with_offset(smp.offset);
        pending = next_slot();
        if (!deliver(std::move(s))) break;
        continue;
      }
      if (!run_.budget.try_acquire(need)) {
        limited = true;
        why = LimitTimer::kBudget;
        break;
      }
      ReadSlot* slot = free_slots.back();
      InFlightSample s;
      s.slot = *pending;
      s.reserved = need;
      if (lays_out_batches) {
        s.direct_buffer = batch_buf;
        s.direct_offset = slot_offsets[s.slot.slot];
        s.on_device = device_reads;
        s.decode_in_place = in_place;
      }
      pending = next_slot();
      std::unique_ptr<storage::ObjectHandle> opened;
      auto handle = handles.get(smp.object, opened);
      if (!handle) {
        s.error = std::move(handle).error();
        run_.budget.release(s.reserved);
        s.reserved = 0;
        if (!deliver(std::move(s))) break;
        continue;
      }
      MutableBytes dst;
      if (direct) {
        dst = MutableBytes(const_cast<std::byte*>(s.bytes()),
                           align_up(std::max<std::uint64_t>(smp.length, 1), kPageAlign));
      } else {
        auto buf = run_.buffers.get(smp.length);
        if (!buf) {
          run_.fail(std::move(buf).error());
          break;
        }
        s.raw = std::move(*buf);
        dst = s.raw.span();
      }
      free_slots.pop_back();
      slot->sample = std::move(s);
      slot->own_handle = std::move(opened);
      slot->op = storage::ReadOp{};
      slot->op.object = *handle;
      slot->op.offset = smp.offset;
      slot->op.length = smp.length;
      slot->op.dst = dst;
      slot->op.done = &done;
      slot->op.user = slot;
      bytes_in_flight += smp.length;
      batch.push_back(&slot->op);
    }
    // The window counts as "held back by downstream" only while most of it has already been
    // read (fewer than half its samples in flight); otherwise storage is still working on it.
    if (why == LimitTimer::kWindow && queue->in_flight() * 2 >= sizing.window)
      why = LimitTimer::kNone;
    limits.set(why);
    if (!batch.empty()) queue->submit(batch);
    if (queue->in_flight() == 0) {
      if (!pending) break;  // everything read
      // Nothing in flight and nothing admissible: waiting on memory or on collate's window.
      w.blocked([&] { run_.budget.wait_release(std::chrono::milliseconds(limited ? 2 : 0)); });
      continue;
    }
    done.done.clear();
    w.working([&] { return queue->poll(1, std::chrono::milliseconds(20)); });
    for (ReadSlot* slot : done.done) {
      InFlightSample s = std::move(slot->sample);
      const storage::ReadOp& op = slot->op;
      const Sample& smp = dataset.samples[s.slot.sample];
      bytes_in_flight -= smp.length;
      if (!op.result) {
        s.error = op.result.error();
      } else if (*op.result < smp.length) {
        s.error = Error(Errc::kCorrupt,
                        fmt::format("object ends after {} of the sample's {} bytes (truncated?)",
                                    *op.result, smp.length))
                      .with_object(dataset.objects[smp.object].key)
                      .with_offset(smp.offset + *op.result);
      } else {
        s.raw_len = *op.result;
        storage_bytes += *op.result;
        w.count(1, *op.result);
      }
      slot->own_handle.reset();
      free_slots.push_back(slot);
      if (s.error) {
        run_.budget.release(s.reserved);
        s.reserved = 0;
        s.raw = AlignedBuffer();
        if (config.on_error == OnError::kFail) {
          run_.fail(*s.error);
          break;
        }
      }
      finished.push_back(std::move(s));
    }
    // One hand-off for everything this poll completed (not one wake-up per sample).
    if (!finished.empty() && !w.push_all(run_.reads, finished)) break;
    finished.clear();
  }
  if (queue->in_flight() > 0) {
    queue->cancel();
    while (queue->in_flight() > 0) queue->poll(1, std::chrono::milliseconds(100));
  }
  limits.set(LimitTimer::kNone);
  io_stats = queue->stats();
  if (device_reads) {
    // How cuFile was driven (batch API or threads, handles registered) and any fallback, as run.
    const auto info = queue->info();
    run_.note_path(fmt::format("cuFile engine: {}", fmt::join(info.features, ", ")));
    for (const auto& n : info.notes) run_.note_path(n);
  }
  run_.reads.close();
}

}  // namespace feedline::loader::detail
