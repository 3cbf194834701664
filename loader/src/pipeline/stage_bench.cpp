#include "feedline/loader/stage_bench.hpp"

#include <fmt/format.h>

#include <atomic>
#include <thread>

#include "stage_work.hpp"

namespace feedline::loader {

using detail::InFlightSample;

namespace {

class Collect final : public storage::ReadCompletion {
 public:
  std::vector<storage::ReadOp*> done;
  void on_read_complete(storage::ReadOp& op) noexcept override { done.push_back(&op); }
};

StageAlone finish(std::string name, std::uint64_t samples, std::uint64_t bytes, std::uint64_t t0) {
  StageAlone s;
  s.stage = std::move(name);
  s.samples = samples;
  s.bytes = bytes;
  s.seconds = static_cast<double>(now_ns() - t0) / 1e9;
  s.samples_per_second = s.seconds > 0 ? static_cast<double>(samples) / s.seconds : 0;
  return s;
}

}  // namespace

Result<StagesAlone> measure_stages_alone(storage::Backend& backend, const Dataset& dataset,
                                         const LoaderConfig& config, std::uint64_t max_samples) {
  SamplerConfig sc = config.sampler;
  sc.num_samples = dataset.samples.size();
  sc.epochs = 1;
  FEEDLINE_ASSIGN_OR_RETURN(Sampler sampler, Sampler::create(sc));
  std::vector<SampleSlot> order;
  while (auto slot = sampler.next()) {
    if (order.size() >= max_samples) break;
    order.push_back(*slot);
  }

  // Storage alone. The first samples that fit in half the budget are kept as the cache that
  // decode alone runs on.
  const std::uint64_t cache_limit = config.memory_budget / 2;
  std::uint64_t cached_bytes = 0;
  std::vector<InFlightSample> cache;
  StagesAlone out;
  {
    storage::QueueOptions qo;
    qo.depth = config.io_depth;
    qo.single_thread = true;
    FEEDLINE_ASSIGN_OR_RETURN(auto queue, backend.make_queue(qo));
    detail::HandleCache handles(backend, dataset);
    struct Slot {
      storage::ReadOp op;
      InFlightSample sample;
      std::unique_ptr<storage::ObjectHandle> hold;
    };
    std::vector<Slot> slots(config.io_depth);
    std::vector<Slot*> free_slots;
    for (auto& s : slots) free_slots.push_back(&s);
    Collect done;
    std::size_t next = 0;
    std::uint64_t bytes = 0;
    const std::uint64_t t0 = now_ns();
    while (next < order.size() || queue->in_flight() > 0) {
      std::vector<storage::ReadOp*> batch;
      while (next < order.size() && !free_slots.empty()) {
        const Sample& smp = dataset.samples[order[next].sample];
        Slot* slot = free_slots.back();
        free_slots.pop_back();
        FEEDLINE_ASSIGN_OR_RETURN(const storage::ObjectHandle* h, handles.get(smp.object, slot->hold));
        FEEDLINE_ASSIGN_OR_RETURN(slot->sample.raw,
                                  AlignedBuffer::allocate(align_up(std::max<std::uint64_t>(smp.length, 1), kPageAlign)));
        slot->sample.slot = order[next];
        slot->op = storage::ReadOp{};
        slot->op.object = h;
        slot->op.offset = smp.offset;
        slot->op.length = smp.length;
        slot->op.dst = slot->sample.raw.span();
        slot->op.done = &done;
        slot->op.user = slot;
        batch.push_back(&slot->op);
        ++next;
      }
      queue->submit(batch);
      done.done.clear();
      queue->poll(1, std::chrono::milliseconds(100));
      for (storage::ReadOp* op : done.done) {
        auto* slot = static_cast<Slot*>(op->user);
        if (!op->result) return fail(op->result.error());
        bytes += *op->result;
        slot->sample.raw_len = *op->result;
        if (cached_bytes + slot->sample.raw.size() <= cache_limit) {
          cached_bytes += slot->sample.raw.size();
          cache.push_back(std::move(slot->sample));
        }
        slot->sample = InFlightSample();
        slot->hold.reset();
        free_slots.push_back(slot);
      }
    }
    out.stages.push_back(finish("storage", order.size(), bytes, t0));
  }
  if (cache.empty()) return fail(Errc::kResourceExhausted, "no sample fits half the memory budget for decode alone");

  // Decode alone: the pipeline's decode threads on cached samples.
  {
    std::atomic<std::size_t> next{0};
    std::atomic<std::uint64_t> bytes{0};
    std::atomic<bool> failed{false};
    std::optional<Error> error;
    std::mutex error_mu;
    const std::uint64_t t0 = now_ns();
    {
      std::vector<std::jthread> threads;
      for (unsigned t = 0; t < config.decode_threads; ++t) {
        threads.emplace_back([&] {
          Decompressor zstd;
          for (std::size_t i = next++; i < cache.size() && !failed; i = next++) {
            detail::decode_sample(dataset, cache[i], zstd);
            if (cache[i].error) {
              std::lock_guard lock(error_mu);
              error = cache[i].error;
              failed = true;
              return;
            }
            detail::spin_for(config.decode_cost);
            bytes += cache[i].decoded_bytes;
          }
        });
      }
    }
    if (error) return fail(*error);
    out.stages.push_back(finish("decode", cache.size(), bytes.load(), t0));
  }

  // Collate alone: the batch copy, one thread, one reused buffer.
  {
    BatchBuffer buffer;
    std::vector<BatchMember> members;
    std::uint64_t used = 0;
    std::uint64_t bytes = 0;
    std::uint32_t in_batch = 0;
    const std::uint64_t t0 = now_ns();
    for (const InFlightSample& s : cache) {
      FEEDLINE_TRY(detail::ensure_room(buffer, used, s, config.lock_memory));
      (void)detail::copy_into_batch(dataset, s, buffer, used, members);
      bytes += s.decoded_bytes;
      if (++in_batch == config.sampler.batch_size) {
        detail::spin_for(config.collate_cost);
        in_batch = 0;
        used = 0;
        members.clear();
      }
    }
    out.stages.push_back(finish("collate", cache.size(), bytes, t0));
  }
  for (const auto& s : out.stages) {
    if (out.slowest.empty() || s.samples_per_second < out.slowest_samples_per_second) {
      out.slowest = s.stage;
      out.slowest_samples_per_second = s.samples_per_second;
    }
  }
  return out;
}

}  // namespace feedline::loader
