// diagnose's text report and JSON document (diagnose_report.hpp).
#include "diagnose_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "cli_checks.hpp"
#include "feedline/core/units.hpp"
#include "feedline/storage/counters.hpp"
#include "knobs.hpp"

namespace feedline::tools {
namespace {

using nlohmann::json;

std::string stage_text(const loader::Prediction& p) {
  return p.cores_limit ? fmt::format("{} (cores)", loader::stage_name(p.limit))
                       : std::string(loader::stage_name(p.limit));
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
    if (const auto& g = d.ground_truth; g && g->baseline_device_bytes > 0) {
      text += fmt::format(
          "; the device {} was {:.0f}% busy during the baseline with {:.1f} requests queued on "
          "average{}",
          g->device, g->baseline_utilisation * 100, g->baseline_queue_depth,
          g->baseline_utilisation >= 0.9 ? " (saturated)"
          : p.bound == "latency"         ? " (it had room: ask it for more)"
                                         : "");
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

// The tuned settings' rate over the starting ones'; none where the start delivered nothing in its
// step (even a lengthened one).
std::optional<double> tune_gain(const loader::TuneResult& t) {
  if (t.start_samples_per_second <= 0) return std::nullopt;
  return t.tuned_samples_per_second / t.start_samples_per_second;
}

}  // namespace

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
  const std::optional<double> gain = tune_gain(t);
  out += fmt::format(
      "  tuned: {}: {:.0f} samples/s, {} the run's settings ({:.0f}); for the workload "
      "TOML:\n    io-depth = {}\n    decode-threads = {}\n    prefetch = {}\n",
      knobs_text(t.tuned), t.tuned_samples_per_second,
      gain ? fmt::format("{:.2f}x", *gain) : std::string("against nothing delivered with"),
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
  const std::optional<double> gain = tune_gain(t);
  return {{"start", knobs_json(t.start)},
          {"model_optimum", knobs_json(t.model_optimum)},
          {"settings", knobs_json(t.tuned)},
          {"start_samples_per_second", t.start_samples_per_second},
          {"tuned_samples_per_second", t.tuned_samples_per_second},
          {"gain", gain ? json(*gain) : json(nullptr)},
          {"steps", steps},
          {"seconds", t.seconds}};
}

std::string diagnose_text(const DiagnoseReport& rep) {
  const loader::Diagnosis& d = rep.diagnosis;
  const loader::Measurements& m = d.measurements;
  const loader::CapacityModel& model = rep.model;
  const std::vector<Outcome>& outcomes = rep.outcomes;
  const auto& tuned = rep.tuned;
  const auto& notes = rep.notes;
  std::string out;
  out += fmt::format("  {:<28} {:>8} {:>8} {:>11} {:>11} {:>7}\n", "controlled run", "samples",
                     "seconds", "samples/s", "rate", "cpu-s");
  for (const auto& r : d.runs) {
    out += fmt::format(
        "  {:<28} {:>8} {:>8.2f} {:>11.0f} {:>11} {:>7.2f}  {}{}\n", r.name, r.samples, r.seconds,
        r.samples_per_second, format_rate(r.bytes_per_second), r.cpu_seconds, r.what,
        r.device ? fmt::format(" [{} {:.0f}% busy]", r.device->device, r.device->utilisation * 100)
                 : "");
  }
  out += fmt::format(
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
    out +=
        fmt::format("  DS-Analyzer: prep {} a sample (the cached run), fetch {} (cold - cached)\n",
                    format_duration_ns(d.prep_seconds_per_sample * 1e9),
                    format_duration_ns(d.fetch_seconds_per_sample * 1e9));
  }
  if (const auto& g = d.ground_truth) {
    out += fmt::format(
        "  ground truth: device {} ({}, queue depth {}, scheduler {}): {:.0f}% busy during the "
        "baseline, {:.1f} requests queued on average, {:.2f} ms a read at the device, {} read "
        "from it\n",
        g->device,
        g->rotational ? (*g->rotational ? "rotational" : "not rotational") : "rotational: unknown",
        g->queue_depth, g->scheduler.empty() ? "unknown" : g->scheduler,
        g->baseline_utilisation * 100, g->baseline_queue_depth, g->baseline_read_await_ms,
        format_bytes(static_cast<double>(g->baseline_device_bytes)));
  }
  if (const auto& net = d.network) {
    std::string parts;
    for (const auto& [name, h] : net->histograms) {
      parts += fmt::format("{}{} p50 {:.2f} ms p99 {:.2f} ms", parts.empty() ? "" : ", ", name,
                           h.p50_ms, h.p99_ms);
    }
    for (const auto& [name, v] : net->counters) {
      if (v > 0)
        parts += fmt::format("{}{}", parts.empty() ? "" : ", ", storage::counter_text(name, v));
    }
    out += fmt::format("  the storage's own figures (baseline): {}\n",
                       parts.empty() ? "none recorded" : parts);
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
    out += fmt::format(
        "  model: as run, {:.0f} samples/s, limited by {} ({}); efficiency {:.2f} of the "
        "limit's capacity{}; stage capacities: {}\n",
        p.samples_per_second, stage_text(p), p.bound, model.efficiency(),
        model.window_fill() != 1
            ? fmt::format(" (its reads in flight {:.0f}% of what held them, on average)",
                          model.window_fill() * 100)
            : std::string(),
        caps);
  }
  out += fmt::format("  {:<40} {:>12} {:>7}  {:<18}{}\n", "what-if", "predicted/s", "AU", "limit",
                     rep.verify ? fmt::format(" {:>12} {:>8}", "achieved/s", "error") : "");
  for (const Outcome& oc : outcomes) {
    std::string verified;
    if (rep.verify) {
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
    out += fmt::format("  {:<40} {:>12.0f} {:>7}  {:<18}{}\n", oc.what.text,
                       oc.predicted.samples_per_second,
                       oc.predicted.au ? fmt::format("{:.1f}%", *oc.predicted.au * 100) : "-",
                       stage_text(oc.predicted), verified);
  }
  if (tuned) out += tune_text(*tuned);
  const loader::Verdict& v = d.baseline.verdict;
  out += fmt::format("  bottleneck (as run): {}\n    evidence: {}\n",
                     v.stage ? loader::stage_name(*v.stage) : "none", v.evidence);
  const std::string advice = conclusion(d, model, outcomes);
  out += fmt::format("  conclusion: {}\n", advice);
  for (const auto& n : notes) out += fmt::format("  note: {}\n", n);

  return out;
}

json diagnose_json(const DiagnoseReport& rep) {
  const loader::Diagnosis& d = rep.diagnosis;
  const loader::Measurements& m = d.measurements;
  const loader::CapacityModel& model = rep.model;
  const std::vector<Outcome>& outcomes = rep.outcomes;
  const auto& tuned = rep.tuned;
  const auto& notes = rep.notes;
  const bool stopped = rep.stopped;
  const loader::Verdict& v = d.baseline.verdict;
  const std::string advice = conclusion(d, model, outcomes);
  const double achieved = loader::steady_samples_per_second(d.baseline.consumer);

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
                 {"baseline_device_bytes", d.ground_truth->baseline_device_bytes},
                 {"baseline_queue_depth", d.ground_truth->baseline_queue_depth},
                 {"baseline_read_await_ms", d.ground_truth->baseline_read_await_ms}}
          : json(nullptr);
  json network = nullptr;
  if (d.network) {
    network = {{"counters", d.network->counters}, {"histograms", json::object()}};
    for (const auto& [name, h] : d.network->histograms) {
      network["histograms"][name] = {
          {"mean_ms", h.mean_ms}, {"p50_ms", h.p50_ms}, {"p99_ms", h.p99_ms}, {"count", h.count}};
    }
  }
  return {
      {"url", rep.url},
      {"format", rep.format},
      {"duration_seconds", rep.duration_seconds},
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
        {"other_processes_cores",
         d.other_processes_cores ? json(*d.other_processes_cores) : json(nullptr)},
        {"prep_seconds_per_sample", d.prep_seconds_per_sample},
        {"fetch_seconds_per_sample", d.fetch_seconds_per_sample}}},
      {"ground_truth", ground},
      {"network", network},
      {"model",
       {{"as_run", prediction_json(model.as_run())},
        {"achieved_samples_per_second", achieved},
        {"efficiency", model.efficiency()},
        {"window_fill", model.window_fill()},
        {"cores", d.as_run.cores}}},
      {"what_if", whatifs},
      {"tuned", tuned ? tune_json(*tuned) : json(nullptr)},
      {"bottleneck",
       {{"stage", v.stage ? json(loader::stage_name(*v.stage)) : json("none")},
        {"evidence", v.evidence},
        {"suggestion", flag_suggestion(v)},
        {"next", next}}},
      {"conclusion", advice},
      {"notes", notes},
      {"interrupted", stopped},
      {"error", nullptr}};
}

}  // namespace feedline::tools
