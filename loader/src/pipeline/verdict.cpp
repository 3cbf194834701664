// The verdict: walk from the consumer back towards storage and name the first stage that is
// mostly busy while the consumer waits (DESIGN.md, "Stall accounting"), with the numbers behind
// the call and the knobs to turn next (report.hpp: Knob, by LoaderConfig's names; tools/ turns
// them into flags). The advice text names no flag.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>

#include "feedline/core/units.hpp"
#include "pipeline.hpp"
#include "stage_work.hpp"

namespace feedline::loader {
namespace {

constexpr double kMostlyBusy = 0.6;  // a stage busier than this, while the consumer waits, limits

std::string pct(double f) { return fmt::format("{:.0f}%", f * 100); }

// How busy a CPU stage really was: its busy time, but no more than the CPU it actually got. A
// thread that is runnable but not running (other threads, other processes) shows as busy on the
// wall clock without doing work; its CPU time tells the two apart.
double cpu_busy(const StageReport& s, double wall_seconds) {
  const double cpu = wall_seconds > 0 && s.threads ? s.cpu_seconds / (wall_seconds * s.threads) : 0;
  return std::min(s.busy_fraction, cpu);
}

// The device sink, right before the consumer: it limits when the consumer's waits were mostly
// spent with a host-to-device copy as the holdup (without the first step's, the pipeline
// filling up).
std::optional<Verdict> device_limit(const PipelineReport& r, const std::string& wait_text) {
  const ConsumerReport& c = r.consumer;
  const double steady_wait = std::max(0.0, c.wait_seconds - c.first_batch_seconds);
  if (r.device.enabled && steady_wait > 0 &&
      r.device.consumer_wait_on_copy_seconds >= 0.5 * steady_wait) {
    const auto& d = r.device;
    Verdict v{
        StageId::kDevice,
        fmt::format(
            "{}; for {:.3f} s of the consumer's {:.3f} s of waiting after the first batch a "
            "host-to-device "
            "copy was the holdup; copies ran at {} ({} of the {} pinned peak), host memory {}",
            wait_text, d.consumer_wait_on_copy_seconds, steady_wait,
            format_rate(d.h2d_bytes_per_second),
            d.peak_bytes_per_second > 0 ? pct(d.h2d_bytes_per_second / d.peak_bytes_per_second)
                                        : "?",
            format_rate(d.peak_bytes_per_second), d.host_memory),
        {},
        ""};
    if (d.pinned) {
      v.next.push_back({Knob::kCudaStreams, d.streams, 2 * d.streams});
      v.advice =
          "more copy streams let more copies overlap; or check the PCIe link (feedline probe "
          "--h2d-bench)";
    } else {
      v.advice =
          "pin the batch pool (raise RLIMIT_MEMLOCK / ulimit -l): pageable copies run at a "
          "fraction of the "
          "pinned rate";
    }
    return v;
  }
  return std::nullopt;
}

// The walk from the consumer back towards storage, over one finished run's report: what it
// reads of the report, and the verdicts it can reach.
struct Walk {
  Walk(const PipelineReport& report, const LoaderConfig& run_config, std::string waited)
      : r(report),
        config(run_config),
        wait_text(std::move(waited)),
        collate(report.stage(StageId::kCollate)),
        decode(report.stage(StageId::kDecode)),
        decoded_q(report.queue(QueueId::kDecoded)),
        reads_q(report.queue(QueueId::kReads)) {}

  // A stage downstream of storage that limits (busy, never starved, or holding storage back).
  std::optional<Verdict> downstream_limit() const;
  // Storage: the reads themselves.
  Verdict storage_limit() const;
  Verdict blame_collate(std::string why) const;
  Verdict blame_decode(std::string why) const;
  // Object stores: is a read waiting for its first byte or for the rest of its bytes?
  void http_advice(Verdict& v, double at_cap) const;
  // Storage CPU-bound on per-sample work: true when that is the verdict's advice.
  bool per_sample_overhead(Verdict& v) const;

  const PipelineReport& r;
  const LoaderConfig& config;
  const std::string wait_text;
  const StageReport* collate;
  const StageReport* decode;
  const QueueReport* decoded_q;
  const QueueReport* reads_q;
};

Verdict Walk::blame_collate(std::string why) const {
  return {StageId::kCollate,
          fmt::format("{}; collate was busy {} of the time ({:.2f} CPU-s) while decode waited to "
                      "hand it samples {} of the time{}",
                      wait_text, pct(collate->busy_fraction), collate->cpu_seconds,
                      pct(decoded_q ? decoded_q->producer_blocked_fraction : 0), why),
          {},
          "collate copies every sample into its batch on one thread: cut per-batch work (larger "
          "samples per "
          "copy, fewer members), or use the direct path"};
}

Verdict Walk::blame_decode(std::string why) const {
  const unsigned cores = detail::usable_cores();
  Verdict v{StageId::kDecode,
            fmt::format("{}; the {} decode threads were busy {} of the time ({:.2f} CPU-s) while "
                        "collate starved {} and finished reads queued {:.1f} deep on average{}",
                        wait_text, decode->threads, pct(decode->busy_fraction), decode->cpu_seconds,
                        pct(collate ? collate->starved_fraction : 0),
                        reads_q ? reads_q->mean_occupancy : 0.0, why),
            {},
            ""};
  // A user's transform that takes most of decode's time: its own cost, or the lock it waits
  // for (Python's GIL: more threads only queue for it), is what to change.
  const TransformReport& t = r.transform;
  if (t.enabled && t.decode_share >= 0.5) {
    v.evidence += fmt::format(
        "; the transform took {} of the decode threads' busy time ({:.2f} s for {} samples, "
        "{:.2f} CPU-s), {} of it off the CPU: waiting for the lock it runs under (Python's GIL; "
        "{:.2f} s of it before the calls began)",
        pct(t.decode_share), t.seconds, t.samples, t.cpu_seconds, pct(t.off_cpu_share),
        t.lock_wait_seconds);
    if (t.off_cpu_share >= 0.3) {
      v.advice =
          "the transform is bound by the lock it runs under (Python's GIL): more decode threads "
          "only queue for it. Do its work in operations that release the GIL (torch or numpy "
          "on whole arrays), in a C++ decoder (decoder.hpp), or per batch in the training loop "
          "instead of per sample, and run fewer Python threads beside it";
      return v;
    }
    v.advice = "the transform is most of decode's work: make it cheaper";
    if (config.decode_threads < cores) {
      v.next.push_back({Knob::kDecodeThreads, config.decode_threads,
                        std::min(cores, 2 * config.decode_threads)});
      v.advice += fmt::format(", or run it on more of the {} cores", cores);
    }
    return v;
  }
  if (config.decode_threads < cores) {
    v.next.push_back(
        {Knob::kDecodeThreads, config.decode_threads, std::min(cores, 2 * config.decode_threads)});
    v.advice = fmt::format("decode is CPU-bound and {} of the {} cores are left for it",
                           cores - config.decode_threads, cores);
  } else {
    // What makes this run's decode cheaper depends on what it decodes.
    std::vector<std::string> cheaper;
    for (const DecoderUse& d : r.data_path.decoders) {
      if (d.name.find("jpeg") != std::string::npos) {
        cheaper.push_back(
            "JPEGs stored nearer the output's size (resized once, offline: a crop of half "
            "the stored size or less decodes at libjpeg-turbo's 1/2 DCT scale, a quarter of "
            "the work), or a smaller image size");
      }
      if (d.name.find("zstd") != std::string::npos)
        cheaper.push_back("a lower zstd level, or data stored decompressed");
    }
    if (cheaper.empty()) cheaper.push_back("pre-decoded data");
    v.advice = fmt::format(
        "decode is CPU-bound on {} threads for {} cores: make decode cheaper ({}) or give "
        "the job more CPU",
        config.decode_threads, cores, fmt::join(cheaper, "; "));
  }
  return v;
}

std::optional<Verdict> Walk::downstream_limit() const {
  const ConsumerReport& c = r.consumer;
  const double wall = c.wall_seconds;
  const double collate_busy = collate ? cpu_busy(*collate, wall) : 0;
  const double decode_busy = decode ? cpu_busy(*decode, wall) : 0;
  if (collate && collate_busy >= kMostlyBusy) return blame_collate("");
  if (decode && decode_busy >= kMostlyBusy) return blame_decode("");
  // The same walk by starvation, which holds when the CPU is shared (a busy stage then gets less
  // CPU than its wall-clock busy time): a stage that almost never waited for input while the
  // stage after it did is the one that limits.
  constexpr double kNeverStarved = 0.10;
  if (collate && collate->starved_fraction < kNeverStarved) {
    return blame_collate(fmt::format("; collate almost never waited for input ({})",
                                     pct(collate->starved_fraction)));
  }
  if (decode && decode->starved_fraction < kNeverStarved) {
    return blame_decode(
        fmt::format("; decode almost never waited for input ({})", pct(decode->starved_fraction)));
  }
  // Storage held back by downstream (the window ahead of collate was full, or finished reads
  // could not be queued for decode): the limit is downstream even if no stage looks saturated
  // (on a loaded machine a CPU-bound stage shows as runnable-but-waiting, not busy).
  const IoReport& io = r.io;
  const double held_back =
      io.window_limited_fraction + (reads_q ? reads_q->producer_blocked_fraction : 0);
  if (decode && collate && held_back >= 0.3 && decode->starved_fraction >= 0.5 &&
      collate->starved_fraction >= 0.5 && io.window_limited_fraction >= 0.3) {
    // Held back, yet decode and collate mostly wait for input: nothing downstream is slow; the
    // window itself is too short for the storage's latency (one late read holds it full).
    return Verdict{
        StageId::kStorage,
        fmt::format(
            "{}; storage could not read further ahead {} of the time (the window of {} samples, "
            "{} batch buffers, was full) while decode starved {} and collate {}; {:.1f} reads in "
            "flight on average (cap {})",
            wait_text, pct(io.window_limited_fraction), io.window_samples, io.batch_buffers,
            pct(decode->starved_fraction), pct(collate->starved_fraction), io.stats.mean_depth(),
            io.io_depth),
        {{Knob::kPrefetchBatches, config.prefetch_batches,
          std::max(4u, 4 * config.prefetch_batches)},
         {Knob::kBatchSize, config.sampler.batch_size, 2 * config.sampler.batch_size}},
        "a longer read-ahead window (more prefetched batches, with the memory budget to hold them, "
        "or larger "
        "batches) keeps reads in flight past one late answer"};
  }
  if (decode && collate && held_back >= 0.3) {
    const std::string why =
        fmt::format("; storage was held back by downstream {} of the time", pct(held_back));
    return collate_busy > decode_busy ? blame_collate(why) : blame_decode(why);
  }
  return std::nullopt;
}

Verdict Walk::storage_limit() const {
  const double wall = r.consumer.wall_seconds;
  const IoReport& io = r.io;
  const storage::QueueStats& st = io.stats;
  const double at_cap =
      st.span_ns ? static_cast<double>(st.at_cap_ns) / static_cast<double>(st.span_ns) : 0;
  const double rate = wall > 0 ? static_cast<double>(io.storage_bytes) / wall : 0;
  Verdict v{
      StageId::kStorage,
      fmt::format(
          "{}; decode starved {} of the time; storage delivered {} with {:.1f} reads in flight on "
          "average (cap {}, at the cap {} of the time), read latency p50 {} / p99 {}",
          wait_text, pct(decode ? decode->starved_fraction : 0), format_rate(rate), st.mean_depth(),
          io.io_depth, pct(at_cap), format_duration_ns(static_cast<double>(st.lat.percentile(0.5))),
          format_duration_ns(static_cast<double>(st.lat.percentile(0.99)))),
      {},
      ""};
  const std::uint64_t depth = io.io_depth, twice = 2 * depth;
  http_advice(v, at_cap);
  // Network backends: round trips, retries and reconnects are part of the evidence.
  if (const Histogram* rtt = st.find_histogram(storage::counters::kRtt); rtt && rtt->count() > 0) {
    v.evidence += fmt::format("; server round trip p50 {} / p99 {}",
                              format_duration_ns(static_cast<double>(rtt->percentile(0.5))),
                              format_duration_ns(static_cast<double>(rtt->percentile(0.99))));
  }
  if (st.retries > 0) v.evidence += fmt::format("; {} retried reads", st.retries);
  if (const std::uint64_t rc = st.counter(storage::counters::kReconnects); rc > 0)
    v.evidence += fmt::format("; {} reconnects to the server", rc);
  if (!v.advice.empty()) return v;
  if (per_sample_overhead(v)) return v;
  if (at_cap >= 0.5) {
    v.next.push_back({Knob::kIoDepth, depth, twice});
    v.advice =
        "reads sat at the in-flight cap: more reads in flight help if the storage has headroom; if "
        "it is "
        "already saturated, only faster storage helps";
  } else if (io.budget_limited_fraction >= 0.3) {
    v.next.push_back({Knob::kMemoryBudget, r.memory.budget, 2 * r.memory.budget});
    v.advice =
        fmt::format("reads waited for memory {} of the time", pct(io.budget_limited_fraction));
  } else {
    v.advice =
        "storage is the limit below the in-flight cap (latency-bound): faster storage, or more "
        "reads in flight "
        "per sample (smaller samples, more shards)";
  }
  return v;
}

void Walk::http_advice(Verdict& v, double at_cap) const {
  const IoReport& io = r.io;
  const storage::QueueStats& st = io.stats;
  const std::uint64_t depth = io.io_depth, twice = 2 * depth;
  namespace sc = storage::counters;
  if (const Histogram* ttfb_h = st.find_histogram(sc::kTtfb); ttfb_h && ttfb_h->count() > 0) {
    // Object stores: is a read waiting for its first byte (request latency: more requests in
    // flight help) or for the rest of its bytes (bandwidth: they do not)?
    const Histogram& ttfb = *ttfb_h;
    const Histogram* tr = st.find_histogram(sc::kTransfer);
    const double t50 = static_cast<double>(ttfb.percentile(0.5));
    const double x50 = tr == nullptr ? 0 : static_cast<double>(tr->percentile(0.5));
    v.evidence += fmt::format(
        "; HTTP time to first byte p50 {} vs transfer p50 {}, {} retries ({} throttled)",
        format_duration_ns(t50), format_duration_ns(x50), st.counter(sc::kHttpRetries),
        st.counter(sc::kHttpThrottled));
    // Shuffled by sample over shards of many samples: neighbouring members are read apart, so
    // each is a GET of its own (nothing coalesced) and pays a first byte of its own.
    const bool get_per_sample = config.sampler.shuffle && config.sampler.shard_shuffle == 0 &&
                                io.samples_per_object >= 4 &&
                                st.counter(sc::kHttpCoalescedReads) * 10 < st.ops;
    if (st.counter(sc::kHttpThrottled) * 20 > st.counter(sc::kHttpRequests) &&
        st.counter(sc::kHttpThrottled) > 0) {
      v.next.push_back({Knob::kIoDepth, depth, std::max(1u, io.io_depth / 2)});
      v.advice =
          "the server throttled requests (HTTP 503/429): ask for fewer at a time (reads in flight, "
          "connections), "
          "or spread keys over more prefixes";
    } else if (t50 >= x50 && get_per_sample) {
      v.next.push_back({Knob::kShardShuffle, 0, 8});
      v.next.push_back({Knob::kIoDepth, depth, twice});
      v.advice = fmt::format(
          "reads wait mostly for the first byte, and each sample was a GET of its own ({} requests "
          "for "
          "{} reads, {:.0f} samples per shard): shuffled by sample, a shard's members are read "
          "apart; a shard shuffle keeps runs of a shard together so that they share GETs",
          st.counter(sc::kHttpRequests), st.ops, io.samples_per_object);
    } else if (t50 >= x50 && at_cap >= 0.5) {
      v.next.push_back({Knob::kIoDepth, depth, twice});
      v.next.push_back({Knob::kConnections, depth, twice});
      v.advice =
          "reads wait mostly for the first byte (request latency) with every read slot always "
          "busy: more "
          "requests in flight help";
    } else if (t50 >= x50) {
      v.next.push_back({Knob::kPrefetchBatches, config.prefetch_batches,
                        std::max(4u, 2 * config.prefetch_batches)});
      v.advice = fmt::format(
          "reads wait mostly for the first byte (request latency) and only {:.1f} were in flight "
          "on "
          "average (cap {}): keep more samples ahead (prefetch, the memory budget to hold them) or "
          "split reads in smaller parts so that more requests overlap",
          st.mean_depth(), io.io_depth);
    } else {
      v.advice =
          "reads spend most of their time transferring bytes (bandwidth-bound): more requests will "
          "not help; a "
          "faster network or server, or less data (compression) will";
    }
  }
}

bool Walk::per_sample_overhead(Verdict& v) const {
  const IoReport& io = r.io;
  // Per-sample overhead: the storage threads spent most of their busy time on the host's own work
  // (opening, copying out of the page cache, closing each small file) and little of it waiting
  // in poll() for reads to complete. More reads in flight cannot help; more threads (or less
  // work per sample) can. (Not CPU time against busy time: on a loaded machine a thread that
  // wants the CPU and waits for it shows busy without CPU time.)
  const StageReport* storage = r.stage(StageId::kStorage);
  const double on_cpu =
      storage && storage->busy_seconds > 0 ? storage->cpu_seconds / storage->busy_seconds : 0;
  const double waiting =
      storage && storage->busy_seconds > 0 ? io.poll_wait_seconds / storage->busy_seconds : 1;
  if (storage && storage->items > 0 && storage->busy_fraction >= kMostlyBusy && waiting <= 0.3) {
    const unsigned cores = detail::usable_cores();
    const double us_per_sample = storage->cpu_seconds * 1e6 / static_cast<double>(storage->items);
    v.evidence += fmt::format(
        "; the {} storage thread(s) were busy {} of the time, {} of it waiting for reads to "
        "complete, and on the CPU for {} of it: {:.1f} us of CPU per sample ({:.0f} samples/s "
        "per core){}",
        storage->threads, pct(storage->busy_fraction), pct(waiting), pct(std::min(on_cpu, 1.0)),
        us_per_sample, 1e6 / std::max(us_per_sample, 1e-3),
        decode && decode->items == 0 ? ", the digest taken there too (nothing to decode)" : "");
    if (storage->threads < cores) {
      v.next.push_back(
          {Knob::kStorageThreads, storage->threads, std::min(cores, 2 * storage->threads)});
      v.advice = fmt::format(
          "storage is CPU-bound on per-sample work (each small object's open, copy and close), "
          "not waiting for the device: more reads in flight will not help; more storage threads "
          "spread it over the {} cores",
          cores);
    } else {
      v.advice = fmt::format(
          "storage is CPU-bound on per-sample work (each small object's open, copy and close) "
          "on {} threads for {} cores: more reads in flight will not help; fewer, larger "
          "objects (tar shards: one open per shard) or direct I/O (the device copies, not the "
          "CPU) cut the work per sample, or give the job more CPU",
          storage->threads, cores);
    }
    return true;
  }
  return false;
}

// A run that delivered no batch: why, as far as the report tells (its error, every sample
// skipped, or the run's end before any read was answered: a server that throttled them all).
Verdict nothing_delivered(const PipelineReport& r) {
  if (r.error) return {std::nullopt, "no batch was delivered", {}, "see the run's error"};
  if (r.delivered.skipped > 0) {
    return {std::nullopt,
            fmt::format("no batch was delivered: every sample read ({}) was skipped (on_error "
                        "= skip)",
                        r.delivered.skipped),
            {},
            "see the skipped samples' errors (skipped.examples): the data, not the pipeline"};
  }
  namespace sc = storage::counters;
  const storage::QueueStats& st = r.io.stats;
  std::string evidence =
      fmt::format("no batch was delivered before the run ended{}: {} read(s) completed",
                  r.interrupted ? " (its time limit, or a stop)" : "", st.ops);
  if (const std::uint64_t throttled = st.counter(sc::kHttpThrottled); throttled > 0) {
    evidence += fmt::format(
        "; the server throttled the reads ({} answer(s) of 429 or 503 to retry after, of {} "
        "request(s))",
        throttled, st.counter(sc::kHttpRequests));
    return {std::nullopt,
            std::move(evidence),
            {},
            "the storage server refused the reads for now (429/503, Retry-After): its request "
            "rate limit, not this pipeline; retry later, or ask for a higher limit"};
  }
  return {std::nullopt,
          std::move(evidence),
          {},
          "the storage answered no read in the run's time: check that it is reachable and "
          "serving, or give the run more time"};
}

}  // namespace

Verdict diagnose(const PipelineReport& r, const LoaderConfig& config) {
  const ConsumerReport& c = r.consumer;
  if (c.batches == 0) return nothing_delivered(r);
  const double wait = c.wait_fraction;
  const std::string wait_text = fmt::format(
      "after the first batch, the consumer waited {} of the time for data (p50 {} / p99 {} per "
      "step)",
      pct(wait), format_duration_ns(static_cast<double>(c.wait_ns.percentile(0.5))),
      format_duration_ns(static_cast<double>(c.wait_ns.percentile(0.99))));
  if (wait < 0.05 && c.compute_seconds > 0) {
    return {StageId::kConsumer,
            fmt::format("{}; the accelerator computed {} of the time (AU {})", wait_text,
                        pct(c.compute_seconds / std::max(c.wall_seconds, 1e-9)), pct(c.au)),
            {},
            "the input pipeline keeps up: the accelerator is the limit, so faster storage or more "
            "decode threads will not raise throughput"};
  }
  if (auto v = device_limit(r, wait_text)) return *v;
  const Walk walk(r, config, wait_text);
  if (auto v = walk.downstream_limit()) return *v;
  return walk.storage_limit();
}

}  // namespace feedline::loader
