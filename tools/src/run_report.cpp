#include "run_report.hpp"

#include <fmt/format.h>

#include "feedline/core/units.hpp"

namespace feedline::tools {

namespace {
double ms(std::uint64_t ns) { return static_cast<double>(ns) / 1e6; }
}  // namespace

nlohmann::json run_json(const loader::PipelineReport& r, const RunContext& ctx) {
  using nlohmann::json;
  json stages = json::array();
  for (const auto& s : r.stages) {
    stages.push_back({{"name", s.name},
                      {"threads", s.threads},
                      {"busy_fraction", s.busy_fraction},
                      {"starved_fraction", s.starved_fraction},
                      {"blocked_fraction", s.blocked_fraction},
                      {"cpu_seconds", s.cpu_seconds},
                      {"items", s.items},
                      {"bytes", s.bytes}});
  }
  json queues = json::array();
  for (const auto& q : r.queues) {
    queues.push_back({{"name", q.name},
                      {"capacity", q.capacity},
                      {"mean_occupancy", q.mean_occupancy},
                      {"max_occupancy", q.max_occupancy},
                      {"producer_blocked_fraction", q.producer_blocked_fraction},
                      {"consumer_starved_fraction", q.consumer_starved_fraction},
                      {"items", q.items}});
  }
  const auto& io = r.io;
  const double at_cap = io.span_ns ? static_cast<double>(io.at_cap_ns) / static_cast<double>(io.span_ns) : 0;
  json j = {
      {"url", ctx.url},
      {"format", ctx.format},
      {"samples", r.samples},
      {"bytes", r.bytes},
      {"batches", r.batches},
      {"epochs", r.epochs},
      {"wall_seconds", r.wall_seconds},
      {"samples_per_second", r.samples_per_second},
      {"bytes_per_second", r.bytes_per_second},
      // null when not measured (a run of one step: AU leaves the first step out).
      {"au", r.au_steps > 0 ? json(r.au) : json(nullptr)},
      {"au_steps", r.au_steps},
      {"compute_seconds", r.compute_seconds},
      {"consumer_wait",
       {{"fraction", r.consumer_wait_fraction},
        {"seconds", r.consumer_wait_seconds},
        {"first_batch_ms", r.first_batch_seconds * 1e3},
        {"p50_ms", ms(r.consumer_wait_ns.percentile(0.5))},
        {"p90_ms", ms(r.consumer_wait_ns.percentile(0.9))},
        {"p99_ms", ms(r.consumer_wait_ns.percentile(0.99))},
        {"max_ms", ms(r.consumer_wait_ns.max())}}},
      {"input_bound", r.input_bound},
      {"stages", stages},
      {"queues", queues},
      {"io",
       {{"engine", ctx.engine},
        {"reads", io.ops},
        {"bytes", r.storage_bytes},
        {"depth_cap", r.io_depth},
        {"mean_in_flight", io.mean_depth()},
        {"at_cap_fraction", at_cap},
        {"window_limited_fraction", r.storage_window_limited_fraction},
        {"budget_limited_fraction", r.storage_budget_limited_fraction},
        {"window_samples", r.window_samples},
        {"batch_buffers", r.batch_buffers},
        {"retries", io.retries},
        {"errors", io.errors},
        {"latency_ns",
         {{"p50", io.lat.percentile(0.5)}, {"p90", io.lat.percentile(0.9)}, {"p99", io.lat.percentile(0.99)},
          {"p999", io.lat.percentile(0.999)}, {"max", io.lat.max()}}},
        {"counters", io.counters},
        {"histograms", [&io] {
           json h = json::object();
           for (const auto& [name, hist] : io.histograms) {
             h[name] = {{"p50", hist.percentile(0.5)}, {"p90", hist.percentile(0.9)},
                        {"p99", hist.percentile(0.99)}, {"max", hist.max()}, {"count", hist.count()}};
           }
           return h;
         }()}}},
      {"memory",
       {{"budget_bytes", r.memory_budget}, {"peak_bytes", r.peak_memory}, {"overshoot_bytes", r.budget_overshoot}}},
      {"bottleneck",
       {{"stage", r.bottleneck.stage}, {"evidence", r.bottleneck.evidence}, {"suggestion", r.bottleneck.suggestion}}},
      // null where samples never passed through host memory (cuFile into GPU memory).
      {"delivered",
       {{"samples", r.samples},
        {"digest", r.digest_computed ? nlohmann::json(r.digest) : nlohmann::json(nullptr)}}},
      {"skipped", {{"samples", r.skipped}, {"examples", r.skipped_examples}}},
      {"interrupted", r.interrupted},
      {"config",
       {{"batch_size", ctx.config.sampler.batch_size},
        {"epochs", ctx.config.sampler.epochs},
        {"seed", ctx.config.sampler.seed},
        {"shuffle", ctx.config.sampler.shuffle},
        {"shard_shuffle", ctx.config.sampler.shard_shuffle},
        {"rank", ctx.config.sampler.rank},
        {"world_size", ctx.config.sampler.world_size},
        {"drop_last", ctx.config.sampler.drop_last},
        {"io_depth", ctx.config.io_depth},
        {"decode_threads", ctx.config.decode_threads},
        {"decode_nice", ctx.config.decode_nice},
        {"prefetch_batches", ctx.config.prefetch_batches},
        {"memory_budget", ctx.config.memory_budget},
        {"compute_time", ctx.compute_time},
        {"accounting", ctx.config.accounting}}},
      {"dataset", {{"samples", ctx.dataset_samples}, {"bytes", ctx.dataset_bytes}}},
  };
  j["error"] = r.error ? json(r.error->what()) : json(nullptr);
  {
    json paths = json::array();
    for (const auto& p : r.data_paths) {
      paths.push_back({{"path", p.path}, {"bytes", p.bytes}, {"copied_bytes", p.copied_bytes},
                       {"copy_amplification", p.copy_amplification}, {"detail", p.detail}});
    }
    j["data_paths"] = paths;
    j["data_path"] = {{"gpu_direct", std::string(loader::gpu_direct_name(ctx.config.gpu_direct))},
                      {"reason", r.data_path_reason},
                      {"notes", r.data_path_notes}};
    if (r.device.enabled) {
      const auto& d = r.device;
      j["device"] = {{"device", fmt::format("cuda:{}", d.device)},
                     {"name", d.name},
                     {"streams", d.streams},
                     {"host_memory", d.host_memory},
                     {"copies", d.copies},
                     {"h2d_bytes", d.h2d_bytes},
                     {"h2d_seconds", d.h2d_seconds},
                     {"h2d_bytes_per_second", d.h2d_bytes_per_second},
                     {"peak_bytes_per_second", d.peak_bytes_per_second},
                     {"h2d_of_peak", d.peak_bytes_per_second > 0 ? d.h2d_bytes_per_second / d.peak_bytes_per_second : 0},
                     {"copy_wait_seconds", d.copy_wait_seconds},
                     {"consumer_wait_on_copy_seconds", d.consumer_wait_on_copy_seconds}};
    } else {
      j["device"] = nullptr;
    }
  }
  if (ctx.au_target > 0) {
    j["au_target"] = ctx.au_target;
    j["au_pass"] = r.au_steps > 0 ? json(r.au >= ctx.au_target) : json(nullptr);
  }
  return j;
}

std::string run_text(const loader::PipelineReport& r, const RunContext& ctx) {
  std::string out;
  auto line = [&out](const std::string& l) { out += l + "\n"; };
  const auto& c = ctx.config;
  line(fmt::format("feedline run: {} ({}, {} samples, {})", ctx.url, ctx.format, ctx.dataset_samples,
                   format_bytes(static_cast<double>(ctx.dataset_bytes))));
  line(fmt::format("  batch {} x {} epoch(s), io-depth {}, {} decode thread(s), prefetch {}, budget {}, compute {}",
                   c.sampler.batch_size, c.sampler.epochs, c.io_depth, c.decode_threads, c.prefetch_batches,
                   format_bytes(static_cast<double>(c.memory_budget)),
                   ctx.compute_time.empty() ? "none" : ctx.compute_time));
  line(fmt::format("  delivered {} samples in {} batches, {} in {:.2f} s: {:.0f} samples/s, {}{}", r.samples,
                   r.batches, format_bytes(static_cast<double>(r.bytes)), r.wall_seconds, r.samples_per_second,
                   format_rate(r.bytes_per_second), r.interrupted ? "  [interrupted: partial result]" : ""));
  line(fmt::format("  first batch after {}; then the consumer waited {:.1f}% of the time (p50 {} p90 {} p99 {} per "
                   "step): input-bound: {}",
                   format_duration_ns(r.first_batch_seconds * 1e9), r.consumer_wait_fraction * 100,
                   format_duration_ns(static_cast<double>(r.consumer_wait_ns.percentile(0.5))),
                   format_duration_ns(static_cast<double>(r.consumer_wait_ns.percentile(0.9))),
                   format_duration_ns(static_cast<double>(r.consumer_wait_ns.percentile(0.99))), r.input_bound));
  if (r.compute_seconds > 0 && r.au_steps > 0) {
    line(fmt::format("  accelerator utilisation (AU): {:.1f}% over {} step(s)", r.au * 100, r.au_steps));
  } else if (r.compute_seconds > 0) {
    line(fmt::format("  accelerator utilisation (AU): not measured: {} step(s), and AU leaves the first one out",
                     r.batches));
  }
  line("  stage      threads   busy  starved  blocked   cpu-s     items");
  for (const auto& s : r.stages) {
    line(fmt::format("  {:<10} {:>7} {:>5.0f}% {:>7.0f}% {:>7.0f}% {:>7.2f} {:>9}", s.name, s.threads,
                     s.busy_fraction * 100, s.starved_fraction * 100, s.blocked_fraction * 100, s.cpu_seconds,
                     s.items));
  }
  line("  queue        cap  mean-occ  producer-blocked  consumer-starved");
  for (const auto& q : r.queues) {
    line(fmt::format("  {:<10} {:>5} {:>9.1f} {:>16.0f}% {:>16.0f}%", q.name, q.capacity, q.mean_occupancy,
                     q.producer_blocked_fraction * 100, q.consumer_starved_fraction * 100));
  }
  const auto& io = r.io;
  line(fmt::format("  storage: {} reads, {} in flight on average (cap {}), latency p50 {} p99 {}, engine {}", io.ops,
                   fmt::format("{:.1f}", io.mean_depth()), r.io_depth,
                   format_duration_ns(static_cast<double>(io.lat.percentile(0.5))),
                   format_duration_ns(static_cast<double>(io.lat.percentile(0.99))), ctx.engine));
  for (const auto& [name, h] : io.histograms) {
    line(fmt::format("    {}: p50 {} p90 {} p99 {} ({} samples)", name,
                     format_duration_ns(static_cast<double>(h.percentile(0.5))),
                     format_duration_ns(static_cast<double>(h.percentile(0.9))),
                     format_duration_ns(static_cast<double>(h.percentile(0.99))), h.count()));
  }
  if (!io.counters.empty()) {
    std::vector<std::string> parts;
    for (const auto& [name, v] : io.counters) parts.push_back(fmt::format("{} {}", name, v));
    line(fmt::format("    backend: {}", fmt::join(parts, "  ")));
  }
  line(fmt::format("  memory: peak {} of a {} budget{}", format_bytes(static_cast<double>(r.peak_memory)),
                   format_bytes(static_cast<double>(r.memory_budget)),
                   r.budget_overshoot ? fmt::format(" (overshoot {})", format_bytes(static_cast<double>(r.budget_overshoot)))
                                      : ""));
  if (r.skipped) {
    line(fmt::format("  skipped {} sample(s) (--on-error skip), e.g. {}", r.skipped,
                     r.skipped_examples.empty() ? "" : r.skipped_examples.front()));
  }
  for (const auto& p : r.data_paths) {
    line(fmt::format("  data path: {} for {}, copy amplification {:.2f}{}", p.path,
                     format_bytes(static_cast<double>(p.bytes)), p.copy_amplification,
                     p.detail.empty() ? "" : " (" + p.detail + ")"));
  }
  if (!r.data_path_reason.empty()) line(fmt::format("    why: {}", r.data_path_reason));
  for (const auto& n : r.data_path_notes) line(fmt::format("    note: {}", n));
  const bool read_into_gpu = !r.data_paths.empty() && (r.data_paths.front().path == "gpu-direct" ||
                                                        r.data_paths.front().path == "cufile-compat");
  if (r.device.enabled && read_into_gpu) {
    // Read into GPU memory by cuFile: there were no copies to report.
    line(fmt::format("  device cuda:{} ({}): samples read into GPU memory by cuFile, no H2D copies; host memory {}",
                     r.device.device, r.device.name, r.device.host_memory));
  } else if (r.device.enabled) {
    const auto& d = r.device;
    line(fmt::format("  device cuda:{} ({}): {} copies, {} H2D at {}{} on {} stream(s); host memory {}", d.device,
                     d.name, d.copies, format_bytes(static_cast<double>(d.h2d_bytes)),
                     format_rate(d.h2d_bytes_per_second),
                     d.peak_bytes_per_second > 0
                         ? fmt::format(" ({:.0f}% of the {} pinned peak)",
                                       100 * d.h2d_bytes_per_second / d.peak_bytes_per_second,
                                       format_rate(d.peak_bytes_per_second))
                         : "",
                     d.streams, d.host_memory));
    line(fmt::format("    copy stage waited {:.3f} s on copies, {:.3f} s of it while the consumer had no batch",
                     d.copy_wait_seconds, d.consumer_wait_on_copy_seconds));
  }
  line(fmt::format("  bottleneck: {}", r.bottleneck.stage));
  line(fmt::format("    evidence: {}", r.bottleneck.evidence));
  line(fmt::format("    next: {}", r.bottleneck.suggestion));
  if (r.digest_computed) {
    line(fmt::format("  delivered digest: {} ({} samples)", r.digest, r.samples));
  } else {
    line(fmt::format("  delivered digest: not computed: samples went from storage to GPU memory ({} samples)",
                     r.samples));
  }
  if (r.error) line(fmt::format("  error: {}", r.error->what()));
  return out;
}

}  // namespace feedline::tools
