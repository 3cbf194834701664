// The decode stage: decode threads take finished reads in completion order, cut the members out
// of each sample's bytes, run each through its decoders (zstd, JPEG: decoder.hpp; into a sample
// buffer, or straight into the batch slot on the decode-in-place path), hash them, and hand them
// to collate. They never wait
// for memory (the reservation was made at admission; a zstd frame larger than estimated is
// force()d and reported, and one declaring more than a sample may take is a data error).
#include <fmt/format.h>

#include <utility>

#include "feedline/core/clock.hpp"
#include "stage_work.hpp"
#include "stages.hpp"

namespace feedline::loader::detail {

void DecodeStage::transform(InFlightSample& item, std::vector<TransformMember>& members) {
  const Dataset& d = run_.dataset;
  const Sample& smp = d.samples[item.slot.sample];
  members.clear();  // the thread's own, reused: no allocation per sample
  for (std::size_t i = 0; i < item.members.size(); ++i) {
    members.push_back({d.members[smp.first_member + i].name,
                       ConstBytes(item.members[i].data, item.members[i].size)});
  }
  TransformInput in{smp.key, item.slot.sample, item.slot.epoch, members};
  TransformCall call;
  // Wall and CPU time of the call: what it spent off the CPU is, for a Python function, mostly
  // the GIL (report.hpp: TransformReport). Two clock reads per sample, against a Python call.
  const std::uint64_t cpu0 = thread_cpu_ns(), t0 = now_ns();
  auto r = run_.config.transform->apply(in, call);
  transform_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
  transform_cpu_ns.fetch_add(thread_cpu_ns() - cpu0, std::memory_order_relaxed);
  transform_lock_wait_ns.fetch_add(static_cast<std::uint64_t>(call.lock_wait.count()),
                                   std::memory_order_relaxed);
  // The room reserved for the result at admission is the result's own account's now.
  const std::uint64_t room = std::exchange(item.result_room, 0);
  item.reserved -= room;
  if (room) run_.budget.release(room);
  if (!r) {
    transform_errors.fetch_add(1, std::memory_order_relaxed);
    Error e = std::move(r).error();
    item.error = Error(e.code(),
                       fmt::format("the transform of sample '{}' failed: {}", smp.key, e.message()))
                     .with_object(d.objects[smp.object].key)
                     .with_offset(smp.offset);
    return;
  }
  transformed.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t bytes = *r ? call.result_bytes : 0;
  run_.results->hold(bytes);
  if (bytes == 0) {
    item.result = std::move(*r);
    return;
  }
  // Counted until the last Batch holding it lets it go.
  const void* p = r->get();
  item.result = TransformResult(
      p, [held = std::move(*r), bytes, results = run_.results](const void*) mutable {
        results->release(bytes);
        held.reset();
      });
}

void DecodeStage::run(Worker& w) {
  const LoaderConfig& config = run_.config;
  ThreadDecoders decoders(run_.plan.decode, config.sampler.seed);
  // Samples are taken and handed on in runs (at most kRun, and collate gets what is done once
  // kFlushBytes are decoded): one queue hand-off per run instead of one per sample.
  constexpr std::size_t kRun = 8;
  constexpr std::uint64_t kFlushBytes = 4ull << 20;
  std::vector<InFlightSample> in;
  std::vector<InFlightSample> out;
  std::vector<TransformMember> members;  // the transform's view of a sample
  in.reserve(kRun);
  out.reserve(kRun);
  bool running = true;
  while (running && w.pop_some(run_.reads, in, kRun)) {
    std::uint64_t pending_bytes = 0;
    for (InFlightSample& item : in) {
      if (run_.stopping()) {  // stop(): what is left is not decoded (nor transformed)
        running = false;
        break;
      }
      if (!item.error && item.on_device()) {
        describe_on_device(run_.dataset, item);  // nothing to decode, nothing the host can hash
      } else if (!item.error) {
        const std::uint64_t t0 = w.lane() ? now_ns() : 0;
        const std::uint64_t extra =
            decode_sample(run_.dataset, item, decoders, &run_.buffers, run_.sizing.decode_limit);
        if (extra) {  // a zstd frame larger than the reservation's estimate
          run_.budget.force(extra);
          item.reserved += extra;
        }
        spin_for(config.diagnostics.decode_cost, run_.stop_flag());
        if (config.transform && !item.error) {
          transform(item, members);
          if (run_.stopping()) {  // stopped during the call: its error is no failure
            running = false;
            break;
          }
        }
        if (TraceLane* lane = w.lane())
          lane->span("decode", "decode", t0, now_ns(), static_cast<double>(item.decoded_bytes),
                     true);
      }
      if (item.error) {  // on to collate, which meets it in delivery order (on_error = kFail)
        item.raw = AlignedBuffer();
        item.decoded = AlignedBuffer();
        item.members.clear();
      } else {
        w.count(1, item.decoded_bytes);
        pending_bytes += item.decoded_bytes;
      }
      out.push_back(std::move(item));
      if (pending_bytes >= kFlushBytes) {
        if (!w.push_all(run_.decoded, out, collate_awaits(run_))) running = false;
        pending_bytes = 0;
        if (!running) break;
      }
    }
    in.clear();
    if (running && !out.empty() && !w.push_all(run_.decoded, out, collate_awaits(run_)))
      running = false;
    out.clear();
  }
  // The last decoder out closes the queue behind it.
  if (++done_ == config.decode_threads) run_.decoded.close();
}

}  // namespace feedline::loader::detail
