#include "run_options.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "cli_checks.hpp"
#include "cli_error.hpp"
#include "feedline/core/redact.hpp"
#include "feedline/core/text.hpp"
#include "feedline/core/units.hpp"
#include "feedline/loader/accelerators.hpp"
#include "feedline/loader/format.hpp"
#include "feedline/loader/image.hpp"
#include "feedline/storage/registry.hpp"
#include "feedline/transports/cuda.hpp"
#include "knobs.hpp"
#include "output.hpp"
#include "setting_flags.hpp"

namespace feedline::tools {
namespace {

std::chrono::nanoseconds duration_opt(const std::string& text, const char* flag) {
  if (text.empty()) return {};
  auto r = parse_duration(text);
  if (!r) throw UsageError(fmt::format("{}: {}", flag, r.error().message()));
  return *r;
}

// Rank and world size: the flags, else the variables of the launcher that set them (torchrun,
// Open MPI, SLURM), always both from the same launcher. Every value is checked the same way
// and errors name where it came from.
struct Sharding {
  unsigned rank = 0, world = 1;
  std::string rank_from = "--rank", world_from = "--world-size";
};

Sharding sharding(const RunOptions& o) {
  struct Launcher {
    const char* rank;
    const char* world;
  };
  constexpr Launcher kLaunchers[] = {{"RANK", "WORLD_SIZE"},
                                     {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                     {"SLURM_PROCID", "SLURM_NTASKS"}};
  auto env_number = [](const char* name, std::uint64_t min,
                       std::uint64_t max) -> std::optional<unsigned> {
    const char* v = std::getenv(name);
    if (!v) return std::nullopt;
    std::string why;
    auto n = parse_whole_number(v, min, max, &why);
    if (!n) throw UsageError(fmt::format("environment variable {}='{}': {}", name, v, why));
    return static_cast<unsigned>(*n);
  };
  Sharding s;
  if (o.rank) s.rank = *o.rank;
  if (o.world_size) s.world = *o.world_size;
  for (const Launcher& l : kLaunchers) {
    const bool has_rank = std::getenv(l.rank) != nullptr,
               has_world = std::getenv(l.world) != nullptr;
    if (!has_rank && !has_world) continue;
    if (!o.rank) {
      if (!has_rank) {
        throw UsageError(
            fmt::format("{} is set but {} is not: set both, or give --rank", l.world, l.rank));
      }
      s.rank = *env_number(l.rank, 0, kMaxRanks - 1);
      s.rank_from = l.rank;
    }
    if (!o.world_size) {
      if (!has_world) {
        throw UsageError(fmt::format("{} is set but {} is not: set both, or give --world-size",
                                     l.rank, l.world));
      }
      s.world = *env_number(l.world, 1, kMaxRanks);
      s.world_from = l.world;
    }
    break;
  }
  if (s.rank >= s.world) {
    throw UsageError(
        fmt::format("{} {} must be below {} {}", s.rank_from, s.rank, s.world_from, s.world));
  }
  return s;
}

}  // namespace

RunSetup make_run_setup(const RunOptions& o, std::stop_token stop) {
  RunSetup st;
  RunContext& ctx = st.ctx;
  ctx.url = redact_url(o.url);
  ctx.au_target = o.au_target.value_or(0);
  ctx.accelerators = o.accelerators;
  if (o.accelerators > 1 && o.stages_alone) {
    throw UsageError(
        "--stages-alone measures one pipeline's stages: run it without --accelerators (each "
        "accelerator's pipeline is the same)");
  }
  loader::LoaderConfig& c = ctx.config;
  c.sampler.batch_size = o.batch_size;
  c.sampler.epochs = o.epochs;
  c.sampler.seed = o.seed;
  c.sampler.shuffle = o.shuffle;
  c.sampler.shard_shuffle = o.shard_shuffle;
  if (o.shard_shuffle > 0 && !o.shuffle)
    throw UsageError("--shard-shuffle shuffles: it cannot go with --no-shuffle");
  const Sharding sh = sharding(o);
  c.sampler.rank = sh.rank;
  c.sampler.world_size = sh.world;
  c.sampler.drop_last = o.drop_last;
  c.io_depth = o.io_depth;
  c.decode_threads = o.decode_threads;
  c.storage_threads = o.storage_threads;
  c.decode_nice = o.decode_nice;
  c.prefetch_batches = o.prefetch;
  {
    auto budget = parse_size(o.memory_budget);
    if (!budget) throw UsageError(fmt::format("--memory-budget: {}", budget.error().message()));
    const std::uint64_t ram = physical_memory_bytes();
    if (*budget < (1u << 20)) throw UsageError("--memory-budget must be at least 1 MiB");
    if (*budget > ram) {
      throw UsageError(fmt::format("--memory-budget {} is more than this machine's memory ({})",
                                   format_bytes(static_cast<double>(*budget)),
                                   format_bytes(static_cast<double>(ram))));
    }
    c.memory_budget = *budget;
  }
  if (!o.max_sample_size.empty()) {
    auto m = parse_size(o.max_sample_size);
    if (!m) throw UsageError(fmt::format("--max-sample-size: {}", m.error().message()));
    if (*m == 0) throw UsageError("--max-sample-size must be positive");
    if (*m > c.memory_budget) {
      throw UsageError(fmt::format(
          "--max-sample-size {} is more than --memory-budget {}: no sample that large fits",
          format_bytes(static_cast<double>(*m)),
          format_bytes(static_cast<double>(c.memory_budget))));
    }
    c.max_sample_bytes = *m;
  }
  c.diagnostics.decode_cost = duration_opt(o.decode_cost, "--decode-cost");
  c.diagnostics.collate_cost = duration_opt(o.collate_cost, "--collate-cost");
  if (o.on_error == "fail") {
    c.on_error = loader::OnError::kFail;
  } else if (o.on_error == "skip") {
    c.on_error = loader::OnError::kSkip;
  } else {
    throw UsageError(
        fmt::format("--on-error: unknown policy '{}' (choose fail or skip)", o.on_error));
  }
  c.diagnostics.accounting = o.accounting;
  if (o.image_size || !o.crop.empty() || !o.dct_scaling) {
    loader::ImageConfig ic;
    ic.decode = true;
    ic.size = o.image_size.value_or(0);
    ic.crop = o.image_size ? loader::Crop::kCenter : loader::Crop::kNone;
    if (!o.crop.empty()) {
      auto crop = loader::parse_crop(o.crop);
      if (!crop) throw UsageError(fmt::format("--crop: {}", crop.error().what()));
      ic.crop = *crop;
    }
    ic.dct_scaling = o.dct_scaling;
    if (ic.crop != loader::Crop::kNone && ic.size == 0) {
      throw UsageError(
          fmt::format("--crop {} needs --image-size (the output's side, e.g. 224); "
                      "--crop none alone decodes each image at its own size",
                      o.crop));
    }
    if (!loader::jpeg_available()) {
      throw UsageError(
          "--image-size/--crop: this feedline was built without JPEG decoding; rebuild with "
          "-DFEEDLINE_WITH_JPEG=ON (libjpeg62-turbo-dev, libexif-dev)");
    }
    auto registry = loader::image_decoders(ic);
    if (!registry)
      throw UsageError(fmt::format("--image-size/--crop: {}", registry.error().what()));
    c.decoders = std::make_shared<const loader::DecoderRegistry>(std::move(*registry));
    ctx.image = c.decoders->find(".jpg")->describe();
  }
  c.stop = stop;
  {
    auto mode = loader::parse_gpu_direct(o.gpu_direct);
    if (!mode) throw UsageError(fmt::format("--gpu-direct: {}", mode.error().message()));
    c.gpu_direct = *mode;
    auto dev = transports::cuda::parse_device(o.device);
    if (!dev)
      throw UsageError(fmt::format("--device: {} ({})", dev.error().message(), dev.error().hint()));
    c.device.device = *dev;
    c.device.streams = o.cuda_streams;
    if (*dev >= 0)
      c.device.cuda =
          transports::cuda::CudaRuntime::load();  // loaded once, for the plan and the run
  }
  if (!o.compute_time.empty()) {
    auto m = loader::parse_compute_time(o.compute_time);
    if (!m) throw UsageError(fmt::format("--compute-time: {}", m.error().message()));
    st.compute = *m;
    ctx.compute_time = o.compute_time;
  }
  if (o.format != "auto") st.format = value_or_usage(loader::parse_format(o.format));

  storage::BackendConfig& bc = st.backend;
  {
    auto engine = transports::parse_engine(o.engine);
    if (!engine) throw UsageError(fmt::format("--engine: {}", engine.error().message()));
    if (*engine == transports::EngineKind::kUring && !transports::uring_compiled_in()) {
      throw UsageError(
          "--engine uring: this feedline was built without io_uring (liburing); use --engine posix "
          "or auto");
    }
    bc.file.engine = *engine;
  }
  bc.file.direct = o.direct;
  bc.stop = stop;
  {
    std::vector<std::string> notes;
    apply_net_options(o.net, o.url, bc, notes);
    for (const auto& n : notes) out::note(n);
  }
  if (!o.throttle_bw.empty() || !o.throttle_latency.empty() || !o.throttle_seek.empty()) {
    storage::ThrottleConfig tc;
    if (!o.throttle_bw.empty()) {
      auto bw = parse_size(o.throttle_bw);
      if (!bw || *bw == 0) {
        throw UsageError(
            fmt::format("--throttle-bw: {}", bw ? "must be positive" : bw.error().message()));
      }
      tc.bytes_per_second = static_cast<double>(*bw);
    }
    if (!o.throttle_latency.empty()) {  // 2ms, normal:MEAN:SD or lognormal:MEAN:SD
      auto latency = storage::LatencyDistribution::parse(o.throttle_latency);
      if (!latency)
        throw UsageError(fmt::format("--throttle-latency: {}", latency.error().message()));
      tc.latency = *latency;
    }
    if (!o.throttle_seek.empty()) {
      auto seek = parse_duration(o.throttle_seek);
      if (!seek || seek->count() <= 0) {
        throw UsageError(
            fmt::format("--throttle-seek: {}", seek ? "must be positive" : seek.error().message()));
      }
      tc.seek = *seek;
    }
    st.throttle = tc;
  }
  return st;
}

void add_trace_options(CLI::App& cmd, std::optional<std::string>& path, std::uint64_t& events) {
  cmd.add_option("--trace", path,
                 "Write a trace of the run to FILE (Chrome trace-event JSON: open it in "
                 "ui.perfetto.dev): each thread's busy/starved/blocked spans, reads, decodes, "
                 "batches, the consumer's waits; queue depths and memory as counters");
  cmd.add_option("--trace-events", events,
                 "At most this many events in the --trace file (~170 bytes each); per-read, "
                 "per-sample and state spans are sampled past a fifth of it (whole 10 ms windows), "
                 "and the trace says what it left out")
      ->check(CLI::Range(std::uint64_t{100}, std::uint64_t{100'000'000}))
      ->capture_default_str();
}

void add_html_option(CLI::App& cmd, std::optional<std::string>& path) {
  cmd.add_option("--html", path,
                 "Write the report as one self-contained HTML page to FILE (no network needed "
                 "to open it): the verdict, throughput, waits and queues over time, the stages, "
                 "the read latency CDF, the data path");
}

void add_metrics_options(CLI::App& cmd, RunOptions& o) {
  add_setting_flags(cmd, o, {"observability"});
  cmd.get_option("--metrics-bind")->needs(cmd.get_option("--metrics-port"));
}

void add_run_options(CLI::App& cmd, RunOptions& o) {
  add_setting_flags(
      cmd, o,
      {"sampler", "dataset", "pipeline", "storage", "network", "decode", "device", "emulation"});
  // The formats' names and words are the format registry's (the table's line is a summary).
  cmd.get_option("--format")->description(loader::builtin_formats().help());
  cmd.add_option("--json", o.json_path,
                 "Write the report as one JSON document to FILE (also when the run fails)");
}

RunDataset open_run_dataset(const RunOptions& o, RunSetup& st) {
  RunContext& ctx = st.ctx;
  const loader::LoaderConfig& c = ctx.config;
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  storage::Resolved resolved = value_or_exit(registry.open(o.url, st.backend));
  RunDataset rd;
  rd.backend = std::move(resolved.backend);
  if (st.throttle) rd.backend = storage::make_throttle(std::move(rd.backend), *st.throttle);

  loader::DatasetOptions dopt;
  dopt.use_index = o.index;
  dopt.skip_bad_objects = c.on_error == loader::OnError::kSkip;
  dopt.format = st.format.value_or(loader::DatasetFormat::kAuto);
  dopt.stop = c.stop;
  rd.dataset = value_or_exit(loader::open_dataset(*rd.backend, resolved.key, dopt));
  const loader::Dataset& dataset = rd.dataset;
  ctx.format = std::string(loader::format_name(dataset.format));
  if (o.shard_shuffle > 0 && dataset.format.spec().one_sample_per_object) {
    out::note(fmt::format(
        "--shard-shuffle shuffles the shards of a tar or TFRecord dataset; in this {} dataset "
        "every file is a shard of one sample, so the order is as shuffled as without it (reads of "
        "neighbouring files do not coalesce)",
        loader::format_name(dataset.format)));
  }
  for (const auto& n : dataset.notes) out::eprint("note: {}\n", printable(n));
  for (const auto& why : dataset.skipped) {
    out::eprint("skipped (--on-error skip): {}\n", printable(why));
  }
  ctx.dataset_samples = dataset.samples.size();
  ctx.dataset_bytes = dataset.total_bytes;
  ctx.listing_bytes = dataset.listing_bytes;
  ctx.dataset_unknown_sizes = static_cast<std::uint64_t>(
      std::count_if(dataset.samples.begin(), dataset.samples.end(),
                    [](const loader::Sample& s) { return s.length == storage::kUnknownSize; }));
  ctx.host_memory_bytes = physical_memory_bytes();
  const auto parsed = storage::parse_url(o.url);
  ctx.potential_caching = parsed && parsed->scheme == "file" && !o.direct &&
                          dataset.total_bytes <= ctx.host_memory_bytes;
  return rd;
}

nlohmann::json run_document(const loader::PipelineReport& report, const RunSetup& st,
                            const loader::Dataset& dataset, std::optional<Error>* mismatch) {
  const RunContext& ctx = st.ctx;
  loader::ReportOptions o;
  o.url = ctx.url;
  o.compute_time = ctx.compute_time;
  o.au_target = ctx.au_target;
  o.potential_caching = ctx.potential_caching;
  o.host_memory_bytes = ctx.host_memory_bytes;
  o.knob_text = knob_flag_text;
  o.mismatch = mismatch;
  nlohmann::json doc = nlohmann::json::parse(loader::report_json(report, dataset, ctx.config, o));
  // The CLI's name of each knob, beside the library's (the same order as the verdict's).
  auto& next = doc["bottleneck"]["next"];
  for (std::size_t i = 0; i < next.size() && i < report.verdict.next.size(); ++i)
    next[i]["flag"] = knob_flag(report.verdict.next[i].knob);
  return doc;
}

}  // namespace feedline::tools
