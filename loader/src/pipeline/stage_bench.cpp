// Each stage measured alone (stage_bench.hpp): read_pass for storage alone (and, untimed, the
// cache the others run on), decode_alone, collate_in_slots_alone or collate_copy_alone as the
// run's data path collates, and add_up for the slowest stage and the CPU ceiling.
#include "feedline/loader/stage_bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <stop_token>
#include <thread>

#include "feedline/storage/http_config.hpp"
#include "stage_work.hpp"
#include "unknown_size.hpp"

namespace feedline::loader {

using detail::BatchBuffer;
using detail::InFlightSample;

namespace {

StageAlone finish(StageId stage, std::uint64_t samples, std::uint64_t bytes, std::uint64_t t0,
                  double cpu0) {
  StageAlone s;
  s.cpu_seconds = process_cpu_times().total() - cpu0;
  s.stage = stage;
  s.samples = samples;
  s.bytes = bytes;
  s.seconds = static_cast<double>(now_ns() - t0) / 1e9;
  s.samples_per_second = s.seconds > 0 ? static_cast<double>(samples) / s.seconds : 0;
  return s;
}

// Reads every sample of order at the pipeline's IO depth. With keep, each sample gets a buffer
// of its own and is appended to *keep; without, reads go into io_depth reused buffers of
// `longest` bytes, touched before the clock starts.
Result<StageAlone> read_pass(storage::Backend& backend, const Dataset& dataset,
                             const LoaderConfig& config, std::span<const SampleSlot> order,
                             std::uint64_t longest, std::vector<InFlightSample>* keep,
                             const std::atomic<bool>& stop, std::uint64_t deadline_ns = 0) {
  // Handles and buffers are declared before the queue: an early return destroys the queue
  // first, which waits for the reads still writing into them.
  detail::HandleCache handles(backend, dataset);
  struct Slot {
    storage::ReadOp op;
    InFlightSample sample;
    std::unique_ptr<storage::ObjectHandle> hold;
  };
  std::vector<Slot> slots(config.io_depth);
  storage::HttpQueueOptions http;
  http.caller_mostly_polls = keep == nullptr;  // reused buffers: the thread only reads
  storage::QueueOptions qo;
  qo.depth = config.io_depth;
  qo.single_thread = true;
  qo.http = &http;
  qo.coalesce = true;  // nearby reads may share a request (as the run's own storage stage)
  FEEDLINE_ASSIGN_OR_RETURN(auto queue, backend.make_queue(qo));
  handles.use_queue(*queue);
  std::vector<Slot*> free_slots;
  for (auto& s : slots) {
    if (!keep) {
      FEEDLINE_ASSIGN_OR_RETURN(s.sample.raw,
                                AlignedBuffer::allocate(align_up(longest, kPageAlign)));
      s.sample.raw.prefault(s.sample.raw.size());
    }
    free_slots.push_back(&s);
  }
  std::vector<storage::ReadOp*> done;  // what each poll() completed
  std::size_t next = 0;
  std::uint64_t bytes = 0;
  const double cpu0 = process_cpu_times().total();
  const std::uint64_t t0 = now_ns();
  std::size_t completed = 0;
  while (next < order.size() || queue->in_flight() > 0) {
    // Past the deadline no read is issued; those in flight finish and count.
    if (deadline_ns && next < order.size() && now_ns() >= deadline_ns) order = order.first(next);
    if (stop.load(std::memory_order_relaxed)) {
      queue->cancel();
      return fail(Errc::kCancelled, "interrupted while measuring storage alone");
    }
    std::vector<storage::ReadOp*> batch;
    while (next < order.size() && !free_slots.empty()) {
      const Sample& smp = dataset.samples[order[next].sample];
      Slot* slot = free_slots.back();
      free_slots.pop_back();
      FEEDLINE_ASSIGN_OR_RETURN(const storage::ObjectHandle* h,
                                handles.get(smp.object, slot->hold));
      if (keep) {
        FEEDLINE_ASSIGN_OR_RETURN(
            slot->sample.raw,
            AlignedBuffer::allocate(align_up(std::max<std::uint64_t>(smp.length, 1), kPageAlign)));
      }
      slot->sample.slot = order[next];
      slot->op = storage::ReadOp{};
      slot->op.object = h;
      slot->op.offset = smp.offset;
      slot->op.length = smp.length;
      slot->op.dst = slot->sample.raw.span();
      slot->op.user = slot;
      batch.push_back(&slot->op);
      ++next;
    }
    queue->submit(batch);
    done.clear();
    queue->poll(1, std::chrono::milliseconds(100), done);
    for (storage::ReadOp* op : done) {
      auto* slot = static_cast<Slot*>(op->user);
      if (!op->result) return fail(op->result.error());
      bytes += *op->result;
      slot->sample.raw_len = *op->result;
      ++completed;
      if (keep) {
        keep->push_back(std::move(slot->sample));
        slot->sample = InFlightSample();
      }
      slot->hold.reset();
      free_slots.push_back(slot);
    }
  }
  return finish(StageId::kStorage, completed, bytes, t0, cpu0);
}

// The run's epoch-0 order (this rank's shard), at most max_samples.
Result<std::vector<SampleSlot>> first_samples(const Dataset& dataset, const LoaderConfig& config,
                                              std::uint64_t max_samples) {
  SamplerConfig sc = config.sampler;
  sc.num_samples = dataset.samples.size();
  sc.epochs = 1;
  if (sc.shard_shuffle > 0 && sc.shard_starts.empty()) sc.shard_starts = shard_starts(dataset);
  FEEDLINE_ASSIGN_OR_RETURN(Sampler sampler, Sampler::create(sc));
  std::vector<SampleSlot> order;
  while (auto slot = sampler.next()) {
    if (order.size() >= max_samples) break;
    order.push_back(*slot);
  }
  return order;
}

Error unknown_sizes_error(const Dataset& dataset) {
  return Error(Errc::kUnsupported,
               "measuring the stages alone needs every sample's size, and this dataset's "
               "objects have none yet (a brace list on a server without a listing)")
      .with_object(dataset.root)
      .with_hint(
          "serve a JSON listing (nginx: autoindex on; autoindex_format json) "
          "or measure the run itself");
}

// The cache for decode and collate alone: the first samples that fit in half the budget, read
// again (untimed) into buffers of their own.
Result<std::vector<InFlightSample>> cache_samples(storage::Backend& backend, const Dataset& dataset,
                                                  const LoaderConfig& config,
                                                  std::span<const SampleSlot> order,
                                                  std::uint64_t longest,
                                                  const std::atomic<bool>& stop) {
  std::vector<InFlightSample> cache;
  const std::uint64_t cache_limit = config.memory_budget / 2;
  std::uint64_t bytes = 0;
  std::size_t n = 0;
  while (n < order.size() &&
         bytes + align_up(dataset.samples[order[n].sample].length, kPageAlign) <= cache_limit) {
    bytes += align_up(dataset.samples[order[n].sample].length, kPageAlign);
    ++n;
  }
  if (n == 0)
    return fail(Errc::kResourceExhausted, "no sample fits half the memory budget for decode alone");
  FEEDLINE_TRY(read_pass(backend, dataset, config, order.first(n), longest, &cache, stop));
  return cache;
}

// What decode and collate alone run on: the cached samples, the run's data path, and the limit
// on declared sizes.
struct AloneInputs {
  const Dataset& dataset;
  const LoaderConfig& config;
  const DataPathPlan& plan;
  std::vector<InFlightSample>& cache;
  std::uint64_t decode_limit;
  const std::atomic<bool>& stop;
};

// Decode alone, timed: the pipeline's decode threads on cached samples, each thread reusing one
// output buffer (decode in place, the run's data path, writes each sample into its batch slot:
// here into one reused, slot-sized batch buffer per thread; the outputs are not kept).
Result<StageAlone> decode_alone(const AloneInputs& in) {
  const Dataset& dataset = in.dataset;
  const LoaderConfig& config = in.config;
  const bool in_place = in.plan.path == DataPath::kDecodeInPlace;
  std::uint64_t widest_slot = kPageAlign;
  if (in_place) {
    for (const InFlightSample& s : in.cache) {
      widest_slot = std::max(
          widest_slot,
          detail::decoded_slot_bytes(dataset, in.plan.decode, dataset.samples[s.slot.sample]));
    }
  }
  std::atomic<std::size_t> next{0};
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<bool> failed{false};
  std::optional<Error> error;
  std::mutex error_mu;
  // Each thread's slot is allocated and touched before the clock starts: on a small cache its
  // page faults would be most of what is timed.
  std::vector<std::unique_ptr<BatchBuffer>> slots(config.decode_threads);
  if (in_place) {
    for (auto& slot : slots) {
      FEEDLINE_ASSIGN_OR_RETURN(slot, BatchBuffer::allocate(align_up(widest_slot, kPageAlign),
                                                            /*lock_memory=*/false));
      slot->prefault();
    }
  }
  std::atomic<unsigned> next_slot{0};
  auto decode_some = [&] {
    detail::ThreadDecoders decoders(in.plan.decode, config.sampler.seed);
    AlignedBuffer scratch;
    BatchBuffer* slot = in_place ? slots[next_slot++].get() : nullptr;
    for (std::size_t i = next++; i < in.cache.size() && !failed && !in.stop; i = next++) {
      InFlightSample& s = in.cache[i];
      s.decoded = std::move(scratch);
      if (in_place) s.place = {.fill = detail::SlotPlace::Fill::kDecode, .buffer = slot};
      detail::decode_sample(dataset, s, decoders, nullptr, in.decode_limit);
      s.place = {};
      scratch = std::move(s.decoded);
      if (s.error) {
        std::lock_guard lock(error_mu);
        error = s.error;
        failed = true;
        return;
      }
      detail::spin_for(config.diagnostics.decode_cost, in.stop);
      bytes += s.decoded_bytes;
    }
  };
  const double cpu0 = process_cpu_times().total();
  const std::uint64_t t0 = now_ns();
  {
    std::vector<std::jthread> threads;
    for (unsigned t = 0; t < config.decode_threads; ++t) threads.emplace_back(decode_some);
  }
  if (error) return fail(*error);
  if (in.stop) return fail(Errc::kCancelled, "interrupted while measuring decode alone");
  return finish(StageId::kDecode, in.cache.size(), bytes.load(), t0, cpu0);
}

// Collate alone on the direct path and with decode in place: the run's collate copies nothing,
// it records where each sample's members lie in the batch its reads landed in.
Result<StageAlone> collate_in_slots_alone(const AloneInputs& in) {
  const Dataset& dataset = in.dataset;
  std::vector<BatchMember> members;
  std::vector<BatchSample> samples;
  std::uint64_t bytes = 0;
  std::uint64_t offset = 0;
  const double cpu0 = process_cpu_times().total();
  const std::uint64_t t0 = now_ns();
  for (const InFlightSample& s : in.cache) {
    if (in.stop) return fail(Errc::kCancelled, "interrupted while measuring collate alone");
    const Sample& smp = dataset.samples[s.slot.sample];
    const auto dm = dataset.members_of(smp);
    BatchSample bs;
    bs.key = smp.key;
    bs.sample = s.slot.sample;
    bs.first_member = static_cast<std::uint32_t>(members.size());
    bs.member_count = static_cast<std::uint32_t>(s.members.size());
    bs.offset = offset;
    for (std::size_t i = 0; i < s.members.size() && i < dm.size(); ++i) {
      members.push_back({dm[i].name, offset + dm[i].offset, s.members[i].size, s.members[i].shape});
    }
    bs.size = smp.length;
    offset += align_up(std::max<std::uint64_t>(smp.length, 1), kPageAlign);
    samples.push_back(bs);
    bytes += s.decoded_bytes;
    if (samples.size() == in.config.sampler.batch_size) {
      detail::spin_for(in.config.diagnostics.collate_cost, in.stop);
      samples.clear();
      members.clear();
      offset = 0;
    }
  }
  return finish(StageId::kCollate, in.cache.size(), bytes, t0, cpu0);
}

// Collate alone: the batch copy, one thread, one reused buffer.
Result<StageAlone> collate_copy_alone(const AloneInputs& in) {
  const Dataset& dataset = in.dataset;
  const LoaderConfig& config = in.config;
  FEEDLINE_ASSIGN_OR_RETURN(std::unique_ptr<BatchBuffer> grown,
                            BatchBuffer::allocate(kPageAlign, config.lock_memory));
  BatchBuffer& buffer = *grown;
  std::vector<BatchMember> members;
  std::uint64_t used = 0;
  std::uint64_t bytes = 0;
  std::uint32_t in_batch = 0;
  // One untimed pass over a batch's worth grows (and touches) the batch buffer first.
  for (std::size_t i = 0; i < in.cache.size() && i < config.sampler.batch_size; ++i) {
    FEEDLINE_TRY(detail::ensure_room(buffer, used, in.cache[i]));
    (void)detail::copy_into_batch(dataset, in.cache[i], buffer, used, members);
  }
  used = 0;
  members.clear();
  const double cpu0 = process_cpu_times().total();
  const std::uint64_t t0 = now_ns();
  for (const InFlightSample& s : in.cache) {
    if (in.stop) return fail(Errc::kCancelled, "interrupted while measuring collate alone");
    FEEDLINE_TRY(detail::ensure_room(buffer, used, s));
    (void)detail::copy_into_batch(dataset, s, buffer, used, members);
    bytes += s.decoded_bytes;
    if (++in_batch == config.sampler.batch_size) {
      detail::spin_for(config.diagnostics.collate_cost, in.stop);
      in_batch = 0;
      used = 0;
      members.clear();
    }
  }
  return finish(StageId::kCollate, in.cache.size(), bytes, t0, cpu0);
}

// The slowest stage, and the CPU ceiling: cores / the CPU per sample of the stages added up.
void add_up(StagesAlone& out) {
  double cpu_per_sample = 0;
  for (const auto& s : out.stages) {
    if (!out.slowest || s.samples_per_second < out.slowest_samples_per_second) {
      out.slowest = s.stage;
      out.slowest_samples_per_second = s.samples_per_second;
    }
    if (s.samples > 0) cpu_per_sample += s.cpu_seconds / static_cast<double>(s.samples);
  }
  out.cores = detail::usable_cores();
  if (cpu_per_sample > 0 && out.cores > 0) {
    out.cpu_per_sample_us = cpu_per_sample * 1e6;
    out.cpu_ceiling_samples_per_second = out.cores / cpu_per_sample;
  }
}

}  // namespace

Result<StageAlone> measure_storage_alone(storage::Backend& backend, const Dataset& dataset,
                                         const LoaderConfig& config, std::uint64_t max_samples,
                                         std::chrono::nanoseconds max_time) {
  if (detail::has_unknown_sizes(dataset)) return fail(unknown_sizes_error(dataset));
  FEEDLINE_ASSIGN_OR_RETURN(std::vector<SampleSlot> order,
                            first_samples(dataset, config, max_samples));
  std::atomic<bool> stop{config.stop.stop_requested()};
  std::stop_callback on_stop(config.stop, [&stop] { stop = true; });
  std::uint64_t longest = 1;
  for (const auto& slot : order) longest = std::max(longest, dataset.samples[slot.sample].length);
  const std::uint64_t deadline =
      max_time.count() > 0 ? now_ns() + static_cast<std::uint64_t>(max_time.count()) : 0;
  return read_pass(backend, dataset, config, order, longest, nullptr, stop, deadline);
}

Result<StagesAlone> measure_stages_alone(storage::Backend& backend, const Dataset& dataset,
                                         const LoaderConfig& config, std::uint64_t max_samples) {
  if (detail::has_unknown_sizes(dataset)) return fail(unknown_sizes_error(dataset));
  FEEDLINE_ASSIGN_OR_RETURN(std::vector<SampleSlot> order,
                            first_samples(dataset, config, max_samples));
  // Ctrl-C: every pass below checks this (a stop_token's callback sets it once).
  std::atomic<bool> stop{config.stop.stop_requested()};
  std::stop_callback on_stop(config.stop, [&stop] { stop = true; });

  // Storage alone, timed: every sample read into a small set of reused, pre-touched buffers (a
  // fresh buffer per read would time page faults, not storage).
  StagesAlone out;
  std::uint64_t longest = 1;
  for (const auto& slot : order) longest = std::max(longest, dataset.samples[slot.sample].length);
  FEEDLINE_ASSIGN_OR_RETURN(StageAlone storage_alone,
                            read_pass(backend, dataset, config, order, longest, nullptr, stop));
  out.stages.push_back(storage_alone);
  FEEDLINE_ASSIGN_OR_RETURN(std::vector<InFlightSample> cache,
                            cache_samples(backend, dataset, config, order, longest, stop));

  // Declared sizes are untrusted here as in the run: a frame may not declare more than the budget.
  const std::uint64_t decode_limit =
      config.max_sample_bytes ? std::min(config.max_sample_bytes, config.memory_budget / 2)
                              : config.memory_budget / 2;
  DataPathPlan plan;
  if (auto p = plan_data_path(dataset, config, backend)) plan = *p;
  const AloneInputs in{dataset, config, plan, cache, decode_limit, stop};
  FEEDLINE_ASSIGN_OR_RETURN(StageAlone decode, decode_alone(in));
  out.stages.push_back(decode);
  // Decoded outputs for collate alone (untimed).
  {
    detail::ThreadDecoders decoders(plan.decode, config.sampler.seed);
    for (InFlightSample& s : cache)
      detail::decode_sample(dataset, s, decoders, nullptr, decode_limit);
  }
  const bool in_slots = reads_into_slot(plan.path) || plan.path == DataPath::kDecodeInPlace;
  FEEDLINE_ASSIGN_OR_RETURN(StageAlone collate,
                            in_slots ? collate_in_slots_alone(in) : collate_copy_alone(in));
  out.stages.push_back(collate);
  add_up(out);
  return out;
}

}  // namespace feedline::loader
