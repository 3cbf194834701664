#include "bench_storage_cmd.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sys/statvfs.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "cli_checks.hpp"
#include "cli_error.hpp"
#include "feedline/core/redact.hpp"
#include "feedline/core/units.hpp"
#include "feedline/loader/storage_bench.hpp"
#include "feedline/storage/counters.hpp"
#include "feedline/storage/device_stats.hpp"
#include "feedline/storage/registry.hpp"
#include "feedline/storage/url_pattern.hpp"
#include "json_file.hpp"
#include "json_render.hpp"
#include "net_options.hpp"
#include "output.hpp"
#include "progress.hpp"
#include "run_options.hpp"
#include "signals.hpp"
#include "trace_file.hpp"

namespace feedline::tools {
namespace {

struct StorageBenchOptions {
  std::string url;
  loader::LoaderSettings settings;  // its network settings (the only ones it takes)
  std::string rw = "read";
  std::string bs = "1MiB";
  unsigned iodepth = 32;
  unsigned numjobs = 1;
  unsigned iodepth_batch = 1;
  bool direct = false;
  std::string engine = "auto";
  std::string size;
  std::string runtime;
  bool time_based = false;
  std::string create;
  std::string output = "text";
  bool sqpoll = false;
  bool fixedbufs = true;
  bool registerfiles = false;
  std::uint64_t seed = 0x5eed;
  std::optional<std::string> trace_path;
  std::uint64_t trace_events = 1'000'000;
};

struct Plan {
  storage::BackendConfig backend;
  loader::StorageBenchConfig bench;
  std::optional<std::uint64_t> create;
};

Plan make_plan(const StorageBenchOptions& o) {
  Plan p;
  auto size_opt = [](const std::string& text, const char* flag) {
    auto r = parse_size(text);
    if (!r) throw UsageError(fmt::format("{}: {}", flag, r.error().message()));
    return *r;
  };
  if (o.rw == "read" || o.rw == "seqread") {
    p.bench.pattern = loader::AccessPattern::kSequential;
  } else if (o.rw == "randread") {
    p.bench.pattern = loader::AccessPattern::kRandom;
  } else {
    throw UsageError(fmt::format("--rw: unknown pattern '{}' (choose read or randread)", o.rw));
  }
  p.bench.block_size = size_opt(o.bs, "--bs");
  if (p.bench.block_size == 0) throw UsageError("--bs: block size must be positive");
  if (o.direct && p.bench.block_size % 4096 != 0) {
    throw UsageError(fmt::format(
        "--bs {} is not a multiple of 4 KiB, which --direct needs (try 4k, 64k or 1M)", o.bs));
  }
  p.bench.iodepth = o.iodepth;
  p.bench.numjobs = o.numjobs;
  if (o.iodepth_batch == 0 || o.iodepth_batch > o.iodepth) {
    throw UsageError(
        fmt::format("--iodepth_batch must be between 1 and --iodepth ({})", o.iodepth));
  }
  p.bench.iodepth_batch = o.iodepth_batch;
  if (!o.size.empty()) {
    p.bench.size = size_opt(o.size, "--size");
    if (p.bench.size == 0)
      throw UsageError("--size must be positive (leave it out to cover the whole file)");
  }
  if (!o.runtime.empty()) {
    auto r = parse_duration(o.runtime);
    if (!r) throw UsageError(fmt::format("--runtime: {}", r.error().message()));
    if (r->count() <= 0) throw UsageError("--runtime must be positive");
    p.bench.runtime = *r;
  }
  p.bench.time_based = o.time_based;
  if (o.time_based && o.runtime.empty())
    throw UsageError("--time-based needs --runtime (for example --runtime 10s)");
  p.bench.register_buffers = o.fixedbufs;
  p.bench.register_files = o.registerfiles;
  p.bench.seed = o.seed;
  if (!o.create.empty()) {
    p.create = size_opt(o.create, "--create");
    if (*p.create == 0) throw UsageError("--create: size must be positive");
  }
  auto engine = transports::parse_engine(o.engine);
  if (!engine) throw UsageError(fmt::format("--engine: {}", engine.error().message()));
  if (*engine == transports::EngineKind::kUring && !transports::uring_compiled_in()) {
    throw UsageError(
        "--engine uring: this feedline was built without io_uring (liburing); use --engine posix "
        "or auto");
  }
  p.backend.file.engine = *engine;
  if (o.sqpoll && *engine == transports::EngineKind::kPosix) {
    throw UsageError("--sqpoll is an io_uring option: it cannot go with --engine posix");
  }
  if (o.registerfiles && *engine == transports::EngineKind::kPosix) {
    throw UsageError("--registerfiles is an io_uring option: it cannot go with --engine posix");
  }
  p.backend.file.direct = o.direct;
  p.backend.file.sqpoll = o.sqpoll;
  p.backend.file.register_buffers = o.fixedbufs;
  std::vector<std::string> notes;
  apply_net_options(o.settings.net, o.url, p.backend, notes);
  for (const auto& n : notes) out::note(n);
  p.bench.stop = stop_token();
  p.backend.stop = stop_token();
  return p;
}

struct Report {
  const StorageBenchOptions& options;
  const Plan& plan;
  const storage::ObjectHandle& object;
  const loader::StorageBenchResult& result;
  std::optional<storage::DiskDelta> disk;
  std::string disk_note;
  std::string created;

  double bandwidth() const {
    return result.seconds > 0 ? static_cast<double>(result.stats.bytes) / result.seconds : 0;
  }
  // The reads that completed, as fio counts them: the queue's ops less those cancelled (Ctrl-C
  // ends the reads in flight: they read nothing) and those that failed.
  std::uint64_t ios() const {
    const auto& s = result.stats;
    return s.ops - std::min(s.ops, s.cancelled + s.errors);
  }
  double iops() const {
    return result.seconds > 0 ? static_cast<double>(ios()) / result.seconds : 0;
  }
  double cpu_per_gib() const {
    return result.stats.bytes
               ? result.cpu.total() / (static_cast<double>(result.stats.bytes) / (1u << 30))
               : 0;
  }
  double cpu_per_io() const { return ios() ? result.cpu.total() / static_cast<double>(ios()) : 0; }

  nlohmann::json json() const {
    const auto& s = result.stats;
    nlohmann::json j = {
        {"url", redact_url(options.url)},
        {"rw", plan.bench.pattern == loader::AccessPattern::kSequential ? "read" : "randread"},
        {"bs", plan.bench.block_size},
        {"iodepth", plan.bench.iodepth},
        {"numjobs", plan.bench.numjobs},
        {"size", plan.bench.size ? plan.bench.size : object.size()},
        {"time_based", plan.bench.time_based},
        {"engine", result.info.engine},
        {"engine_features", result.info.features},
        {"notes", result.info.notes},
        {"direct", plan.backend.file.direct},
        {"bytes", s.bytes},
        {"ios", ios()},
        {"cancelled", s.cancelled},
        {"seconds", result.seconds},
        {"bandwidth_bytes_per_second", bandwidth()},
        {"iops", iops()},
        {"latency_ns", histogram_json(s.lat)},
        {"slat_ns", histogram_json(s.slat)},
        {"clat_ns", histogram_json(s.clat)},
        {"mean_in_flight", s.mean_depth()},
        {"cpu", {{"user_seconds", result.cpu.user_s}, {"system_seconds", result.cpu.system_s}}},
        {"cpu_seconds_per_gib", cpu_per_gib()},
        {"cpu_seconds_per_io", cpu_per_io()},
        {"retries", s.retries},
        {"short_reads", s.short_reads},
        {"bounced_bytes", s.bounced_bytes},
        {"errors", s.errors},
        {"interrupted", result.interrupted},
        {"backend_counters", s.counters},
    };
    // The queue's stats as every command renders them (run --json's "io" has the same keys); the
    // top-level keys above are bench storage's documented, fio-like summary of them.
    j["io"] = io_stats_json(s);
    j["backend_histograms"] = j["io"]["histograms"];
    if (disk) {
      j["device"] = {{"name", disk->device},
                     {"utilisation", disk->utilisation},
                     {"reads", disk->reads},
                     {"read_bytes", disk->read_bytes}};
    } else {
      j["device"] = {{"name", nullptr}, {"note", disk_note}};
    }
    j["error"] = result.error ? nlohmann::json(result.error->what()) : nlohmann::json(nullptr);
    if (!created.empty()) j["created"] = created;
    return j;
  }

  std::string text() const {
    const auto& s = result.stats;
    std::string out;
    auto line = [&out](std::string_view l) { out::add_line(out, l); };
    const auto& b = plan.bench;
    line(fmt::format("feedline bench storage: {}", redact_url(options.url)));
    if (!created.empty()) line(fmt::format("  {}", created));
    line(fmt::format("  job: {} bs={} iodepth={} numjobs={} {} size={}{}",
                     b.pattern == loader::AccessPattern::kSequential ? "read" : "randread",
                     format_bytes(static_cast<double>(b.block_size)), b.iodepth, b.numjobs,
                     plan.backend.file.direct ? "direct" : "buffered",
                     format_bytes(static_cast<double>(b.size ? b.size : object.size())),
                     b.time_based ? fmt::format(" runtime={}", options.runtime) : ""));
    line(fmt::format("  engine: {}{}", result.info.engine,
                     result.info.features.empty()
                         ? ""
                         : fmt::format(" ({})", fmt::join(result.info.features, ", "))));
    for (const auto& n : result.info.notes) line(fmt::format("  note: {}", n));
    line(fmt::format("  read: {}  {} IOPS  {} in {:.2f} s{}", format_rate(bandwidth()),
                     format_count(iops()), format_bytes(static_cast<double>(s.bytes)),
                     result.seconds, result.interrupted ? "  [interrupted: partial result]" : ""));
    auto lat = [](const Histogram& h) {
      return fmt::format("p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
                         format_duration_ns(static_cast<double>(h.percentile(0.5))),
                         format_duration_ns(static_cast<double>(h.percentile(0.9))),
                         format_duration_ns(static_cast<double>(h.percentile(0.99))),
                         format_duration_ns(static_cast<double>(h.percentile(0.999))),
                         format_duration_ns(static_cast<double>(h.max())));
    };
    line(fmt::format("  lat:  {}", lat(s.lat)));
    line(fmt::format("  slat: {}", lat(s.slat)));
    line(fmt::format("  clat: {}", lat(s.clat)));
    line(fmt::format("  in flight: {:.1f} on average (iodepth {} x {} jobs)", s.mean_depth(),
                     b.iodepth, b.numjobs));
    line(fmt::format("  cpu: {:.2f} s user + {:.2f} s sys = {:.3f} s/GiB, {} per IO",
                     result.cpu.user_s, result.cpu.system_s, cpu_per_gib(),
                     format_duration_ns(cpu_per_io() * 1e9)));
    if (disk) {
      line(fmt::format(
          "  device {}: {:.1f}% busy, {} read from the device ({:.0f}% of the bytes delivered)",
          disk->device, disk->utilisation * 100,
          format_bytes(static_cast<double>(disk->read_bytes)),
          s.bytes ? 100.0 * static_cast<double>(disk->read_bytes) / static_cast<double>(s.bytes)
                  : 0.0));
    } else {
      line(fmt::format("  device: unknown ({})", disk_note));
    }
    if (s.cancelled && !result.interrupted) {
      // The reads the deadline cut (loader::StorageBenchConfig::runtime): a slow server, or
      // retries waiting out a Retry-After. Their bytes and retries are in no figure above.
      line(
          fmt::format("  cut at the runtime: {} read(s) still in flight a second past it were "
                      "cancelled (a slow or throttling server; counted in no figure above)",
                      s.cancelled));
    }
    if (s.retries || s.short_reads || s.bounced_bytes) {
      line(fmt::format("  retries {}  short reads {}  bounced {}", s.retries, s.short_reads,
                       format_bytes(static_cast<double>(s.bounced_bytes))));
    }
    for (const auto& [name, h] : s.histograms) line(fmt::format("  {}: {}", name, lat(h)));
    if (!s.counters.empty()) {
      std::vector<std::string> parts;
      for (const auto& [name, v] : s.counters) parts.push_back(storage::counter_text(name, v));
      line(fmt::format("  backend: {}", fmt::join(parts, "  ")));
    }
    if (result.error) line(fmt::format("  error: {}", result.error->what()));
    return out;
  }
};

// --create on a local filesystem without the room: say so before writing, not after filling the
// disk for minutes (a full disk is a runtime failure, exit 1).
void check_room(const std::string& path, std::uint64_t more) {
  const std::filesystem::path p(path);
  const std::filesystem::path dir =
      p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) return;  // the write itself will say what is wrong
  const std::uint64_t avail = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (more > avail) {
    throw CommandError(Error(Errc::kResourceExhausted,
                             fmt::format("--create needs {} more, the filesystem has {} free",
                                         format_bytes(static_cast<double>(more)),
                                         format_bytes(static_cast<double>(avail))))
                           .with_object(path)
                           .with_hint("use a smaller --create SIZE, or a filesystem with room"));
  }
}

// What the trace says of the command that wrote it (--trace).
nlohmann::json trace_about(const StorageBenchOptions& o, int code) {
  return {{"command", "feedline bench storage"}, {"url", redact_url(o.url)}, {"exit_code", code}};
}

int run_checked(const StorageBenchOptions& o, const Plan& plan, TraceFile& trace) {
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  if (storage::has_brace_pattern(o.url)) {
    throw UsageError(
        "bench storage reads one object; brace patterns name datasets (use `feedline run`)");
  }
  storage::Resolved resolved = value_or_exit(registry.open(o.url, plan.backend));
  if (resolved.key.ends_with('/')) {  // s3://bucket/prefix/, http://host/dir/: no object to stat
    throw UsageError(
        fmt::format("{} names a directory: bench storage reads one object (name a file in it; "
                    "`feedline run` reads directories)",
                    redact_url(o.url)));
  }
  storage::Backend& backend = *resolved.backend;

  std::string created;
  if (plan.create) {
    auto st = backend.stat(resolved.key);
    if (!st && st.error().code() != Errc::kNotFound) throw CommandError(st.error());
    if (!st || st->size < *plan.create) {
      if (backend.scheme() == "file") check_room(resolved.key, *plan.create - (st ? st->size : 0));
      if (o.output == "text") {
        out::eprint("laying out {} of random data in {} ...\n",
                    format_bytes(static_cast<double>(*plan.create)), redact_url(o.url));
      }
      value_or_exit(
          loader::create_random_object(backend, resolved.key, *plan.create, o.seed, stop_token()));
      created =
          fmt::format("created {} of random data", format_bytes(static_cast<double>(*plan.create)));
    }
  }
  auto object = backend.open(resolved.key);
  if (!object) {
    Error e = std::move(object).error();
    if (e.code() == Errc::kNotFound)
      e.with_hint("check the path, or lay out a test file with --create SIZE");
    throw CommandError(std::move(e));
  }
  value_or_exit(loader::validate(plan.bench, **object, backend.caps()));

  std::optional<storage::DeviceMonitor> monitor;
  std::string disk_note;
  if (backend.scheme() == "file") {
    auto m = storage::DeviceMonitor::for_path(resolved.key);
    if (m)
      monitor = std::move(*m);
    else
      disk_note = m.error().message();
  } else {
    disk_note = fmt::format("{}:// has no local block device", backend.scheme());
  }
  std::optional<storage::DiskCounters> before;
  if (monitor) {
    auto c = monitor->sample();
    if (c)
      before = *c;
    else
      disk_note = c.error().message();
  }

  loader::BenchProgress progress;
  auto result = [&] {
    ProgressLine line(o.output == "text" && stdout_is_tty(), [&progress](double s) {
      const double bytes = static_cast<double>(progress.bytes.load(std::memory_order_relaxed));
      const double ios = static_cast<double>(progress.ios.load(std::memory_order_relaxed));
      return fmt::format("[{:5.1f}s] {}  {} IOPS  {} read", s, format_rate(s > 0 ? bytes / s : 0),
                         format_count(s > 0 ? ios / s : 0), format_bytes(bytes));
    });
    return loader::run_storage_bench(backend, **object, plan.bench, &progress);
  }();
  value_or_exit(result);
  Report report{o, plan, **object, *result, std::nullopt, disk_note, created};
  if (monitor && before) {
    auto after = monitor->sample();
    if (after) report.disk = storage::DeviceMonitor::delta(monitor->device(), *before, *after);
  }
  int code = result->error         ? exit_code_for(*result->error)
             : result->interrupted ? exit_code_for_stop()
                                   : kExitOk;
  code = trace.finish(trace_about(o, code), code);
  if (o.output == "json") {
    nlohmann::json j = report.json();
    if (code != kExitOk) j["exit_code"] = code;
    out::print("{}\n", dump_json(j, 2, Json::kAscii));
  } else {
    out::write_stdout(report.text());
  }
  if (result->error) out::error(result->error->what());
  return code;
}

int run(const StorageBenchOptions& o) {
  if (o.output != "text" && o.output != "json") {
    throw UsageError(fmt::format("--output: unknown format '{}' (choose text or json)", o.output));
  }
  // The trace must not be the file it reads (nor, with --create, the one it lays out).
  value_or_usage(check_output_paths({{"--trace", &o.trace_path}}, o.url));
  TraceFile trace = value_or_usage(TraceFile::prepare(o.trace_path, "--trace", o.trace_events));
  try {
    Plan plan = make_plan(o);
    plan.bench.trace = trace.log();
    return run_checked(o, plan, trace);
  } catch (const CommandError& e) {
    trace.finish(trace_about(o, e.code()), e.code());  // the trace up to the failure
    // --output json: a failure is a JSON document too (the error line still goes to stderr).
    if (o.output == "json") {
      nlohmann::json j = {
          {"url", redact_url(o.url)}, {"error", e.error().what()}, {"exit_code", e.code()}};
      out::print("{}\n", dump_json(j, 2, Json::kAscii));
    }
    throw;
  }
}

}  // namespace

void add_bench_storage(CLI::App& bench, int& exit_code) {
  auto o = std::make_shared<StorageBenchOptions>();
  CLI::App* cmd =
      bench.add_subcommand("storage", "Measure how fast a storage URL serves reads (fio-style)");
  cmd->add_option("url", o->url,
                  "What to read: a file path, file:///path, s3://bucket/key, http(s)://host/path, "
                  "nfs://server/export/path or mem://key")
      ->required();
  cmd->add_option("--rw", o->rw, "Access pattern: read (sequential) or randread")
      ->capture_default_str();
  cmd->add_option("--bs", o->bs, "Block size per read (4k, 128KiB, 1M)")->capture_default_str();
  cmd->add_option("--iodepth", o->iodepth, "Reads in flight per job")
      ->capture_default_str()
      ->check(whole_number(1, 65536));
  cmd->add_option("--numjobs", o->numjobs, "Parallel jobs, each with its own queue")
      ->capture_default_str()
      ->check(whole_number(1, 1024));
  cmd->add_option("--iodepth_batch,--iodepth-batch", o->iodepth_batch,
                  "Reads re-issued per submission (fio's iodepth_batch_submit)")
      ->capture_default_str();
  cmd->add_flag("--direct", o->direct, "O_DIRECT: bypass the page cache");
  add_net_options(*cmd, o->settings);
  cmd->add_option("--engine", o->engine, "I/O engine: uring, posix or auto")->capture_default_str();
  cmd->add_option("--size", o->size, "Bytes of the file to cover (default: all of it)");
  cmd->add_option("--runtime", o->runtime,
                  "Stop after this long (10s, 2m); with --time-based, loop until then");
  cmd->add_flag("--time-based,--time_based", o->time_based,
                "Loop over the file until --runtime ends");
  cmd->add_option("--create", o->create,
                  "Lay out the file with SIZE bytes of random data if it is missing or smaller");
  cmd->add_option("--output", o->output, "Report format: text or json")->capture_default_str();
  cmd->add_flag("--sqpoll", o->sqpoll, "io_uring: kernel submission-queue polling thread");
  cmd->add_flag("--fixedbufs,!--no-fixedbufs", o->fixedbufs,
                "io_uring: registered buffers (on by default; falls back when refused)");
  cmd->add_flag("--registerfiles", o->registerfiles, "io_uring: registered file descriptors");
  cmd->add_option("--seed", o->seed, "Seed for random offsets and --create data")
      ->check(whole_number(0, ~std::uint64_t{0}));
  add_trace_options(*cmd, o->trace_path, o->trace_events);
  cmd->callback([o, &exit_code] { exit_code = run(*o); });
}

}  // namespace feedline::tools
