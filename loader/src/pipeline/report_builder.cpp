// The report of a finished run, assembled from what each stage counted (pipeline.hpp:
// RunParts). The verdict is added by the caller (verdict.cpp), from this report.
#include <fmt/format.h>

#include "device_sink.hpp"
#include "feedline/loader/report_json.hpp"
#include "pipeline.hpp"

namespace feedline::loader::detail {

void add_transform_report(PipelineReport& r, const RunState& run, const DecodeStage& d) {
  if (!run.config.transform) return;
  TransformReport& t = r.transform;
  t.enabled = true;
  t.samples = d.transformed.load();
  t.errors = d.transform_errors.load();
  t.seconds = static_cast<double>(d.transform_ns.load()) / 1e9;
  t.cpu_seconds = std::min(t.seconds, static_cast<double>(d.transform_cpu_ns.load()) / 1e9);
  t.lock_wait_seconds = static_cast<double>(d.transform_lock_wait_ns.load()) / 1e9;
  t.off_cpu_seconds = std::max(t.seconds - t.cpu_seconds, t.lock_wait_seconds);
  if (t.seconds > 0) t.off_cpu_share = std::min(1.0, t.off_cpu_seconds / t.seconds);
  const StageReport* decode = r.stage(StageId::kDecode);
  if (decode && decode->busy_seconds > 0)
    t.decode_share = std::min(1.0, t.seconds / decode->busy_seconds);
}

namespace {

// The data path: one per run (the plan is made once), with every copy the pipeline made.
DataPathReport data_path_report(const RunParts& p) {
  const RunState& run = p.run;
  DataPathReport d;
  const DataPath path = run.plan.path;
  d.path = path;
  d.bytes = p.collate.direct_delivered + p.collate.bounce_delivered;
  const std::uint64_t bounced = p.storage.io_stats.bounced_bytes;
  const std::uint64_t h2d = run.sink ? run.sink->bytes : 0;
  // cuFile's compatibility mode reads into libcufile's host buffers and copies from there to
  // the GPU: one copy of every byte, made where feedline cannot count it.
  const std::uint64_t cufile_copied = path == DataPath::kCufileCompat ? d.bytes : 0;
  const std::uint64_t collate_copied = p.collate.copied_bytes;
  d.copied_bytes = collate_copied + bounced + h2d + cufile_copied;
  d.copy_amplification =
      d.bytes ? static_cast<double>(d.copied_bytes) / static_cast<double>(d.bytes) : 0;
  std::vector<std::string> parts;
  if (reads_into_slot(path)) {
    parts.push_back(reads_into_device(path)
                        ? "cuFile reads landed in their batch slot in GPU memory"
                        : "reads landed in their batch slot");
  }
  const bool in_place = path == DataPath::kDecodeInPlace;
  if (in_place) parts.push_back("decode wrote each member straight into its batch slot");
  if (cufile_copied)
    parts.push_back(
        fmt::format("libcufile copied {} bytes through host bounce buffers", cufile_copied));
  if (collate_copied)
    parts.push_back(
        fmt::format("{} copied {} bytes", in_place ? "decode" : "collate", collate_copied));
  if (bounced) parts.push_back(fmt::format("O_DIRECT bounce buffers copied {} bytes", bounced));
  if (h2d) parts.push_back(fmt::format("H2D copied {} bytes", h2d));
  d.detail = fmt::format("{}", fmt::join(parts, "; "));
  d.reason = run.plan.reason;
  for (const DecodePlan::Chain& c : run.plan.decode.chains()) {
    if (c.members) d.decoders.push_back({c.name, c.steps.back()->describe(), c.members});
  }
  d.notes = run.path_notes();
  return d;
}

// The device sink's figures (a run with a device).
DeviceReport device_report(const RunParts& p) {
  const RunState& run = p.run;
  const DeviceSink& sink = *run.sink;
  DeviceReport dv;
  dv.enabled = true;
  dv.device = sink.device();
  dv.name = sink.cuda().devices()[static_cast<std::size_t>(dv.device)].name;
  dv.streams = sink.streams();
  const std::string pin_failure = sink.pin_failure();
  dv.pinned = !reads_into_device(run.plan.path) && pin_failure.empty();
  dv.host_memory =
      reads_into_device(run.plan.path) ? "not used: cuFile reads samples into GPU memory"
      : pin_failure.empty()
          ? fmt::format("pinned (cudaHostRegister, {} buffers)", sink.pinned_buffers.load())
          : "pageable: " + pin_failure;
  dv.copies = sink.copies;
  dv.h2d_bytes = sink.bytes;
  dv.h2d_seconds = sink.gpu_seconds;
  dv.h2d_bytes_per_second =
      sink.gpu_seconds > 0 ? static_cast<double>(sink.bytes) / sink.gpu_seconds : 0;
  dv.peak_bytes_per_second = sink.peak_bytes_per_second;
  dv.copy_wait_seconds = sink.wait_seconds;
  dv.consumer_wait_on_copy_seconds = p.consumer.copy_blocking_seconds();
  return dv;
}

}  // namespace

PipelineReport build_report(const RunParts& p) {
  const RunState& run = p.run;
  PipelineReport r;
  r.consumer = p.consumer.report();
  r.stages = p.stages;
  for (StageReport& s : r.stages) {
    if (s.stage == StageId::kDecode) s.items_inline = p.storage.decoded_inline;
  }
  r.queues = p.queues;

  IoReport& io = r.io;
  io.engine = p.storage.engine;
  io.storage_threads = p.storage.threads();
  io.poll_wait_seconds = static_cast<double>(p.storage.poll_wait_ns) / 1e9;
  io.stats = p.storage.io_stats;
  io.storage_bytes = p.storage.storage_bytes;
  io.io_depth = run.config.io_depth;
  const double wall = r.consumer.wall_seconds;
  if (wall > 0) {
    io.window_limited_fraction = static_cast<double>(p.storage.window_limited_ns) / (wall * 1e9);
    io.budget_limited_fraction = static_cast<double>(p.storage.budget_limited_ns) / (wall * 1e9);
    io.window_samples = run.sizing.window;
    io.batch_buffers = run.pool->buffers().size();
  }
  io.samples_per_object = run.dataset.objects.empty()
                              ? 0.0
                              : static_cast<double>(run.dataset.samples.size()) /
                                    static_cast<double>(run.dataset.objects.size());

  r.memory.budget = run.config.memory_budget;
  r.memory.peak = run.budget.peak() + run.pool_grown_bytes.load();
  r.memory.overshoot = run.budget.overshoot();
  r.memory.peak_rss = peak_rss_bytes();
  r.memory.fitted = run.sizing.fitted;

  r.delivered.digest = p.consumer.digest();
  r.delivered.digest_computed = !reads_into_device(run.plan.path);
  r.delivered.skipped = run.skipped.load();
  r.delivered.skipped_examples = run.skipped_examples();
  add_transform_report(r, run, p.decode);
  r.error = run.error();
  r.interrupted = run.stopped_by_user() && !r.error;

  r.data_path = data_path_report(p);
  if (run.sink) r.device = device_report(p);
  return r;
}

}  // namespace feedline::loader::detail
