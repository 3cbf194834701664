#include "pipeline.hpp"
#include "stage_work.hpp"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <deque>

#include "feedline/core/thread_name.hpp"
#include "feedline/loader/codec.hpp"
#include "feedline/transports/cuda.hpp"
#include "feedline/transports/cufile.hpp"

namespace feedline::loader {

using detail::InFlightSample;
using detail::spin_for;

namespace {
// Bytes of freed sample buffers kept for reuse: an eighth of the budget, at most 64 MiB.
std::uint64_t recycle_bytes(std::uint64_t budget) { return std::min<std::uint64_t>(budget / 8, 64ull << 20); }

// Samples storage may read ahead of collate over a network, in units of --io-depth. With only
// prefetch + 2 batches ahead, small batches starve the reads: batch 32 at depth 16 kept 7 of 16
// requests in flight against a web server (one slow response holds the window while the next
// batches wait). Local storage keeps prefetch + 2: its reads come back in microseconds, and more
// buffers only cost start-up time (they are locked, so faulted in, at once).
constexpr std::uint64_t kWindowDepths = 16;
constexpr std::size_t kMaxBatchBuffers = 64;

// Batch buffers in the pool: prefetch + 2 at least; over a network, more when batches are
// small, so that the window (every buffer's batch) holds kWindowDepths x io_depth samples.
// start() gives back what the memory budget cannot hold.
std::size_t wanted_batch_buffers(const LoaderConfig& c, bool networked) {
  const std::size_t floor = std::size_t{c.prefetch_batches} + 2;
  if (!networked) return floor;
  const std::uint64_t batch = std::max(1u, c.sampler.batch_size);
  const std::uint64_t for_window = (kWindowDepths * c.io_depth + batch - 1) / batch + 1;
  return std::max<std::size_t>(floor, std::min<std::uint64_t>(for_window, kMaxBatchBuffers));
}
}  // namespace


Pipeline::Pipeline(storage::Backend& backend, const Dataset& dataset, LoaderConfig config,
                   Sampler sampler)
    : backend_(backend),
      dataset_(dataset),
      config_(std::move(config)),
      sampler_(std::move(sampler)),
      budget_(config_.memory_budget),
      buffers_(recycle_bytes(config_.memory_budget)),
      reads_("reads", std::max<std::size_t>(2 * config_.io_depth, 64), config_.accounting, 1,
             config_.decode_threads),
      decoded_("decoded", std::max<std::size_t>(2 * config_.sampler.batch_size, 64), config_.accounting,
               config_.decode_threads, 1),
      free_buffers_("batch-pool", wanted_batch_buffers(config_, backend.caps().networked), config_.accounting),
      batches_("batches", std::max(1u, config_.prefetch_batches), config_.accounting),
      device_batches_("device", std::max(1u, config_.prefetch_batches), config_.accounting),
      storage_clock_(config_.accounting),
      collate_clock_(config_.accounting),
      device_clock_(config_.accounting),
      consumer_clock_(config_.accounting) {
  for (unsigned i = 0; i < config_.decode_threads; ++i) decode_clocks_.emplace_back(config_.accounting);
}

Pipeline::~Pipeline() {
  shutdown();
  if (sink_) {
    for (auto& b : pool_) sink_->release(*b);
  }
}

std::uint64_t Pipeline::oversized(const Sample& s) const {
  const std::uint64_t max = config_.max_sample_bytes;
  if (max == 0) return 0;
  if (s.length > max) return s.length;
  std::uint64_t decoded = 0;
  for (const Member& m : dataset_.members_of(s)) decoded += m.zstd ? m.decoded_size : m.size;
  return decoded > max ? decoded : 0;
}

Error Pipeline::larger_than_max(std::size_t index, std::uint64_t size) const {
  const Sample& s = dataset_.samples[index];
  return Error(Errc::kInvalidArgument, fmt::format("sample '{}' has {} bytes, more than the largest sample "
                                                     "allowed ({} bytes)",
                                                     s.key, size, config_.max_sample_bytes))
      .with_object(dataset_.objects[s.object].key)
      .with_offset(s.offset)
      .with_hint("raise --max-sample-size, or --on-error skip to leave such samples out");
}

std::uint64_t Pipeline::footprint(const Sample& s) const {
  std::uint64_t bytes = align_up(s.length, kPageAlign);
  if (decode_in_place_) return bytes;  // decoded bytes go into the batch buffer (the pool's share)
  for (const Member& m : dataset_.members_of(s)) {
    if (m.zstd) bytes += detail::decoded_estimate(m);
  }
  return bytes;
}

Result<void> Pipeline::start() {
  // No batch is larger than what one epoch of this rank holds (a batch size above the dataset
  // must not size buffers for samples that do not exist).
  batch_samples_ = std::max<std::uint64_t>(1, std::min<std::uint64_t>(config_.sampler.batch_size, sampler_.samples_per_epoch()));
  // CUDA and cuFile are loaded once, for the plan and the run.
  LoaderConfig planned = config_;
  if (planned.device.device >= 0) {
    if (!planned.device.cuda) planned.device.cuda = transports::cuda::CudaRuntime::load();
    if (!planned.device.cufile) planned.device.cufile = transports::cufile::CufileRuntime::load();
  }
  FEEDLINE_ASSIGN_OR_RETURN(plan_, plan_data_path(dataset_, planned, backend_));
  direct_ = plan_.direct;
  device_reads_ = plan_.device_reads;
  decode_in_place_ = plan_.decode_in_place;
  if (planned.device.device >= 0) {
    FEEDLINE_ASSIGN_OR_RETURN(sink_, detail::DeviceSink::open(planned.device.cuda, planned.device.device,
                                                              planned.device.streams,
                                                              planned.device.calibrate && !device_reads_));
    cufile_ = planned.device.cufile;
  }
  copies_ = sink_ && !device_reads_;
  const std::uint64_t recycle = recycle_bytes(config_.memory_budget);
  const std::size_t min_buffers = config_.prefetch_batches + 2;
  std::size_t buffers = wanted_batch_buffers(config_, backend_.caps().networked);
  auto too_large = [&](std::size_t index, std::uint64_t need, std::uint64_t room) {
    const Sample& s = dataset_.samples[index];
    return Error(Errc::kInvalidArgument,
                 fmt::format("sample '{}' needs {} bytes, more than the {} bytes of memory budget it "
                             "can have (the rest holds batch and recycled buffers)",
                             s.key, need, room))
        .with_object(dataset_.objects[s.object].key)
        .with_offset(s.offset)
        .with_hint("raise --memory-budget, or --on-error skip to leave such samples out");
  };
  // A sample may use at most half of what is left after the recycled buffers: the other half
  // holds batches.
  const std::uint64_t sample_cap = (config_.memory_budget - std::min(config_.memory_budget, recycle)) / 2;
  std::uint64_t est_total = 0;
  std::uint64_t counted = 0;
  footprints_.clear();
  footprints_.reserve(dataset_.samples.size());
  std::uint64_t largest = 0;
  std::size_t largest_index = 0;
  for (std::size_t i = 0; i < dataset_.samples.size(); ++i) {
    if (const std::uint64_t size = oversized(dataset_.samples[i])) {
      if (config_.on_error == OnError::kFail) return fail(larger_than_max(i, size));
      footprints_.push_back(kOversized);  // skipped when its turn comes
      continue;
    }
    const std::uint64_t f = footprint(dataset_.samples[i]);
    footprints_.push_back(f);
    if (f > sample_cap) {
      if (config_.on_error == OnError::kFail) return fail(too_large(i, f, sample_cap));
      continue;  // skipped when its turn comes
    }
    est_total += f;
    ++counted;
    if (f > largest) {
      largest = f;
      largest_index = i;
    }
  }
  // Batch buffers: sized from the average decoded sample, grown on demand.
  const std::uint64_t avg = est_total / std::max<std::uint64_t>(1, counted);
  std::uint64_t batch_cap =
      align_up(batch_samples_ * (avg + 2 * detail::kMemberAlign) + 65536, kPageAlign);
  if (decode_in_place_) {
    // Decode in place: slots of decoded size, laid out per batch by the storage thread; like the
    // direct path's, buffers are sized for the worst batch when the budget allows.
    std::uint64_t widest = 0;
    std::uint64_t decoded_total = 0;
    for (const Sample& smp : dataset_.samples) {
      const std::uint64_t b = detail::decoded_slot_bytes(dataset_, smp) + detail::kMemberAlign;
      widest = std::max(widest, b);
      decoded_total += b;
    }
    const std::uint64_t worst = align_up(batch_samples_ * widest, kPageAlign);
    const std::uint64_t typical = align_up(batch_samples_ *
                                               (decoded_total / std::max<std::size_t>(1, dataset_.samples.size())),
                                           kPageAlign);
    batch_cap = worst * buffers + recycle < config_.memory_budget / 2 ? worst : std::max(typical, kPageAlign);
  }
  if (direct_) {
    // Direct path: every sample has a 4 KiB-aligned slot (O_DIRECT reads land in place). Size the
    // buffers for the worst batch when the budget allows, so they never grow (and stay registered
    // with the I/O queue); otherwise for the average, grown per batch where needed.
    const std::uint64_t worst = batch_samples_ * align_up(dataset_.max_sample_bytes, kPageAlign);
    const std::uint64_t typical = align_up(batch_samples_ * (avg + kPageAlign), kPageAlign);
    batch_cap = worst * buffers + recycle < config_.memory_budget / 2 ? std::max(worst, kPageAlign) : typical;
  }
  // Reads into GPU memory: the slots are in device twins sized for the worst batch (GPU memory,
  // outside the host budget), so they never grow and stay registered with cuFile; the host
  // buffers hold nothing.
  const std::uint64_t device_cap =
      std::max(batch_samples_ * align_up(dataset_.max_sample_bytes, kPageAlign), kPageAlign);
  if (device_reads_) batch_cap = kPageAlign;
  // Buffers beyond prefetch + 2 are there for a deeper read window: only as many as fit in half
  // the budget (the other half is for samples in flight).
  while (buffers > min_buffers && batch_cap * buffers + recycle > config_.memory_budget / 2) --buffers;
  pool_bytes_ = batch_cap * buffers + recycle;
  if (pool_bytes_ >= config_.memory_budget) {
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("the memory budget of {} bytes cannot hold {} batch buffers of {} bytes "
                                  "(batch size {} x ~{} bytes per sample) and {} bytes of recycled buffers",
                                  config_.memory_budget, buffers, batch_cap, batch_samples_, avg,
                                  recycle))
                    .with_hint("raise --memory-budget, or lower --batch-size or --prefetch"));
  }
  const std::uint64_t sample_budget = config_.memory_budget - pool_bytes_;
  sample_limit_ = sample_budget;
  decode_limit_ = config_.max_sample_bytes ? std::min(sample_budget, config_.max_sample_bytes) : sample_budget;
  if (largest > sample_budget && config_.on_error == OnError::kFail) {
    return fail(too_large(largest_index, largest, sample_budget));
  }
  // The budget object was built with the whole budget; take the pool's share out of it.
  budget_.force(pool_bytes_);
  for (std::size_t i = 0; i < buffers; ++i) {
    auto b = std::make_unique<BatchBuffer>();
    FEEDLINE_ASSIGN_OR_RETURN(b->buffer, AlignedBuffer::allocate(batch_cap));
    if (config_.lock_memory) b->locked = ::mlock(b->buffer.data(), b->buffer.size()) == 0;
    if (device_reads_) {
      FEEDLINE_TRY(sink_->allocate(*b, device_cap));
    } else if (sink_) {
      sink_->pin(*b);
    }
    BatchBuffer* raw = b.get();
    pool_.push_back(std::move(b));
    free_buffers_.push(raw);
  }
  // At least twice the IO depth, so the window never caps reads in flight below --io-depth.
  window_ = std::max<std::uint64_t>(std::uint64_t{buffers} * batch_samples_, 2ull * config_.io_depth);

  on_stop_ = std::make_unique<std::stop_callback<std::function<void()>>>(config_.stop, [this] { stop_by_user(); });
  start_ns_ = now_ns();
  reads_.start();
  decoded_.start();
  free_buffers_.start();
  batches_.start();
  device_batches_.start();
  consumer_clock_.start(WorkState::kBusy);
  // Named threads: top -H, perf and gdb show which stage is which.
  threads_.emplace_back([this] {
    name_this_thread("fl-storage");
    storage_loop();
  });
  for (unsigned i = 0; i < config_.decode_threads; ++i) {
    threads_.emplace_back([this, i] {
      name_this_thread(fmt::format("fl-decode-{}", i));
      detail::make_this_thread_nicer(config_.decode_nice);  // refused: run at the same priority
      decode_loop(i);
    });
  }
  threads_.emplace_back([this] {
    name_this_thread("fl-collate");
    collate_loop();
  });
  if (copies_) {
    threads_.emplace_back([this] {
      name_this_thread("fl-device");
      device_loop();
    });
  }
  return {};
}

void Pipeline::fail_run(Error e) {
  {
    std::lock_guard lock(error_mu_);
    if (!error_) error_ = std::move(e);
  }
  stop();
}

void Pipeline::stop() {
  stop_.store(true);
  reads_.close();
  decoded_.close();
  free_buffers_.close();
  batches_.close();
  device_batches_.close();
}

void Pipeline::shutdown() {
  if (joined_) return;
  stop();
  threads_.clear();  // joins
  joined_ = true;
}

// ---- storage ------------------------------------------------------------------------------

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

}  // namespace

void Pipeline::storage_loop() {
  WorkerClock& clock = storage_clock_;
  clock.start(WorkState::kBusy);
  storage::QueueOptions qo;
  qo.depth = config_.io_depth;
  qo.single_thread = true;
  qo.caller_mostly_polls = direct_;  // reads land in batch slots: no buffers to allocate here
  qo.coalesce = true;  // nearby reads (tar members in storage order) may share a request
  auto queue_r = device_reads_ ? backend_.make_device_queue(qo, cufile_) : backend_.make_queue(qo);
  if (!queue_r) {
    fail_run(std::move(queue_r).error());
    clock.stop();
    return;
  }
  std::unique_ptr<storage::IoQueue> queue = std::move(*queue_r);
  detail::HandleCache handles(backend_, dataset_);
  std::vector<ReadSlot> slots(config_.io_depth);
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
  BatchBuffer* direct_buf = nullptr;
  std::uint64_t direct_batch = ~std::uint64_t{0};
  std::vector<std::uint64_t> slot_offsets;
  bool noted_growth = false;
  if (direct_) {
    // The pool's buffers become the queue's registered (io_uring fixed) buffers: O_DIRECT reads
    // then DMA into the batch slot without per-read page pinning.
    // With reads into GPU memory, the device twins are registered with cuFile instead.
    std::vector<MutableBytes> regions;
    for (const auto& b : pool_) {
      regions.push_back(device_reads_ ? MutableBytes(static_cast<std::byte*>(b->device), b->device_size)
                                      : b->buffer.span());
    }
    auto reg = queue->register_buffers(regions);
    std::lock_guard lock(error_mu_);
    if (device_reads_) {
      path_notes_.push_back(fmt::format("cuFile reads into 4 KiB-aligned slots of {} GPU batch buffers of {} bytes",
                                        pool_.size(), regions.front().size()));
    } else {
      path_notes_.push_back(backend_.caps().alignment >= kPageAlign
                                ? "O_DIRECT reads land in 4 KiB-aligned batch slots"
                                : "buffered reads: the kernel copies from its page cache into the batch slot "
                                  "(--direct makes it DMA)");
    }
    path_notes_.push_back(reg ? fmt::format("{} batch buffers registered with the I/O queue", regions.size())
                              : fmt::format("batch buffers not registered with the I/O queue: {}",
                                            reg.error().message()));
  }
  std::optional<SampleSlot> pending = next_slot();
  std::vector<storage::ReadOp*> batch;
  std::vector<InFlightSample> finished;

  // Hands a finished (or failed) sample to decode; false when the run is over.
  auto deliver = [&](InFlightSample&& s) {
    if (s.error && config_.on_error == OnError::kFail) {
      fail_run(*s.error);
      return false;
    }
    return reads_.push(s, &clock);
  };

  // Why admission stopped, timed: the window ahead of collate (downstream is slow) or the memory
  // budget. The verdict uses these to tell "storage is slow" from "storage is held back".
  enum Limit { kNone = 0, kWindow = 1, kBudget = 2 };
  Limit limit = kNone;
  std::uint64_t limit_since = now_ns();
  auto set_limit = [&](Limit l) {
    if (l == limit) return;
    const std::uint64_t t = now_ns();
    if (limit == kWindow) window_limited_ns_ += t - limit_since;
    if (limit == kBudget) budget_limited_ns_ += t - limit_since;
    limit = l;
    limit_since = t;
  };

  while (!stopping()) {
    batch.clear();
    bool limited = false;
    Limit why = kNone;
    while (pending && !free_slots.empty() && bytes_in_flight < config_.io_max_bytes) {
      if (pending->seq >= collate_cursor_.load(std::memory_order_acquire) + window_) {
        limited = true;
        why = kWindow;
        break;
      }
      const Sample& smp = dataset_.samples[pending->sample];
      if ((direct_ || decode_in_place_) && pending->batch != direct_batch) {
        // A new batch: take a free buffer without blocking (reads in flight must be polled) and
        // lay out its 4 KiB-aligned slots, growing the buffer before anything lands in it.
        auto b = free_buffers_.pop_for(std::chrono::nanoseconds(0));
        if (!b) {
          limited = true;
          why = kWindow;  // the consumer has not handed back a buffer yet
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
          const Sample& x = dataset_.samples[sl.sample];
          if (footprints_[sl.sample] > sample_limit_) return;  // skipped below: no slot
          off += decode_in_place_ ? align_up(detail::decoded_slot_bytes(dataset_, x), detail::kMemberAlign)
                                  : align_up(std::max<std::uint64_t>(x.length, 1), kPageAlign);
        };
        place(*pending);
        for (const auto& sl : ahead) place(sl);
        auto grown = device_reads_ ? detail::fits_device_twin(**b, off)
                                   : detail::regrow_empty(**b, off, config_.lock_memory, sink_.get());
        if (!grown) {
          fail_run(std::move(grown).error());
          break;
        }
        if (*grown) {
          pool_grown_bytes_ += *grown;
          if (!noted_growth) {
            noted_growth = true;
            std::lock_guard lock(error_mu_);
            path_notes_.push_back(fmt::format("a batch buffer grew past its start-up size{}: raise --memory-budget "
                                              "to size every buffer for the largest batch",
                                              direct_ ? " (no longer a registered buffer)" : ""));
          }
        }
        direct_buf = *b;
        direct_batch = pending->batch;
      }
      // The direct path reserves nothing per sample (its slot in the batch buffer is charged with
      // the pool), but a sample too large for the budget is skipped all the same.
      const std::uint64_t need = direct_ ? 0 : footprints_[pending->sample];
      if (footprints_[pending->sample] > sample_limit_) {  // only with on_error = skip: start() refused it otherwise
        InFlightSample s;
        s.slot = *pending;
        s.direct_buffer = direct_ || decode_in_place_ ? direct_buf : nullptr;  // the batch's buffer travels with every sample
        s.error = footprints_[pending->sample] == kOversized
                      ? larger_than_max(pending->sample, oversized(smp))
                      : Error(Errc::kResourceExhausted,
                              fmt::format("sample '{}' needs {} bytes, more than the memory budget allows ({})",
                                          smp.key, need, sample_limit_))
                            .with_object(dataset_.objects[smp.object].key)
                            .with_offset(smp.offset);
        pending = next_slot();
        if (!deliver(std::move(s))) break;
        continue;
      }
      if (!budget_.try_acquire(need)) {
        limited = true;
        why = kBudget;
        break;
      }
      ReadSlot* slot = free_slots.back();
      InFlightSample s;
      s.slot = *pending;
      s.reserved = need;
      if (direct_ || decode_in_place_) {
        s.direct_buffer = direct_buf;
        s.direct_offset = slot_offsets[s.slot.slot];
        s.on_device = device_reads_;
        s.decode_in_place = decode_in_place_;
      }
      pending = next_slot();
      std::unique_ptr<storage::ObjectHandle> opened;
      auto handle = handles.get(smp.object, opened);
      if (!handle) {
        s.error = std::move(handle).error();
        budget_.release(s.reserved);
        s.reserved = 0;
        if (!deliver(std::move(s))) break;
        continue;
      }
      MutableBytes dst;
      if (direct_) {
        dst = MutableBytes(const_cast<std::byte*>(s.bytes()), align_up(std::max<std::uint64_t>(smp.length, 1), kPageAlign));
      } else {
        auto buf = buffers_.get(smp.length);
        if (!buf) {
          fail_run(std::move(buf).error());
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
    if (why == kWindow && queue->in_flight() * 2 >= window_) why = kNone;
    set_limit(why);
    if (!batch.empty()) queue->submit(batch);
    if (queue->in_flight() == 0) {
      if (!pending) break;  // everything read
      // Nothing in flight and nothing admissible: waiting on memory or on collate's window.
      clock.to(WorkState::kBlocked);
      budget_.wait_release(std::chrono::milliseconds(limited ? 2 : 0));
      clock.to(WorkState::kBusy);
      continue;
    }
    done.done.clear();
    queue->poll(1, std::chrono::milliseconds(20));
    for (ReadSlot* slot : done.done) {
      InFlightSample s = std::move(slot->sample);
      const storage::ReadOp& op = slot->op;
      const Sample& smp = dataset_.samples[s.slot.sample];
      bytes_in_flight -= smp.length;
      if (!op.result) {
        s.error = op.result.error();
      } else if (*op.result < smp.length) {
        s.error = Error(Errc::kCorrupt,
                        fmt::format("object ends after {} of the sample's {} bytes (truncated?)",
                                    *op.result, smp.length))
                      .with_object(dataset_.objects[smp.object].key)
                      .with_offset(smp.offset + *op.result);
      } else {
        s.raw_len = *op.result;
        storage_bytes_ += *op.result;
        clock.count(1, *op.result);
      }
      slot->own_handle.reset();
      free_slots.push_back(slot);
      if (s.error) {
        budget_.release(s.reserved);
        s.reserved = 0;
        s.raw = AlignedBuffer();
        if (config_.on_error == OnError::kFail) {
          fail_run(*s.error);
          break;
        }
      }
      finished.push_back(std::move(s));
    }
    // One hand-off for everything this poll completed (not one wake-up per sample).
    if (!finished.empty() && !reads_.push_all(finished, &clock)) break;
    finished.clear();
  }
  if (queue->in_flight() > 0) {
    queue->cancel();
    while (queue->in_flight() > 0) queue->poll(1, std::chrono::milliseconds(100));
  }
  set_limit(kNone);
  io_stats_ = queue->stats();
  if (device_reads_) {
    // How cuFile was driven (batch API or threads, handles registered) and any fallback, as run.
    const auto info = queue->info();
    std::lock_guard lock(error_mu_);
    path_notes_.push_back(fmt::format("cuFile engine: {}", fmt::join(info.features, ", ")));
    for (const auto& n : info.notes) path_notes_.push_back(n);
  }
  reads_.close();
  clock.stop();
}

// ---- decode -------------------------------------------------------------------------------

void Pipeline::decode_loop(unsigned index) {
  WorkerClock& clock = decode_clocks_[index];
  clock.start(WorkState::kStarved);
  Decompressor zstd;
  // Samples are taken and handed on in runs (at most kRun, and collate gets what is done once
  // kFlushBytes are decoded): one queue hand-off per run instead of one per sample.
  constexpr std::size_t kRun = 8;
  constexpr std::uint64_t kFlushBytes = 4ull << 20;
  std::vector<InFlightSample> in;
  std::vector<InFlightSample> out;
  in.reserve(kRun);
  out.reserve(kRun);
  bool running = true;
  while (running && reads_.pop_some(in, kRun, &clock)) {
    clock.to(WorkState::kBusy);
    std::uint64_t pending_bytes = 0;
    for (InFlightSample& item : in) {
      if (!item.error && item.on_device) {
        detail::describe_on_device(dataset_, item);  // nothing to decode, nothing the host can hash
      } else if (!item.error) {
        const std::uint64_t extra = detail::decode_sample(dataset_, item, zstd, &buffers_, decode_limit_);
        if (extra) {  // a zstd frame larger than the reservation's estimate
          budget_.force(extra);
          item.reserved += extra;
        }
        spin_for(config_.decode_cost, stop_);
      }
      if (item.error) {
        if (config_.on_error == OnError::kFail) {
          fail_run(*item.error);
          running = false;
          break;
        }
        item.raw = AlignedBuffer();
        item.decoded = AlignedBuffer();
        item.members.clear();
      } else {
        clock.count(1, item.decoded_bytes);
        pending_bytes += item.decoded_bytes;
      }
      out.push_back(std::move(item));
      if (pending_bytes >= kFlushBytes) {
        if (!decoded_.push_all(out, &clock)) running = false;
        pending_bytes = 0;
        if (!running) break;
      }
    }
    in.clear();
    if (running && !out.empty() && !decoded_.push_all(out, &clock)) running = false;
    out.clear();
    clock.to(WorkState::kStarved);
  }
  clock.stop();
  // The last decoder out closes the queue behind it.
  static_assert(sizeof(std::size_t) >= 4);
  if (++decoders_done_ == config_.decode_threads) decoded_.close();
}

// ---- collate ------------------------------------------------------------------------------

void Pipeline::collate_loop() {
  WorkerClock& clock = collate_clock_;
  clock.start(WorkState::kStarved);
  std::map<std::uint64_t, InFlightSample> reorder;
  std::vector<InFlightSample> arrived;
  std::uint64_t next_seq = 0;
  BatchBuffer* buffer = nullptr;
  std::optional<Batch> batch;
  std::uint64_t used = 0;
  bool open = true;
  while (open) {
    auto it = reorder.find(next_seq);
    while (it == reorder.end()) {
      arrived.clear();
      if (!decoded_.pop_some(arrived, 64, &clock)) {
        open = false;
        break;
      }
      for (InFlightSample& item : arrived) {
        const std::uint64_t seq = item.slot.seq;
        reorder.emplace(seq, std::move(item));
      }
      it = reorder.find(next_seq);
    }
    if (!open) break;
    clock.to(WorkState::kBusy);
    InFlightSample s = std::move(it->second);
    reorder.erase(it);
    if (s.slot.slot == 0 || !batch) {
      if (s.direct_buffer) {
        buffer = s.direct_buffer;  // the storage stage took it from the pool for this batch
      } else {
        clock.to(WorkState::kBlocked);  // waiting for the consumer to hand back a buffer
        auto b = free_buffers_.pop();
        clock.to(WorkState::kBusy);
        if (!b) break;
        buffer = *b;
      }
      batch.emplace(Batch());
      batch->owner_ = this;
      batch->buffer_ = buffer;
      batch->epoch_ = s.slot.epoch;
      batch->index_ = s.slot.batch;
      batch->on_device_ = batch->device_only_ = device_reads_;
      used = 0;
    }
    if (s.error) {
      ++skipped_;
      std::lock_guard lock(error_mu_);
      if (skipped_examples_.size() < 10) skipped_examples_.push_back(s.error->what());
    } else if (s.direct_buffer) {
      BatchSample bs = detail::place_in_batch(dataset_, s, batch->members_);  // already in place
      used = std::max(used, bs.offset + bs.size);
      direct_delivered_ += s.decoded_bytes;
      collate_copied_bytes_ += s.copied_bytes;  // stored members decode copied into the slot
      batch->samples_.push_back(bs);
      batch->digest_ += s.digest;
      batch->bytes_ += s.decoded_bytes;
      clock.count(1, s.decoded_bytes);
    } else {
      auto grown = detail::ensure_room(*buffer, used, s, config_.lock_memory, sink_.get(), &collate_copied_bytes_);
      if (!grown) {
        fail_run(std::move(grown).error());
        break;
      }
      pool_grown_bytes_ += *grown;
      BatchSample bs = detail::copy_into_batch(dataset_, s, *buffer, used, batch->members_);
      collate_copied_bytes_ += s.decoded_bytes;
      bounce_delivered_ += s.decoded_bytes;
      batch->samples_.push_back(bs);
      batch->digest_ += s.digest;
      batch->bytes_ += s.decoded_bytes;
      clock.count(1, s.decoded_bytes);
    }
    buffers_.put(std::move(s.raw));
    buffers_.put(std::move(s.decoded));
    budget_.release(s.reserved);
    const bool last = s.slot.slot + 1 == s.slot.batch_len;
    ++next_seq;
    collate_cursor_.store(next_seq, std::memory_order_release);
    if (last) {
      spin_for(config_.collate_cost, stop_);
      Batch out = std::move(*batch);
      batch.reset();
      if (!batches_.push(out, &clock)) break;
    }
    clock.to(WorkState::kStarved);
  }
  batches_.close();
  clock.stop();
}

// ---- device -------------------------------------------------------------------------------

// Copies finished batches to the GPU, keeping up to one copy per stream in flight. It waits on
// the oldest copy only when every stream is busy or nothing new is ready, so copies overlap with
// each other and with IO, decode and collate; batches reach the consumer in order.
void Pipeline::device_loop() {
  WorkerClock& clock = device_clock_;
  clock.start(WorkState::kStarved);
  struct Copying {
    Batch batch;
    detail::DeviceSink::Ticket ticket;
  };
  std::deque<Copying> copying;
  const std::size_t depth = sink_->streams();
  for (;;) {
    std::optional<Batch> b;
    if (copying.empty()) {
      b = batches_.pop(&clock);
    } else if (copying.size() < depth) {
      b = batches_.pop_for(std::chrono::nanoseconds(0));
    }
    if (b) {
      clock.to(WorkState::kBusy);
      auto t = sink_->copy(*b->buffer_, b->data().size());
      if (!t) {
        fail_run(std::move(t).error().with_hint("the GPU copy failed mid-run; check the device (nvidia-smi)"));
        break;
      }
      copying.push_back({std::move(*b), *t});
      continue;
    }
    if (copying.empty()) break;  // closed and drained
    clock.to(WorkState::kBusy);
    const std::uint64_t t0 = now_ns();
    auto w = sink_->wait(copying.front().ticket);
    const std::uint64_t t1 = now_ns();
    if (!w) {
      copying.pop_front();
      fail_run(std::move(w).error());
      break;
    }
    Batch out = std::move(copying.front().batch);
    copying.pop_front();
    out.on_device_ = true;
    out.copy_wait_from_ns_ = t0;
    out.copy_done_ns_ = t1;
    clock.count(1, out.bytes());
    if (!device_batches_.push(out, &clock)) break;
    clock.to(WorkState::kStarved);
  }
  // Stopping: let copies still running finish before their host buffers can be reused.
  for (auto& c : copying) (void)sink_->wait(c.ticket);
  copying.clear();
  device_batches_.close();
  clock.stop();
}

// ---- consumer -----------------------------------------------------------------------------

Result<std::optional<Batch>> Pipeline::next() {
  if (finished_) {
    if (error_) return fail(*error_);
    return std::optional<Batch>();
  }
  const std::uint64_t t0 = now_ns();
  consumer_clock_.to(WorkState::kStarved);
  auto b = copies_ ? device_batches_.pop() : batches_.pop();
  const std::uint64_t t1 = now_ns();
  consumer_clock_.to(WorkState::kBusy);
  if (!b) {
    finish_run(t1);
    std::lock_guard lock(error_mu_);
    if (error_) return fail(*error_);
    return std::optional<Batch>();
  }
  wait_ns_.record(t1 - t0);
  wait_total_ns_ += t1 - t0;
  // The part of this wait during which the device thread was waiting for this batch's copy.
  if (b->copy_done_ns_ > t0) {
    const std::uint64_t from = std::max(t0, b->copy_wait_from_ns_);
    const std::uint64_t to = std::min(t1, b->copy_done_ns_);
    if (to > from) copy_blocking_ns_ += to - from;
  }
  if (delivered_batches_ == 0) {
    first_wait_ns_ = t1 - t0;
    first_batch_ns_ = t1 - start_ns_;
  }
  delivered_samples_ += b->samples().size();
  delivered_bytes_ += b->bytes();
  ++delivered_batches_;
  digest_ += b->digest();
  consumer_clock_.count(b->samples().size(), b->bytes());
  return std::optional<Batch>(std::move(*b));
}

void Pipeline::record_compute(std::chrono::nanoseconds spent) {
  const auto ns = static_cast<std::uint64_t>(std::max<std::int64_t>(0, spent.count()));
  compute_total_ns_ += ns;
  if (delivered_batches_ <= 1) {
    first_step_end_ns_ = now_ns();
  } else {
    compute_after_first_ns_ += ns;
    ++compute_steps_after_first_;
  }
}

void Pipeline::release(BatchBuffer* buffer) {
  if (!free_buffers_.push(buffer)) {
    // Closed: the run is over; the buffer stays in pool_ and is freed with the pipeline.
  }
}

// Ends the run at `end`: the consumer's clock and the queues' occupancy are measured up to
// that moment, not up to whenever the report is taken.
void Pipeline::finish_run(std::uint64_t end) {
  if (finished_) return;
  finished_ = true;
  end_ns_ = end;
  consumer_clock_.stop();
  shutdown();
  const double wall = static_cast<double>(end_ns_ - start_ns_) / 1e9;
  end_queues_ = {reads_.report(wall, end_ns_), decoded_.report(wall, end_ns_),
                 batches_.report(wall, end_ns_), free_buffers_.report(wall, end_ns_)};
  if (copies_) end_queues_.push_back(device_batches_.report(wall, end_ns_));
}

PipelineReport Pipeline::report() {
  finish_run(now_ns());
  PipelineReport r;
  r.wall_seconds = static_cast<double>(end_ns_ - start_ns_) / 1e9;
  r.samples = delivered_samples_;
  r.bytes = delivered_bytes_;
  r.batches = delivered_batches_;
  const std::uint64_t bpe = sampler_.batches_per_epoch();
  r.epochs = static_cast<std::uint32_t>(bpe ? delivered_batches_ / bpe : 0);
  if (r.wall_seconds > 0) {
    r.samples_per_second = static_cast<double>(r.samples) / r.wall_seconds;
    r.bytes_per_second = static_cast<double>(r.bytes) / r.wall_seconds;
  }
  r.storage_bytes = storage_bytes_;
  r.consumer_wait_seconds = static_cast<double>(wait_total_ns_) / 1e9;
  r.first_batch_seconds = static_cast<double>(first_batch_ns_) / 1e9;
  {
    // Steady state: without the first step's wait (the pipeline filling up), unless that is all.
    const bool steady = delivered_batches_ > 1;
    const double wait = static_cast<double>(wait_total_ns_ - (steady ? first_wait_ns_ : 0));
    const double wall = static_cast<double>(end_ns_ - start_ns_) - (steady ? static_cast<double>(first_batch_ns_) : 0);
    r.consumer_wait_fraction = wall > 0 ? std::min(1.0, wait / wall) : 0;
  }
  r.consumer_wait_ns = wait_ns_;
  r.compute_seconds = static_cast<double>(compute_total_ns_) / 1e9;
  if (first_step_end_ns_ && end_ns_ > first_step_end_ns_ && compute_steps_after_first_ > 0) {
    r.au = static_cast<double>(compute_after_first_ns_) / static_cast<double>(end_ns_ - first_step_end_ns_);
    r.au_steps = compute_steps_after_first_;
  }
  r.input_bound = r.consumer_wait_fraction < 0.05 ? "no" : r.consumer_wait_fraction < 0.20 ? "moderate" : "high";

  auto stage = [&](std::string name, std::span<const WorkerClock> clocks) {
    StageStats s;
    s.name = std::move(name);
    for (const auto& c : clocks) s.add(c);
    s.finish(r.wall_seconds);
    return s;
  };
  r.stages.push_back(stage("storage", std::span<const WorkerClock>(&storage_clock_, 1)));
  r.stages.push_back(stage("decode", decode_clocks_));
  r.stages.push_back(stage("collate", std::span<const WorkerClock>(&collate_clock_, 1)));
  if (copies_) r.stages.push_back(stage("device", std::span<const WorkerClock>(&device_clock_, 1)));
  r.stages.push_back(stage("consumer", std::span<const WorkerClock>(&consumer_clock_, 1)));
  r.queues = end_queues_;
  r.io = io_stats_;
  if (r.wall_seconds > 0) {
    r.storage_window_limited_fraction = static_cast<double>(window_limited_ns_) / (r.wall_seconds * 1e9);
    r.window_samples = window_;
    r.batch_buffers = pool_.size();
    r.storage_budget_limited_fraction = static_cast<double>(budget_limited_ns_) / (r.wall_seconds * 1e9);
  }
  r.io_depth = config_.io_depth;
  r.memory_budget = config_.memory_budget;
  r.peak_memory = budget_.peak() + pool_grown_bytes_.load();
  r.budget_overshoot = budget_.overshoot();
  r.skipped = skipped_.load();
  {
    std::lock_guard lock(error_mu_);
    r.skipped_examples = skipped_examples_;
    r.error = error_;
  }
  r.digest = digest_;
  r.digest_computed = !device_reads_;
  r.interrupted = stop_requested_by_user_ && !error_;
  {
    // Data paths: one per run (the plan is made once), with every copy the pipeline made.
    DataPathReport d;
    d.path = plan_.path;
    d.bytes = direct_delivered_ + bounce_delivered_;
    const std::uint64_t bounced = io_stats_.bounced_bytes;
    const std::uint64_t h2d = sink_ ? sink_->bytes : 0;
    // cuFile's compatibility mode reads into libcufile's host buffers and copies from there to
    // the GPU: one copy of every byte, made where feedline cannot count it.
    const std::uint64_t cufile_copied = plan_.path == "cufile-compat" ? d.bytes : 0;
    d.copied_bytes = collate_copied_bytes_ + bounced + h2d + cufile_copied;
    d.copy_amplification = d.bytes ? static_cast<double>(d.copied_bytes) / static_cast<double>(d.bytes) : 0;
    std::vector<std::string> parts;
    if (direct_) parts.push_back(device_reads_ ? "cuFile reads landed in their batch slot in GPU memory"
                                               : "reads landed in their batch slot");
    if (decode_in_place_) parts.push_back("zstd members decoded straight into their batch slot");
    if (cufile_copied) parts.push_back(fmt::format("libcufile copied {} bytes through host bounce buffers", cufile_copied));
    if (collate_copied_bytes_) {
      parts.push_back(fmt::format("{} copied {} bytes", decode_in_place_ ? "decode" : "collate", collate_copied_bytes_));
    }
    if (bounced) parts.push_back(fmt::format("O_DIRECT bounce buffers copied {} bytes", bounced));
    if (h2d) parts.push_back(fmt::format("H2D copied {} bytes", h2d));
    d.detail = fmt::format("{}", fmt::join(parts, "; "));
    r.data_paths.push_back(std::move(d));
    r.data_path_reason = plan_.reason;
    std::lock_guard lock(error_mu_);
    r.data_path_notes = path_notes_;
  }
  if (sink_) {
    DeviceReport& dv = r.device;
    dv.enabled = true;
    dv.device = sink_->device();
    dv.name = sink_->cuda().devices()[static_cast<std::size_t>(dv.device)].name;
    dv.streams = sink_->streams();
    const std::string pin_failure = sink_->pin_failure();
    dv.host_memory = device_reads_         ? "not used: cuFile reads samples into GPU memory"
                     : pin_failure.empty()
                         ? fmt::format("pinned (cudaHostRegister, {} buffers)", sink_->pinned_buffers.load())
                         : "pageable: " + pin_failure;
    dv.copies = sink_->copies;
    dv.h2d_bytes = sink_->bytes;
    dv.h2d_seconds = sink_->gpu_seconds;
    dv.h2d_bytes_per_second = sink_->gpu_seconds > 0 ? static_cast<double>(sink_->bytes) / sink_->gpu_seconds : 0;
    dv.peak_bytes_per_second = sink_->peak_bytes_per_second;
    dv.copy_wait_seconds = sink_->wait_seconds;
    dv.consumer_wait_on_copy_seconds = static_cast<double>(copy_blocking_ns_) / 1e9;
  }
  r.samples_per_object = dataset_.objects.empty() ? 0.0
                                                  : static_cast<double>(dataset_.samples.size()) /
                                                        static_cast<double>(dataset_.objects.size());
  r.bottleneck = diagnose(r, config_);
  return r;
}

// ---- Batch and Loader ----------------------------------------------------------------------

Batch::Batch(Batch&& o) noexcept
    : owner_(std::exchange(o.owner_, nullptr)),
      buffer_(std::exchange(o.buffer_, nullptr)),
      epoch_(o.epoch_),
      index_(o.index_),
      samples_(std::move(o.samples_)),
      members_(std::move(o.members_)),
      digest_(o.digest_),
      bytes_(o.bytes_),
      on_device_(o.on_device_),
      device_only_(o.device_only_),
      copy_wait_from_ns_(o.copy_wait_from_ns_),
      copy_done_ns_(o.copy_done_ns_) {}

Batch& Batch::operator=(Batch&& o) noexcept {
  if (this != &o) {
    if (owner_ && buffer_) owner_->release(buffer_);
    owner_ = std::exchange(o.owner_, nullptr);
    buffer_ = std::exchange(o.buffer_, nullptr);
    epoch_ = o.epoch_;
    index_ = o.index_;
    samples_ = std::move(o.samples_);
    members_ = std::move(o.members_);
    digest_ = o.digest_;
    bytes_ = o.bytes_;
    on_device_ = o.on_device_;
    device_only_ = o.device_only_;
    copy_wait_from_ns_ = o.copy_wait_from_ns_;
    copy_done_ns_ = o.copy_done_ns_;
  }
  return *this;
}

Batch::~Batch() {
  if (owner_ && buffer_) owner_->release(buffer_);
}

std::uint64_t Batch::extent() const noexcept {
  std::uint64_t end = 0;
  for (const auto& s : samples_) end = std::max(end, s.offset + s.size);
  return end;
}

ConstBytes Batch::data() const noexcept {
  if (!buffer_ || device_only_) return {};
  return ConstBytes(buffer_->buffer.data(), extent());
}

const void* Batch::device_data() const noexcept { return on_device_ && buffer_ ? buffer_->device : nullptr; }

Loader::Loader(std::unique_ptr<Pipeline> p) : pipeline_(std::move(p)) {}
Loader::~Loader() = default;

Result<std::unique_ptr<Loader>> Loader::open(storage::Backend& backend, const Dataset& dataset,
                                             LoaderConfig config) {
  // Bounds on counts: each unit costs per-read, per-thread or per-batch state, and beyond these
  // more only allocates (a depth of 10^9 once asked for 8 GB before anything was read).
  auto bound = [](std::string_view what, std::uint64_t v, std::uint64_t lo, std::uint64_t hi) -> Result<void> {
    if (v < lo || v > hi) return fail(Errc::kInvalidArgument, fmt::format("{} is {}: it must be {}..{}", what, v, lo, hi));
    return {};
  };
  FEEDLINE_TRY(bound("io_depth", config.io_depth, 1, kMaxIoDepth));
  FEEDLINE_TRY(bound("decode_threads", config.decode_threads, 1, kMaxDecodeThreads));
  FEEDLINE_TRY(bound("prefetch_batches", config.prefetch_batches, 0, kMaxPrefetchBatches));
  FEEDLINE_TRY(bound("sampler.batch_size", config.sampler.batch_size, 1, kMaxBatchSize));
  config.sampler.num_samples = dataset.samples.size();
  if (config.sampler.shard_shuffle > 0 && config.sampler.shard_starts.empty()) config.sampler.shard_starts = shard_starts(dataset);
  FEEDLINE_ASSIGN_OR_RETURN(Sampler sampler, Sampler::create(config.sampler));
  auto p = std::make_unique<Pipeline>(backend, dataset, config, std::move(sampler));
  FEEDLINE_TRY(p->start());
  return std::unique_ptr<Loader>(new Loader(std::move(p)));
}

Result<std::optional<Batch>> Loader::next() { return pipeline_->next(); }
void Loader::record_compute(std::chrono::nanoseconds spent) { pipeline_->record_compute(spent); }
void Loader::stop() { pipeline_->stop_by_user(); }
PipelineReport Loader::report() { return pipeline_->report(); }

}  // namespace feedline::loader
