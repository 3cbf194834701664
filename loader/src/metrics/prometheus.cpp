// MetricsEndpoint (metrics.hpp) over prometheus-cpp: a Collectable that turns the attached
// loaders' LiveFigures into metric families at each scrape. prometheus-cpp's headers stay here.
#include "feedline/loader/metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "feedline/core/text.hpp"
#include "feedline/storage/counters.hpp"

#if FEEDLINE_HAVE_PROMETHEUS
#include <arpa/inet.h>
#include <netinet/in.h>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <optional>
#include <thread>
#endif

namespace feedline::loader {

#if FEEDLINE_HAVE_PROMETHEUS
namespace {

// Counters and histograms of `f` added into `into` (gauges are the live loaders' own).
void add_totals(LiveFigures& into, const LiveFigures& f) {
  into.samples += f.samples;
  into.batches += f.batches;
  into.bytes += f.bytes;
  into.wait_seconds += f.wait_seconds;
  into.compute_seconds += f.compute_seconds;
  auto add_hist = [](LiveHistogram::Reading& a, const LiveHistogram::Reading& b) {
    for (std::size_t i = 0; i < a.counts.size(); ++i) a.counts[i] += b.counts[i];
    a.count += b.count;
    a.sum_seconds += b.sum_seconds;
  };
  add_hist(into.wait, f.wait);
  add_hist(into.read_latency, f.read_latency);
  into.reads += f.reads;
  into.read_errors += f.read_errors;
  into.storage_bytes += f.storage_bytes;
  into.skipped += f.skipped;
  for (const auto& s : f.stages) {
    auto it = std::find_if(into.stages.begin(), into.stages.end(),
                           [&](const LiveFigures::Stage& x) { return x.stage == s.stage; });
    if (it == into.stages.end()) {
      into.stages.push_back(s);
      into.stages.back().threads = 0;  // a gauge: the live loaders'
      continue;
    }
    it->busy_seconds += s.busy_seconds;
    it->starved_seconds += s.starved_seconds;
    it->blocked_seconds += s.blocked_seconds;
    it->items += s.items;
  }
  for (const auto& [name, v] : f.storage_counters) into.storage_counters[name] += v;
}

// The metrics server's workers and the time a client has to send its request (start()).
constexpr int kServerThreads = 8;
constexpr int kRequestTimeoutMs = 2000;

}  // namespace

class MetricsEndpoint::Impl : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;

  std::unique_ptr<prometheus::Exposer> exposer;
  std::string bind;
  std::uint16_t port = 0;

  mutable std::mutex mu;
  struct Attached {
    std::function<LiveFigures()> source;
    Labels labels;
  };
  std::map<std::uint64_t, Attached> sources;  // under mu
  std::uint64_t next_id = 1;
  std::map<Labels, LiveFigures> retired;  // the totals ended loaders left, by labels
  // Each counter's last value served: a figure read mid-switch that comes out a hair lower than
  // the last scrape's is served as the last one, so counters never go down.
  mutable std::map<std::string, double> last;
};

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

class Families {
 public:
  Families(std::map<std::string, double>& last) : last_(last) {}

  MetricFamily& family(const std::string& name, const std::string& help, MetricType type) {
    auto [it, fresh] = index_.try_emplace(name, out_.size());
    if (fresh) out_.push_back(MetricFamily{name, help, type, {}});
    return out_[it->second];
  }
  // The exposition format's label values are UTF-8 (prometheus-cpp escapes \\, \" and newlines
  // itself): a value that is not is served with those bytes as \xHH (text.hpp).
  static std::vector<ClientMetric::Label> labels(const LiveWatch::Labels& base,
                                                 std::initializer_list<ClientMetric::Label> more) {
    std::vector<ClientMetric::Label> l;
    for (const auto& [k, v] : base) l.push_back({k, utf8_text(v)});
    for (const auto& x : more) l.push_back({x.name, utf8_text(x.value)});
    return l;
  }
  void counter(const std::string& name, const std::string& help, std::vector<ClientMetric::Label> l,
               double v) {
    std::string key = name;
    for (const auto& x : l) key += fmt::format("\x1f{}={}", x.name, x.value);
    double& prev = last_[key];
    v = std::max(v, prev);
    prev = v;
    ClientMetric m;
    m.label = std::move(l);
    m.counter.value = v;
    family(name, help, MetricType::Counter).metric.push_back(std::move(m));
  }
  void gauge(const std::string& name, const std::string& help, std::vector<ClientMetric::Label> l,
             double v) {
    ClientMetric m;
    m.label = std::move(l);
    m.gauge.value = v;
    family(name, help, MetricType::Gauge).metric.push_back(std::move(m));
  }
  void histogram(const std::string& name, const std::string& help,
                 std::vector<ClientMetric::Label> l, const LiveHistogram::Reading& r) {
    ClientMetric m;
    m.label = std::move(l);
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < LiveHistogram::kBounds.size(); ++i) {
      cumulative += r.counts[i];
      m.histogram.bucket.push_back({cumulative, LiveHistogram::kBounds[i]});
    }
    m.histogram.bucket.push_back({r.count, std::numeric_limits<double>::infinity()});
    m.histogram.sample_count = r.count;
    m.histogram.sample_sum = r.sum_seconds;
    family(name, help, MetricType::Histogram).metric.push_back(std::move(m));
  }
  std::vector<MetricFamily> take() { return std::move(out_); }

 private:
  std::map<std::string, double>& last_;
  std::map<std::string, std::size_t> index_;
  std::vector<MetricFamily> out_;
};

void serve(Families& out, const LiveWatch::Labels& base, const LiveFigures& f, bool live) {
  auto l = [&](std::initializer_list<ClientMetric::Label> more = {}) {
    return Families::labels(base, more);
  };
  out.counter("feedline_samples_total", "Samples delivered to the consumer", l(),
              static_cast<double>(f.samples));
  out.counter("feedline_batches_total", "Batches delivered to the consumer", l(),
              static_cast<double>(f.batches));
  out.counter("feedline_delivered_bytes_total", "Decoded bytes delivered to the consumer", l(),
              static_cast<double>(f.bytes));
  out.histogram("feedline_consumer_wait_seconds", "The consumer's wait for each batch", l(),
                f.wait);
  out.counter("feedline_compute_seconds_total",
              "Compute time the consumer recorded (the emulated accelerator's or the caller's)",
              l(), f.compute_seconds);
  for (const auto& s : f.stages) {
    const ClientMetric::Label stage{"stage", std::string(stage_name(s.stage))};
    out.counter("feedline_stage_busy_seconds_total",
                "Time a stage's threads were busy, summed over its threads", l({stage}),
                s.busy_seconds);
    out.counter("feedline_stage_starved_seconds_total",
                "Time a stage's threads waited for input, summed over its threads", l({stage}),
                s.starved_seconds);
    out.counter("feedline_stage_blocked_seconds_total",
                "Time a stage's threads waited for room downstream or for memory, summed over "
                "its threads",
                l({stage}), s.blocked_seconds);
    out.gauge("feedline_stage_threads", "Threads of a stage (the consumer: 1, the caller's)",
              l({stage}), s.stage == StageId::kConsumer && live ? 1 : s.threads);
  }
  for (const auto& q : f.queues) {
    const ClientMetric::Label queue{"queue", std::string(queue_name(q.queue))};
    out.gauge("feedline_queue_depth", "Items in a pipeline queue", l({queue}),
              static_cast<double>(q.depth));
    out.gauge("feedline_queue_capacity", "A pipeline queue's capacity", l({queue}),
              static_cast<double>(q.capacity));
  }
  out.histogram("feedline_storage_read_seconds", "Storage reads, from submission to completion",
                l(), f.read_latency);
  out.counter("feedline_storage_reads_total", "Storage reads completed (failed ones included)", l(),
              static_cast<double>(f.reads));
  out.counter("feedline_storage_read_errors_total", "Storage reads that failed", l(),
              static_cast<double>(f.read_errors));
  out.counter("feedline_storage_bytes_total", "Bytes read from storage", l(),
              static_cast<double>(f.storage_bytes));
  // The family is served (HELP, TYPE) from the first scrape; a reason's series appears with its
  // first retry.
  out.family("feedline_storage_retries_total", "Storage requests retried, by reason",
             MetricType::Counter);
  // The storage's own counters by their definitions (storage/counters.hpp); a name none defines
  // (an embedder's backend) is served as an event.
  double reconnects = 0;
  for (const auto& [name, v] : f.storage_counters) {
    const storage::CounterDef* d = storage::find_counter(name);
    if (d != nullptr && d->kind != storage::CounterKind::kTotal) continue;  // peaks
    switch (d != nullptr ? d->role : storage::CounterRole::kPlain) {
      case storage::CounterRole::kRetry:
        out.counter("feedline_storage_retries_total", "Storage requests retried, by reason",
                    l({{"reason", storage::retry_reason(name).value_or(name)}}),
                    static_cast<double>(v));
        break;
      case storage::CounterRole::kReconnect:
        reconnects += static_cast<double>(v);
        break;
      case storage::CounterRole::kRetryTotal:  // the sum of the reasons served above
        break;
      case storage::CounterRole::kPlain:
        out.counter("feedline_storage_events_total",
                    "The storage queues' own counters (HTTP requests and statuses, connections "
                    "opened, ...)",
                    l({{"event", name}}), static_cast<double>(v));
        break;
    }
  }
  out.counter("feedline_storage_reconnects_total", "Storage connections re-established", l(),
              reconnects);
  out.gauge("feedline_memory_in_use_bytes",
            "Bytes the pipeline holds: reads in flight, decoded samples, batch buffers", l(),
            static_cast<double>(f.memory_in_use));
  out.gauge("feedline_memory_budget_bytes", "The pipeline's memory budget", l(),
            static_cast<double>(f.memory_budget));
  out.counter("feedline_skipped_samples_total", "Samples skipped on error (on_error: skip)", l(),
              static_cast<double>(f.skipped));
  out.gauge("feedline_run_seconds", "Seconds since the loader's run started", l(), f.seconds);
  out.gauge("feedline_running", "1 while a loader's run goes on", l(), f.running ? 1 : 0);
}

}  // namespace

std::vector<prometheus::MetricFamily> MetricsEndpoint::Impl::Collect() const {
  std::lock_guard lock(mu);
  // Totals by labels: what ended loaders left, plus the live loaders' own; gauges from the
  // latest live loader of each label set.
  std::map<Labels, LiveFigures> totals = retired;
  std::map<Labels, bool> live;
  for (const auto& [id, a] : sources) {
    LiveFigures f;
    try {
      f = a.source();
    } catch (...) {
      continue;
    }
    LiveFigures& t = totals[a.labels];
    add_totals(t, f);
    t.queues = f.queues;
    for (const auto& s : f.stages) {
      for (auto& ts : t.stages) {
        if (ts.stage == s.stage) ts.threads = s.threads;
      }
    }
    t.memory_in_use = f.memory_in_use;
    t.memory_budget = f.memory_budget;
    t.seconds = f.seconds;
    t.running = f.running;
    live[a.labels] = true;
  }
  Families out(last);
  for (const auto& [labels, f] : totals) serve(out, labels, f, live.contains(labels));
  return out.take();
}

MetricsEndpoint::MetricsEndpoint(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsEndpoint::~MetricsEndpoint() {
  // The server first: no scrape runs once the sources go. civetweb's listener polls its socket
  // 2 s at a time and looks at its stop flag only between polls, so stopping it would hold up
  // the command's exit (and Ctrl-C's) by up to 2 s: connections to it meanwhile end each poll.
  std::atomic<bool> stopped{false};
  std::thread wake([this, &stopped] {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(impl_->port);
    if (::inet_pton(AF_INET, impl_->bind == "0.0.0.0" ? "127.0.0.1" : impl_->bind.c_str(),
                    &addr.sin_addr) != 1)
      return;
    while (!stopped.load()) {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) return;
      (void)::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
      ::close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  impl_->exposer.reset();
  stopped.store(true);
  wake.join();
}

Result<std::shared_ptr<MetricsEndpoint>> MetricsEndpoint::start(const std::string& bind,
                                                                std::uint16_t port) {
  // An IPv4 address: Debian's civetweb (under prometheus-cpp) is built without IPv6.
  in_addr parsed{};
  if (::inet_pton(AF_INET, bind.c_str(), &parsed) != 1) {
    return fail(Errc::kInvalidArgument,
                fmt::format("metrics bind address '{}' is not an IPv4 address (the metrics "
                            "server takes IPv4 only: 127.0.0.1, 0.0.0.0, an interface's)",
                            bind));
  }
  const std::string address = fmt::format("{}:{}", bind, port);
  auto impl = std::make_shared<Impl>();
  try {
    // civetweb serves one connection per worker thread, and waits up to request_timeout_ms
    // (30 s by default) for a request's headers: a single worker let one client that sends a
    // byte a second hold every scrape back, and a few of them for half a minute. Here a client
    // has 2 s to send its request (a scrape's is one short line) and 8 workers serve
    // connections: slow clients wait in turn while scrapes are answered.
    impl->exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", address, "num_threads", std::to_string(kServerThreads),
        "request_timeout_ms", std::to_string(kRequestTimeoutMs), "keep_alive_timeout_ms",
        std::to_string(kRequestTimeoutMs)});
  } catch (const std::exception&) {  // civetweb says no more than that it could not bind
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("cannot serve metrics on {}: the port is in use or the address "
                                  "is not one of this host's",
                                  address))
                    .with_hint("choose another port (0: any free one)"));
  }
  const auto ports = impl->exposer->GetListeningPorts();
  impl->port = ports.empty() ? port : static_cast<std::uint16_t>(ports.front());
  impl->bind = bind;
  impl->exposer->RegisterCollectable(impl);
  return std::shared_ptr<MetricsEndpoint>(new MetricsEndpoint(std::move(impl)));
}

std::uint16_t MetricsEndpoint::port() const noexcept { return impl_->port; }

std::string MetricsEndpoint::url() const {
  return fmt::format("http://{}:{}/metrics", impl_->bind, impl_->port);
}

std::uint64_t MetricsEndpoint::attach(std::function<LiveFigures()> source, Labels labels) {
  std::lock_guard lock(impl_->mu);
  const std::uint64_t id = impl_->next_id++;
  impl_->sources.emplace(id, Impl::Attached{std::move(source), std::move(labels)});
  return id;
}

void MetricsEndpoint::detach(std::uint64_t id) noexcept {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->sources.find(id);
  if (it == impl_->sources.end()) return;
  try {
    // Its last figures stay in the totals (counters never go back).
    add_totals(impl_->retired[it->second.labels], it->second.source());
  } catch (...) {
  }
  impl_->sources.erase(it);
}

#else  // built without prometheus-cpp

class MetricsEndpoint::Impl {};
MetricsEndpoint::MetricsEndpoint(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
MetricsEndpoint::~MetricsEndpoint() = default;
std::uint16_t MetricsEndpoint::port() const noexcept { return 0; }
std::string MetricsEndpoint::url() const { return {}; }
std::uint64_t MetricsEndpoint::attach(std::function<LiveFigures()>, Labels) { return 0; }
void MetricsEndpoint::detach(std::uint64_t) noexcept {}
Result<std::shared_ptr<MetricsEndpoint>> MetricsEndpoint::start(const std::string&, std::uint16_t) {
  return fail(Errc::kUnsupported,
              "this feedline was built without prometheus-cpp (FEEDLINE_WITH_PROMETHEUS=OFF): no "
              "metrics endpoint");
}

#endif

}  // namespace feedline::loader
