#include "run_report.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "feedline/core/units.hpp"
#include "feedline/storage/counters.hpp"
#include "knobs.hpp"
#include "output.hpp"
#include "setting_flags.hpp"

namespace feedline::tools {

std::string record_run(RunsRecord& r, unsigned i, double samples_per_second,
                       std::optional<double> au) {
  if (i == 0) {
    r.warmup_samples_per_second = samples_per_second;
    return fmt::format("  warm-up run: {:.0f} samples/s\n", samples_per_second);
  }
  r.samples_per_second.push_back(samples_per_second);
  if (au) r.au.push_back(*au);
  return fmt::format("  run {} of {}: {:.0f} samples/s{}\n", i, r.runs, samples_per_second,
                     au ? fmt::format(", AU {:.1f}%", *au * 100) : "");
}

double runs_spread(const RunsRecord& r) {
  if (r.samples_per_second.size() < 2) return 0;
  std::vector<double> v = r.samples_per_second;
  std::sort(v.begin(), v.end());
  const double median =
      v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  return median > 0 ? (v.back() - v.front()) / median : 0;
}

nlohmann::json runs_json(const RunsRecord& r) {
  if (r.runs <= 1) return nullptr;
  const double spread = runs_spread(r);
  return {{"count", r.runs},
          {"completed", r.samples_per_second.size()},
          {"warmup_samples_per_second", r.warmup_samples_per_second},
          {"samples_per_second", r.samples_per_second},
          {"au", r.au},
          {"spread", spread},
          {"agree", r.samples_per_second.size() == r.runs && spread <= kRunsAgree}};
}

std::string runs_text(const RunsRecord& r) {
  if (r.runs <= 1) return {};
  if (r.samples_per_second.size() < r.runs) {
    return fmt::format("  runs: {} of {} done after the warm-up: not compared\n",
                       r.samples_per_second.size(), r.runs);
  }
  const auto [lo, hi] =
      std::minmax_element(r.samples_per_second.begin(), r.samples_per_second.end());
  const double spread = runs_spread(r);
  return fmt::format(
      "  runs: {} after a warm-up ({:.0f} samples/s): {:.0f}..{:.0f} samples/s, spread {:.1f}%: "
      "{}\n",
      r.runs, r.warmup_samples_per_second, *lo, *hi, spread * 100,
      spread <= kRunsAgree
          ? "they agree within 5%"
          : "they do NOT agree within 5% (the storage or the host was not steady)");
}

MlperfFigures run_mlperf(const loader::PipelineReport& r, const RunContext& ctx) {
  return loader::run_mlperf(r, ctx.au_target);
}

nlohmann::json mlperf_document(const MlperfFigures& m) {
  return nlohmann::json::parse(loader::mlperf_json(m));
}

std::string mlperf_text(const MlperfFigures& m) {
  std::string au = "train_au_mean_percentage -";
  if (m.au_mean) {
    au = fmt::format("train_au_mean_percentage {:.2f}", *m.au_mean * 100);
    if (m.au_target > 0 && m.au_min) {
      au += fmt::format(" ({} at {:.0f}%)", *m.au_min >= m.au_target ? "success" : "fail",
                        m.au_target * 100);
    }
  }
  return fmt::format(
      "  MLPerf Storage terms: {} accelerator(s) on {} host(s), {}, "
      "train_throughput_mean_samples_per_second {:.2f}, train_io_mean_MB_per_second {:.2f} "
      "(MiB/s)",
      m.accelerators, m.hosts, au, m.samples_per_second, m.bytes_per_second / (1024.0 * 1024.0));
}

std::string potential_caching_note(const RunContext& ctx) {
  if (!ctx.potential_caching) return {};
  return fmt::format(
      "the dataset ({}) fits in this host's memory ({}): reads through the page cache may "
      "measure memory, not the disk (MLPerf Storage's potential_caching); for the disk: --direct, "
      "or a dataset of at least 5x memory (feedline gen --for-host)",
      format_bytes(static_cast<double>(ctx.dataset_bytes)),
      format_bytes(static_cast<double>(ctx.host_memory_bytes)));
}

std::string run_text(const loader::PipelineReport& r, const RunContext& ctx) {
  std::string out;
  auto line = [&out](std::string_view l) { out::add_line(out, l); };
  const auto& cfg = ctx.config;
  const loader::ConsumerReport& c = r.consumer;
  // Sizes a listing did not give (an http:// brace list on a server without one) are learned as
  // the samples are read: the header does not pass their 0 off as the dataset's size.
  const std::string bytes = format_bytes(static_cast<double>(ctx.dataset_bytes));
  std::string size;
  if (ctx.dataset_unknown_sizes == 0) {
    size = bytes;
  } else if (ctx.dataset_unknown_sizes == ctx.dataset_samples) {
    size = "sizes learned as they are read";
  } else {
    size =
        fmt::format("{} + {} of sizes learned as they are read", bytes, ctx.dataset_unknown_sizes);
  }
  line(fmt::format("feedline run: {} ({}, {} samples, {})", ctx.url, ctx.format,
                   ctx.dataset_samples, size));
  if (auto n = potential_caching_note(ctx); !n.empty()) line("  note: " + n);
  line(
      fmt::format("  batch {} x {} epoch(s), io-depth {}, {} decode thread(s), prefetch {}, budget "
                  "{}, compute {}",
                  cfg.sampler.batch_size, cfg.sampler.epochs, cfg.io_depth, cfg.decode_threads,
                  cfg.prefetch_batches, format_bytes(static_cast<double>(cfg.memory_budget)),
                  ctx.compute_time.empty() ? "none" : ctx.compute_time));
  if (!ctx.image.empty()) line(fmt::format("  images: JPEG members decoded to {}", ctx.image));
  line(fmt::format("  delivered {} samples in {} batches, {} in {:.2f} s: {:.0f} samples/s, {}{}",
                   c.samples, c.batches, format_bytes(static_cast<double>(c.bytes)), c.wall_seconds,
                   c.samples_per_second, format_rate(c.bytes_per_second),
                   r.interrupted ? "  [interrupted: partial result]" : ""));
  if (c.left_out_per_epoch > 0) {
    line(fmt::format(
        "  note: {} sample(s) of each epoch went to no rank: every rank gets as many batches "
        "(rank {} of {} takes {} a epoch; shuffled, other samples are left out each epoch)",
        c.left_out_per_epoch, cfg.sampler.rank, cfg.sampler.world_size,
        cfg.sampler.world_size > 0
            ? (ctx.dataset_samples - c.left_out_per_epoch) / cfg.sampler.world_size
            : 0));
  }
  line(
      fmt::format("  first batch after {}; then the consumer waited {:.1f}% of the time (p50 {} "
                  "p90 {} p99 {} per "
                  "step): input-bound: {}",
                  format_duration_ns(c.first_batch_seconds * 1e9), c.wait_fraction * 100,
                  format_duration_ns(static_cast<double>(c.wait_ns.percentile(0.5))),
                  format_duration_ns(static_cast<double>(c.wait_ns.percentile(0.9))),
                  format_duration_ns(static_cast<double>(c.wait_ns.percentile(0.99))),
                  loader::input_bound_name(c.input_bound)));
  if (c.compute_seconds > 0 && c.au_steps > 0) {
    line(fmt::format("  accelerator utilisation (AU): {:.1f}% over {} step(s)", c.au * 100,
                     c.au_steps));
  } else if (c.compute_seconds > 0) {
    line(fmt::format(
        "  accelerator utilisation (AU): not measured: {} step(s), and AU leaves the first one out",
        c.batches));
  }
  if (!ctx.compute_time.empty()) line(mlperf_text(run_mlperf(r, ctx)));
  line("  stage      threads   busy  starved  blocked   cpu-s     items");
  for (const auto& s : r.stages) {
    line(fmt::format("  {:<10} {:>7} {:>5.0f}% {:>7.0f}% {:>7.0f}% {:>7.2f} {:>9}",
                     loader::stage_name(s.stage), s.threads, s.busy_fraction * 100,
                     s.starved_fraction * 100, s.blocked_fraction * 100, s.cpu_seconds,
                     s.items_inline > s.items ? fmt::format("{} inline", s.items_inline)
                                              : fmt::format("{}", s.items)));
  }
  if (const auto& t = r.transform; t.enabled) {
    line(fmt::format(
        "  transform: {} samples, {:.2f} s ({:.0f}% of decode's busy time, {:.2f} CPU-s), {:.2f} s "
        "of it ({:.0f}%) off the CPU waiting for the lock it runs under (Python's GIL){}",
        t.samples, t.seconds, t.decode_share * 100, t.cpu_seconds, t.off_cpu_seconds,
        t.off_cpu_share * 100, t.errors ? fmt::format("; {} failed", t.errors) : ""));
  }
  line("  queue        cap  mean-occ  producer-blocked  consumer-starved");
  for (const auto& q : r.queues) {
    line(fmt::format("  {:<10} {:>5} {:>9.1f} {:>16.0f}% {:>16.0f}%", loader::queue_name(q.queue),
                     q.capacity, q.mean_occupancy, q.producer_blocked_fraction * 100,
                     q.consumer_starved_fraction * 100));
  }
  const auto& io = r.io.stats;
  line(fmt::format(
      "  storage: {} reads, {} in flight on average (cap {}{}), latency p50 {} p99 {}, engine {}",
      io.ops, fmt::format("{:.1f}", io.mean_depth()), r.io.io_depth,
      r.io.storage_threads > 1 ? fmt::format(" over {} queues", r.io.storage_threads) : "",
      format_duration_ns(static_cast<double>(io.lat.percentile(0.5))),
      format_duration_ns(static_cast<double>(io.lat.percentile(0.99))), r.io.engine));
  for (const auto& [name, h] : io.histograms) {
    line(fmt::format("    {}: p50 {} p90 {} p99 {} ({} samples)", name,
                     format_duration_ns(static_cast<double>(h.percentile(0.5))),
                     format_duration_ns(static_cast<double>(h.percentile(0.9))),
                     format_duration_ns(static_cast<double>(h.percentile(0.99))), h.count()));
  }
  if (!io.counters.empty()) {
    std::vector<std::string> parts;
    for (const auto& [name, v] : io.counters) parts.push_back(storage::counter_text(name, v));
    line(fmt::format("    backend: {}", fmt::join(parts, "  ")));
  }
  line(fmt::format(
      "  memory: peak {} of a {} budget{}{}", format_bytes(static_cast<double>(r.memory.peak)),
      format_bytes(static_cast<double>(r.memory.budget)),
      r.memory.overshoot
          ? fmt::format(" (overshoot {})", format_bytes(static_cast<double>(r.memory.overshoot)))
          : "",
      ctx.listing_bytes ? fmt::format("; the dataset's listing holds {} besides",
                                      format_bytes(static_cast<double>(ctx.listing_bytes)))
                        : ""));
  for (const auto& f : r.memory.fitted) line(fmt::format("    note: {}", in_flag_words(f)));
  if (r.delivered.skipped) {
    line(fmt::format("  skipped {} sample(s) (--on-error skip), e.g. {}", r.delivered.skipped,
                     r.delivered.skipped_examples.empty()
                         ? ""
                         : in_flag_words(r.delivered.skipped_examples.front())));
  }
  const auto& p = r.data_path;
  line(fmt::format("  data path: {} for {}, copy amplification {:.2f}{}",
                   loader::data_path_name(p.path), format_bytes(static_cast<double>(p.bytes)),
                   p.copy_amplification,
                   p.detail.empty() ? "" : " (" + in_flag_words(p.detail) + ")"));
  if (!p.reason.empty()) line(fmt::format("    why: {}", in_flag_words(p.reason)));
  for (const auto& d : p.decoders) {
    line(fmt::format("    decode: {} for {} member(s){}", d.name, d.members,
                     d.output.empty() ? "" : " -> " + d.output));
  }
  for (const auto& n : p.notes) line(fmt::format("    note: {}", in_flag_words(n)));
  if (r.device.enabled && loader::reads_into_device(p.path)) {
    // Read into GPU memory by cuFile: there were no copies to report.
    line(
        fmt::format("  device cuda:{} ({}): samples read into GPU memory by cuFile, no H2D copies; "
                    "host memory {}",
                    r.device.device, r.device.name, r.device.host_memory));
  } else if (r.device.enabled) {
    const auto& d = r.device;
    line(fmt::format(
        "  device cuda:{} ({}): {} copies, {} H2D at {}{} on {} stream(s); host memory {}",
        d.device, d.name, d.copies, format_bytes(static_cast<double>(d.h2d_bytes)),
        format_rate(d.h2d_bytes_per_second),
        d.peak_bytes_per_second > 0
            ? fmt::format(" ({:.0f}% of the {} pinned peak)",
                          100 * d.h2d_bytes_per_second / d.peak_bytes_per_second,
                          format_rate(d.peak_bytes_per_second))
            : "",
        d.streams, d.host_memory));
    line(fmt::format(
        "    copy stage waited {:.3f} s on copies, {:.3f} s of it while the consumer had no batch",
        d.copy_wait_seconds, d.consumer_wait_on_copy_seconds));
  }
  line(fmt::format("  bottleneck: {}",
                   r.verdict.stage ? loader::stage_name(*r.verdict.stage) : "none"));
  line(fmt::format("    evidence: {}", in_flag_words(r.verdict.evidence)));
  line(fmt::format("    next: {}", flag_suggestion(r.verdict)));
  if (r.delivered.digest_computed) {
    line(fmt::format("  delivered digest: {} ({} samples)", r.delivered.digest, c.samples));
  } else {
    line(fmt::format(
        "  delivered digest: not computed: samples went from storage to GPU memory ({} samples)",
        c.samples));
  }
  if (r.error) line(fmt::format("  error: {}", r.error->what()));
  return out;
}

}  // namespace feedline::tools
