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
#include "feedline/core/cpus.hpp"
#include "feedline/core/time_limit.hpp"
#include "feedline/core/units.hpp"
#include "feedline/loader/accelerators.hpp"
#include "feedline/loader/capacity.hpp"
#include "feedline/loader/diagnose.hpp"
#include "feedline/loader/tune.hpp"
#include "feedline/storage/registry.hpp"
#include "json_file.hpp"
#include "knobs.hpp"
#include "output.hpp"
#include "run_options.hpp"
#include "signals.hpp"
#include "what_if.hpp"

namespace feedline::tools {
namespace {

using nlohmann::json;

struct Options {
  RunOptions run;
  std::string config_path;
  std::string accelerator_type;
  std::vector<std::string> what_ifs;
  bool verify = false;
  bool tune = false;
  std::string duration = "8s";
};

// One what-if's outcome.
struct Outcome {
  WhatIf what;
  loader::Prediction predicted;
  std::string not_realisable;  // why not (empty: it can run here)
  std::optional<double> achieved;
  std::optional<std::string> failed;  // its verification run failed
};

std::string stage_text(const loader::Prediction& p) {
  return p.cores_limit ? fmt::format("{} (cores)", loader::stage_name(p.limit))
                       : std::string(loader::stage_name(p.limit));
}

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
loader::Settings settings_for(const WhatIf& w, const RunDataset& rd, const loader::Diagnosis& d,
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
    const TimeLimit limit(std::chrono::duration_cast<std::chrono::nanoseconds>(duration), stop);
    FEEDLINE_ASSIGN_OR_RETURN(
        loader::HostReport host,
        loader::run_accelerators(*data->backend, data->dataset, c, w.accelerators, st.compute,
                                 limit.token(), nullptr));
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

json device_json(const std::optional<storage::DiskDelta>& d) {
  if (!d) return nullptr;
  return {{"name", d->device},
          {"utilisation", d->utilisation},
          {"reads", d->reads},
          {"read_bytes", d->read_bytes}};
}

json prediction_json(const loader::Prediction& p) {
  json stages = json::array();
  for (const auto& s : p.stages) {
    stages.push_back(
        {{"stage", loader::stage_name(s.stage)},
         {"samples_per_second",
          std::isfinite(s.samples_per_second) ? json(s.samples_per_second) : json(nullptr)},
         {"bound", s.bound}});
  }
  return {{"samples_per_second", p.samples_per_second},
          {"au", p.au ? json(*p.au) : json(nullptr)},
          {"limit", loader::stage_name(p.limit)},
          {"cores_limit", p.cores_limit},
          {"bound", p.bound},
          {"held_by", p.held_by.empty() ? json(nullptr) : json(p.held_by)},
          {"stages", stages}};
}

// What to do, in words: the model's limit, the ground truth, and the best what-if.
std::string conclusion(const loader::Diagnosis& d, const loader::CapacityModel& model,
                       const std::vector<Outcome>& outcomes) {
  const loader::Prediction& p = model.as_run();
  const loader::Measurements& m = d.measurements;
  std::string text;
  const double achieved = loader::steady_samples_per_second(d.baseline.consumer);
  if (p.cores_limit) {
    text = fmt::format(
        "the host's cores are the limit: the stages need {:.1f} CPU-us a sample together, so {} "
        "core(s) allow about {:.0f} samples/s; more threads cannot help here, cheaper per-sample "
        "work or more cores can",
        (m.storage_cpu_seconds + m.decode_cpu_seconds + m.collate_cpu_seconds +
         m.consumer_cpu_seconds) *
            1e6,
        d.as_run.cores, p.samples_per_second / std::max(model.efficiency(), 1e-9));
  } else if (p.limit == loader::StageId::kStorage) {
    if (p.bound == "bandwidth") {
      text = fmt::format(
          "the storage is saturated at {}{}: only faster storage helps",
          format_rate(p.samples_per_second * m.read_bytes_per_sample),
          m.storage_bytes_per_second_max > 0 ? "" : " (the --throttle-bw it was given)");
    } else if (p.bound == "latency") {
      std::string held = p.held_by;
      if (held == "read-ahead window") {
        held =
            "the read-ahead window (the batch buffers prefetch and the memory budget allow, "
            "times the batch size)";
      } else if (held == "memory budget") {
        held = "the memory budget (each read in flight holds its sample's bytes)";
      } else {
        held = "the IO depth";
      }
      text = fmt::format(
          "the storage is latency-bound: the pipeline does not ask enough ({} reads in flight "
          "over {} a read, held by {}): more reads in flight help",
          d.baseline.io.stats.mean_depth() > 0
              ? fmt::format("{:.1f}", d.baseline.io.stats.mean_depth())
              : std::string("few"),
          format_duration_ns(m.read_latency_seconds * 1e9), held);
    } else {
      text =
          "the storage threads are CPU-bound on per-sample work (open, copy, close): more "
          "storage threads, up to the cores, or fewer, larger objects";
    }
    if (m.storage_order_speedup >= 1.3) {
      text += fmt::format(
          "; shuffled reads cost it: the same samples in storage order read {:.1f}x as fast{} "
          "(--what-if order=storage, or shard-shuffle=N to keep some shuffling)",
          m.storage_order_speedup,
          d.ground_truth && d.ground_truth->rotational.value_or(false)
              ? " on this rotational device (a seek per shuffled read)"
              : "");
    }
    if (d.ground_truth && d.ground_truth->baseline_device_bytes > 0) {
      text += fmt::format("; the device {} was {:.0f}% busy during the baseline",
                          d.ground_truth->device, d.ground_truth->baseline_utilisation * 100);
    }
  } else if (p.limit == loader::StageId::kDecode) {
    text = fmt::format(
        "decode is the limit: {:.1f} CPU-us a sample on {} thread(s); the {} core(s) allow {} "
        "thread(s)",
        m.decode_cpu_seconds * 1e6, d.as_run.decode_threads, d.as_run.cores, d.as_run.cores);
  } else if (p.limit == loader::StageId::kConsumer) {
    text = "the accelerator is the limit: the input pipeline keeps up";
  } else {
    text = fmt::format("{} is the limit", loader::stage_name(p.limit));
  }
  const Outcome* best = nullptr;
  for (const Outcome& o : outcomes) {
    if (!o.not_realisable.empty()) continue;
    if (!best || o.predicted.samples_per_second > best->predicted.samples_per_second) best = &o;
  }
  if (best && best->predicted.samples_per_second > 1.05 * achieved) {
    text += fmt::format(
        "; of the what-ifs this machine can run, {} gives the most: {:.0f} "
        "samples/s predicted ({:.2f}x)",
        best->what.text, best->predicted.samples_per_second,
        best->predicted.samples_per_second / std::max(achieved, 1e-9));
  } else if (p.limit != loader::StageId::kConsumer) {
    text += "; none of the what-ifs this machine can run would help by more than 5%";
  }
  return text;
}

std::string knobs_text(const loader::Knobs& k) {
  return fmt::format("io-depth {}, decode-threads {}, prefetch {}", k.io_depth, k.decode_threads,
                     k.prefetch_batches);
}

json knobs_json(const loader::Knobs& k) {
  return {{"io-depth", k.io_depth},
          {"decode-threads", k.decode_threads},
          {"prefetch", k.prefetch_batches}};
}

std::string tune_text(const loader::TuneResult& t) {
  std::string out = fmt::format(
      "  autotune: from the run's settings ({}), the model's optimum ({}), then each knob doubled "
      "and halved; {} run(s) in {:.1f} s:\n",
      knobs_text(t.start), knobs_text(t.model_optimum), t.steps.size(), t.seconds);
  out += fmt::format("    {:>9} {:>15} {:>9} {:>13} {:>12}\n", "io-depth", "decode-threads",
                     "prefetch", "predicted/s", "achieved/s");
  for (const auto& s : t.steps) {
    out += fmt::format("    {:>9} {:>15} {:>9} {:>13.0f} {:>12.0f}\n", s.knobs.io_depth,
                       s.knobs.decode_threads, s.knobs.prefetch_batches,
                       s.predicted_samples_per_second, s.achieved_samples_per_second);
  }
  out += fmt::format(
      "  tuned: {}: {:.0f} samples/s, {:.2f}x the run's settings ({:.0f}); for the workload "
      "TOML:\n    io-depth = {}\n    decode-threads = {}\n    prefetch = {}\n",
      knobs_text(t.tuned), t.tuned_samples_per_second,
      t.tuned_samples_per_second / std::max(t.start_samples_per_second, 1e-9),
      t.start_samples_per_second, t.tuned.io_depth, t.tuned.decode_threads,
      t.tuned.prefetch_batches);
  return out;
}

json tune_json(const loader::TuneResult& t) {
  json steps = json::array();
  for (const auto& s : t.steps) {
    steps.push_back({{"knobs", knobs_json(s.knobs)},
                     {"predicted_samples_per_second", s.predicted_samples_per_second},
                     {"achieved_samples_per_second", s.achieved_samples_per_second}});
  }
  return {{"start", knobs_json(t.start)},
          {"model_optimum", knobs_json(t.model_optimum)},
          {"settings", knobs_json(t.tuned)},
          {"start_samples_per_second", t.start_samples_per_second},
          {"tuned_samples_per_second", t.tuned_samples_per_second},
          {"gain", t.tuned_samples_per_second / std::max(t.start_samples_per_second, 1e-9)},
          {"steps", steps},
          {"seconds", t.seconds}};
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

int run(const Options& o) {
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
  JsonFile json_file;
  if (ro.json_path) json_file = value_or_usage(JsonFile::prepare(*ro.json_path, "--json"));
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
  loader::Diagnosis d =
      value_or_exit(loader::diagnose(*rd.backend, rd.dataset, st.ctx.config, st.compute, dopt));
  notes.insert(notes.end(), d.notes.begin(), d.notes.end());
  const double achieved = loader::steady_samples_per_second(d.baseline.consumer);
  const loader::CapacityModel model(d.measurements, d.as_run, achieved);
  const loader::Measurements& m = d.measurements;
  std::vector<WhatIf> what_ifs =
      asked.empty() ? default_what_ifs(ro, d.as_run.cores, m.storage_bytes_per_second_seen) : asked;
  std::vector<Outcome> outcomes;
  for (WhatIf& w : what_ifs) {
    Outcome oc;
    oc.predicted = model.predict(settings_for(w, rd, d, stop_token()));
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

  // The text report.
  out::print("  {:<28} {:>8} {:>8} {:>11} {:>11} {:>7}\n", "controlled run", "samples", "seconds",
             "samples/s", "rate", "cpu-s");
  for (const auto& r : d.runs) {
    out::print(
        "  {:<28} {:>8} {:>8.2f} {:>11.0f} {:>11} {:>7.2f}  {}{}\n", r.name, r.samples, r.seconds,
        r.samples_per_second, format_rate(r.bytes_per_second), r.cpu_seconds, r.what,
        r.device ? fmt::format(" [{} {:.0f}% busy]", r.device->device, r.device->utilisation * 100)
                 : "");
  }
  out::print(
      "  per sample: storage {:.1f} CPU-us, decode {:.1f}, collate {:.1f}, consumer {:.1f}; {} in "
      "{:.2f} read(s), read latency {}; storage {}\n",
      m.storage_cpu_seconds * 1e6, m.decode_cpu_seconds * 1e6, m.collate_cpu_seconds * 1e6,
      m.consumer_cpu_seconds * 1e6, format_bytes(m.read_bytes_per_sample), m.reads_per_sample,
      format_duration_ns(m.read_latency_seconds * 1e9),
      m.storage_bytes_per_second_max > 0
          ? fmt::format("saturated at {}", format_rate(m.storage_bytes_per_second_max))
      : d.as_run.storage_bytes_per_second > 0
          ? fmt::format("throttled at {} (--throttle-bw)",
                        format_rate(d.as_run.storage_bytes_per_second))
          : fmt::format("not seen saturated (up to {})",
                        format_rate(m.storage_bytes_per_second_seen)));
  if (d.prep_seconds_per_sample > 0) {
    out::print("  DS-Analyzer: prep {} a sample (the cached run), fetch {} (cold - cached)\n",
               format_duration_ns(d.prep_seconds_per_sample * 1e9),
               format_duration_ns(d.fetch_seconds_per_sample * 1e9));
  }
  if (const auto& g = d.ground_truth) {
    out::print(
        "  ground truth: device {} ({}, queue depth {}, scheduler {}): {:.0f}% busy during the "
        "baseline, {} read from it\n",
        g->device,
        g->rotational ? (*g->rotational ? "rotational" : "not rotational") : "rotational: unknown",
        g->queue_depth, g->scheduler.empty() ? "unknown" : g->scheduler,
        g->baseline_utilisation * 100, format_bytes(static_cast<double>(g->baseline_device_bytes)));
  }
  {
    const loader::Prediction& p = model.as_run();
    std::string caps;
    for (const auto& s : p.stages) {
      caps += fmt::format("{}{} {}", caps.empty() ? "" : ", ", loader::stage_name(s.stage),
                          std::isfinite(s.samples_per_second)
                              ? fmt::format("{:.0f} ({})", s.samples_per_second, s.bound)
                              : std::string("unbounded"));
    }
    out::print(
        "  model: as run, {:.0f} samples/s, limited by {} ({}); efficiency {:.2f} of the "
        "limit's capacity; stage capacities: {}\n",
        p.samples_per_second, stage_text(p), p.bound, model.efficiency(), caps);
  }
  out::print("  {:<40} {:>12} {:>7}  {:<18}{}\n", "what-if", "predicted/s", "AU", "limit",
             o.verify ? fmt::format(" {:>12} {:>8}", "achieved/s", "error") : "");
  for (const Outcome& oc : outcomes) {
    std::string verified;
    if (o.verify) {
      if (oc.achieved) {
        verified = fmt::format(
            " {:>12.0f} {:>+7.1f}%", *oc.achieved,
            100 * (oc.predicted.samples_per_second - *oc.achieved) / std::max(*oc.achieved, 1e-9));
      } else if (oc.failed) {
        verified = fmt::format("  failed: {}", *oc.failed);
      } else if (!oc.not_realisable.empty()) {
        verified = fmt::format("  not run: {}", oc.not_realisable);
      }
    }
    out::print("  {:<40} {:>12.0f} {:>7}  {:<18}{}\n", oc.what.text,
               oc.predicted.samples_per_second,
               oc.predicted.au ? fmt::format("{:.1f}%", *oc.predicted.au * 100) : "-",
               stage_text(oc.predicted), verified);
  }
  if (tuned) out::print("{}", tune_text(*tuned));
  const loader::Verdict& v = d.baseline.verdict;
  out::print("  bottleneck (as run): {}\n    evidence: {}\n",
             v.stage ? loader::stage_name(*v.stage) : "none", v.evidence);
  const std::string advice = conclusion(d, model, outcomes);
  out::print("  conclusion: {}\n", advice);
  for (const auto& n : notes) out::print("  note: {}\n", n);

  // The JSON document.
  json runs = json::array();
  for (const auto& r : d.runs) {
    runs.push_back({{"name", r.name},
                    {"what", r.what},
                    {"samples", r.samples},
                    {"seconds", r.seconds},
                    {"samples_per_second", r.samples_per_second},
                    {"bytes_per_second", r.bytes_per_second},
                    {"cpu_seconds", r.cpu_seconds},
                    {"io_depth", r.io_depth},
                    {"device", device_json(r.device)}});
  }
  json whatifs = json::array();
  for (const Outcome& oc : outcomes) {
    json changes = json::object();
    for (const auto& [k, val] : oc.what.changes) {
      auto n = parse_whole_number(val, 0, ~std::uint64_t{0});
      changes[k] = n ? json(*n) : json(val);
    }
    json w = {
        {"what_if", oc.what.text},
        {"changes", changes},
        {"predicted_samples_per_second", oc.predicted.samples_per_second},
        {"predicted_au", oc.predicted.au ? json(*oc.predicted.au) : json(nullptr)},
        {"limit", loader::stage_name(oc.predicted.limit)},
        {"cores_limit", oc.predicted.cores_limit},
        {"bound", oc.predicted.bound},
        {"realisable", oc.not_realisable.empty()},
        {"not_realisable", oc.not_realisable.empty() ? json(nullptr) : json(oc.not_realisable)}};
    if (oc.achieved) {
      w["achieved_samples_per_second"] = *oc.achieved;
      w["error"] = (oc.predicted.samples_per_second - *oc.achieved) / std::max(*oc.achieved, 1e-9);
    } else if (oc.failed) {
      w["verify_error"] = *oc.failed;
    }
    whatifs.push_back(std::move(w));
  }
  json next = json::array();
  for (const auto& k : v.next) {
    next.push_back({{"knob", loader::knob_name(k.knob)},
                    {"flag", knob_flag(k.knob)},
                    {"from", k.from},
                    {"to", k.to}});
  }
  const json ground =
      d.ground_truth
          ? json{{"device", d.ground_truth->device},
                 {"rotational",
                  d.ground_truth->rotational ? json(*d.ground_truth->rotational) : json(nullptr)},
                 {"scheduler", d.ground_truth->scheduler},
                 {"queue_depth", d.ground_truth->queue_depth},
                 {"baseline_utilisation", d.ground_truth->baseline_utilisation},
                 {"baseline_device_bytes", d.ground_truth->baseline_device_bytes}}
          : json(nullptr);
  json doc = {
      {"url", st.ctx.url},
      {"format", st.ctx.format},
      {"duration_seconds", length.count()},
      {"controlled_runs", runs},
      {"measurements",
       {{"read_bytes_per_sample", m.read_bytes_per_sample},
        {"reads_per_sample", m.reads_per_sample},
        {"read_latency_seconds", m.read_latency_seconds},
        {"storage_bytes_per_second_max",
         m.storage_bytes_per_second_max > 0 ? json(m.storage_bytes_per_second_max) : json(nullptr)},
        {"storage_bytes_per_second_seen", m.storage_bytes_per_second_seen},
        {"storage_cpu_seconds", m.storage_cpu_seconds},
        {"decode_cpu_seconds", m.decode_cpu_seconds},
        {"collate_cpu_seconds", m.collate_cpu_seconds},
        {"consumer_cpu_seconds", m.consumer_cpu_seconds},
        {"storage_cpu_bound", m.storage_cpu_bound},
        {"storage_order_speedup", m.storage_order_speedup},
        {"prep_seconds_per_sample", d.prep_seconds_per_sample},
        {"fetch_seconds_per_sample", d.fetch_seconds_per_sample}}},
      {"ground_truth", ground},
      {"model",
       {{"as_run", prediction_json(model.as_run())},
        {"achieved_samples_per_second", achieved},
        {"efficiency", model.efficiency()},
        {"cores", d.as_run.cores}}},
      {"what_if", whatifs},
      {"tuned", tuned ? tune_json(*tuned) : json(nullptr)},
      {"bottleneck",
       {{"stage", v.stage ? json(loader::stage_name(*v.stage)) : json("none")},
        {"evidence", v.evidence},
        {"suggestion", suggestion_text(v)},
        {"next", next}}},
      {"conclusion", advice},
      {"notes", notes},
      {"interrupted", stopped},
      {"error", nullptr}};
  int code = stopped ? exit_code_for_stop() : kExitOk;
  if (code != kExitOk) doc["exit_code"] = code;
  if (auto w = json_file.commit(doc); !w) {
    out::error(w.error().what());
    if (code == kExitOk) code = kExitRuntime;
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
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "diagnose",
      "Controlled runs on a dataset, a capacity model of the pipeline, and what each change would "
      "give (--what-if), run and checked (--verify)");
  add_config_options(*cmd, o->config_path, o->accelerator_type);
  cmd->add_option("url", o->run.url, "Dataset root, as for run")->required();
  add_run_options(*cmd, o->run);
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
