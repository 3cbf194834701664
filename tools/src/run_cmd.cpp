#include "run_cmd.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>

#include "cli_error.hpp"
#include "net_options.hpp"
#include "config_file.hpp"
#include "feedline/core/units.hpp"
#include "feedline/loader/dataset.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/loader/stage_bench.hpp"
#include "feedline/storage/decorators.hpp"
#include "feedline/storage/registry.hpp"
#include "feedline/storage/url_pattern.hpp"
#include "feedline/transports/cuda.hpp"
#include "progress.hpp"
#include "run_report.hpp"
#include "signals.hpp"

namespace feedline::tools {
namespace {

// The process's peak resident set (VmHWM), to check the memory budget holds from outside.
std::uint64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // "VmHWM:  1234 kB"
  }
  return 0;
}

struct Options {
  std::string url;
  NetOptions net;
  std::string format = "auto";
  unsigned batch_size = 32;
  unsigned epochs = 1;
  std::uint64_t seed = 0;
  bool no_shuffle = false;
  unsigned shard_shuffle = 0;
  std::optional<unsigned> rank;
  std::optional<unsigned> world_size;
  bool drop_last = false;
  unsigned io_depth = 64;
  unsigned decode_threads = 2;
  int decode_nice = 5;
  unsigned prefetch = 2;
  std::string memory_budget = "1GiB";
  std::string compute_time;
  std::string decode_cost;
  std::string collate_cost;
  std::string on_error = "fail";
  bool no_accounting = false;
  std::string json_path;
  std::string engine = "auto";
  bool direct = false;
  std::string throttle_bw;
  std::string throttle_latency;
  bool no_index = false;
  double au_target = 0;
  bool stages_alone = false;
  std::string device;                 // "cuda:N" copies batches to that GPU
  std::string gpu_direct = "auto";
  unsigned cuda_streams = 4;
  std::uint64_t stages_alone_samples = 20000;
};

// Rank and world size the way launchers publish them: torchrun, Open MPI, SLURM.
std::optional<unsigned> env_uint(std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (const char* v = std::getenv(n); v && *v) {
      char* end = nullptr;
      const unsigned long x = std::strtoul(v, &end, 10);
      if (end && *end == '\0') return static_cast<unsigned>(x);
      throw UsageError(fmt::format("environment variable {}='{}' is not a number", n, v));
    }
  }
  return std::nullopt;
}

std::chrono::nanoseconds duration_opt(const std::string& text, const char* flag) {
  if (text.empty()) return {};
  auto r = parse_duration(text);
  if (!r) throw UsageError(fmt::format("{}: {}", flag, r.error().message()));
  return *r;
}

int run(const Options& o) {
  RunContext ctx;
  ctx.url = o.url;
  ctx.au_target = o.au_target;
  loader::LoaderConfig& c = ctx.config;
  c.sampler.batch_size = o.batch_size;
  c.sampler.epochs = o.epochs;
  c.sampler.seed = o.seed;
  c.sampler.shuffle = !o.no_shuffle;
  c.sampler.shard_shuffle = o.shard_shuffle;
  if (o.shard_shuffle > 0 && o.no_shuffle) throw UsageError("--shard-shuffle shuffles: it cannot go with --no-shuffle");
  if (o.shard_shuffle > 65536) throw UsageError("--shard-shuffle must be at most 65536 open shards");
  c.sampler.rank = o.rank.value_or(env_uint({"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}).value_or(0));
  c.sampler.world_size =
      o.world_size.value_or(env_uint({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"}).value_or(1));
  c.sampler.drop_last = o.drop_last;
  if (o.batch_size == 0) throw UsageError("--batch-size must be at least 1");
  if (o.epochs == 0) throw UsageError("--epochs must be at least 1");
  if (c.sampler.world_size == 0 || c.sampler.rank >= c.sampler.world_size) {
    throw UsageError(fmt::format("--rank {} must be below --world-size {}", c.sampler.rank, c.sampler.world_size));
  }
  if (o.io_depth == 0) throw UsageError("--io-depth must be at least 1");
  if (o.decode_threads == 0 || o.decode_threads > 256) throw UsageError("--decode-threads must be between 1 and 256");
  c.io_depth = o.io_depth;
  c.decode_threads = o.decode_threads;
  if (o.decode_nice < 0 || o.decode_nice > 19) throw UsageError("--decode-nice must be between 0 and 19");
  c.decode_nice = o.decode_nice;
  c.prefetch_batches = o.prefetch;
  auto budget = parse_size(o.memory_budget);
  if (!budget) throw UsageError(fmt::format("--memory-budget: {}", budget.error().message()));
  c.memory_budget = *budget;
  c.decode_cost = duration_opt(o.decode_cost, "--decode-cost");
  c.collate_cost = duration_opt(o.collate_cost, "--collate-cost");
  if (o.on_error == "fail") {
    c.on_error = loader::OnError::kFail;
  } else if (o.on_error == "skip") {
    c.on_error = loader::OnError::kSkip;
  } else {
    throw UsageError(fmt::format("--on-error: unknown policy '{}' (choose fail or skip)", o.on_error));
  }
  c.accounting = !o.no_accounting;
  {
    auto mode = loader::parse_gpu_direct(o.gpu_direct);
    if (!mode) throw UsageError(fmt::format("--gpu-direct: {}", mode.error().message()));
    c.gpu_direct = *mode;
    auto dev = transports::cuda::parse_device(o.device);
    if (!dev) throw UsageError(fmt::format("--device: {} ({})", dev.error().message(), dev.error().hint()));
    c.device.device = *dev;
    if (o.cuda_streams == 0 || o.cuda_streams > 64) throw UsageError("--cuda-streams must be between 1 and 64");
    c.device.streams = o.cuda_streams;
    if (*dev >= 0) c.device.cuda = transports::cuda::CudaRuntime::load();  // loaded once, for the plan and the run
  }
  loader::ComputeModel compute;
  if (!o.compute_time.empty()) {
    auto m = loader::parse_compute_time(o.compute_time);
    if (!m) throw UsageError(fmt::format("--compute-time: {}", m.error().message()));
    compute = *m;
    ctx.compute_time = o.compute_time;
  }
  std::optional<loader::DatasetFormat> format;
  if (o.format != "auto") format = value_or_usage(loader::parse_format(o.format));

  storage::BackendConfig bc;
  {
    auto engine = transports::parse_engine(o.engine);
    if (!engine) throw UsageError(fmt::format("--engine: {}", engine.error().message()));
    if (*engine == transports::EngineKind::kUring && !transports::uring_compiled_in()) {
      throw UsageError("--engine uring: this feedline was built without io_uring (liburing); use --engine posix or auto");
    }
    bc.file.engine = *engine;
  }
  bc.file.direct = o.direct;
  {
    std::vector<std::string> notes;
    apply_net_options(o.net, o.url, bc, notes);
    for (const auto& n : notes) std::fprintf(stderr, "feedline: note: %s\n", n.c_str());
  }
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  storage::Resolved resolved = value_or_usage(registry.open(o.url, bc));
  std::unique_ptr<storage::Backend> backend = std::move(resolved.backend);
  if (!o.throttle_bw.empty() || !o.throttle_latency.empty()) {
    storage::ThrottleConfig tc;
    if (!o.throttle_bw.empty()) {
      auto bw = parse_size(o.throttle_bw);
      if (!bw || *bw == 0) {
        throw UsageError(fmt::format("--throttle-bw: {}", bw ? "must be positive" : bw.error().message()));
      }
      tc.bytes_per_second = static_cast<double>(*bw);
    }
    tc.latency = duration_opt(o.throttle_latency, "--throttle-latency");
    backend = storage::make_throttle(std::move(backend), tc);
  }

  loader::DatasetOptions dopt;
  dopt.use_index = !o.no_index;
  dopt.skip_bad_objects = c.on_error == loader::OnError::kSkip;
  if (format) {
    dopt.format = *format;
  } else {
    // auto: tar when the root holds .tar shards, else one sample per file.
    bool tar = resolved.key.ends_with(".tar");
    if (storage::has_brace_pattern(resolved.key)) {
      // Named objects (no listing): their names say.
      if (auto names = storage::expand_braces(resolved.key)) {
        for (const auto& n : *names) tar = tar || n.ends_with(".tar");
      }
    } else if (auto listing = backend->list(resolved.key)) {
      for (const auto& obj : *listing) tar = tar || obj.key.ends_with(".tar");
    }
    dopt.format = tar ? loader::DatasetFormat::kTar : loader::DatasetFormat::kFiles;
  }
  ctx.format = std::string(loader::format_name(dopt.format));
  auto dataset = loader::open_dataset(*backend, resolved.key, dopt);
  if (!dataset) {
    fmt::print(stderr, "feedline: error: {}\n", dataset.error().what());
    return kExitRuntime;
  }
  for (const auto& note : dataset->notes) fmt::print(stderr, "note: {}\n", note);
  for (const auto& why : dataset->skipped) fmt::print(stderr, "skipped (--on-error skip): {}\n", why);
  ctx.dataset_samples = dataset->samples.size();
  ctx.dataset_bytes = dataset->total_bytes;
  {
    auto q = backend->make_queue({});
    ctx.engine = q ? (*q)->info().engine : "?";
  }

  // The data path: "impossible" (--gpu-direct on, a GPU that is not there) is a usage error.
  {
    auto plan = loader::plan_data_path(*dataset, c, *backend);
    if (!plan) throw UsageError(plan.error());
  }
  auto loader_r = loader::Loader::open(*backend, *dataset, c);
  if (!loader_r) {
    fmt::print(stderr, "feedline: error: {}\n", loader_r.error().what());
    return kExitRuntime;
  }
  const std::atomic<bool>& stop = install_stop_handlers();
  std::atomic<std::uint64_t> delivered{0};
  loader::PipelineReport report;
  {
    const auto total = static_cast<double>(dataset->samples.size()) * o.epochs / c.sampler.world_size;
    ProgressLine line(stdout_is_tty(), [&delivered, total](double s) {
      const double n = static_cast<double>(delivered.load(std::memory_order_relaxed));
      return fmt::format("[{:5.1f}s] {:.0f} samples/s  {:.0f}/{:.0f} samples ({:.0f}%)", s, s > 0 ? n / s : 0, n,
                         total, total > 0 ? 100 * n / total : 0);
    });
    report = loader::run_emulated(**loader_r, compute, &stop, &delivered);
  }
  fmt::print("{}", run_text(report, ctx));
  // Objects left out of the dataset itself (unreadable shards) are skipped work too.
  report.skipped_examples.insert(report.skipped_examples.begin(), dataset->skipped.begin(), dataset->skipped.end());
  nlohmann::json doc = run_json(report, ctx);
  doc["skipped"]["objects"] = dataset->skipped.size();
  doc["memory"]["peak_rss_bytes"] = peak_rss_bytes();
  if (o.stages_alone && !report.error && !report.interrupted) {
    // DS-Analyzer-style controlled runs: each stage alone, against the end-to-end rate.
    auto alone = loader::measure_stages_alone(*backend, *dataset, c, o.stages_alone_samples);
    if (!alone) {
      fmt::print(stderr, "feedline: error: measuring the stages alone: {}\n", alone.error().what());
      return kExitRuntime;
    }
    nlohmann::json stages = nlohmann::json::array();
    fmt::print("  stages alone ({} samples):\n", alone->stages.front().samples);
    for (const auto& st : alone->stages) {
      fmt::print("    {:<8} {:>10.0f} samples/s  {}\n", st.stage, st.samples_per_second,
                 format_rate(st.seconds > 0 ? static_cast<double>(st.bytes) / st.seconds : 0));
      stages.push_back({{"stage", st.stage}, {"samples", st.samples}, {"bytes", st.bytes},
                        {"seconds", st.seconds}, {"samples_per_second", st.samples_per_second},
                        {"cpu_seconds", st.cpu_seconds}});
    }
    const double efficiency =
        alone->slowest_samples_per_second > 0 ? report.samples_per_second / alone->slowest_samples_per_second : 0;
    fmt::print("    pipeline efficiency: {:.0f}% of the slowest stage alone ({}, {:.0f} samples/s)\n",
               efficiency * 100, alone->slowest, alone->slowest_samples_per_second);
    doc["stages_alone"] = {{"stages", stages},
                           {"slowest", alone->slowest},
                           {"slowest_samples_per_second", alone->slowest_samples_per_second},
                           {"efficiency", efficiency}};
    if (alone->cpu_ceiling_samples_per_second > 0) {
      const double of_ceiling = report.samples_per_second / alone->cpu_ceiling_samples_per_second;
      fmt::print("    CPU: the stages need {:.1f} CPU-us per sample together: at most {:.0f} samples/s on {} "
                 "core(s); the run reached {:.0f}% of that{}\n",
                 alone->cpu_per_sample_us, alone->cpu_ceiling_samples_per_second, alone->cores, of_ceiling * 100,
                 alone->cpu_ceiling_samples_per_second < alone->slowest_samples_per_second
                     ? " (the cores, not one stage, bound this run)"
                     : "");
      doc["stages_alone"]["cpu_per_sample_us"] = alone->cpu_per_sample_us;
      doc["stages_alone"]["cores"] = alone->cores;
      doc["stages_alone"]["cpu_ceiling_samples_per_second"] = alone->cpu_ceiling_samples_per_second;
      doc["stages_alone"]["efficiency_vs_cpu_ceiling"] = of_ceiling;
    }
  }
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    out << doc.dump(2) << "\n";
    if (!out) {
      fmt::print(stderr, "feedline: error: cannot write the JSON report to {}\n", o.json_path);
      return kExitRuntime;
    }
  }
  if (report.error) {
    fmt::print(stderr, "feedline: error: {}\n", report.error->what());
    return kExitRuntime;
  }
  if (o.au_target > 0 && !report.interrupted) {
    const bool ok = report.au >= o.au_target;
    fmt::print("  AU {:.1f}% {} the {:.0f}% target: {}\n", report.au * 100, ok ? ">=" : "<", o.au_target * 100,
               ok ? "PASS" : "FAIL (the storage cannot feed this accelerator at this rate)");
  }
  return report.interrupted ? exit_code_for_stop() : kExitOk;
}

}  // namespace

void add_run(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("run", "Run the data-loading pipeline on a dataset and report where it stalls");
  auto config_path = std::make_shared<std::string>();
  cmd->add_option("--config", *config_path, "TOML workload file (see configs/workloads); flags override it");
  cmd->add_option("url", o->url, "Dataset root: a directory, file:///path or mem://prefix")->required();
  cmd->add_option("--format", o->format, "files, tar or auto")->capture_default_str();
  cmd->add_option("--batch-size", o->batch_size, "Samples per batch")->capture_default_str();
  cmd->add_option("--epochs", o->epochs, "Passes over the dataset")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Shuffle seed")->capture_default_str();
  cmd->add_flag("--no-shuffle", o->no_shuffle, "Read in storage order");
  cmd->add_option("--shard-shuffle", o->shard_shuffle,
                  "Shuffle shards, not samples: K shards open at a time, runs of batch-size/K consecutive samples "
                  "from a random one (reads of a run coalesce over HTTP; 0 = shuffle samples)")
      ->capture_default_str();
  cmd->add_option("--rank", o->rank, "This process's rank (default: RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID)");
  cmd->add_option("--world-size", o->world_size, "Number of ranks (default: WORLD_SIZE, OMPI_COMM_WORLD_SIZE or SLURM_NTASKS)");
  cmd->add_flag("--drop-last", o->drop_last, "Drop each epoch's last partial batch");
  cmd->add_option("--io-depth", o->io_depth, "Reads in flight at most")->capture_default_str();
  cmd->add_option("--decode-threads", o->decode_threads, "Decode worker threads")->capture_default_str();
  cmd->add_option("--decode-nice", o->decode_nice,
                  "Nice increment for the decode threads (0-19): CPU-bound decode yields to the short "
                  "storage/collate/consumer hand-offs on busy cores; 0 keeps them at the process's priority")
      ->capture_default_str();
  cmd->add_option("--prefetch", o->prefetch, "Finished batches queued ahead of the consumer (over a network the batch pool also grows, "
                  "within half the memory budget, until storage may read 16 x --io-depth samples ahead)")->capture_default_str();
  cmd->add_option("--memory-budget", o->memory_budget, "Bytes the pipeline may hold in buffers")->capture_default_str();
  cmd->add_option("--compute-time", o->compute_time, "Emulated accelerator time per batch: 50ms or normal:50ms:5ms");
  cmd->add_option("--decode-cost", o->decode_cost, "Extra CPU time per sample in decode (plants a decode bottleneck)");
  cmd->add_option("--collate-cost", o->collate_cost, "Extra CPU time per batch in collate");
  cmd->add_option("--on-error", o->on_error, "fail, or skip bad samples and count them")->capture_default_str();
  cmd->add_flag("--no-accounting", o->no_accounting, "Turn stall accounting off (to measure its overhead)");
  cmd->add_option("--json", o->json_path, "Write the report as one JSON document to FILE");
  cmd->add_option("--engine", o->engine, "Local I/O engine: uring, posix or auto")->capture_default_str();
  cmd->add_flag("--direct", o->direct, "O_DIRECT reads of local files");
  cmd->add_option("--device", o->device, "Copy each batch to this GPU (cuda:N) with overlapped async copies");
  cmd->add_option("--gpu-direct", o->gpu_direct,
                  "Direct path for samples that need no decode: auto, on (an error when impossible) or off")
      ->capture_default_str();
  cmd->add_option("--cuda-streams", o->cuda_streams, "Host-to-device copies in flight (one per stream)")
      ->capture_default_str();
  add_net_options(*cmd, o->net);
  cmd->add_option("--throttle-bw", o->throttle_bw, "Cap storage bandwidth (bytes per second, e.g. 50MiB)");
  cmd->add_option("--throttle-latency", o->throttle_latency, "Add latency to every read (e.g. 2ms)");
  cmd->add_flag("--no-index", o->no_index, "Ignore tar indexes and scan the shards' headers");
  cmd->add_flag("--stages-alone", o->stages_alone,
                "After the run, measure storage, decode and collate each alone and report the pipeline's efficiency");
  cmd->add_option("--stages-alone-samples", o->stages_alone_samples, "Samples for --stages-alone")
      ->capture_default_str();
  cmd->add_option("--au-target", o->au_target, "Minimum accelerator utilisation (0..1) the run must reach, as in MLPerf Storage");
  cmd->callback([o, cmd, config_path, &exit_code] {
    if (!config_path->empty()) apply_config_file(*cmd, *config_path);
    exit_code = run(*o);
  });
}

}  // namespace feedline::tools
