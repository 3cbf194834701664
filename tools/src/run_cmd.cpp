#include "run_cmd.hpp"

#include <fmt/format.h>

#include <atomic>
#include <optional>

#include "cli_error.hpp"
#include "config_file.hpp"
#include "diagnose_cmd.hpp"
#include "feedline/core/units.hpp"
#include "feedline/loader/diagnose.hpp"
#include "feedline/loader/emulate.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/loader/metrics.hpp"
#include "feedline/loader/stage_bench.hpp"
#include "host_run.hpp"
#include "html_report.hpp"
#include "job_run.hpp"
#include "json_file.hpp"
#include "output.hpp"
#include "progress.hpp"
#include "run_options.hpp"
#include "run_report.hpp"
#include "signals.hpp"
#include "trace_file.hpp"

namespace feedline::tools {
namespace {

nlohmann::json stages_alone_json(const loader::StagesAlone& alone,
                                 const loader::PipelineReport& report) {
  nlohmann::json stages = nlohmann::json::array();
  out::print("  stages alone ({} samples):\n", alone.stages.front().samples);
  for (const auto& st : alone.stages) {
    out::print("    {:<8} {:>10.0f} samples/s  {}\n", loader::stage_name(st.stage),
               st.samples_per_second,
               format_rate(st.seconds > 0 ? static_cast<double>(st.bytes) / st.seconds : 0));
    stages.push_back({{"stage", loader::stage_name(st.stage)},
                      {"samples", st.samples},
                      {"bytes", st.bytes},
                      {"seconds", st.seconds},
                      {"samples_per_second", st.samples_per_second},
                      {"cpu_seconds", st.cpu_seconds}});
  }
  const std::string slowest(alone.slowest ? loader::stage_name(*alone.slowest) : "none");
  const double efficiency =
      alone.slowest_samples_per_second > 0
          ? report.consumer.samples_per_second / alone.slowest_samples_per_second
          : 0;
  out::print("    pipeline efficiency: {:.0f}% of the slowest stage alone ({}, {:.0f} samples/s)\n",
             efficiency * 100, slowest, alone.slowest_samples_per_second);
  nlohmann::json doc = {{"stages", stages},
                        {"slowest", slowest},
                        {"slowest_samples_per_second", alone.slowest_samples_per_second},
                        {"efficiency", efficiency}};
  if (alone.cpu_ceiling_samples_per_second > 0) {
    const double of_ceiling =
        report.consumer.samples_per_second / alone.cpu_ceiling_samples_per_second;
    out::print(
        "    CPU: the stages need {:.1f} CPU-us per sample together: at most {:.0f} samples/s on "
        "{} "
        "core(s); the run reached {:.0f}% of that{}\n",
        alone.cpu_per_sample_us, alone.cpu_ceiling_samples_per_second, alone.cores,
        of_ceiling * 100,
        alone.cpu_ceiling_samples_per_second < alone.slowest_samples_per_second
            ? " (the cores, not one stage, bound this run)"
            : "");
    doc["cpu_per_sample_us"] = alone.cpu_per_sample_us;
    doc["cores"] = alone.cores;
    doc["cpu_ceiling_samples_per_second"] = alone.cpu_ceiling_samples_per_second;
    doc["efficiency_vs_cpu_ceiling"] = of_ceiling;
  }
  return doc;
}

int run_checked(const RunOptions& o, RunSetup& st, JsonFile& json, const TraceFile& trace,
                HtmlFile& html) {
  RunContext& ctx = st.ctx;
  loader::LoaderConfig& c = ctx.config;
  RunDataset rd = open_run_dataset(o, st);
  storage::Backend& backend = *rd.backend;
  const loader::Dataset& dataset = rd.dataset;
  nlohmann::json tuned = nullptr;
  if (o.autotune) tuned = autotune_run(o, st, rd);
  c.trace = trace.log();  // the run itself, not the tuning's runs
  if (html.enabled()) c.watchers.push_back(html.timeline());
  if (o.accelerators > 1) return run_on_host(o, st, rd, json, html);
  // --runtime D: epochs repeat until D has passed (fio's --time_based), the end planned, not an
  // interruption.
  std::optional<std::chrono::nanoseconds> runtime;
  if (!o.runtime.empty()) {
    runtime = *parse_duration(o.runtime);  // checked with the flags
    c.sampler.epochs = 1u << 20;
  }
  // The data path is planned by open(): an impossible one (--gpu-direct on, a GPU that is not
  // there) is kInvalidArgument / kUnsupported, a usage error by the exit-code rule.
  RunsRecord runs;
  runs.runs = o.runs;
  loader::PipelineReport report;
  // With --runs N: a warm-up, then N runs; the last one's report is the run's. A run that fails
  // or is stopped ends the series there, and is the report.
  const unsigned total_runs = o.runs > 1 ? o.runs + 1 : 1;
  for (unsigned i = 0; i < total_runs; ++i) {
    auto loader = value_or_exit(loader::Loader::open(backend, dataset, c));
    std::atomic<std::uint64_t> delivered{0};
    {
      const auto total =
          static_cast<double>(dataset.samples.size()) * o.epochs / c.sampler.world_size;
      ProgressLine line(stdout_is_tty(), [&delivered, total](double s) {
        const double n = static_cast<double>(delivered.load(std::memory_order_relaxed));
        return fmt::format("[{:5.1f}s] {:.0f} samples/s  {:.0f}/{:.0f} samples ({:.0f}%)", s,
                           s > 0 ? n / s : 0, n, total, total > 0 ? 100 * n / total : 0);
      });
      report = runtime ? loader::timed_run(*loader, st.compute, *runtime, stop_token())
                       : loader::run_emulated(*loader, st.compute, stop_token(), &delivered);
    }
    if (report.error || report.interrupted) break;
    if (total_runs == 1) break;
    const auto& cr = report.consumer;
    const bool au = cr.au_steps > 0 && st.compute.mean.count() > 0;
    out::print("{}", record_run(runs, i, cr.samples_per_second,
                                au ? std::optional<double>(cr.au) : std::nullopt));
  }
  out::write_stdout(run_text(report, ctx) + runs_text(runs));
  std::optional<Error> mismatch;
  nlohmann::json doc = run_document(report, st, dataset, &mismatch);
  doc["runs"] = runs_json(runs);
  doc["autotune"] = tuned;
  int code = report.error ? kExitRuntime : report.interrupted ? exit_code_for_stop() : kExitOk;
  std::optional<Error> failure = report.error;
  if (doc["delivered"]["verified"] == true) {
    out::print("  verified: the delivered digest is {} x the digest feedline gen recorded\n",
               c.sampler.epochs);
  }
  if (mismatch) {
    failure = std::move(mismatch);
    code = kExitRuntime;
  }
  if (o.stages_alone && code == kExitOk) {
    // DS-Analyzer-style controlled runs: each stage alone, against the end-to-end rate.
    loader::LoaderConfig untraced = c;
    untraced.trace.reset();
    auto alone = loader::measure_stages_alone(backend, dataset, untraced, o.stages_alone_samples);
    if (alone) {
      doc["stages_alone"] = stages_alone_json(*alone, report);
    } else {
      failure = Error(alone.error().code(),
                      fmt::format("measuring the stages alone: {}", alone.error().what()));
      code = exit_code_for(*failure);
      doc["error"] = failure->what();
      doc["interrupted"] = alone.error().code() == Errc::kCancelled;
    }
  }
  if (code != kExitOk) doc["exit_code"] = code;
  if (auto w = json.commit(doc); !w) {
    out::error(w.error().what());
    if (code == kExitOk) code = kExitRuntime;
  }
  code = html.finish({"feedline run", &doc, nullptr, {}, &report.io.stats.lat}, code);
  if (failure) out::error(failure->what());
  if (ctx.au_target > 0 && !report.interrupted && !report.error) {
    if (report.consumer.au_steps == 0) {
      out::print(
          "  AU target {:.0f}%: not measured: the run had {} step(s), and AU leaves the first one "
          "out (as "
          "MLPerf Storage does); run more batches (--epochs, a smaller --batch-size)\n",
          ctx.au_target * 100, report.consumer.batches);
    } else {
      const bool ok = report.consumer.au >= ctx.au_target;
      // What cannot feed it: the verdict's stage (decode of JPEGs, say), storage by default.
      const std::optional<loader::StageId> limit = report.verdict.stage;
      const std::string who =
          !limit || *limit == loader::StageId::kStorage ? "the storage"
          : *limit == loader::StageId::kConsumer
              ? "the input pipeline"
              : fmt::format("the pipeline's {} stage", loader::stage_name(*limit));
      out::print(
          "  AU {:.1f}% {} the {:.0f}% target: {}\n", report.consumer.au * 100, ok ? ">=" : "<",
          ctx.au_target * 100,
          ok ? "PASS" : fmt::format("FAIL ({} cannot feed this accelerator at this rate)", who));
    }
  }
  return code;
}

// What the trace says of the command that wrote it (--trace).
nlohmann::json trace_about(const RunSetup& st, int code) {
  return {{"command", "feedline run"}, {"url", st.ctx.url}, {"exit_code", code}};
}

int run(const RunOptions& o) {
  // Under mpirun: a rank of the job (job_run.hpp); otherwise a process of its own.
  if (auto job = MpiJob::join(o.rank || o.world_size)) {
    for (const auto& [set, flag] : {std::pair{o.trace_path.has_value(), "--trace"},
                                    std::pair{o.html_path.has_value(), "--html"},
                                    std::pair{o.metrics_port.has_value(), "--metrics-port"}}) {
      if (!set) continue;
      throw UsageError(fmt::format(
          "{0} is not taken under mpirun (every rank would write the same file or port): run "
          "one rank's share as its own process, `feedline run URL --rank R --world-size W {0} "
          "...`",
          flag));
    }
    return run_in_job(o, *job);
  }
  RunSetup st = make_run_setup(o, stop_token());
  value_or_usage(check_output_paths(
      {{"--json", &o.json_path}, {"--trace", &o.trace_path}, {"--html", &o.html_path}}, o.url));
  JsonFile json;
  if (o.json_path) json = value_or_usage(JsonFile::prepare(*o.json_path, "--json"));
  TraceFile trace = value_or_usage(TraceFile::prepare(o.trace_path, "--trace", o.trace_events));
  HtmlFile html = value_or_usage(HtmlFile::prepare(o.html_path, "--html"));
  // The endpoint lives until the command ends.
  std::shared_ptr<loader::MetricsEndpoint> metrics;
  if (o.metrics_port) {
    metrics = value_or_usage(loader::MetricsEndpoint::start(
        o.metrics_bind, static_cast<std::uint16_t>(*o.metrics_port)));
    st.ctx.config.watchers.push_back(metrics);
    out::note(fmt::format("serving metrics at {}", metrics->url()));
  }
  try {
    const int code = run_checked(o, st, json, trace, html);
    return trace.finish(trace_about(st, code), code);
  } catch (const CommandError& e) {
    // A run that did not get to its report still leaves a document saying why.
    const int code = e.code();
    nlohmann::json doc = {{"url", st.ctx.url},
                          {"error", e.error().what()},
                          {"exit_code", code},
                          {"interrupted", e.error().code() == Errc::kCancelled}};
    if (auto w = json.commit(doc); !w) out::error(w.error().what());
    trace.finish(trace_about(st, code), code);  // the trace up to the failure
    html.finish({"feedline run", &doc, nullptr, {}, nullptr}, code);
    throw;
  }
}

}  // namespace

void add_run(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Run the data-loading pipeline on a dataset and report where it stalls");
  auto config_path = std::make_shared<std::string>();
  auto accelerator_type = std::make_shared<std::string>();
  add_config_options(*cmd, *config_path, *accelerator_type);
  cmd->add_option("url", o->url,
                  "Dataset root: a directory, file:///path, s3://bucket/prefix/, "
                  "http(s)://host/dir/, nfs://server/export/dir or mem://prefix")
      ->required();
  add_run_options(*cmd, *o);
  add_trace_options(*cmd, o->trace_path, o->trace_events);
  add_html_option(*cmd, o->html_path);
  add_metrics_options(*cmd, *o);
  cmd->add_option("--runtime", o->runtime,
                  "Run for this long, epochs repeating as needed (as fio's --time_based): 30s, 5m");
  cmd->add_flag(
      "--autotune", o->autotune,
      "Before the run, tune io-depth, decode-threads and prefetch (short controlled runs, "
      "the capacity model's optimum, then hill-climbing on measured throughput) and run "
      "with what was found");
  cmd->callback([o, cmd, config_path, accelerator_type, &exit_code] {
    apply_config_options(*cmd, *config_path);
    if (!o->runtime.empty()) {
      auto d = parse_duration(o->runtime);
      if (!d || d->count() <= 0) {
        throw UsageError(
            fmt::format("--runtime: {}", d ? "must be positive" : d.error().message()));
      }
      if (o->accelerators > 1 || o->runs > 1) {
        throw UsageError(
            "--runtime bounds one run of one accelerator: not with --accelerators or "
            "--runs");
      }
      if (cmd->get_option("--epochs")->count() > 0) {
        throw UsageError("--runtime and --epochs both say when the run ends: give one");
      }
    }
    exit_code = run(*o);
  });
}

}  // namespace feedline::tools
