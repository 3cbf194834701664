// The run's report as a JSON document (report_json.hpp; the keys: docs/CLI.md).
#include "feedline/loader/report_json.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "json_support.hpp"

namespace feedline::loader {
namespace {

using json = nlohmann::json;

double ms(std::uint64_t ns) { return static_cast<double>(ns) / 1e6; }

json histogram_doc(const Histogram& h) {
  return {{"min", h.min()},
          {"mean", h.mean()},
          {"p50", h.percentile(0.50)},
          {"p90", h.percentile(0.90)},
          {"p99", h.percentile(0.99)},
          {"p999", h.percentile(0.999)},
          {"p9999", h.percentile(0.9999)},
          {"max", h.max()},
          {"count", h.count()}};
}

json io_stats_doc(const storage::QueueStats& s) {
  json histograms = json::object();
  for (const auto& [name, h] : s.histograms) histograms[name] = histogram_doc(h);
  return {{"ops", s.ops},
          {"bytes", s.bytes},
          {"errors", s.errors},
          {"cancelled", s.cancelled},
          {"short_reads", s.short_reads},
          {"retries", s.retries},
          {"bounced_bytes", s.bounced_bytes},
          {"mean_in_flight", s.mean_depth()},
          {"at_cap_fraction",
           s.span_ns ? static_cast<double>(s.at_cap_ns) / static_cast<double>(s.span_ns) : 0.0},
          {"latency_ns", histogram_doc(s.lat)},
          {"slat_ns", histogram_doc(s.slat)},
          {"clat_ns", histogram_doc(s.clat)},
          {"counters", s.counters},
          {"histograms", histograms}};
}

json mlperf_doc(const MlperfFigures& m) {
  json meet = nullptr;
  if (m.au_target > 0 && m.au_min) meet = *m.au_min >= m.au_target ? "success" : "fail";
  return {{"num_accelerators", m.accelerators},
          {"num_hosts", m.hosts},
          {"train_au_mean_percentage", m.au_mean ? json(*m.au_mean * 100) : json(nullptr)},
          {"train_au_meet_expectation", meet},
          {"train_throughput_mean_samples_per_second", m.samples_per_second},
          {"train_io_mean_MB_per_second", m.bytes_per_second / (1024.0 * 1024.0)}};
}

json stages_doc(const PipelineReport& r) {
  json stages = json::array();
  for (const auto& s : r.stages) {
    stages.push_back({{"name", stage_name(s.stage)},
                      {"threads", s.threads},
                      {"busy_fraction", s.busy_fraction},
                      {"starved_fraction", s.starved_fraction},
                      {"blocked_fraction", s.blocked_fraction},
                      {"cpu_seconds", s.cpu_seconds},
                      {"items", s.items},
                      {"items_inline", s.items_inline},
                      {"bytes", s.bytes}});
  }
  return stages;
}

json queues_doc(const PipelineReport& r) {
  json queues = json::array();
  for (const auto& q : r.queues) {
    queues.push_back({{"name", queue_name(q.queue)},
                      {"capacity", q.capacity},
                      {"mean_occupancy", q.mean_occupancy},
                      {"max_occupancy", q.max_occupancy},
                      {"producer_blocked_fraction", q.producer_blocked_fraction},
                      {"consumer_starved_fraction", q.consumer_starved_fraction},
                      {"items", q.items}});
  }
  return queues;
}

// The storage stage's reads: the queue's stats as every document renders them, plus the
// pipeline's own (the window, the budget, what the verdict reads).
json io_doc(const IoReport& r) {
  json io = io_stats_doc(r.stats);
  io["engine"] = r.engine;
  io["reads"] = r.stats.ops;
  io["bytes"] = r.storage_bytes;
  io["depth_cap"] = r.io_depth;
  io["storage_threads"] = r.storage_threads;
  io["poll_wait_seconds"] = r.poll_wait_seconds;
  io["window_limited_fraction"] = r.window_limited_fraction;
  io["budget_limited_fraction"] = r.budget_limited_fraction;
  io["window_samples"] = r.window_samples;
  io["batch_buffers"] = r.batch_buffers;
  return io;
}

// The verdict: each knob by its config field, its values typed (the field's unit).
json bottleneck_doc(const Verdict& v, const KnobText& spell) {
  json next = json::array();
  for (const KnobChange& k : v.next)
    next.push_back({{"knob", knob_name(k.knob)}, {"from", k.from}, {"to", k.to}});
  return {{"stage", v.stage ? json(stage_name(*v.stage)) : json("none")},
          {"evidence", v.evidence},
          {"suggestion", spell ? suggestion_text(v, spell) : suggestion_text(v)},
          {"next", std::move(next)}};
}

json config_doc(const LoaderConfig& c, const std::string& compute_time) {
  return {{"batch_size", c.sampler.batch_size},
          {"epochs", c.sampler.epochs},
          {"seed", c.sampler.seed},
          {"shuffle", c.sampler.shuffle},
          {"shard_shuffle", c.sampler.shard_shuffle},
          {"rank", c.sampler.rank},
          {"world_size", c.sampler.world_size},
          {"drop_last", c.sampler.drop_last},
          {"io_depth", c.io_depth},
          {"storage_threads", c.storage_threads},
          {"decode_threads", c.decode_threads},
          {"decode_nice", c.decode_nice},
          {"prefetch_batches", c.prefetch_batches},
          {"caller_batches", c.caller_batches},
          {"memory_budget", c.memory_budget},
          {"compute_time", compute_time},
          {"accounting", c.diagnostics.accounting}};
}

json dataset_doc(const Dataset& d, std::uint64_t host_memory_bytes) {
  const auto unknown = static_cast<std::uint64_t>(
      std::count_if(d.samples.begin(), d.samples.end(),
                    [](const Sample& s) { return s.length == storage::kUnknownSize; }));
  return {{"samples", d.samples.size()},
          {"bytes", d.total_bytes},
          {"unknown_size_samples", unknown},
          {"host_memory_bytes", host_memory_bytes},
          {"manifest", d.manifest.empty() ? json(nullptr) : json(d.manifest)},
          {"open_reads", d.open_reads},
          {"open_bytes", d.open_bytes},
          {"listing_bytes", d.listing_bytes}};
}

json transform_doc(const TransformReport& t) {
  if (!t.enabled) return nullptr;
  return {{"samples", t.samples},
          {"errors", t.errors},
          {"seconds", t.seconds},
          {"cpu_seconds", t.cpu_seconds},
          {"lock_wait_seconds", t.lock_wait_seconds},
          {"off_cpu_seconds", t.off_cpu_seconds},
          {"decode_share", t.decode_share},
          {"off_cpu_share", t.off_cpu_share}};
}

json device_doc(const DeviceReport& d) {
  if (!d.enabled) return nullptr;
  return {{"device", fmt::format("cuda:{}", d.device)},
          {"name", d.name},
          {"streams", d.streams},
          {"host_memory", d.host_memory},
          {"copies", d.copies},
          {"h2d_bytes", d.h2d_bytes},
          {"h2d_seconds", d.h2d_seconds},
          {"h2d_bytes_per_second", d.h2d_bytes_per_second},
          {"peak_bytes_per_second", d.peak_bytes_per_second},
          {"h2d_of_peak",
           d.peak_bytes_per_second > 0 ? d.h2d_bytes_per_second / d.peak_bytes_per_second : 0},
          {"copy_wait_seconds", d.copy_wait_seconds},
          {"consumer_wait_on_copy_seconds", d.consumer_wait_on_copy_seconds}};
}

// The library's messages name settings as {name} placeholders (settings.hpp): the document's
// messages name them in the words of the front end that writes it. (Names of objects in them
// are kept: a brace that names no setting stays as it is.)
void name_settings(json& j, SettingVocabulary names) {
  const auto render = [names](json& text) {
    if (text.is_string()) text = render_setting_names(text.get<std::string>(), names);
  };
  const auto render_all = [&render](json& list) {
    if (list.is_array()) {
      for (json& text : list) render(text);
    }
  };
  render(j["error"]);
  render(j["bottleneck"]["evidence"]);
  render(j["data_path"]["reason"]);
  render_all(j["data_path"]["notes"]);
  render_all(j["skipped"]["examples"]);
  render_all(j["memory"]["fitted"]);
  for (json& p : j["data_paths"]) render(p["detail"]);
}

void add_data_path(json& j, const DataPathReport& p, GpuDirect gpu_direct) {
  j["data_paths"] = json::array({{{"path", data_path_name(p.path)},
                                  {"bytes", p.bytes},
                                  {"copied_bytes", p.copied_bytes},
                                  {"copy_amplification", p.copy_amplification},
                                  {"detail", p.detail}}});
  json decoders = json::array();
  for (const auto& d : p.decoders)
    decoders.push_back({{"name", d.name}, {"output", d.output}, {"members", d.members}});
  j["data_path"] = {{"gpu_direct", std::string(gpu_direct_name(gpu_direct))},
                    {"reason", p.reason},
                    {"notes", p.notes},
                    {"decoders", std::move(decoders)}};
}

json report_doc(const PipelineReport& r, const Dataset& dataset, const LoaderConfig& config,
                const ReportOptions& o) {
  const ConsumerReport& c = r.consumer;
  // Objects left out of the dataset itself (unreadable shards) are skipped work too.
  std::vector<std::string> skipped = dataset.skipped;
  skipped.insert(skipped.end(), r.delivered.skipped_examples.begin(),
                 r.delivered.skipped_examples.end());
  json memory = {{"budget_bytes", r.memory.budget},
                 {"peak_bytes", r.memory.peak},
                 {"overshoot_bytes", r.memory.overshoot},
                 {"fitted", r.memory.fitted},
                 {"peak_rss_bytes", r.memory.peak_rss}};
  json j = {
      {"schema", kReportSchema},
      {"url", o.url},
      {"format", format_name(dataset.format)},
      {"samples", c.samples},
      {"bytes", c.bytes},
      {"batches", c.batches},
      {"epochs", c.epochs},
      {"left_out_per_epoch", c.left_out_per_epoch},
      {"wall_seconds", c.wall_seconds},
      {"samples_per_second", c.samples_per_second},
      {"bytes_per_second", c.bytes_per_second},
      // null when not measured (a run of one step: AU leaves the first step out).
      {"au", c.au_steps > 0 ? json(c.au) : json(nullptr)},
      {"au_steps", c.au_steps},
      {"compute_seconds", c.compute_seconds},
      {"sync_seconds", c.sync_seconds},
      {"consumer_wait",
       {{"fraction", c.wait_fraction},
        {"seconds", c.wait_seconds},
        {"first_batch_ms", c.first_batch_seconds * 1e3},
        {"p50_ms", ms(c.wait_ns.percentile(0.5))},
        {"p90_ms", ms(c.wait_ns.percentile(0.9))},
        {"p99_ms", ms(c.wait_ns.percentile(0.99))},
        {"max_ms", ms(c.wait_ns.max())}}},
      {"input_bound", input_bound_name(c.input_bound)},
      {"stages", stages_doc(r)},
      {"queues", queues_doc(r)},
      {"io", io_doc(r.io)},
      {"memory", std::move(memory)},
      {"bottleneck", bottleneck_doc(r.verdict, o.knob_text)},
      // digest null where samples never passed through host memory (cuFile into GPU memory).
      {"delivered",
       {{"samples", c.samples},
        {"digest", r.delivered.digest_computed ? json(r.delivered.digest) : json(nullptr)},
        {"verified", nullptr}}},
      {"skipped",
       {{"samples", r.delivered.skipped},
        {"examples", std::move(skipped)},
        {"objects", dataset.skipped.size()}}},
      {"interrupted", r.interrupted},
      {"snapshot", r.snapshot},
      {"config", config_doc(config, o.compute_time)},
      {"dataset", dataset_doc(dataset, o.host_memory_bytes)},
      {"potential_caching", o.potential_caching},
      {"error", r.error ? json(r.error->what()) : json(nullptr)},
      {"runs", nullptr},      // the CLI's --runs N sets it
      {"autotune", nullptr},  // the CLI's run --autotune sets it
      // The user's transform (the Python layer's transform=): null without one.
      {"transform", transform_doc(r.transform)},
      {"device", device_doc(r.device)},
      {"mlperf", mlperf_doc(run_mlperf(r, o.au_target))},
  };
  add_data_path(j, r.data_path, config.gpu_direct);
  if (o.au_target > 0) {
    j["au_target"] = o.au_target;
    j["au_pass"] = c.au_steps > 0 ? json(c.au >= o.au_target) : json(nullptr);
  }
  if (o.resumed_from) j["resumed_from"] = detail::resume_point_doc(*o.resumed_from);
  const DeliveredWhole whole{r.delivered.digest,
                             c.samples,
                             r.delivered.skipped,
                             r.delivered.digest_computed,
                             r.interrupted || r.error.has_value(),
                             config.sampler.world_size};
  if (auto v = check_manifest_digest(whole, config, dataset, o.mismatch)) {
    j["delivered"]["verified"] = *v;
    if (!*v && o.mismatch && *o.mismatch) j["error"] = (*o.mismatch)->what();
  }
  name_settings(j, o.names);
  return j;
}

}  // namespace

std::string report_json(const PipelineReport& report, const Dataset& dataset,
                        const LoaderConfig& config, const ReportOptions& options, int indent) {
  return detail::dump_utf8(report_doc(report, dataset, config, options), indent);
}

std::string histogram_json(const Histogram& h) { return histogram_doc(h).dump(); }

std::string io_stats_json(const storage::QueueStats& s) {
  return detail::dump_utf8(io_stats_doc(s));  // backend counters' names
}

std::string mlperf_json(const MlperfFigures& m) { return mlperf_doc(m).dump(); }

MlperfFigures run_mlperf(const PipelineReport& r, double au_target) {
  const ConsumerReport& c = r.consumer;
  MlperfFigures m;
  m.samples_per_second = c.samples_per_second;
  m.bytes_per_second = c.bytes_per_second;
  if (c.au_steps > 0 && c.compute_seconds > 0) m.au_mean = m.au_min = c.au;
  m.au_target = au_target;
  return m;
}

std::optional<bool> check_manifest_digest(const DeliveredWhole& d, const LoaderConfig& c,
                                          const Dataset& dataset, std::optional<Error>* mismatch) {
  const bool whole_epochs = d.world_size == 1 && !c.sampler.drop_last &&
                            c.sampler.resume.at_start() && d.skipped == 0 &&
                            dataset.skipped.empty() && !d.stopped &&
                            d.samples == dataset.samples.size() * std::uint64_t{c.sampler.epochs};
  if (!dataset.manifest_digest || !whole_epochs || !d.digest_computed) return std::nullopt;
  const std::uint64_t want =
      *dataset.manifest_digest * std::uint64_t{c.sampler.epochs};  // mod 2^64, as the digest
  if (d.digest != want && mismatch) {
    *mismatch =
        Error(Errc::kCorrupt,
              fmt::format("the bytes delivered are not those feedline gen wrote: digest {}, "
                          "expected {} ({} epoch(s) x {} from its manifest)",
                          d.digest, want, c.sampler.epochs, *dataset.manifest_digest))
            .with_object(dataset.manifest)
            .with_hint(
                "a sample was changed after gen wrote it, or was read wrong: rerun with "
                "{!index}, and check the storage");
  }
  return d.digest == want;
}

std::uint64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0)  // "VmHWM:  1234 kB"
      return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  }
  return 0;
}

}  // namespace feedline::loader
