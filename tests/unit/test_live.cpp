// A running loader's live figures (loader/live.hpp) and what reads them: the fixed-bucket
// histograms, Loader::live() against the final report, loaders attaching to their watchers (and
// a host's accelerators labelled), the HTML report's Timeline (bounded, decimated), and the
// Prometheus endpoint (metrics.hpp) over a real socket: the exposition, totals that survive a
// loader's end, counters that never go down, a port in use.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "feedline/core/text.hpp"
#include "feedline/loader/accelerators.hpp"
#include "feedline/loader/live.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/loader/metrics.hpp"
#include "feedline/loader/timeline.hpp"
#include "feedline/storage/counters.hpp"
#include "feedline/storage/forwarding.hpp"
#include "feedline/storage/registry.hpp"
#include "test_support.hpp"

using namespace feedline;
using namespace feedline::loader;

namespace {

struct MemDataset {
  std::unique_ptr<storage::Backend> backend;
  Dataset dataset;
};

MemDataset mem_dataset(const std::string& prefix, std::size_t n) {
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  MemDataset m;
  m.backend = std::move(registry.open("mem://" + prefix + "/", {})->backend);
  for (std::size_t i = 0; i < n; ++i) {
    REQUIRE(m.backend->write(fmt::format("{}/{:04}.bin", prefix, i),
                             testing::pattern_bytes(2000, i + 1)));
  }
  m.dataset = open_dataset(*m.backend, prefix + "/", {}).value();
  return m;
}

// Records what attaches to it; reads each source once when it detaches.
class RecordingWatch final : public LiveWatch {
 public:
  std::uint64_t attach(std::function<LiveFigures()> source, Labels labels) override {
    std::lock_guard lock(mu);
    attached.push_back(labels);
    sources.push_back(std::move(source));
    return sources.size();
  }
  void detach(std::uint64_t id) noexcept override {
    std::lock_guard lock(mu);
    last.push_back(sources.at(id - 1)());
    ++detached;
  }
  std::mutex mu;
  std::vector<Labels> attached;
  std::vector<std::function<LiveFigures()>> sources;
  std::vector<LiveFigures> last;
  int detached = 0;
};

// GET /metrics from 127.0.0.1:port with a plain socket; the body.
std::string http_get(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  REQUIRE(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  REQUIRE(::write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size()));
  std::string resp;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    resp.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  const auto body = resp.find("\r\n\r\n");
  REQUIRE(body != std::string::npos);
  REQUIRE(resp.starts_with("HTTP/1."));
  REQUIRE(resp.find(" 200 ") != std::string::npos);
  return resp.substr(body + 4);
}

// The value of the sample line that starts with `series` ("name" or "name{labels}").
double sample(const std::string& body, const std::string& series) {
  std::size_t at = 0;
  while ((at = body.find(series + " ", at)) != std::string::npos) {
    if (at == 0 || body[at - 1] == '\n') return std::stod(body.substr(at + series.size() + 1));
    at += series.size();
  }
  FAIL("no sample " << series << " in:\n" << body);
  return 0;
}

LiveFigures figures(std::uint64_t samples, double wait_seconds = 0) {
  LiveFigures f;
  f.samples = samples;
  f.batches = samples / 10;
  f.wait_seconds = wait_seconds;
  f.running = true;
  f.stages.push_back({StageId::kDecode, 2, 1.5, 0.25, 0.125, samples});
  f.queues.push_back({QueueId::kReads, 3, 8});
  f.memory_in_use = 1000;
  f.memory_budget = 4096;
  f.storage_counters["http_retry_http_503"] = 2;
  return f;
}

}  // namespace

TEST_CASE("LiveHistogram: Prometheus buckets (le, inclusive), the rest above the last bound",
          "[live]") {
  LiveHistogram h;
  h.record_ns(100'000);                 // exactly 100 us: the first bucket (le 0.0001)
  h.record_ns(100'001);                 // just above: the second
  h.record_ns(2'000'000);               // 2 ms: le 0.0025
  h.record_ns(120ull * 1'000'000'000);  // 2 minutes: above 60 s
  const auto r = h.read();
  CHECK(r.count == 4);
  CHECK(r.counts[0] == 1);
  CHECK(r.counts[1] == 1);
  CHECK(r.counts[4] == 1);
  CHECK(r.counts.back() == 1);
  CHECK(r.sum_seconds == Approx(120.0021001));
}

TEST_CASE("LiveCounters: each storage thread's counters, summed", "[live]") {
  LiveCounters c;
  CHECK(c.publish(0, {{"http_requests", 5}, {"reconnects", 1}}));
  CHECK(c.publish(1, {{"http_requests", 7}}));
  CHECK(c.publish(0, {{"http_requests", 6}, {"reconnects", 1}}));  // absolute: replaces thread 0's
  const auto sum = c.read();
  CHECK(sum.at("http_requests") == 13);
  CHECK(sum.at("reconnects") == 1);
}

TEST_CASE("Loader::live(): at the end, the figures of the final report; watchers attached once",
          "[live][loader]") {
  auto m = mem_dataset("live", 90);
  LoaderConfig c;
  c.sampler.batch_size = 9;
  c.sampler.epochs = 2;
  c.memory_budget = 64 << 20;
  c.io_depth = 8;
  auto watch = std::make_shared<RecordingWatch>();
  c.watchers.push_back(watch);
  auto loader = Loader::open(*m.backend, m.dataset, c).value();
  {
    std::lock_guard lock(watch->mu);
    REQUIRE(watch->attached.size() == 1);
    CHECK(watch->attached[0].empty());  // one loader of its own: no label
  }
  std::uint64_t batches = 0;
  // Live readings from another thread while the loop runs: never a sample more than delivered.
  std::atomic<std::uint64_t> delivered{0};
  std::atomic<bool> done{false};
  std::jthread reader([&] {
    while (!done.load()) {
      const LiveFigures f = loader->live();
      CHECK(f.samples <= 180);
      CHECK(f.batches <= 20);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  for (;;) {
    auto b = loader->next();
    REQUIRE(b);
    if (b->end()) break;
    ++batches;
    delivered += b->samples().size();
  }
  done = true;
  reader.join();
  const PipelineReport r = loader->report();
  const LiveFigures f = loader->live();
  CHECK_FALSE(f.running);
  CHECK(f.samples == r.consumer.samples);
  CHECK(f.samples == delivered.load());
  CHECK(f.batches == batches);
  CHECK(f.bytes == r.consumer.bytes);
  CHECK(f.wait.count == batches);
  CHECK(f.wait_seconds == Approx(r.consumer.wait_seconds));
  CHECK(f.reads == r.io.stats.ops);
  CHECK(f.read_latency.count == r.io.stats.ops);
  CHECK(f.storage_bytes == r.io.storage_bytes);
  CHECK(f.memory_budget == c.memory_budget);
  REQUIRE(f.queues.size() >= 4);
  for (const auto& q : f.queues) CHECK(q.depth <= q.capacity);
  bool consumer = false;
  for (const auto& s : f.stages) {
    if (s.stage == StageId::kConsumer) {
      consumer = true;
      CHECK(s.items == r.consumer.samples);
    }
  }
  CHECK(consumer);
  loader.reset();
  std::lock_guard lock(watch->mu);
  CHECK(watch->detached == 1);
  REQUIRE(watch->last.size() == 1);
  CHECK(watch->last[0].samples == 180);  // its final figures, read as it detached
}

TEST_CASE("a host's accelerators attach each with its label", "[live][loader]") {
  auto m = mem_dataset("liveacc", 80);
  LoaderConfig c;
  c.sampler.batch_size = 8;
  c.memory_budget = 64 << 20;
  c.io_depth = 8;
  auto watch = std::make_shared<RecordingWatch>();
  c.watchers.push_back(watch);
  auto host = run_accelerators(*m.backend, m.dataset, c, 2, {}, {}, nullptr, nullptr);
  REQUIRE(host);
  std::lock_guard lock(watch->mu);
  REQUIRE(watch->attached.size() == 2);
  CHECK(watch->attached[0].at("accelerator") == "0");
  CHECK(watch->attached[1].at("accelerator") == "1");
  CHECK(watch->detached == 2);
  CHECK(watch->last[0].samples + watch->last[1].samples == 80);
}

TEST_CASE("Timeline: points only while a loader runs, sums across a loader's end, bounded",
          "[live][html]") {
  loader::Timeline t(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // nothing attached: no points
  std::atomic<std::uint64_t> n{0};
  const auto a = t.attach([&] { return figures(n.load()); }, {});
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (std::chrono::steady_clock::now() < until) {
    n += 10;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  t.detach(a);
  // A second loader after the first (a series of runs): its samples add to what the first left.
  const auto b = t.attach([] { return figures(7); }, {});
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  t.detach(b);
  const auto pts = t.finish();
  REQUIRE(pts.size() >= 100);
  CHECK(pts.size() <= loader::Timeline::kMaxPoints + 1);
  // Decimated: more than 1.5 s of 1 ms points would be 1,500; the interval doubled instead.
  CHECK(pts.back().seconds - pts.front().seconds > 1.0);
  for (std::size_t i = 1; i < pts.size(); ++i) {
    CHECK(pts[i].seconds >= pts[i - 1].seconds);
    CHECK(pts[i].samples >= pts[i - 1].samples);
  }
  CHECK(pts.back().samples == static_cast<double>(n.load() + 7));
  CHECK(pts.front().queue_capacity[0] == 8);
}

TEST_CASE("the metrics endpoint: exposition over a socket, totals kept past a loader's end",
          "[live][metrics]") {
  auto ep = MetricsEndpoint::start("127.0.0.1", 0);
  if (!ep && ep.error().code() == Errc::kUnsupported) {
    testing::skip_test("built without prometheus-cpp");
    return;
  }
  REQUIRE(ep);
  const std::uint16_t port = (*ep)->port();
  REQUIRE(port != 0);
  CHECK((*ep)->url() == fmt::format("http://127.0.0.1:{}/metrics", port));
  std::atomic<std::uint64_t> n{100};
  const auto a = (*ep)->attach([&] { return figures(n.load(), 0.5); }, {});
  std::string body = http_get(port);
  CHECK(sample(body, "feedline_samples_total") == 100);
  CHECK(sample(body, "feedline_running") == 1);
  CHECK(sample(body, "feedline_stage_busy_seconds_total{stage=\"decode\"}") == 1.5);
  CHECK(sample(body, "feedline_queue_depth{queue=\"reads\"}") == 3);
  CHECK(sample(body, "feedline_storage_retries_total{reason=\"http_503\"}") == 2);
  CHECK(sample(body, "feedline_memory_budget_bytes") == 4096);
  CHECK(body.find("# TYPE feedline_consumer_wait_seconds histogram") != std::string::npos);
  CHECK(sample(body, "feedline_consumer_wait_seconds_bucket{le=\"+Inf\"}") == 0);
  // A figure read a hair lower than before (a state switch mid-read) is served as the last one.
  n = 90;
  CHECK(sample(http_get(port), "feedline_samples_total") == 100);
  n = 120;
  (*ep)->detach(a);
  // The next loader of a series adds to what the first left.
  const auto b = (*ep)->attach([] { return figures(30, 0.25); }, {});
  body = http_get(port);
  CHECK(sample(body, "feedline_samples_total") == 150);
  CHECK(sample(body, "feedline_storage_retries_total{reason=\"http_503\"}") == 4);
  CHECK(sample(body, "feedline_compute_seconds_total") == 0);
  // Labelled loaders are series of their own.
  const auto c = (*ep)->attach([] { return figures(5); }, {{"accelerator", "1"}});
  body = http_get(port);
  CHECK(sample(body, "feedline_samples_total{accelerator=\"1\"}") == 5);
  CHECK(sample(body, "feedline_samples_total") == 150);
  (*ep)->detach(c);
  (*ep)->detach(b);
  body = http_get(port);
  CHECK(sample(body, "feedline_samples_total") == 150);
  CHECK(sample(body, "feedline_running") == 0);

  // The same port again: a clear error naming it.
  auto again = MetricsEndpoint::start("127.0.0.1", port);
  REQUIRE_FALSE(again);
  CHECK(again.error().code() == Errc::kInvalidArgument);
  CHECK_THAT(again.error().what(), Catch::Contains(fmt::format("127.0.0.1:{}", port)));
  auto v6 = MetricsEndpoint::start("::1", 0);
  REQUIRE_FALSE(v6);
  CHECK_THAT(v6.error().what(), Catch::Contains("IPv4"));
}

TEST_CASE("the metrics endpoint: label values are escaped and UTF-8 whatever their bytes",
          "[live][metrics][text]") {
  auto ep = MetricsEndpoint::start("127.0.0.1", 0);
  if (!ep && ep.error().code() == Errc::kUnsupported) {
    testing::skip_test("built without prometheus-cpp");
    return;
  }
  REQUIRE(ep);
  const auto a = (*ep)->attach([] { return figures(7); }, {{"accelerator", "q\"b\\s\nn\xff"}});
  const std::string body = http_get((*ep)->port());
  CHECK(feedline::is_utf8(body));
  CHECK(sample(body, "feedline_samples_total{accelerator=\"q\\\"b\\\\s\\nn\\\\xff\"}") == 7);
  (*ep)->detach(a);
}

TEST_CASE("the metrics endpoint: each backend counter of counters.hpp served as its role says",
          "[live][metrics][counters]") {
  namespace sc = storage::counters;
  auto ep = MetricsEndpoint::start("127.0.0.1", 0);
  if (!ep && ep.error().code() == Errc::kUnsupported) {
    testing::skip_test("built without prometheus-cpp");
    return;
  }
  REQUIRE(ep);
  LiveFigures f;
  f.running = true;
  std::uint64_t v = 1;
  for (const storage::CounterDef* d : sc::kAll) {
    if (d->kind == storage::CounterKind::kHistogram) continue;  // reports only: never live
    f.storage_counters[d->family ? storage::member_name(*d, "x9") : std::string(d->name)] = v++;
  }
  f.storage_counters["an_embedders_own"] = 77;  // no definition: an event
  const auto a = (*ep)->attach([&] { return f; }, {});
  const std::string body = http_get((*ep)->port());
  (*ep)->detach(a);
  double reconnects = 0;
  for (const auto& [name, value] : f.storage_counters) {
    INFO(name);
    const storage::CounterDef* d = storage::find_counter(name);
    const auto role = d ? d->role : storage::CounterRole::kPlain;
    const std::string event = fmt::format("feedline_storage_events_total{{event=\"{}\"}}", name);
    if (d && d->kind == storage::CounterKind::kPeak) {
      CHECK(body.find(fmt::format("\"{}\"", name)) == std::string::npos);  // a peak: no counter
    } else if (role == storage::CounterRole::kRetry) {
      CHECK(sample(body, fmt::format("feedline_storage_retries_total{{reason=\"{}\"}}",
                                     *storage::retry_reason(name))) == static_cast<double>(value));
      CHECK(body.find(event) == std::string::npos);
    } else if (role == storage::CounterRole::kReconnect) {
      reconnects += static_cast<double>(value);
      CHECK(body.find(event) == std::string::npos);
    } else if (role == storage::CounterRole::kRetryTotal) {
      CHECK(body.find(fmt::format("\"{}\"", name)) == std::string::npos);  // the reasons' sum
    } else {
      CHECK(sample(body, event) == static_cast<double>(value));
    }
  }
  CHECK(reconnects > 0);
  CHECK(sample(body, "feedline_storage_reconnects_total") == reconnects);
}

namespace {

// A decorator that makes every read count one retry, as a network backend does: in
// QueueStats::retries (complete()'s count) and under a reason of its own (nfs_retries).
class RetryEveryRead final : public storage::ForwardingQueue {
 public:
  RetryEveryRead(unsigned depth, std::unique_ptr<storage::IoQueue> inner)
      : ForwardingQueue(depth, std::move(inner)) {
    mutable_stats().start({&storage::counters::kNfsRetries});
  }

 protected:
  std::uint64_t on_inner_done(Forwarded& f) noexcept override {
    f.retries = 1;
    ++mutable_stats().count(storage::counters::kNfsRetries);
    return kDeliverNow;
  }
};

class RetryEveryReadBackend final : public storage::ForwardingBackend {
 public:
  explicit RetryEveryReadBackend(std::unique_ptr<storage::Backend> inner)
      : ForwardingBackend(std::move(inner)) {}
  Result<std::unique_ptr<storage::IoQueue>> make_queue(
      const storage::QueueOptions& options) override {
    FEEDLINE_ASSIGN_OR_RETURN(auto q, inner().make_queue(options));
    return std::unique_ptr<storage::IoQueue>(
        std::make_unique<RetryEveryRead>(options.depth, std::move(q)));
  }
};

}  // namespace

TEST_CASE("live counters: a retry is published once, under its reason, not again as io_retries",
          "[live][counters]") {
  storage::QueueStats st;
  st.retries = 3;
  CHECK(storage::live_counters(st).at("io_retries") == 3);  // no reason of the backend's: "io"
  st.count(storage::counters::kNfsRetries) = 3;
  CHECK_FALSE(storage::live_counters(st).contains("io_retries"));

  // Through a loader's live figures, as the metrics endpoint and the trace read them.
  auto m = mem_dataset("retried", 40);
  m.backend = std::make_unique<RetryEveryReadBackend>(std::move(m.backend));
  LoaderConfig c;
  c.sampler.batch_size = 8;
  c.io_depth = 4;
  auto loader = Loader::open(*m.backend, m.dataset, c).value();
  for (;;) {
    auto b = loader->next();
    REQUIRE(b);
    if (b->end()) break;
  }
  const LiveFigures f = loader->live();
  CHECK(f.storage_counters.at("nfs_retries") == 40);
  CHECK_FALSE(f.storage_counters.contains("io_retries"));  // each retry once, under "nfs"
}
