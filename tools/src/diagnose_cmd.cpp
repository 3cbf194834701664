// `feedline diagnose URL [run flags] [--what-if K=V,...]... [--verify]`: the controlled runs
// (loader/diagnose.hpp), the capacity model's prediction for the run's settings and for each
// what-if (loader/capacity.hpp), and with --verify each what-if this machine can realise run
// and set against its prediction.
#include "diagnose_cmd.hpp"

#include <fmt/format.h>
#include <sched.h>

#include <chrono>
#include <cmath>
#include <optional>

#include "cli_checks.hpp"
#include "cli_error.hpp"
#include "config_file.hpp"
#include "diagnose_report.hpp"
#include "feedline/core/cpus.hpp"
#include "feedline/core/time_limit.hpp"
#include "feedline/core/units.hpp"
#include "feedline/loader/accelerators.hpp"
#include "feedline/loader/capacity.hpp"
#include "feedline/loader/diagnose.hpp"
#include "feedline/loader/stage_bench.hpp"
#include "feedline/loader/tune.hpp"
#include "feedline/storage/registry.hpp"
#include "html_report.hpp"
#include "json_file.hpp"
#include "knobs.hpp"
#include "output.hpp"
#include "run_options.hpp"
#include "signals.hpp"
#include "trace_file.hpp"
#include "what_if.hpp"

namespace feedline::tools {
namespace {

using nlohmann::json;

struct DiagnoseOptions {
  RunOptions run;
  std::string config_path;
  std::string accelerator_type;
  std::vector<std::string> what_ifs;
  bool verify = false;
  bool tune = false;
  std::string duration = "8s";
};

// The CPUs this process may use: the first n of them for a what-if of fewer cores.
class CpuAffinity {
 public:
  explicit CpuAffinity(unsigned n) {
    if (sched_getaffinity(0, sizeof(saved_), &saved_) != 0) return;
    cpu_set_t fewer;
    CPU_ZERO(&fewer);
    unsigned kept = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && kept < n; ++cpu) {
      if (CPU_ISSET(cpu, &saved_)) {
        CPU_SET(cpu, &fewer);
        ++kept;
      }
    }
    active_ = sched_setaffinity(0, sizeof(fewer), &fewer) == 0;
  }
  ~CpuAffinity() {
    if (active_) sched_setaffinity(0, sizeof(saved_), &saved_);
  }
  CpuAffinity(const CpuAffinity&) = delete;
  CpuAffinity& operator=(const CpuAffinity&) = delete;

 private:
  cpu_set_t saved_{};
  bool active_ = false;
};

bool is_local(const std::string& url) {
  auto parsed = storage::parse_url(url);
  return parsed && parsed->scheme == "file";
}

std::string local_path(const std::string& url) {
  auto parsed = storage::parse_url(url);
  return parsed && parsed->scheme == "file" ? parsed->path : std::string();
}

// The model's settings for a what-if.
// How much faster the storage serves the what-if's read order than the run's: storage order
// from the controlled runs; shards shuffled instead of samples measured now, storage alone in
// that order for a short while (an eighth of the baseline's time). 1 where the order is the run's.
double order_speedup_for(const WhatIf& w, const RunOptions& base, const RunSetup& st,
                         const RunDataset& rd, const loader::Diagnosis& d,
                         std::chrono::duration<double> duration) {
  if (w.options.shuffle == base.shuffle && w.options.shard_shuffle == base.shard_shuffle) {
    return 1;
  }
  const loader::Measurements& m = d.measurements;
  if (!w.options.shuffle && base.shuffle && base.shard_shuffle == 0) {
    return m.storage_order_speedup;
  }
  if (m.storage_alone_samples_per_second <= 0) return 1;
  auto alone = loader::measure_storage_alone(
      *rd.backend, rd.dataset, st.ctx.config, rd.dataset.samples.size(),
      std::chrono::duration_cast<std::chrono::nanoseconds>(duration / 8));
  if (!alone || alone->samples_per_second <= 0) return 1;
  return alone->samples_per_second / m.storage_alone_samples_per_second;
}

loader::Settings settings_for(const WhatIf& w, const RunOptions& base, const RunDataset& rd,
                              const loader::Diagnosis& d, std::chrono::duration<double> duration,
                              std::stop_token stop) {
  const RunSetup st = make_run_setup(w.options, stop);
  loader::Settings s = loader::settings_of(*rd.backend, rd.dataset, st.ctx.config, st.compute,
                                           w.accelerators, d.measurements);
  s.storage_bytes_per_second = d.as_run.storage_bytes_per_second;
  if (w.storage_bytes_per_second) s.storage_bytes_per_second = *w.storage_bytes_per_second;
  s.added_latency_seconds = w.added_latency_seconds;
  if (w.latency_seconds)
    s.added_latency_seconds += *w.latency_seconds - d.measurements.read_latency_seconds;
  if (w.cores) s.cores = *w.cores;
  s.order_speedup = order_speedup_for(w, base, st, rd, d, duration);
  return s;
}

// Why this machine cannot run the what-if ("" when it can).
std::string why_not_realisable(const WhatIf& w, const RunOptions& base_options,
                               const RunSetup& base, const loader::Diagnosis& d) {
  if (w.cores && *w.cores > usable_cores()) {
    return fmt::format("this machine has {} usable core(s)", usable_cores());
  }
  const bool throttled = base.throttle.has_value();
  if (w.storage_bytes_per_second && !throttled &&
      *w.storage_bytes_per_second > d.measurements.storage_bytes_per_second_seen) {
    return fmt::format("this storage was not seen going faster than {}",
                       format_rate(d.measurements.storage_bytes_per_second_seen));
  }
  if (w.latency_seconds && *w.latency_seconds < d.measurements.read_latency_seconds) {
    return fmt::format("below the read latency measured here ({})",
                       format_duration_ns(d.measurements.read_latency_seconds * 1e9));
  }
  if ((w.latency_seconds || w.added_latency_seconds > 0) &&
      !base_options.throttle_latency.empty() && !parse_duration(base_options.throttle_latency)) {
    return "the run's --throttle-latency is a distribution: a latency cannot be added to it";
  }
  return {};
}

// Runs the what-if for `duration` and returns its samples/s.
Result<double> realise(const WhatIf& w, const RunOptions& base_options, RunDataset& rd,
                       const loader::Diagnosis& d, std::chrono::duration<double> duration,
                       std::stop_token stop) {
  RunOptions o = w.options;
  const bool storage_change =
      w.storage_bytes_per_second || w.latency_seconds || w.added_latency_seconds > 0;
  if (w.storage_bytes_per_second) {
    o.throttle_bw = fmt::format("{}", static_cast<std::uint64_t>(*w.storage_bytes_per_second));
  }
  if (w.latency_seconds || w.added_latency_seconds > 0) {
    double added = w.added_latency_seconds;
    if (w.latency_seconds) added += *w.latency_seconds - d.measurements.read_latency_seconds;
    if (!base_options.throttle_latency.empty()) {
      added +=
          std::chrono::duration<double>(*parse_duration(base_options.throttle_latency)).count();
    }
    o.throttle_latency =
        fmt::format("{}ns", static_cast<std::uint64_t>(std::max(0.0, added) * 1e9));
  }
  RunSetup st = make_run_setup(o, stop);
  std::optional<RunDataset> own;
  RunDataset* data = &rd;
  if (storage_change) {
    own = open_run_dataset(o, st);
    data = &*own;
  }
  loader::LoaderConfig c = st.ctx.config;
  c.sampler.epochs = 1u << 20;
  std::optional<CpuAffinity> affinity;
  if (w.cores && *w.cores < usable_cores()) affinity.emplace(*w.cores);
  if (w.accelerators > 1) {
    // Timed from when the accelerators are open, as the single loader's run below is.
    FEEDLINE_ASSIGN_OR_RETURN(
        loader::HostReport host,
        loader::run_accelerators(*data->backend, data->dataset, c, w.accelerators, st.compute, stop,
                                 nullptr, nullptr,
                                 std::chrono::duration_cast<std::chrono::nanoseconds>(duration)));
    if (host.error) return fail(*host.error);
    double rate = 0;  // the accelerators' rates after their first batch, together
    for (const auto& a : host.accelerators) rate += loader::steady_samples_per_second(a.consumer);
    return rate;
  }
  FEEDLINE_ASSIGN_OR_RETURN(auto loader, loader::Loader::open(*data->backend, data->dataset, c));
  const loader::PipelineReport r = loader::timed_run(*loader, st.compute, duration, stop);
  if (r.error) return fail(*r.error);
  return loader::steady_samples_per_second(r.consumer);
}

loader::TuneResult tune(const RunSetup& st, RunDataset& rd, const loader::Diagnosis& d,
                        const loader::CapacityModel& model, std::chrono::duration<double> step) {
  loader::TuneOptions to;
  to.step = step;
  to.cores = d.as_run.cores;
  const double cap = d.as_run.storage_bytes_per_second;
  auto settings = [&](const loader::LoaderConfig& c) {
    loader::Settings s =
        loader::settings_of(*rd.backend, rd.dataset, c, st.compute, 1, d.measurements);
    s.storage_bytes_per_second = cap;
    return s;
  };
  return value_or_exit(
      loader::autotune(*rd.backend, rd.dataset, st.ctx.config, st.compute, model, settings, to));
}

int diagnose_checked(const DiagnoseOptions& o, std::chrono::duration<double> length, RunSetup& st,
                     JsonFile& json_file, const TraceFile& trace, HtmlFile& html);

int run(const DiagnoseOptions& o) {
  const RunOptions& ro = o.run;
  if (ro.accelerators > 1) {
    throw UsageError(
        "--accelerators: diagnose measures one accelerator's pipeline; ask what N would give with "
        "--what-if accelerators=N");
  }
  if (ro.stages_alone)
    throw UsageError("--stages-alone: diagnose measures the stages alone itself");
  if (ro.runs > 1) throw UsageError("--runs is a run flag: diagnose makes its own runs");
  auto duration = parse_duration(o.duration);
  if (!duration || duration->count() <= 0) {
    throw UsageError(
        fmt::format("--duration: {}", duration ? "must be positive" : duration.error().message()));
  }
  const std::chrono::duration<double> length = *duration;
  RunSetup st = make_run_setup(ro, stop_token());
  value_or_usage(check_output_paths(
      {{"--json", &ro.json_path}, {"--trace", &ro.trace_path}, {"--html", &ro.html_path}}, ro.url));
  JsonFile json_file;
  if (ro.json_path) json_file = value_or_usage(JsonFile::prepare(*ro.json_path, "--json"));
  TraceFile trace = value_or_usage(TraceFile::prepare(ro.trace_path, "--trace", ro.trace_events));
  HtmlFile html = value_or_usage(HtmlFile::prepare(ro.html_path, "--html"));
  // The trace is of the baseline (the user's own settings), written when diagnose ends, however
  // it ends.
  const nlohmann::json about = {{"command", "feedline diagnose"},
                                {"url", st.ctx.url},
                                {"run", "the baseline: the pipeline as configured"}};
  try {
    return trace.finish(about, diagnose_checked(o, length, st, json_file, trace, html));
  } catch (const CommandError& e) {
    // A diagnose that did not get to its report (a failed or interrupted controlled run, a
    // what-if refused) still leaves a document saying why, as run's does: --json never goes on
    // showing an older diagnosis as if it were this one.
    trace.finish(about, e.code());
    const nlohmann::json doc = {{"url", st.ctx.url},
                                {"error", e.error().what()},
                                {"exit_code", e.code()},
                                {"interrupted", e.error().code() == Errc::kCancelled}};
    if (auto w = json_file.commit(doc); !w) out::error(w.error().what());
    html.finish({"feedline diagnose", &doc, nullptr, {}, nullptr}, e.code());
    throw;
  }
}

int diagnose_checked(const DiagnoseOptions& o, std::chrono::duration<double> length, RunSetup& st,
                     JsonFile& json_file, const TraceFile& trace, HtmlFile& html) {
  const RunOptions& ro = o.run;
  std::vector<WhatIf> asked;
  for (const std::string& t : o.what_ifs) asked.push_back(parse_what_if(t, ro));
  RunDataset rd = open_run_dataset(ro, st);
  value_or_usage(loader::check_diagnosable(rd.dataset, st.ctx.config));
  out::print(
      "feedline diagnose: {} ({}, {} samples), controlled runs of {} (the baseline) and "
      "less\n",
      st.ctx.url, st.ctx.format, rd.dataset.samples.size(), o.duration);
  // The cold run: the same files with O_DIRECT, where the run reads through the page cache.
  std::optional<RunDataset> cold;
  std::vector<std::string> notes;
  if (is_local(ro.url) && !ro.direct) {
    RunOptions oc = ro;
    oc.direct = true;
    try {
      RunSetup sc = make_run_setup(oc, stop_token());
      cold = open_run_dataset(oc, sc);
    } catch (const CommandError& e) {
      notes.push_back(fmt::format("cold run skipped: {}", e.error().what()));
    }
  }
  loader::DiagnoseOptions dopt;
  dopt.duration = length;
  dopt.cold = cold ? cold->backend.get() : nullptr;
  dopt.local_path = local_path(ro.url);
  dopt.storage_bytes_per_second_cap = st.throttle ? st.throttle->bytes_per_second : 0;
  loader::LoaderConfig traced = st.ctx.config;
  traced.trace = trace.log();
  if (html.enabled()) traced.watchers.push_back(html.timeline());  // the baseline's course
  loader::Diagnosis d =
      value_or_exit(loader::diagnose(*rd.backend, rd.dataset, traced, st.compute, dopt));
  notes.insert(notes.end(), d.notes.begin(), d.notes.end());
  const double achieved = loader::steady_samples_per_second(d.baseline.consumer);
  const loader::CapacityModel model(d.measurements, d.as_run, achieved);
  const loader::Measurements& m = d.measurements;
  std::vector<WhatIf> what_ifs =
      asked.empty() ? default_what_ifs(ro, d.as_run.cores, m.storage_bytes_per_second_seen) : asked;
  std::vector<Outcome> outcomes;
  for (WhatIf& w : what_ifs) {
    Outcome oc;
    oc.predicted = model.predict(settings_for(w, ro, rd, d, length, stop_token()));
    oc.not_realisable = why_not_realisable(w, ro, st, d);
    oc.what = std::move(w);
    outcomes.push_back(std::move(oc));
  }
  bool stopped = false;
  std::optional<loader::TuneResult> tuned;
  if (o.tune && !stop_requested()) tuned = tune(st, rd, d, model, length / 2);
  if (o.verify) {
    for (Outcome& oc : outcomes) {
      if (!oc.not_realisable.empty()) continue;
      if (stop_requested()) {
        stopped = true;
        break;
      }
      auto r = realise(oc.what, ro, rd, d, length, stop_token());
      if (r) {
        oc.achieved = *r;
      } else {
        oc.failed = r.error().what();
      }
    }
  }

  DiagnoseReport report{st.ctx.url, st.ctx.format, length.count(), d,        model,
                        outcomes,   tuned,         notes,          o.verify, stopped};
  out::print("{}", diagnose_text(report));
  json doc = diagnose_json(report);
  int code = stopped ? exit_code_for_stop() : kExitOk;
  if (code != kExitOk) doc["exit_code"] = code;
  if (auto w = json_file.commit(doc); !w) {
    out::error(w.error().what());
    if (code == kExitOk) code = kExitRuntime;
  }
  if (html.enabled()) {
    // The page shows the baseline as a run's report would, and what diagnose adds.
    nlohmann::json baseline = run_document(d.baseline, st, rd.dataset, nullptr);
    code = html.finish({"feedline diagnose", &baseline, &doc, {}, &d.baseline.io.stats.lat}, code);
  }
  return code;
}

}  // namespace

nlohmann::json autotune_run(const RunOptions& o, RunSetup& st, RunDataset& rd) {
  if (o.accelerators > 1) {
    throw UsageError("--autotune tunes one accelerator's pipeline: leave out --accelerators");
  }
  const std::chrono::duration<double> length{4.0};
  loader::DiagnoseOptions dopt;
  dopt.duration = length;
  dopt.local_path = local_path(o.url);
  dopt.storage_bytes_per_second_cap = st.throttle ? st.throttle->bytes_per_second : 0;
  out::print("feedline run --autotune: controlled runs ({} baseline), then the search\n", "4s");
  const loader::Diagnosis d =
      value_or_exit(loader::diagnose(*rd.backend, rd.dataset, st.ctx.config, st.compute, dopt));
  const loader::CapacityModel model(d.measurements, d.as_run,
                                    loader::steady_samples_per_second(d.baseline.consumer));
  const loader::TuneResult t = tune(st, rd, d, model, length / 2);
  out::print("{}", tune_text(t));
  loader::LoaderConfig& c = st.ctx.config;
  c.io_depth = t.tuned.io_depth;
  c.decode_threads = t.tuned.decode_threads;
  c.prefetch_batches = t.tuned.prefetch_batches;
  return tune_json(t);
}

void add_diagnose(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<DiagnoseOptions>();
  CLI::App* cmd = app.add_subcommand(
      "diagnose",
      "Controlled runs on a dataset, a capacity model of the pipeline, and what each change would "
      "give (--what-if), run and checked (--verify)");
  add_config_options(*cmd, o->config_path, o->accelerator_type);
  cmd->add_option("url", o->run.url, "Dataset root, as for run")->required();
  add_run_options(*cmd, o->run);
  add_trace_options(*cmd, o->run.trace_path, o->run.trace_events);
  add_html_option(*cmd, o->run.html_path);
  cmd->add_option("--what-if", o->what_ifs,
                  "A change to predict: KEY=VALUE[,KEY=VALUE...] (decode-threads, io-depth, "
                  "prefetch, memory-budget, storage-threads, batch-size, compute-time, "
                  "accelerators, cores, storage-bw, storage-latency); repeatable. Default: each "
                  "knob doubled, storage twice as fast, 5 ms more latency, twice the cores, two "
                  "accelerators");
  cmd->add_flag("--verify", o->verify,
                "Run every what-if this machine can realise and print predicted against achieved");
  cmd->add_flag("--tune", o->tune,
                "Tune io-depth, decode-threads and prefetch: from the model's optimum, "
                "hill-climbing on measured throughput (runs of half --duration)");
  cmd->add_option("--duration", o->duration,
                  "How long the baseline (and each verification) runs; the other controlled runs "
                  "take a quarter of it")
      ->capture_default_str();
  cmd->callback([o, cmd, &exit_code] {
    apply_config_options(*cmd, o->config_path);
    exit_code = run(*o);
  });
}

}  // namespace feedline::tools
