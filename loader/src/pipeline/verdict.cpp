// The verdict: walk from the consumer back towards storage and name the first stage that is
// mostly busy while the consumer waits (DESIGN.md, "Stall accounting"), with the numbers behind
// the call and the next knob to turn.
#include <fmt/format.h>

#include <algorithm>

#include "feedline/core/units.hpp"
#include "pipeline.hpp"
#include "stage_work.hpp"

namespace feedline::loader {
namespace {

constexpr double kMostlyBusy = 0.6;  // a stage busier than this, while the consumer waits, limits

const StageStats* find(const PipelineReport& r, std::string_view name) {
  for (const auto& s : r.stages) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

const QueueReport* find_queue(const PipelineReport& r, std::string_view name) {
  for (const auto& q : r.queues) {
    if (q.name == name) return &q;
  }
  return nullptr;
}

std::string pct(double f) { return fmt::format("{:.0f}%", f * 100); }

// How busy a CPU stage really was: its busy time, but no more than the CPU it actually got. A
// thread that is runnable but not running (other threads, other processes) shows as busy on the
// wall clock without doing work; its CPU time tells the two apart.
double cpu_busy(const StageStats& s, double wall_seconds) {
  const double cpu = wall_seconds > 0 && s.threads ? s.cpu_seconds / (wall_seconds * s.threads) : 0;
  return std::min(s.busy_fraction, cpu);
}

}  // namespace

Verdict diagnose(const PipelineReport& r, const LoaderConfig& config) {
  if (r.batches == 0) return {"none", "no batch was delivered", "see the error above"};
  const double wait = r.consumer_wait_fraction;
  const std::string wait_text = fmt::format(
      "after the first batch, the consumer waited {} of the time for data (p50 {} / p99 {} per step)", pct(wait),
      format_duration_ns(static_cast<double>(r.consumer_wait_ns.percentile(0.5))),
      format_duration_ns(static_cast<double>(r.consumer_wait_ns.percentile(0.99))));
  if (wait < 0.05 && r.compute_seconds > 0) {
    return {"consumer",
            fmt::format("{}; the accelerator computed {} of the time (AU {})", wait_text,
                        pct(r.compute_seconds / std::max(r.wall_seconds, 1e-9)), pct(r.au)),
            "the input pipeline keeps up: the accelerator is the limit, so faster storage or more "
            "decode threads will not raise throughput"};
  }
  // The device sink, right before the consumer: it limits when the consumer's waits were mostly
  // spent with a host-to-device copy as the holdup.
  // The waits are compared without the first step's (the pipeline filling up).
  const double steady_wait = std::max(0.0, r.consumer_wait_seconds - r.first_batch_seconds);
  if (r.device.enabled && steady_wait > 0 && r.device.consumer_wait_on_copy_seconds >= 0.5 * steady_wait) {
    const auto& d = r.device;
    return {"device",
            fmt::format("{}; for {:.3f} s of the consumer's {:.3f} s of waiting after the first batch a host-to-device copy was "
                        "the holdup; copies ran at {} ({} of the {} pinned peak), host memory {}",
                        wait_text, d.consumer_wait_on_copy_seconds, steady_wait,
                        format_rate(d.h2d_bytes_per_second),
                        d.peak_bytes_per_second > 0 ? pct(d.h2d_bytes_per_second / d.peak_bytes_per_second) : "?",
                        format_rate(d.peak_bytes_per_second), d.host_memory),
            d.host_memory.starts_with("pinned")
                ? fmt::format("raise --cuda-streams from {} so more copies overlap, or check the PCIe link "
                              "(feedline probe --h2d-bench)", d.streams)
                : "pin the batch pool (raise RLIMIT_MEMLOCK / ulimit -l): pageable copies run at a fraction "
                  "of the pinned rate"};
  }
  const StageStats* collate = find(r, "collate");
  const StageStats* decode = find(r, "decode");
  const QueueReport* decoded_q = find_queue(r, "decoded");
  const QueueReport* reads_q = find_queue(r, "reads");
  auto blame_collate = [&](std::string why) -> Verdict {
    return {"collate",
            fmt::format("{}; collate was busy {} of the time ({:.2f} CPU-s) while decode waited to "
                        "hand it samples {} of the time{}",
                        wait_text, pct(collate->busy_fraction), collate->cpu_seconds,
                        pct(decoded_q ? decoded_q->producer_blocked_fraction : 0), why),
            "collate copies every sample into its batch on one thread: cut per-batch work "
            "(larger samples per copy, fewer members), or use the direct path"};
  };
  auto blame_decode = [&](std::string why) -> Verdict {
    const unsigned cores = detail::usable_cores();
    std::string knob;
    if (config.decode_threads < cores) {
      knob = fmt::format("raise --decode-threads from {} to {}", config.decode_threads,
                         std::min(cores, 2 * config.decode_threads));
    } else {
      knob = fmt::format(
          "decode is CPU-bound on {} threads for {} cores: make decode cheaper (a lower zstd "
          "level, pre-decoded data) or give the job more CPU",
          config.decode_threads, cores);
    }
    return {"decode",
            fmt::format("{}; the {} decode threads were busy {} of the time ({:.2f} CPU-s) while "
                        "collate starved {} and finished reads queued {:.1f} deep on average{}",
                        wait_text, decode->threads, pct(decode->busy_fraction), decode->cpu_seconds,
                        pct(collate ? collate->starved_fraction : 0),
                        reads_q ? reads_q->mean_occupancy : 0.0, why),
            knob};
  };
  const double collate_busy = collate ? cpu_busy(*collate, r.wall_seconds) : 0;
  const double decode_busy = decode ? cpu_busy(*decode, r.wall_seconds) : 0;
  if (collate && collate_busy >= kMostlyBusy) return blame_collate("");
  if (decode && decode_busy >= kMostlyBusy) return blame_decode("");
  // The same walk by starvation, which holds when the CPU is shared (a busy stage then gets less
  // CPU than its wall-clock busy time): a stage that almost never waited for input while the
  // stage after it did is the one that limits.
  constexpr double kNeverStarved = 0.10;
  if (collate && collate->starved_fraction < kNeverStarved) {
    return blame_collate(fmt::format("; collate almost never waited for input ({})", pct(collate->starved_fraction)));
  }
  if (decode && decode->starved_fraction < kNeverStarved) {
    return blame_decode(fmt::format("; decode almost never waited for input ({})", pct(decode->starved_fraction)));
  }
  // Storage held back by downstream (the window ahead of collate was full, or finished reads
  // could not be queued for decode): the limit is downstream even if no stage looks saturated
  // (on a loaded machine a CPU-bound stage shows as runnable-but-waiting, not busy).
  const double held_back =
      r.storage_window_limited_fraction + (reads_q ? reads_q->producer_blocked_fraction : 0);
  if (decode && collate && held_back >= 0.3 && decode->starved_fraction >= 0.5 && collate->starved_fraction >= 0.5 &&
      r.storage_window_limited_fraction >= 0.3) {
    // Held back, yet decode and collate mostly wait for input: nothing downstream is slow; the
    // window itself is too short for the storage's latency (one late read holds it full).
    return {"storage",
            fmt::format("{}; storage could not read further ahead {} of the time (the window of {} samples, "
                        "{} batch buffers, was full) while decode starved {} and collate {}; {:.1f} reads in "
                        "flight on average (cap {})",
                        wait_text, pct(r.storage_window_limited_fraction), r.window_samples, r.batch_buffers,
                        pct(decode->starved_fraction), pct(collate->starved_fraction), r.io.mean_depth(),
                        r.io_depth),
            fmt::format("raise --prefetch from {} to {} (a longer read-ahead window), and --memory-budget if it "
                        "cannot hold it; or larger --batch-size",
                        config.prefetch_batches, std::max(4u, 4 * config.prefetch_batches))};
  }
  if (decode && collate && held_back >= 0.3) {
    const std::string why =
        fmt::format("; storage was held back by downstream {} of the time", pct(held_back));
    return collate_busy > decode_busy ? blame_collate(why) : blame_decode(why);
  }
  // Storage: the reads themselves.
  const double at_cap =
      r.io.span_ns ? static_cast<double>(r.io.at_cap_ns) / static_cast<double>(r.io.span_ns) : 0;
  const double rate = r.wall_seconds > 0 ? static_cast<double>(r.storage_bytes) / r.wall_seconds : 0;
  const std::string evidence = fmt::format(
      "{}; decode starved {} of the time; storage delivered {} with {:.1f} reads in flight on "
      "average (cap {}, at the cap {} of the time), read latency p50 {} / p99 {}",
      wait_text, pct(decode ? decode->starved_fraction : 0), format_rate(rate), r.io.mean_depth(),
      r.io_depth, pct(at_cap), format_duration_ns(static_cast<double>(r.io.lat.percentile(0.5))),
      format_duration_ns(static_cast<double>(r.io.lat.percentile(0.99))));
  std::string net_evidence, net_knob;
  if (auto it = r.io.histograms.find("ttfb_ns"); it != r.io.histograms.end() && it->second.count() > 0) {
    // Object stores: is a read waiting for its first byte (request latency: more requests in
    // flight help) or for the rest of its bytes (bandwidth: they do not)?
    const Histogram& ttfb = it->second;
    const auto tr = r.io.histograms.find("transfer_ns");
    const double t50 = static_cast<double>(ttfb.percentile(0.5));
    const double x50 = tr == r.io.histograms.end() ? 0 : static_cast<double>(tr->second.percentile(0.5));
    auto counter = [&r](const char* name) {
      const auto c = r.io.counters.find(name);
      return c == r.io.counters.end() ? std::uint64_t{0} : c->second;
    };
    net_evidence = fmt::format("; HTTP time to first byte p50 {} vs transfer p50 {}, {} retries ({} throttled)",
                               format_duration_ns(t50), format_duration_ns(x50), counter("http_retries"),
                               counter("http_throttled"));
    // Shuffled by sample over shards of many samples: neighbouring members are read apart, so
    // each is a GET of its own (nothing coalesced) and pays a first byte of its own.
    const bool get_per_sample = config.sampler.shuffle && config.sampler.shard_shuffle == 0 &&
                                r.samples_per_object >= 4 && counter("http_coalesced_reads") * 10 < r.io.ops;
    if (counter("http_throttled") * 20 > counter("http_requests") && counter("http_throttled") > 0) {
      net_knob = "the server throttled requests (HTTP 503/429): lower --io-depth/--connections, or spread keys "
                 "over more prefixes";
    } else if (t50 >= x50 && get_per_sample) {
      net_knob = fmt::format("reads wait mostly for the first byte, and each sample was a GET of its own ({} requests "
                             "for {} reads, {:.0f} samples per shard): shuffled by sample, a shard's members are read "
                             "apart; --shard-shuffle 8 keeps runs of a shard together so that they share GETs (or "
                             "raise --io-depth from {} to {})",
                             counter("http_requests"), r.io.ops, r.samples_per_object, r.io_depth, 2 * r.io_depth);
    } else if (t50 >= x50 && at_cap >= 0.5) {
      net_knob = fmt::format("reads wait mostly for the first byte (request latency) with --io-depth {} always "
                             "full: raise --io-depth (and --connections) to {}",
                             r.io_depth, 2 * r.io_depth);
    } else if (t50 >= x50) {
      net_knob = fmt::format("reads wait mostly for the first byte (request latency) and only {:.1f} were in "
                             "flight on average (cap {}): keep more samples ahead (--prefetch, --memory-budget) "
                             "or use smaller --part-size so more requests overlap",
                             r.io.mean_depth(), r.io_depth);
    } else {
      net_knob = "reads spend most of their time transferring bytes (bandwidth-bound): more requests will not "
                 "help; a faster network or server, or less data (compression) will";
    }
  }
  // Network backends: round trips, retries and reconnects are part of the evidence.
  std::string net;
  if (auto it = r.io.histograms.find("rtt_ns"); it != r.io.histograms.end() && it->second.count() > 0) {
    net += fmt::format("; server round trip p50 {} / p99 {}",
                       format_duration_ns(static_cast<double>(it->second.percentile(0.5))),
                       format_duration_ns(static_cast<double>(it->second.percentile(0.99))));
  }
  if (r.io.retries > 0) net += fmt::format("; {} retried reads", r.io.retries);
  if (auto it = r.io.counters.find("reconnects"); it != r.io.counters.end() && it->second > 0) {
    net += fmt::format("; {} reconnects to the server", it->second);
  }
  std::string knob;
  if (!net_knob.empty()) {
    knob = net_knob;
  } else if (at_cap >= 0.5) {
    knob = fmt::format(
        "reads sat at the --io-depth cap: raise --io-depth from {} to {} if the storage has "
        "headroom; if it is already saturated, only faster storage helps",
        r.io_depth, 2 * r.io_depth);
  } else if (r.storage_budget_limited_fraction >= 0.3) {
    knob = fmt::format(
        "reads waited for memory {} of the time: raise --memory-budget (now {})",
        pct(r.storage_budget_limited_fraction), format_bytes(static_cast<double>(r.memory_budget)));
  } else {
    knob = "storage is the limit below the depth cap (latency-bound): faster storage, or more "
           "reads in flight per sample (smaller samples, more shards)";
  }
  return {"storage", evidence + net_evidence + net, knob};
}

}  // namespace feedline::loader
