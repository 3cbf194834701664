#include "run_options.hpp"

#include <fmt/format.h>

#include "cli_error.hpp"
#include "feedline/core/redact.hpp"
#include "feedline/core/text.hpp"
#include "feedline/loader/format.hpp"
#include "knobs.hpp"
#include "output.hpp"
#include "setting_flags.hpp"

namespace feedline::tools {

RunSetup make_run_setup(const RunOptions& o, std::stop_token stop) {
  // Whatever the URL carries that is secret (a password, a signature) is never printed.
  for (std::string& secret : url_secrets(o.url)) out::add_secret(std::move(secret));
  auto plan = loader::plan_run(o, o.url, process_env(), stop);
  if (!plan) throw UsageError(in_flag_words(plan.error().message()));
  for (std::string& secret : plan->secrets) out::add_secret(std::move(secret));
  for (const std::string& n : plan->notes) out::note(in_flag_words(n));
  return std::move(*plan);
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
  RunDataset rd = value_or_exit(loader::open_run(st, o.url));
  for (const std::string& n : rd.notes) out::note(in_flag_words(n));
  for (const auto& n : rd.dataset.notes) out::eprint("note: {}\n", printable(n));
  for (const auto& why : rd.dataset.skipped) {
    out::eprint("skipped (--on-error skip): {}\n", printable(why));
  }
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
