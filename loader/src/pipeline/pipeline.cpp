// Pipeline (pipeline.hpp): start() opens the run (plan, device sink, sizing, batch buffers), makes
// the stages and their runners, and starts them; report() and live() read what they counted.
#include "pipeline.hpp"

#include <fmt/format.h>

#include "device_sink.hpp"
#include "feedline/loader/report_json.hpp"
#include "feedline/transports/cuda.hpp"
#include "feedline/transports/cufile.hpp"
#include "stage_work.hpp"

namespace feedline::loader {
namespace {

// How many storage threads a run gets (LoaderConfig::storage_threads). Set: that many, at most
// one per read in flight. Auto: one where a read costs the host little CPU (O_DIRECT reads of
// shards and cuFile DMA; network reads of shards, whose samples coalesce into large GETs on one
// queue); where it is the host's own work, one per usable core, at most 4: page-cache copies of
// local files and mem:// (20,000 files of 64 KiB on 2 cores, open + read + close + XXH3 per file,
// went 42k -> 78k files/s with a second thread and ring), O_DIRECT reads of files of one sample
// each, whose opens and closes are the host's (100,000 files of 4 KiB, caches dropped, on a disk
// that served 137k reads/s to fio: one thread 144-150k files/s, busy 97%, two 256-270k), and HTTP
// objects of one sample each, whose requests cost CPU each (4,000 x 64 KiB from nginx at depth 16
// on 2 cores: 11-14k -> 17-20k objects/s with two threads of depth 8, where one thread at depth 32
// stayed at 11-14k).
unsigned storage_threads_auto(const LoaderConfig& config, const storage::Backend& backend,
                              const Dataset& dataset, DataPath path) {
  if (config.storage_threads > 0) return std::min(config.storage_threads, config.io_depth);
  const storage::BackendCaps caps = backend.caps();
  const bool per_sample_objects = detail::one_sample_per_object(dataset);
  const bool host_work = caps.networked ? caps.cpu_per_request && per_sample_objects
                                        : caps.alignment <= 1 || per_sample_objects;
  if (!host_work || reads_into_device(path)) return 1;
  const unsigned cores = config.cores > 0 ? config.cores : detail::usable_cores();
  return std::clamp(cores, 1u, std::min(4u, config.io_depth));
}

}  // namespace

unsigned detail::storage_threads_for(const LoaderConfig& config, const storage::Backend& backend,
                                     const Dataset& dataset, DataPath path) {
  return storage_threads_auto(config, backend, dataset, path);
}

Pipeline::Pipeline(storage::Backend& backend, const Dataset& dataset, LoaderConfig config,
                   Sampler sampler)
    : backend_(backend),
      dataset_(dataset),
      config_(std::move(config)),
      sampler_(std::move(sampler)) {}

Pipeline::~Pipeline() {
  on_stop_.reset();
  if (run_) run_->stop();
  finish_run(now_ns());
}

Result<void> Pipeline::start() {
  FEEDLINE_TRY(open_run());
  make_stages();
  start_stages();
  return {};
}

// The dataset's tables (and the run's per-sample arrays: footprints, the sampler's order) are
// held for the whole run: counted against the budget, the buffers get the rest. Loaders sharing
// one dataset on a host (accelerators) each count their share of it.
Result<std::uint64_t> Pipeline::held_for_tables() const {
  const std::uint64_t held =
      dataset_table_bytes(dataset_) / std::max(1u, config_.loaders_sharing_backend) +
      16 * dataset_.samples.size();
  if (held < config_.memory_budget) return held;
  return fail(
      Error(Errc::kInvalidArgument,
            fmt::format("the dataset's tables take {} bytes of memory ({} samples, {} members: "
                        "their names and offsets), more than the memory budget of {} bytes, "
                        "which must also hold the reads in flight",
                        held, dataset_.samples.size(), dataset_.members.size(),
                        config_.memory_budget))
          .with_hint(fmt::format("raise {{memory_budget}} above {} bytes, or read a part of "
                                 "the dataset (a brace list, or a subdirectory)",
                                 held + held / 2)));
}

// The plan, the device sink, the pool's sizing and buffers, and the run's shared state.
Result<void> Pipeline::open_run() {
  // CUDA and cuFile are loaded once, for the plan and the run.
  LoaderConfig planned = config_;
  if (planned.device.device >= 0) {
    if (!planned.device.cuda) planned.device.cuda = transports::cuda::CudaRuntime::load();
    if (!planned.device.cufile) planned.device.cufile = transports::cufile::CufileRuntime::load();
  }
  FEEDLINE_ASSIGN_OR_RETURN(DataPathPlan plan, plan_data_path(dataset_, planned, backend_));
  if (config_.transform && reads_into_device(plan.path)) {
    return fail(
        Error(Errc::kInvalidArgument,
              fmt::format("a transform needs each sample in host memory, and {}", plan.reason))
            .with_hint("turn GPUDirect reads off (gpu_direct off) to use a transform"));
  }
  config_.storage_threads = detail::storage_threads_for(config_, backend_, dataset_, plan.path);
  std::shared_ptr<detail::DeviceSink> sink;
  if (planned.device.device >= 0) {
    FEEDLINE_ASSIGN_OR_RETURN(
        auto opened,
        detail::DeviceSink::open(planned.device.cuda, planned.device.device, planned.device.streams,
                                 planned.device.calibrate && !reads_into_device(plan.path)));
    sink = std::move(opened);
  }
  FEEDLINE_ASSIGN_OR_RETURN(const std::uint64_t held, held_for_tables());
  LoaderConfig sized = config_;
  sized.memory_budget -= held;
  FEEDLINE_ASSIGN_OR_RETURN(detail::PoolSizing sizing,
                            detail::size_pool(dataset_, sized, plan, backend_.caps().networked,
                                              sampler_.samples_per_epoch()));
  const std::size_t buffers = sizing.buffers;
  const std::uint64_t batch_cap = sizing.batch_cap, device_cap = sizing.device_cap;
  run_ = std::make_unique<detail::RunState>(backend_, dataset_, config_, plan, std::move(sizing),
                                            sink, planned.device.cufile);
  detail::RunState& run = *run_;
  // The budget object was built with the whole budget; take the pool's share and the tables'
  // out of it (so the report's peak counts them).
  run.budget.force(run.sizing.pool_bytes + held);
  for (std::size_t i = 0; i < buffers; ++i) {
    FEEDLINE_ASSIGN_OR_RETURN(auto b,
                              detail::BatchBuffer::allocate(batch_cap, config_.lock_memory));
    if (reads_into_device(plan.path)) {
      FEEDLINE_TRY(sink->allocate(*b, device_cap));
    } else if (sink) {
      sink->pin(*b);
    }
    run.pool->add(std::move(b));
  }
  return {};
}

// The stages and their runners (threads, clocks, trace lanes).
void Pipeline::make_stages() {
  detail::RunState& run = *run_;
  const bool accounting = config_.diagnostics.accounting;
  storage_ = std::make_unique<detail::StorageStage>(run, sampler_, config_.storage_threads);
  decode_ = std::make_unique<detail::DecodeStage>(run);
  collate_ = std::make_unique<detail::CollateStage>(run);
  storage_runner_ =
      std::make_unique<detail::StageRunner>(StageId::kStorage, config_.storage_threads, accounting);
  decode_runner_ =
      std::make_unique<detail::StageRunner>(StageId::kDecode, config_.decode_threads, accounting);
  collate_runner_ = std::make_unique<detail::StageRunner>(StageId::kCollate, 1, accounting);
  consumer_runner_ = std::make_unique<detail::StageRunner>(StageId::kConsumer, 0, accounting);
  consumer_ = std::make_unique<detail::Consumer>(run, consumer_runner_->worker(),
                                                 sampler_.batches_per_epoch());
  if (run.copies) {
    device_ = std::make_unique<detail::DeviceStage>(run);
    device_runner_ = std::make_unique<detail::StageRunner>(StageId::kDevice, 1, accounting);
  }
  TraceLog* log = config_.trace.get();
  if (!log) return;
  // One viewer process per loader where a host's accelerators share the trace.
  const std::string process = config_.loaders_sharing_backend > 1
                                  ? fmt::format("accelerator {}", config_.sampler.rank)
                                  : std::string("feedline");
  for (auto* r :
       {storage_runner_.get(), decode_runner_.get(), collate_runner_.get(), device_runner_.get()}) {
    if (r) r->trace_to(log, process);
  }
  // The consumer's track: its waits for batches and its compute (its busy / starved states
  // would say the same again, less clearly).
  consumer_runner_->worker().trace_to(&log->lane("consumer", process), false);
  TraceLane& lane = *consumer_runner_->worker().lane();
  lane.counter("memory budget", now_ns(), static_cast<double>(config_.memory_budget), true);
}

void Pipeline::start_stages() {
  detail::RunState& run = *run_;
  on_stop_.emplace(config_.stop, [this] { stop_by_user(); });
  const std::uint64_t t0 = now_ns();
  run.reads.start();
  run.decoded.start();
  run.pool->free().start();
  run.batches.start();
  run.device_batches.start();
  consumer_->start(t0);
  storage_runner_->start([this](detail::Worker& w) { storage_->run(w); });
  decode_runner_->start(
      [this](detail::Worker& w) { decode_->run(w); },
      [this](detail::Worker&) {
        detail::make_this_thread_nicer(config_.decode_nice);  // refused: same priority
      });
  collate_runner_->start([this](detail::Worker& w) { collate_->run(w); });
  if (device_runner_) device_runner_->start([this](detail::Worker& w) { device_->run(w); });
}

// Ends the run at `end`: the consumer's clock and the queues' occupancy are measured up to that
// moment, not up to whenever the report is taken.
void Pipeline::finish_run(std::uint64_t end) {
  if (!run_ || joined_) return;
  run_->stop();
  if (!consumer_) return;  // start() failed before the stages were made: nothing ran
  consumer_->finish(end);
  for (auto* r :
       {storage_runner_.get(), decode_runner_.get(), collate_runner_.get(), device_runner_.get()}) {
    if (r) r->join();
  }
  joined_ = true;
  const std::uint64_t end_ns = consumer_->end_ns();
  const double wall = static_cast<double>(end_ns - consumer_->start_ns()) / 1e9;
  auto queue = [&](QueueId id, auto& q) {
    QueueReport r{q.report(wall, end_ns)};
    r.queue = id;
    return r;
  };

  end_queues_ = {queue(QueueId::kReads, run_->reads), queue(QueueId::kDecoded, run_->decoded),
                 queue(QueueId::kBatches, run_->batches),
                 queue(QueueId::kBatchPool, run_->pool->free())};
  if (run_->copies) end_queues_.push_back(queue(QueueId::kDevice, run_->device_batches));
}

PipelineReport Pipeline::report() {
  finish_run(now_ns());
  const double wall = static_cast<double>(consumer_->end_ns() - consumer_->start_ns()) / 1e9;
  detail::RunParts parts{*run_, *consumer_, *storage_, *decode_, *collate_, {}, end_queues_};
  for (auto* r : {storage_runner_.get(), decode_runner_.get(), collate_runner_.get(),
                  device_runner_.get(), consumer_runner_.get()}) {
    if (r) parts.stages.push_back(r->report(wall));
  }
  PipelineReport r = detail::build_report(parts);
  r.consumer.left_out_per_epoch = sampler_.left_out_per_epoch();
  r.verdict = diagnose(r, config_);
  return r;
}

PipelineReport Pipeline::snapshot() {
  // Stopped but not over (next() has not returned the end): still a snapshot, which waits for
  // nothing, where report() would wait for the stages' threads (a user's transform under way).
  if (joined_ || !consumer_ || consumer_->finished()) return report();
  // What the stages' threads share safely while they run: their clocks (atomics), the queues'
  // and the budget's figures (under their locks), the run's counters. What a stage sums only
  // when its threads end (the IO queues' stats, collate's copies) waits for the final report.
  const std::uint64_t now = now_ns();
  const double wall = static_cast<double>(now - consumer_->start_ns()) / 1e9;
  detail::RunState& run = *run_;
  PipelineReport r;
  r.snapshot = true;
  r.consumer = consumer_->report_until(now);
  r.consumer.left_out_per_epoch = sampler_.left_out_per_epoch();
  for (auto* s : {storage_runner_.get(), decode_runner_.get(), collate_runner_.get(),
                  device_runner_.get(), consumer_runner_.get()}) {
    if (s) r.stages.push_back(s->snapshot(wall, now));
  }
  auto queue = [&](QueueId id, auto& q) {
    QueueReport qr{q.report(wall, now)};
    qr.queue = id;
    r.queues.push_back(qr);
  };
  queue(QueueId::kReads, run.reads);
  queue(QueueId::kDecoded, run.decoded);
  queue(QueueId::kBatches, run.batches);
  queue(QueueId::kBatchPool, run.pool->free());
  if (run.copies) queue(QueueId::kDevice, run.device_batches);
  r.io.io_depth = config_.io_depth;
  r.io.storage_threads = config_.storage_threads;
  r.memory.budget = config_.memory_budget;
  r.memory.peak = run.budget.peak() + run.pool_grown_bytes.load();
  r.memory.overshoot = run.budget.overshoot();
  r.memory.peak_rss = peak_rss_bytes();
  r.memory.fitted = run.sizing.fitted;
  r.data_path.path = run.plan.path;
  r.data_path.reason = run.plan.reason;
  r.delivered.digest = consumer_->digest();
  r.delivered.digest_computed = !reads_into_device(run.plan.path);
  r.delivered.skipped = run.skipped.load();
  r.delivered.skipped_examples = run.skipped_examples();
  detail::add_transform_report(r, run, *decode_);
  r.error = run.error();
  r.verdict.evidence = "a report taken mid-run: the verdict comes with the report at the end";
  return r;
}

LiveFigures Pipeline::live() const {
  LiveFigures f;
  if (!run_ || !consumer_) return f;  // start() failed: nothing ran
  const detail::RunState& run = *run_;
  consumer_->read_live(f);
  const std::uint64_t now = now_ns();
  for (const auto* r : {storage_runner_.get(), decode_runner_.get(), collate_runner_.get(),
                        device_runner_.get(), consumer_runner_.get()}) {
    if (!r) continue;
    LiveFigures::Stage st;
    st.stage = r->id();
    r->live(now, st);
    if (st.stage == StageId::kConsumer) {
      f.samples = st.items;
      f.bytes = r->bytes();
    }
    f.stages.push_back(st);
  }
  auto queue = [&](QueueId id, const auto& q) {
    f.queues.push_back({id, q.depth_now(), q.capacity(), q.depth_integral_now() / 1e9});
  };
  queue(QueueId::kReads, run.reads);
  queue(QueueId::kDecoded, run.decoded);
  queue(QueueId::kBatches, run.batches);
  queue(QueueId::kBatchPool, run.pool->free());
  if (run.copies) queue(QueueId::kDevice, run.device_batches);
  f.reads = run.live.reads.load(std::memory_order_relaxed);
  f.read_errors = run.live.read_errors.load(std::memory_order_relaxed);
  f.storage_bytes = run.live.storage_bytes.load(std::memory_order_relaxed);
  f.read_latency = run.live.read_latency.read();
  f.storage_counters = run.live.counters.read();
  f.memory_in_use = run.budget.used() + run.pool_grown_bytes.load(std::memory_order_relaxed);
  f.memory_budget = config_.memory_budget;
  f.skipped = run.skipped.load(std::memory_order_relaxed);
  return f;
}

ResumePoint Pipeline::resume_point() const {
  // The run's own sampler: what it says of a count of batches depends only on its settings and
  // where it started, which its storage-thread user never changes.
  return sampler_.resume_point_after(consumer_ ? consumer_->handed() : 0);
}

// ---- Loader ------------------------------------------------------------------------------------

Loader::Loader(std::unique_ptr<Pipeline> p) : pipeline_(std::move(p)) {}
Loader::~Loader() {
  for (auto& [watch, id] : watching_) watch->detach(id);
}

Result<std::unique_ptr<Loader>> Loader::open(storage::Backend& backend, const Dataset& dataset,
                                             LoaderConfig config) {
  // Bounds on counts: each unit costs per-read, per-thread or per-batch state, and beyond these
  // more only allocates (a depth of 10^9 once asked for 8 GB before anything was read).
  auto bound = [](std::string_view what, std::uint64_t v, std::uint64_t lo,
                  std::uint64_t hi) -> Result<void> {
    if (v < lo || v > hi)
      return fail(Errc::kInvalidArgument,
                  fmt::format("{} is {}: it must be {}..{}", what, v, lo, hi));
    return {};
  };
  FEEDLINE_TRY(bound("io_depth", config.io_depth, 1, kMaxIoDepth));
  FEEDLINE_TRY(bound("decode_threads", config.decode_threads, 1, kMaxDecodeThreads));
  FEEDLINE_TRY(bound("storage_threads", config.storage_threads, 0, kMaxStorageThreads));
  FEEDLINE_TRY(bound("cores", config.cores, 0, 1u << 16));
  FEEDLINE_TRY(bound("prefetch_batches", config.prefetch_batches, 0, kMaxPrefetchBatches));
  FEEDLINE_TRY(bound("caller_batches", config.caller_batches, 1, kMaxPrefetchBatches));
  FEEDLINE_TRY(bound("sampler.batch_size", config.sampler.batch_size, 1, kMaxBatchSize));
  // The sampler's view of the dataset comes from the dataset: a different one set by hand is a
  // mistake to report, not to paper over.
  if (config.sampler.num_samples != 0 && config.sampler.num_samples != dataset.samples.size()) {
    return fail(Errc::kInvalidArgument,
                fmt::format("sampler.num_samples is {}, the dataset has {} samples (leave it 0)",
                            config.sampler.num_samples, dataset.samples.size()));
  }
  config.sampler.num_samples = dataset.samples.size();
  if (config.sampler.shard_shuffle > 0) {
    auto starts = shard_starts(dataset);
    if (!config.sampler.shard_starts.empty() && config.sampler.shard_starts != starts) {
      return fail(Errc::kInvalidArgument,
                  "sampler.shard_starts does not match the dataset's shards (leave it empty: "
                  "open() fills it in)");
    }
    config.sampler.shard_starts = std::move(starts);
  }
  FEEDLINE_ASSIGN_OR_RETURN(Sampler sampler, Sampler::create(config.sampler));
  auto p = std::make_unique<Pipeline>(backend, dataset, std::move(config), std::move(sampler));
  FEEDLINE_TRY(p->start());
  std::vector<std::shared_ptr<LiveWatch>> watchers = p->watchers();
  LiveWatch::Labels labels;
  if (p->shares_host()) labels["accelerator"] = fmt::format("{}", p->rank());
  auto loader = std::unique_ptr<Loader>(new Loader(std::move(p)));
  for (auto& w : watchers) {
    if (!w) continue;
    const Pipeline* pipeline = loader->pipeline_.get();
    const std::uint64_t id = w->attach([pipeline] { return pipeline->live(); }, labels);
    loader->watching_.emplace_back(std::move(w), id);
  }
  return loader;
}

Result<Batch> Loader::next() { return pipeline_->next(); }
std::optional<Result<Batch>> Loader::next_for(std::chrono::nanoseconds timeout) {
  return pipeline_->next_for(timeout);
}
void Loader::record_compute(std::chrono::nanoseconds spent) { pipeline_->record_compute(spent); }
void Loader::stop() { pipeline_->stop_by_user(); }
PipelineReport Loader::report() { return pipeline_->report(); }
PipelineReport Loader::snapshot() { return pipeline_->snapshot(); }
LiveFigures Loader::live() const { return pipeline_->live(); }
ResumePoint Loader::resume_point() const { return pipeline_->resume_point(); }

std::uint64_t Loader::batches_per_epoch() const noexcept {
  return pipeline_->sampler().batches_per_epoch();
}

std::uint64_t Loader::samples_per_epoch() const noexcept {
  return pipeline_->sampler().samples_per_epoch();
}

}  // namespace feedline::loader
