#include "host_run.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <vector>

#include "cli_error.hpp"
#include "feedline/core/units.hpp"
#include "feedline/loader/job_report.hpp"
#include "feedline/storage/counters.hpp"
#include "knobs.hpp"
#include "output.hpp"
#include "progress.hpp"
#include "signals.hpp"

namespace feedline::tools {
namespace {

// Accelerator i's setup: the host's, with the config that accelerator's loader ran with.
RunSetup accelerator_setup(const RunSetup& st, const loader::HostReport& host, std::size_t i) {
  RunSetup each = st;
  loader::LoaderConfig& c = each.ctx.config;
  c.sampler.rank = host.ranks[i];
  c.sampler.world_size = st.ctx.config.sampler.world_size * host.split.accelerators;
  c.decode_threads = host.split.decode_threads_each;
  c.memory_budget = host.split.memory_budget_each;
  c.cores = host.split.cores_each;
  each.ctx.accelerators = 1;
  return each;
}

nlohmann::json split_json(const loader::AcceleratorSplit& s) {
  return {{"accelerators", s.accelerators},
          {"cores", s.cores},
          {"cores_each", s.cores_each},
          {"decode_threads", s.decode_threads},
          {"decode_threads_each", s.decode_threads_each},
          {"memory_budget", s.memory_budget},
          {"memory_budget_each", s.memory_budget_each}};
}

// The host's connections to an HTTP/S3 store: the accelerators read through one pool
// (storage::HttpQueueOptions::shared_by), so what they opened adds up to what the host opened, and
// each saw the pool's peak. Nothing for other backends.
struct HostConnections {
  std::uint64_t opened = 0;
  std::uint64_t peak = 0;
};
std::optional<HostConnections> host_connections(const loader::HostReport& host) {
  std::optional<HostConnections> c;
  for (const auto& r : host.accelerators) {
    const auto& counters = r.io.stats.counters;
    namespace sc = storage::counters;
    const auto opened = counters.find(sc::kHttpConnectionsOpened.name);
    const auto peak = counters.find(sc::kHttpConnectionsPeak.name);
    if (opened == counters.end() && peak == counters.end()) continue;
    if (!c) c.emplace();
    if (opened != counters.end()) c->opened += opened->second;
    if (peak != counters.end()) c->peak = std::max(c->peak, peak->second);
  }
  return c;
}

}  // namespace

MlperfFigures host_mlperf(const loader::HostReport& host, const RunContext& ctx) {
  MlperfFigures m;
  m.accelerators = host.split.accelerators;
  m.samples_per_second = host.samples_per_second;
  m.bytes_per_second = host.bytes_per_second;
  if (host.au_measured && !ctx.compute_time.empty()) {
    m.au_mean = host.au_mean;
    m.au_min = host.au_min;
  }
  m.au_target = ctx.au_target;
  return m;
}

nlohmann::json host_document(loader::HostReport& host, const RunSetup& st,
                             const loader::Dataset& dataset, std::optional<Error>* mismatch) {
  using nlohmann::json;
  json each = json::array();
  for (std::size_t i = 0; i < host.accelerators.size(); ++i) {
    const RunSetup one = accelerator_setup(st, host, i);
    json doc = run_document(host.accelerators[i], one, dataset, nullptr);
    doc["accelerator"] = i;
    each.push_back(std::move(doc));
  }
  // The host's document starts from accelerator 0's (the keys every run document has) and puts
  // the host's figures in the place of its own.
  json j = each.empty() ? json::object() : each.front();
  j.erase("accelerator");
  const loader::LoaderConfig& c = st.ctx.config;
  j["samples"] = host.samples;
  j["bytes"] = host.bytes;
  j["batches"] = host.batches;
  j["wall_seconds"] = host.wall_seconds;
  j["samples_per_second"] = host.samples_per_second;
  j["bytes_per_second"] = host.bytes_per_second;
  j["au"] = host.au_measured ? json(host.au_mean) : json(nullptr);
  j["au_min"] = host.au_measured ? json(host.au_min) : json(nullptr);
  j["au_mean"] = host.au_measured ? json(host.au_mean) : json(nullptr);
  j["au_max"] = host.au_measured ? json(host.au_max) : json(nullptr);
  j["accelerators"] = host.split.accelerators;
  j["sync_seconds"] = host.sync_seconds;
  j["mlperf"] = mlperf_document(host_mlperf(host, st.ctx));
  if (!each.empty()) {
    // Stages, queues and reads for the whole host; latency percentiles stay accelerator 0's
    // (per_accelerator has each one's).
    std::vector<std::string> docs;
    for (const auto& doc : each) docs.push_back(doc.dump());
    const json tables = json::parse(loader::merged_tables_json(docs));
    j["stages"] = tables["stages"];
    j["queues"] = tables["queues"];
    for (const auto& [k, v] : tables["io"].items()) j["io"][k] = v;
    double wait = 0;
    for (const auto& doc : each) wait += doc["consumer_wait"]["fraction"].get<double>();
    j["consumer_wait"]["fraction"] = wait / static_cast<double>(each.size());
  }
  {
    const auto& slow =
        host.accelerators.empty() ? loader::PipelineReport{} : host.accelerators[host.straggler];
    j["stragglers"] = {
        {"slowest", host.straggler},
        {"rank", host.ranks.empty() ? 0u : host.ranks[host.straggler]},
        {"samples_per_second", slow.consumer.samples_per_second},
        {"median_samples_per_second", host.median_samples_per_second},
        {"ratio", host.straggler_ratio},
        {"bottleneck",
         slow.verdict.stage ? json(loader::stage_name(*slow.verdict.stage)) : json("none")},
        {"evidence", slow.verdict.evidence}};
  }
  j["split"] = split_json(host.split);
  if (const auto conns = host_connections(host)) {
    j["connections"] = {
        {"shared", host.split.accelerators > 1}, {"opened", conns->opened}, {"peak", conns->peak}};
  }
  json next = json::array();
  for (const auto& k : host.verdict.next) {
    next.push_back({{"knob", loader::knob_name(k.knob)},
                    {"flag", knob_flag(k.knob)},
                    {"from", k.from},
                    {"to", k.to}});
  }
  j["bottleneck"] = {
      {"stage", host.verdict.stage ? json(loader::stage_name(*host.verdict.stage)) : json("none")},
      {"evidence", host.verdict.evidence},
      {"suggestion", flag_suggestion(host.verdict)},
      {"next", next}};
  j["delivered"] = {{"samples", host.samples},
                    {"digest", host.digest_computed ? json(host.digest) : json(nullptr)},
                    {"verified", nullptr}};
  j["skipped"]["samples"] = host.skipped;
  j["interrupted"] = host.interrupted;
  j["error"] = host.error ? json(host.error->what()) : json(nullptr);
  j["config"] = each.empty() ? json::object() : each.front()["config"];
  j["config"]["rank"] = c.sampler.rank;
  j["config"]["world_size"] = c.sampler.world_size;
  j["config"]["decode_threads"] = c.decode_threads;
  j["config"]["memory_budget"] = c.memory_budget;
  j["config"]["accelerators"] = host.split.accelerators;
  j["memory"]["budget_bytes"] = c.memory_budget;
  std::uint64_t peak = 0;
  for (const auto& r : host.accelerators) peak += r.memory.peak;
  j["memory"]["peak_bytes"] = peak;  // the sum of each one's peak: at most, not at once
  j["memory"]["peak_rss_bytes"] = peak_rss_bytes();
  const DeliveredWhole whole{host.digest,
                             host.samples,
                             host.skipped,
                             host.digest_computed,
                             host.interrupted || host.error.has_value(),
                             c.sampler.world_size};
  if (auto v = check_manifest_digest(whole, c, dataset, mismatch)) {
    j["delivered"]["verified"] = *v;
    if (!*v && mismatch && *mismatch) j["error"] = (*mismatch)->what();
  }
  if (st.ctx.au_target > 0) {
    j["au_target"] = st.ctx.au_target;
    // MLPerf Storage: the run passes only when every accelerator meets the target.
    j["au_pass"] = host.au_measured ? json(host.au_min >= st.ctx.au_target) : json(nullptr);
  }
  j["per_accelerator"] = std::move(each);
  return j;
}

std::string host_text(const loader::HostReport& host, const RunContext& ctx) {
  std::string out;
  auto line = [&out](std::string_view l) { out::add_line(out, l); };
  const auto& cfg = ctx.config;
  const auto& s = host.split;
  line(fmt::format("feedline run: {} ({}, {} samples, {}) on {} emulated accelerators", ctx.url,
                   ctx.format, ctx.dataset_samples,
                   format_bytes(static_cast<double>(ctx.dataset_bytes)), s.accelerators));
  if (auto n = potential_caching_note(ctx); !n.empty()) line("  note: " + n);
  line(fmt::format(
      "  each accelerator: batch {} x {} epoch(s), io-depth {}, prefetch {}, compute {}; the "
      "host's {} decode thread(s) give each {}, its {} core(s) each {} for storage threads, its "
      "{} budget each {}",
      cfg.sampler.batch_size, cfg.sampler.epochs, cfg.io_depth, cfg.prefetch_batches,
      ctx.compute_time.empty() ? "none" : ctx.compute_time, s.decode_threads, s.decode_threads_each,
      s.cores, s.cores_each, format_bytes(static_cast<double>(s.memory_budget)),
      format_bytes(static_cast<double>(s.memory_budget_each))));
  if (const auto c = host_connections(host); c && s.accelerators > 1) {
    line(
        fmt::format("  connections: one pool for the host's accelerators, {} opened, at most {} "
                    "open at once",
                    c->opened, c->peak));
  }
  line("  accel   rank   samples   samples/s        rate      AU   wait  bottleneck");
  for (std::size_t i = 0; i < host.accelerators.size(); ++i) {
    const auto& r = host.accelerators[i];
    const auto& c = r.consumer;
    line(fmt::format("  {:>5} {:>6} {:>9} {:>11.0f} {:>11} {:>7} {:>5.0f}%  {}", i,
                     fmt::format("{}/{}", host.ranks[i], cfg.sampler.world_size * s.accelerators),
                     c.samples, c.samples_per_second, format_rate(c.bytes_per_second),
                     c.au_steps > 0 ? fmt::format("{:.1f}%", c.au * 100) : std::string("-"),
                     c.wait_fraction * 100,
                     r.verdict.stage ? loader::stage_name(*r.verdict.stage) : "none"));
  }
  line(fmt::format(
      "  host: delivered {} samples in {} batches, {} in {:.2f} s: {:.0f} samples/s, {}{}",
      host.samples, host.batches, format_bytes(static_cast<double>(host.bytes)), host.wall_seconds,
      host.samples_per_second, format_rate(host.bytes_per_second),
      host.interrupted ? "  [interrupted: partial result]" : ""));
  if (host.au_measured) {
    line(fmt::format(
        "  accelerator utilisation (AU): min {:.1f}% (accelerator {}), mean {:.1f}%, "
        "max {:.1f}%",
        host.au_min * 100, host.au_min_accelerator, host.au_mean * 100, host.au_max * 100));
  }
  if (host.accelerators.size() > 1) {
    const auto& slow = host.accelerators[host.straggler];
    line(
        fmt::format("  slowest accelerator: {} (rank {}) at {:.2f}x the median {:.0f} samples/s, "
                    "limited by {}",
                    host.straggler, host.ranks[host.straggler], host.straggler_ratio,
                    host.median_samples_per_second,
                    slow.verdict.stage ? loader::stage_name(*slow.verdict.stage) : "none"));
  }
  if (!ctx.compute_time.empty()) line(mlperf_text(host_mlperf(host, ctx)));
  line(fmt::format("  bottleneck (host): {}",
                   host.verdict.stage ? loader::stage_name(*host.verdict.stage) : "none"));
  line(fmt::format("    evidence: {}", host.verdict.evidence));
  line(fmt::format("    next: {}", flag_suggestion(host.verdict)));
  if (host.digest_computed) {
    line(fmt::format("  delivered digest: {} ({} samples, summed over the accelerators)",
                     host.digest, host.samples));
  }
  if (host.error) line(fmt::format("  error: {}", host.error->what()));
  return out;
}

std::string check_accelerator_share(const RunSetup& st, unsigned accelerators,
                                    std::uint64_t samples) {
  const loader::SamplerConfig& c = st.ctx.config.sampler;
  const std::uint64_t ranks = std::max<std::uint32_t>(1, c.world_size);
  if (accelerators * ranks <= 1) return {};
  const std::uint64_t ways = accelerators * ranks;
  const std::uint64_t share = samples / ways;
  const std::string over =
      ranks > 1 ? fmt::format(" over {} rank(s) x {}", ranks, accelerators) : std::string();
  const std::string per_rank = ranks > 1 ? " per rank" : "";
  if (share == 0) {
    throw UsageError(fmt::format(
        "--accelerators {}: {} samples{} leave each accelerator none an epoch: at most {} "
        "accelerator(s){}",
        accelerators, samples, over, samples / ranks, per_rank));
  }
  if (st.compute.mean.count() <= 0) return {};
  const std::uint64_t batch = std::max<std::uint32_t>(1, c.batch_size);
  const std::uint64_t full = share / batch;
  if (full == 0) {
    throw UsageError(fmt::format(
        "--accelerators {}: each accelerator gets {} samples an epoch{}, less than one batch of "
        "{}: every emulated step would be a short batch, its compute counted in full, so AU would "
        "hold up however slowly the storage fed it (MLPerf Storage never counts a short batch); "
        "give at most {} accelerator(s){}, a smaller --batch-size, or a dataset of at least {} "
        "samples",
        accelerators, share, over, batch, samples / (batch * ranks), per_rank, batch * ways));
  }
  const std::uint64_t rest = share % batch;
  if (rest == 0 || c.drop_last) return {};
  return fmt::format(
      "each accelerator's epochs end in a short batch of {} sample(s) after {} full one(s) of "
      "{}: its emulated step costs a full step's compute, which lifts AU; --drop-last leaves it "
      "out, as MLPerf Storage does",
      rest, full, batch);
}

int run_on_host(const RunOptions& o, RunSetup& st, RunDataset& rd, JsonFile& json, HtmlFile& html) {
  RunContext& ctx = st.ctx;
  const loader::Dataset& dataset = rd.dataset;
  if (const std::string note = check_accelerator_share(st, o.accelerators, dataset.samples.size());
      !note.empty()) {
    out::note(note);
  }
  RunsRecord runs;
  runs.runs = o.runs;
  loader::HostReport host;
  const unsigned total_runs = o.runs > 1 ? o.runs + 1 : 1;  // --runs N: a warm-up first
  for (unsigned i = 0; i < total_runs; ++i) {
    std::atomic<std::uint64_t> delivered{0};
    {
      const auto total =
          static_cast<double>(dataset.samples.size()) * o.epochs / ctx.config.sampler.world_size;
      ProgressLine line(stdout_is_tty(), [&delivered, total](double s) {
        const double n = static_cast<double>(delivered.load(std::memory_order_relaxed));
        return fmt::format("[{:5.1f}s] {:.0f} samples/s  {:.0f}/{:.0f} samples ({:.0f}%)", s,
                           s > 0 ? n / s : 0, n, total, total > 0 ? 100 * n / total : 0);
      });
      host = value_or_exit(loader::run_accelerators(
          *rd.backend, dataset, ctx.config, o.accelerators, st.compute, stop_token(), &delivered));
    }
    if (host.error || host.interrupted || total_runs == 1) break;
    const bool au = host.au_measured && st.compute.mean.count() > 0;
    out::print("{}", record_run(runs, i, host.samples_per_second,
                                au ? std::optional<double>(host.au_mean) : std::nullopt));
  }
  out::write_stdout(host_text(host, ctx) + runs_text(runs));
  std::optional<Error> mismatch;
  nlohmann::json doc = host_document(host, st, dataset, &mismatch);
  doc["runs"] = runs_json(runs);
  int code = host.error ? kExitRuntime : host.interrupted ? exit_code_for_stop() : kExitOk;
  std::optional<Error> failure = host.error;
  if (doc["delivered"]["verified"] == true) {
    out::print(
        "  verified: the digest summed over the accelerators is {} x the digest feedline "
        "gen recorded\n",
        ctx.config.sampler.epochs);
  }
  if (mismatch) {
    failure = std::move(mismatch);
    code = kExitRuntime;
  }
  if (code != kExitOk) doc["exit_code"] = code;
  if (auto w = json.commit(doc); !w) {
    out::error(w.error().what());
    if (code == kExitOk) code = kExitRuntime;
  }
  {
    Histogram latency;  // every accelerator's reads
    for (const auto& a : host.accelerators) latency.merge(a.io.stats.lat);
    code = html.finish({"feedline run", &doc, nullptr, {}, &latency}, code);
  }
  if (failure) out::error(failure->what());
  if (ctx.au_target > 0 && !host.interrupted && !host.error) {
    if (!host.au_measured) {
      out::print(
          "  AU target {:.0f}%: not measured: no accelerator had more than one step, and AU "
          "leaves the first one out (as MLPerf Storage does)\n",
          ctx.au_target * 100);
    } else {
      const bool ok = host.au_min >= ctx.au_target;
      out::print("  AU min {:.1f}% {} the {:.0f}% target: {}\n", host.au_min * 100, ok ? ">=" : "<",
                 ctx.au_target * 100,
                 ok ? std::string("PASS (every accelerator meets it)")
                    : fmt::format("FAIL (accelerator {} does not: the storage cannot feed {} "
                                  "accelerators at this rate)",
                                  host.au_min_accelerator, host.split.accelerators));
    }
  }
  return code;
}

}  // namespace feedline::tools
