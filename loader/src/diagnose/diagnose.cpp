// diagnose(): the controlled runs and the model's inputs (diagnose.hpp).
#include "feedline/loader/diagnose.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>

#include "../formats/sequential_reader.hpp"
#include "../pipeline/sizing.hpp"
#include "../pipeline/unknown_size.hpp"
#include "feedline/core/clock.hpp"
#include "feedline/core/cpus.hpp"
#include "feedline/core/time_limit.hpp"
#include "feedline/loader/stage_bench.hpp"
#include "feedline/storage/registry.hpp"

namespace feedline::loader {
namespace {

constexpr std::uint32_t kManyEpochs = 1u << 20;  // a timed run repeats epochs until its time ends
// The storage counts as saturated at the configured depth when it gave less than this share of
// what the low depth's latency would allow there (reads in flight / latency).
constexpr double kSaturated = 0.75;

double cpu_of(const PipelineReport& r) {
  double s = 0;
  for (const StageReport& st : r.stages) s += st.cpu_seconds;
  return s;
}

double per_sample(double total, std::uint64_t samples) {
  return samples > 0 ? total / static_cast<double>(samples) : 0;
}

std::string read_sysfs(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

GroundTruth ground_truth_of(const std::string& device) {
  GroundTruth g;
  g.device = device;
  const std::string queue = "/sys/block/" + device + "/queue/";
  if (const std::string r = read_sysfs(queue + "rotational"); !r.empty()) g.rotational = r == "1";
  g.scheduler = read_sysfs(queue + "scheduler");
  while (!g.scheduler.empty() && g.scheduler.back() == ' ') g.scheduler.pop_back();
  if (const std::string n = read_sysfs(queue + "nr_requests"); !n.empty()) {
    g.queue_depth = static_cast<unsigned>(std::strtoul(n.c_str(), nullptr, 10));
  }
  return g;
}

// Counters of the device around a run (nothing without a monitor).
struct DeviceWatch {
  const std::optional<storage::DeviceMonitor>& monitor;
  std::optional<storage::DiskCounters> before;
  explicit DeviceWatch(const std::optional<storage::DeviceMonitor>& m) : monitor(m) {
    if (monitor) {
      if (auto c = monitor->sample()) before = *c;
    }
  }
  std::optional<storage::DiskDelta> done() const {
    if (!monitor || !before) return std::nullopt;
    auto after = monitor->sample();
    if (!after) return std::nullopt;
    return storage::DeviceMonitor::delta(monitor->device(), *before, *after);
  }
};

ControlledRun from_report(std::string name, std::string what, const PipelineReport& r,
                          unsigned depth) {
  ControlledRun run;
  run.name = std::move(name);
  run.what = std::move(what);
  run.samples = r.consumer.samples;
  run.seconds = r.consumer.wall_seconds;
  run.samples_per_second = r.consumer.samples_per_second;
  run.bytes_per_second = r.consumer.bytes_per_second;
  run.cpu_seconds = cpu_of(r);
  run.io_depth = depth;
  return run;
}

ControlledRun from_alone(std::string name, std::string what, const StageAlone& s, unsigned depth) {
  ControlledRun run;
  run.name = std::move(name);
  run.what = std::move(what);
  run.samples = s.samples;
  run.seconds = s.seconds;
  run.samples_per_second = s.samples_per_second;
  run.bytes_per_second = s.seconds > 0 ? static_cast<double>(s.bytes) / s.seconds : 0;
  run.cpu_seconds = s.cpu_seconds;
  run.io_depth = depth;
  return run;
}

// The first objects of the dataset (and their samples: the dataset lists samples object by
// object) copied into a mem:// store, at most `budget` bytes: the cached run's data.
struct Staged {
  std::unique_ptr<storage::Backend> backend;
  Dataset dataset;
};

Result<Staged> stage_in_memory(storage::Backend& backend, const Dataset& dataset,
                               std::uint64_t budget, std::stop_token stop) {
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  FEEDLINE_ASSIGN_OR_RETURN(storage::Resolved mem,
                            registry.open("mem://feedline-diagnose/", storage::BackendConfig{}));
  Staged out;
  out.backend = std::move(mem.backend);
  storage::QueueOptions qo;
  qo.depth = 1;
  qo.single_thread = true;
  FEEDLINE_ASSIGN_OR_RETURN(auto queue, backend.make_queue(qo));
  const std::uint64_t align = std::max<std::uint64_t>(backend.caps().alignment, kPageAlign);
  std::uint64_t staged = 0;
  std::size_t objects = 0;
  for (; objects < dataset.objects.size(); ++objects) {
    const storage::ObjectInfo& info = dataset.objects[objects];
    if (info.size == storage::kUnknownSize || staged + info.size > budget) break;
    FEEDLINE_ASSIGN_OR_RETURN(auto handle, backend.open_known(info));
    FEEDLINE_ASSIGN_OR_RETURN(AlignedBuffer buf,
                              AlignedBuffer::allocate(static_cast<std::size_t>(
                                  align_up(std::max<std::uint64_t>(info.size, 1), align))));
    FEEDLINE_ASSIGN_OR_RETURN(std::uint64_t n,
                              detail::read_sync(*queue, *handle, 0, buf.span(), stop));
    FEEDLINE_TRY(out.backend->write(info.key, ConstBytes(buf.data(), static_cast<std::size_t>(n))));
    staged += info.size;
  }
  out.dataset = dataset;
  Dataset& d = out.dataset;
  d.objects.resize(objects);
  const auto end = std::find_if(d.samples.begin(), d.samples.end(),
                                [&](const Sample& s) { return s.object >= objects; });
  d.samples.erase(end, d.samples.end());
  d.members.resize(
      d.samples.empty() ? 0 : d.samples.back().first_member + d.samples.back().member_count);
  d.total_bytes = 0;
  d.max_sample_bytes = 0;
  for (const Sample& s : d.samples) {
    d.total_bytes += s.length;
    d.max_sample_bytes = std::max(d.max_sample_bytes, s.length);
  }
  d.manifest.clear();
  d.manifest_digest.reset();
  d.skipped.clear();
  d.notes.clear();
  return out;
}

// What the host's other processes took of its CPU while the runs ran, and a note where it was
// enough to move the figures (a quarter of a core: on 2 cores, the decode case's second thread).
void note_other_processes(Diagnosis& d, std::optional<double> host0, double self0,
                          std::chrono::steady_clock::time_point wall0) {
  const std::optional<double> host1 = host_busy_seconds();
  const double self1 = process_cpu_times().total();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  if (!host0 || !host1 || wall <= 0) return;
  const double others = ((*host1 - *host0) - (self1 - self0)) / wall;
  d.other_processes_cores = std::max(0.0, others);
  if (others >= 0.25) {
    d.notes.push_back(fmt::format(
        "other processes took {:.1f} of the host's {} cores while the runs ran: these figures, "
        "and the predictions made from them, are of what they left",
        others, usable_cores()));
  }
}

}  // namespace

double steady_samples_per_second(const ConsumerReport& c) {
  // The window after the first batch must be most of the run: where the first batch took most of
  // it (a slow start, a short run), the batches buffered meanwhile arrive in a burst and a rate
  // over that burst alone would be many times the pipeline's.
  const double after_first = c.wall_seconds - c.first_batch_seconds;
  if (c.batches < 2 || after_first < 0.5 * c.wall_seconds) return c.samples_per_second;
  const double first = static_cast<double>(c.samples) / static_cast<double>(c.batches);
  return (static_cast<double>(c.samples) - first) / after_first;
}

PipelineReport timed_run(Loader& loader, const ComputeModel& compute,
                         std::chrono::duration<double> duration, std::stop_token stop) {
  const TimeLimit limit(std::chrono::duration_cast<std::chrono::nanoseconds>(duration), stop);
  PipelineReport r = run_emulated(loader, compute, limit.token(), nullptr);
  // The limit is the run's planned end, not an interruption (the caller's stop is).
  if (!stop.stop_requested()) r.interrupted = false;
  return r;
}

Settings settings_of(const storage::Backend& backend, const Dataset& dataset,
                     const LoaderConfig& config, const ComputeModel& compute, unsigned accelerators,
                     const Measurements& measured) {
  Settings s;
  s.accelerators = std::max(1u, accelerators);
  s.decode_threads = config.decode_threads;
  s.cores = config.cores > 0 ? config.cores : usable_cores();
  s.batch_size = config.sampler.batch_size;
  s.compute_seconds = std::chrono::duration<double>(compute.mean).count();
  // Each accelerator's pipeline: the host's budget and cores shared out (accelerators.hpp).
  LoaderConfig each = config;
  each.memory_budget = config.memory_budget / s.accelerators;
  each.decode_threads = std::max(1u, config.decode_threads / s.accelerators);
  each.cores = std::max(1u, s.cores / s.accelerators);
  const double rps = std::max(measured.reads_per_sample, 1e-9);
  s.concurrency.io_depth = each.io_depth;
  DataPathPlan plan;
  if (auto p = plan_data_path(dataset, each, backend)) plan = *p;
  s.storage_threads = detail::storage_threads_for(each, backend, dataset, plan.path);
  const std::uint64_t world =
      std::uint64_t{std::max(1u, config.sampler.world_size)} * s.accelerators;
  const std::uint64_t per_epoch = std::max<std::uint64_t>(1, dataset.samples.size() / world);
  if (auto z = detail::size_pool(dataset, each, plan, backend.caps().networked, per_epoch)) {
    // Where reads land in their batch slots (or decode writes there), storage takes a batch
    // buffer for each batch it lays out ahead (admission.cpp): the pool's
    // buffers, each of a batch, bound the reads in flight too (the consumer hands each back as
    // soon as it is done, so an input-bound run can have them all).
    double window = static_cast<double>(z->window);
    const bool slots = reads_into_slot(plan.path) || plan.path == DataPath::kDecodeInPlace;
    if (slots) {
      window =
          std::min(window, static_cast<double>(z->buffers) * static_cast<double>(z->batch_samples));
    }
    s.concurrency.window_reads = window * rps;
    double footprint = 0;
    for (std::uint64_t f : z->footprints) {
      if (f != detail::kOversized) footprint += static_cast<double>(f);
    }
    footprint /= std::max<std::size_t>(1, z->footprints.size());
    // The direct path reserves nothing per read (its slot is the pool's); the others reserve
    // each sample's footprint while it is in flight.
    if (reads_into_slot(plan.path)) footprint = 0;
    if (footprint > 0 && each.memory_budget > z->pool_bytes) {
      s.concurrency.memory_reads =
          static_cast<double>(each.memory_budget - z->pool_bytes) / footprint * rps;
    }
    if (footprint > 0 && each.io_max_bytes > 0) {
      const double by_bytes = static_cast<double>(each.io_max_bytes) / footprint * rps;
      s.concurrency.memory_reads = s.concurrency.memory_reads > 0
                                       ? std::min(s.concurrency.memory_reads, by_bytes)
                                       : by_bytes;
    }
  }
  return s;
}

Result<void> check_diagnosable(const Dataset& dataset, const LoaderConfig& config) {
  const std::uint64_t world = std::max(1u, config.sampler.world_size);
  const std::uint64_t shard = dataset.samples.size() / world;
  if (shard < 2ull * config.sampler.batch_size) {
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("the dataset is too small for a steady measurement: {} samples "
                                  "for this rank, fewer than two batches of {}",
                                  shard, config.sampler.batch_size))
                    .with_object(dataset.root)
                    .with_hint("diagnose a larger dataset (feedline gen --samples), or a smaller "
                               "batch size"));
  }
  return {};
}

Result<Diagnosis> diagnose(storage::Backend& backend, const Dataset& dataset,
                           const LoaderConfig& config, const ComputeModel& compute,
                           const DiagnoseOptions& options) {
  FEEDLINE_TRY(check_diagnosable(dataset, config));
  const std::uint64_t world = std::max(1u, config.sampler.world_size);
  const std::uint64_t shard = dataset.samples.size() / world;
  Diagnosis d;
  const std::optional<double> host0 = host_busy_seconds();
  const double self0 = process_cpu_times().total();
  const auto wall0 = std::chrono::steady_clock::now();
  std::optional<storage::DeviceMonitor> monitor;
  if (!options.local_path.empty()) {
    if (auto m = storage::DeviceMonitor::for_path(options.local_path)) {
      monitor = std::move(*m);
      d.ground_truth = ground_truth_of(monitor->device());
    } else {
      d.notes.push_back(
          fmt::format("no device counters for {}: {}", options.local_path, m.error().message()));
    }
  }
  LoaderConfig c = config;
  c.sampler.epochs = kManyEpochs;
  const auto quarter = options.duration / 4;

  // The baseline: the user's settings.
  {
    DeviceWatch watch(monitor);
    FEEDLINE_ASSIGN_OR_RETURN(auto loader, Loader::open(backend, dataset, c));
    d.baseline = timed_run(*loader, compute, options.duration, config.stop);
    if (d.baseline.error) return fail(*d.baseline.error);
    if (config.stop.stop_requested())
      return fail(Errc::kCancelled, "interrupted: the baseline run");
    c.trace.reset();     // a trace (config.trace) is of the baseline: the user's own settings
    c.watchers.clear();  // ... and so are what the watchers see
    ControlledRun run =
        from_report("baseline", "the pipeline as configured", d.baseline, c.io_depth);
    run.device = watch.done();
    if (d.ground_truth && run.device) {
      d.ground_truth->baseline_utilisation = run.device->utilisation;
      d.ground_truth->baseline_device_bytes = run.device->read_bytes;
      d.ground_truth->baseline_queue_depth = run.device->mean_queue_depth;
      d.ground_truth->baseline_read_await_ms = run.device->read_await_ms;
    }
    if (backend.caps().networked) {
      NetworkTruth net;
      const storage::QueueStats& q = d.baseline.io.stats;
      for (const auto& [name, value] : q.counters) net.counters[name] = value;
      net.counters["retries"] = q.retries;
      net.counters["errors"] = q.errors;
      for (const auto& [name, h] : q.histograms) {
        net.histograms[name] = {h.mean() / 1e6, static_cast<double>(h.percentile(0.5)) / 1e6,
                                static_cast<double>(h.percentile(0.99)) / 1e6, h.count()};
      }
      d.network = std::move(net);
    }
    d.runs.push_back(std::move(run));
  }
  const PipelineReport& base = d.baseline;
  const std::uint64_t samples = base.consumer.samples;
  if (samples < 2ull * config.sampler.batch_size) {
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("the baseline delivered {} samples in {:.1f} s: too few for a "
                                  "steady measurement",
                                  samples, options.duration.count()))
                    .with_object(dataset.root)
                    .with_hint("give the runs more time (--duration)"));
  }
  Measurements& m = d.measurements;
  // Bytes and reads per sample over the samples whose reads completed, not those delivered: a
  // short run ends with a read-ahead window's worth read and not yet delivered (at 8 MiB/s and
  // 64 reads in flight, a quarter of a 2 s run's bytes), and reads the end cancelled read nothing.
  const StageReport* storage_stage = base.stage(StageId::kStorage);
  const std::uint64_t read_samples =
      storage_stage && storage_stage->items > 0 ? storage_stage->items : samples;
  const std::uint64_t reads =
      base.io.stats.ops - std::min(base.io.stats.ops, base.io.stats.cancelled);
  m.read_bytes_per_sample = per_sample(static_cast<double>(base.io.storage_bytes), read_samples);
  m.reads_per_sample = std::max(per_sample(static_cast<double>(reads), read_samples), 1e-6);
  const storage::BackendCaps caps = backend.caps();
  m.storage_cpu_bound = !caps.networked && caps.alignment <= 1;
  if (const StageReport* st = base.stage(StageId::kConsumer)) {
    m.consumer_cpu_seconds = per_sample(st->cpu_seconds, samples);
  }
  if (base.verdict.stage == StageId::kConsumer && base.consumer.au_steps > 0 &&
      compute.mean.count() > 0) {
    m.consumer_au_ceiling = std::clamp(base.consumer.au, 0.5, 1.0);
  }

  // Storage, decode and collate alone; storage again at an eighth of the depth.
  const double rate = std::max(1.0, base.consumer.samples_per_second);
  const std::uint64_t n_hi = std::clamp<std::uint64_t>(
      static_cast<std::uint64_t>(rate * quarter.count()), 2ull * c.sampler.batch_size, shard);
  const unsigned depth = c.io_depth;
  const unsigned low_depth = std::max(1u, depth / 8);
  if (detail::has_unknown_sizes(dataset)) {
    // Objects whose sizes a listing did not give (a brace list on a server without one) cannot be
    // read alone by their ranges: the baseline's own accounting stands in for the stages alone.
    d.notes.push_back(
        "the stages were not measured alone: the objects' sizes are learned as they are read (no "
        "listing); the baseline's own accounting stands in (its storage latency, each stage's "
        "CPU per sample)");
    auto stage_cpu = [&](StageId id) {
      const StageReport* st = base.stage(id);
      return st ? per_sample(st->cpu_seconds, std::max(st->items, st->items_inline)) : 0.0;
    };
    m.storage_cpu_seconds = stage_cpu(StageId::kStorage);
    m.decode_cpu_seconds = stage_cpu(StageId::kDecode);
    m.collate_cpu_seconds = stage_cpu(StageId::kCollate);
    m.read_latency_seconds = base.io.stats.clat.mean() / 1e9;
    m.storage_bytes_per_second_seen = base.consumer.samples_per_second * m.read_bytes_per_sample;
  } else {
    // Decode and collate alone on samples cached in memory: at least 256 MiB of them where the
    // run's own budget is smaller (a few samples would time the threads' start, not the work).
    LoaderConfig sa = c;
    sa.memory_budget = std::max<std::uint64_t>(c.memory_budget, std::uint64_t{256} << 20);
    const double mean_bytes = std::max(1.0, m.read_bytes_per_sample);
    const std::uint64_t n_cache = std::clamp<std::uint64_t>(
        static_cast<std::uint64_t>(static_cast<double>(sa.memory_budget / 2) / mean_bytes),
        std::min<std::uint64_t>(64, shard), n_hi);
    FEEDLINE_ASSIGN_OR_RETURN(StagesAlone alone,
                              measure_stages_alone(backend, dataset, sa, n_cache));
    for (const StageAlone& s : alone.stages) {
      if (s.stage == StageId::kDecode) {
        m.decode_cpu_seconds = per_sample(s.cpu_seconds, s.samples);
        d.runs.push_back(from_alone(
            "decode alone",
            fmt::format("{} decode thread(s) on samples in memory", c.decode_threads), s, 0));
      }
      if (s.stage == StageId::kCollate) {
        m.collate_cpu_seconds = per_sample(s.cpu_seconds, s.samples);
        d.runs.push_back(
            from_alone("collate alone", "one thread, batches of decoded samples", s, 0));
      }
    }
    // Storage alone at the configured depth, bounded by time: a few rounds of a deep queue would
    // time its filling, not its rate.
    const auto quarter_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(quarter);
    StageAlone hi;
    {
      DeviceWatch watch(monitor);
      FEEDLINE_ASSIGN_OR_RETURN(hi, measure_storage_alone(backend, dataset, c, shard, quarter_ns));
      ControlledRun run = from_alone(
          "storage alone", fmt::format("{} reads in flight, one thread", depth), hi, depth);
      run.device = watch.done();
      d.runs.insert(d.runs.begin() + 1, std::move(run));
    }
    const StageAlone* storage_hi = &hi;
    m.storage_alone_samples_per_second = hi.samples_per_second;
    m.storage_cpu_seconds = per_sample(storage_hi->cpu_seconds, storage_hi->samples);
    double low_rate = 0;
    if (low_depth < depth) {
      LoaderConfig lc = c;
      lc.io_depth = low_depth;
      // Bounded by time (a quarter of the baseline's), not samples: a latency-bound storage reads
      // an eighth as fast here, a saturated one as fast as at the full depth.
      DeviceWatch watch(monitor);
      FEEDLINE_ASSIGN_OR_RETURN(StageAlone lo,
                                measure_storage_alone(backend, dataset, lc, shard, quarter_ns));
      ControlledRun run =
          from_alone("storage alone (low depth)",
                     fmt::format("{} read(s) in flight, one thread", low_depth), lo, low_depth);
      run.device = watch.done();
      d.runs.insert(d.runs.begin() + 2, std::move(run));
      low_rate = lo.samples_per_second;
    }
    // The same reads in storage order, where the run shuffles samples: what storage order (or
    // shuffling shards instead) would give a seek-bound disk or coalescing tar members.
    if (c.sampler.shuffle && c.sampler.shard_shuffle == 0 && hi.samples_per_second > 0) {
      LoaderConfig oc = c;
      oc.sampler.shuffle = false;
      DeviceWatch watch(monitor);
      FEEDLINE_ASSIGN_OR_RETURN(StageAlone ordered,
                                measure_storage_alone(backend, dataset, oc, shard, quarter_ns / 2));
      ControlledRun run = from_alone("storage alone (storage order)",
                                     fmt::format("{} reads in flight, one thread, samples in the "
                                                 "order they are stored",
                                                 depth),
                                     ordered, depth);
      run.device = watch.done();
      d.runs.insert(d.runs.begin() + 3, std::move(run));
      m.storage_order_speedup = std::max(1.0, ordered.samples_per_second / hi.samples_per_second);
    }
    // Little's law at the low depth (the storage is not saturated there, as a rule); saturated at
    // the configured depth when that gave much less than the low depth's latency allows.
    const double hi_rate = storage_hi->samples_per_second;
    if (low_rate > 0) {
      m.read_latency_seconds = low_depth / (low_rate * m.reads_per_sample);
      if (hi_rate < kSaturated * low_rate * depth / low_depth) {
        m.storage_bytes_per_second_max = hi_rate * m.read_bytes_per_sample;
      }
    } else if (hi_rate > 0) {
      m.read_latency_seconds = depth / (hi_rate * m.reads_per_sample);
    }
    m.storage_bytes_per_second_seen =
        std::max({hi_rate, low_rate, base.consumer.samples_per_second}) * m.read_bytes_per_sample;
  }
  // A throttle the user set is a setting, not the storage's own limit: where the storage
  // saturated at (about) the throttle's rate, what saturated was the throttle, and a what-if may
  // change it (Settings::storage_bytes_per_second).
  const double cap = options.storage_bytes_per_second_cap;
  if (cap > 0 && m.storage_bytes_per_second_max >= 0.8 * cap) m.storage_bytes_per_second_max = 0;
  // CPU per sample: each stage's own accounting in the baseline where it did the work (its
  // threads' CPU clocks under the run's real conditions: bytes hashed while hot in the cache,
  // cores shared), the stage alone where it did none. Where the storage threads took the digest
  // as each read landed (nothing else to decode), that work is theirs and is in their CPU.
  {
    auto baseline_cpu = [&](StageId id, double alone) {
      const StageReport* st = base.stage(id);
      if (!st || st->items == 0) return alone;
      return per_sample(st->cpu_seconds, st->items);
    };
    m.storage_cpu_seconds = baseline_cpu(StageId::kStorage, m.storage_cpu_seconds);
    m.collate_cpu_seconds = baseline_cpu(StageId::kCollate, m.collate_cpu_seconds);
    const StageReport* dec = base.stage(StageId::kDecode);
    if (dec && dec->items_inline > dec->items) {
      m.decode_cpu_seconds = 0;
      m.storage_cpu_bound = true;
    } else {
      m.decode_cpu_seconds = baseline_cpu(StageId::kDecode, m.decode_cpu_seconds);
    }
  }

  // Cached: the first objects staged in memory, the pipeline over them (no storage).
  double cached_rate = 0;
  {
    const std::uint64_t budget = std::min(options.stage_bytes, config.memory_budget / 2);
    auto staged = stage_in_memory(backend, dataset, budget, config.stop);
    if (!staged) {
      d.notes.push_back(fmt::format("cached run skipped: {}", staged.error().what()));
    } else if (staged->dataset.samples.size() / world < 2ull * c.sampler.batch_size) {
      d.notes.push_back(fmt::format(
          "cached run skipped: {} MiB of objects staged in memory hold fewer than two batches",
          budget >> 20));
    } else {
      auto loader = Loader::open(*staged->backend, staged->dataset, c);
      if (!loader) {
        d.notes.push_back(fmt::format("cached run skipped: {}", loader.error().what()));
      } else {
        const PipelineReport r = timed_run(**loader, compute, quarter, config.stop);
        if (r.error) return fail(*r.error);
        cached_rate = steady_samples_per_second(r.consumer);
        d.runs.push_back(
            from_report("cached",
                        fmt::format("the pipeline over {} object(s) staged in memory (no storage)",
                                    staged->dataset.objects.size()),
                        r, c.io_depth));
      }
    }
  }
  // Cold: the same storage with O_DIRECT, where the baseline read through the page cache.
  double cold_rate = steady_samples_per_second(base.consumer);
  if (options.cold) {
    DeviceWatch watch(monitor);
    auto loader = Loader::open(*options.cold, dataset, c);
    if (!loader) {
      d.notes.push_back(fmt::format("cold run skipped: {}", loader.error().what()));
    } else {
      const PipelineReport r = timed_run(**loader, compute, quarter, config.stop);
      if (r.error) return fail(*r.error);
      cold_rate = steady_samples_per_second(r.consumer);
      ControlledRun run =
          from_report("cold", "the same storage with O_DIRECT (no page cache)", r, c.io_depth);
      run.device = watch.done();
      d.runs.push_back(std::move(run));
    }
  }
  if (config.stop.stop_requested()) return fail(Errc::kCancelled, "interrupted: diagnose");
  if (cached_rate > 0) {
    d.prep_seconds_per_sample = 1 / cached_rate;
    if (cold_rate > 0) d.fetch_seconds_per_sample = std::max(0.0, 1 / cold_rate - 1 / cached_rate);
  }
  d.as_run = settings_of(backend, dataset, config, compute, 1, m);
  d.as_run.storage_bytes_per_second = cap;
  note_other_processes(d, host0, self0, wall0);
  return d;
}

}  // namespace feedline::loader
