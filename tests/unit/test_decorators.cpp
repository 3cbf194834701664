// The decorators (throttle, faults, counting) and what they share: every call reaches the inner
// backend, latencies come from a seeded distribution, faults arrive at their rates and seeds, the
// inner queue's measurements show through. The conformance rows over decorators are in
// test_conformance.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <set>

#include "feedline/storage/decorators.hpp"
#include "feedline/storage/device_reads.hpp"
#include "feedline/storage/registry.hpp"
#include "test_support.hpp"

using namespace feedline;
using namespace feedline::storage;
using namespace std::chrono_literals;

namespace {

// A mem:// backend holding `objects` objects of `size` bytes: "d/obj-0" ...
std::unique_ptr<Backend> mem_with(std::size_t objects, std::size_t size,
                                  std::vector<std::string>* keys = nullptr) {
  Registry registry;
  register_builtin_backends(registry);
  auto r = registry.open("mem://d/", {}).value();
  for (std::size_t i = 0; i < objects; ++i) {
    const std::string key = "d/obj-" + std::to_string(i);
    REQUIRE(r.backend->write(key, testing::pattern_bytes(size, i)));
    if (keys) keys->push_back(key);
  }
  return std::move(r.backend);
}

// Reads `n` blocks of `len` bytes (block i at (i * len) % size) at depth `depth` through the
// collecting poll(); returns the ops, each completed once.
struct Run {
  AlignedBuffer buf;
  std::vector<ReadOp> ops;
};
Run read_all(IoQueue& q, const ObjectHandle& h, std::size_t n, std::size_t len, std::size_t depth) {
  Run run{AlignedBuffer::allocate(n * len).value(), std::vector<ReadOp>(n)};
  std::size_t next = 0, completed = 0;
  std::vector<ReadOp*> done;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (completed < n && std::chrono::steady_clock::now() < deadline) {
    while (next < n && q.in_flight() < depth) {
      ReadOp& op = run.ops[next];
      op.object = &h;
      op.offset = (next * len) % h.size();
      op.length = len;
      op.dst = run.buf.span().subspan(next * len, len);
      q.submit(op);
      ++next;
    }
    done.clear();
    q.poll(1, 50ms, done);
    completed += done.size();
  }
  REQUIRE(completed == n);
  return run;
}

}  // namespace

TEST_CASE("latency distributions: the --compute-time forms, checked", "[storage][decorators]") {
  auto fixed = LatencyDistribution::parse("2ms").value();
  CHECK(fixed.kind == LatencyDistribution::Kind::kFixed);
  CHECK(fixed.mean == 2ms);
  CHECK(LatencyDistribution::parse("fixed:250us").value().mean == 250us);
  auto n = LatencyDistribution::parse("normal:50ms:5ms").value();
  CHECK(n.kind == LatencyDistribution::Kind::kNormal);
  CHECK(n.mean == 50ms);
  CHECK(n.stdev == 5ms);
  auto ln = LatencyDistribution::parse("lognormal:2ms:1ms").value();
  CHECK(ln.kind == LatencyDistribution::Kind::kLognormal);
  CHECK(ln.describe() == "lognormal:2ms:1ms");
  CHECK(n.describe() == "normal:50ms:5ms");
  CHECK(LatencyDistribution::parse(fixed.describe()).value() == fixed);
  // A plain duration still converts, as ThrottleConfig{.latency = 2ms} did before distributions.
  const ThrottleConfig tc{0, 2ms};
  CHECK(tc.latency == fixed);
  for (const char* bad : {"", "fast", "normal:5ms", "normal:5ms:1ms:2ms", "gamma:1ms:1ms",
                          "lognormal:0:1ms", "normal:-5ms:1ms", "fixed:1ms:2ms", "normal:5ms:"}) {
    INFO(bad);
    auto r = LatencyDistribution::parse(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kInvalidArgument);
    CHECK(r.error().message().find("normal:MEAN:STDEV") !=
          std::string::npos);  // says what it takes
  }
}

TEST_CASE("latency sampler: seeded, never negative, with the mean and spread asked for",
          "[storage][decorators]") {
  auto draws = [](const LatencyDistribution& d, std::uint64_t seed, std::size_t n = 20000) {
    LatencySampler s(d, seed);
    std::vector<double> v;
    for (std::size_t i = 0; i < n; ++i) v.push_back(static_cast<double>(s.next().count()));
    return v;
  };
  auto mean_sd = [](const std::vector<double>& v) {
    double m = 0;
    for (double x : v) m += x;
    m /= static_cast<double>(v.size());
    double var = 0;
    for (double x : v) var += (x - m) * (x - m);
    return std::pair{m, std::sqrt(var / static_cast<double>(v.size()))};
  };
  const auto ln = LatencyDistribution::lognormal(2ms, 1ms);
  CHECK(draws(ln, 5) == draws(ln, 5));
  CHECK(draws(ln, 5) != draws(ln, 6));
  {
    auto [m, sd] = mean_sd(draws(ln, 5));
    CHECK(m == Approx(2e6).epsilon(0.03));
    CHECK(sd == Approx(1e6).epsilon(0.1));
  }
  {
    auto [m, sd] = mean_sd(draws(LatencyDistribution::normal(10ms, 2ms), 1));
    CHECK(m == Approx(1e7).epsilon(0.02));
    CHECK(sd == Approx(2e6).epsilon(0.05));
  }
  const auto wide = draws(LatencyDistribution::normal(1ms, 5ms), 2);  // mostly below zero: clamped
  CHECK(*std::min_element(wide.begin(), wide.end()) == 0);
  const auto fixed = draws(LatencyDistribution(3ms), 9, 10);
  CHECK(std::all_of(fixed.begin(), fixed.end(), [](double x) { return x == 3e6; }));
}

TEST_CASE(
    "a throttled backend passes every call on: stat_many, open_known, display_name reach the "
    "backend",
    "[storage][decorators]") {
  // An object store sizes a brace list with one stat_many() and opens listed objects without a
  // HEAD each (open_known): a throttled run must make the same calls as a plain one. The inner
  // spy is the counting decorator.
  std::vector<std::string> keys;
  auto counts = std::make_shared<CallCounts>();
  auto b = make_throttle(make_counting(mem_with(5, 1000, &keys), counts),
                         {.bytes_per_second = 1e9, .latency = 1ms});
  auto infos = b->stat_many(keys);
  REQUIRE(infos);
  CHECK(infos->size() == 5);
  CHECK(counts->get("stat_many") == 1);
  CHECK(counts->get("stat_many_keys") == 5);
  CHECK(counts->get("stat") == 0);  // not the default stat_many() asking one by one
  auto h = b->open_known(infos->front());
  REQUIRE(h);
  CHECK(counts->get("open_known") == 1);
  CHECK(counts->get("open") == 0);
  CHECK(b->display_name("d/obj-0") == "mem://d/obj-0");
  CHECK(counts->get("display_name") == 1);
  REQUIRE(b->list("d/"));
  CHECK(counts->get("list") == 1);
  REQUIRE(b->write("d/new", testing::pattern_bytes(10, 1)));
  CHECK(counts->get("create") == 1);
  CHECK(b->stat("d/new").value().size == 10);
  CHECK(counts->get("stat") == 1);
  CHECK(b->scheme() == "mem");
}

TEST_CASE("throttle: each read waits its drawn latency; the same seed draws the same latencies",
          "[storage][decorators]") {
  auto b = make_throttle(mem_with(1, 1 << 20),
                         {.latency = LatencyDistribution::normal(4ms, 1ms), .seed = 3});
  auto h = b->open("d/obj-0").value();
  auto q = b->make_queue({.depth = 16}).value();
  auto run = read_all(*q, *h, 200, 4096, 16);
  const auto expect = testing::pattern_bytes(1 << 20, 0);
  for (const ReadOp& op : run.ops) {
    REQUIRE(op.result);
    REQUIRE(*op.result == 4096);
    REQUIRE(std::memcmp(op.dst.data(), expect.data() + op.offset, 4096) == 0);
  }
  const QueueStats& s = q->stats();
  CHECK(s.ops == 200);
  // None is faster than its draw (4 +- 1 ms: under 1 ms once in 700); the mean is near 4 ms
  // (the bound above is loose: a shared machine adds, never takes away).
  CHECK(s.lat.percentile(0.01) > 1'000'000);
  CHECK(s.lat.mean() > 3'500'000);
  CHECK(s.lat.mean() < 20'000'000);
  CHECK(std::find(q->info().features.begin(), q->info().features.end(), "throttled") !=
        q->info().features.end());
  // Reads into GPU memory would bypass the throttle: not offered.
  CHECK_FALSE(b->caps().device_reads);
  auto device = b->make_queue({.memory = QueueMemory::kDevice});
  REQUIRE_FALSE(device);
  CHECK(device.error().code() == Errc::kUnsupported);
}

TEST_CASE("throttle: a seek is added to a read that does not go on from the previous one",
          "[storage][decorators]") {
  // 20 ms a seek: reads front to back pay one (the first), the same reads in another order one
  // each. At depth 1, so that each read's predecessor is the one before it.
  auto b = make_throttle(mem_with(1, 1 << 20), {.seek = 20ms});
  auto h = b->open("d/obj-0").value();
  auto sequential = b->make_queue({.depth = 1}).value();
  auto run = read_all(*sequential, *h, 16, 4096, 1);
  CHECK(sequential->stats().lat.percentile(0.5) < 15'000'000);  // no seek but the first
  CHECK(sequential->stats().lat.max() >= 20'000'000);           // the first read seeks
  // Every other block: a short skip (4 KiB) past the previous end is no seek either.
  auto skipping = b->make_queue({.depth = 1}).value();
  {
    std::vector<ReadOp> ops(8);
    AlignedBuffer buf = AlignedBuffer::allocate(8 * 4096).value();
    std::vector<ReadOp*> done;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      ops[i].object = h.get();
      ops[i].offset = i * 8192;
      ops[i].length = 4096;
      ops[i].dst = buf.span().subspan(i * 4096, 4096);
      skipping->submit(ops[i]);
      while (skipping->in_flight() > 0) skipping->poll(1, 50ms, done);
    }
    CHECK(skipping->stats().lat.percentile(0.5) < 15'000'000);
  }
  // Backwards: each read starts before the previous one ended, a seek each.
  auto backwards = b->make_queue({.depth = 1}).value();
  {
    std::vector<ReadOp> ops(6);
    AlignedBuffer buf = AlignedBuffer::allocate(6 * 4096).value();
    std::vector<ReadOp*> done;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      ops[i].object = h.get();
      ops[i].offset = (ops.size() - i) * 65536 * 2;
      ops[i].length = 4096;
      ops[i].dst = buf.span().subspan(i * 4096, 4096);
      backwards->submit(ops[i]);
      while (backwards->in_flight() > 0) backwards->poll(1, 50ms, done);
      REQUIRE(ops[i].result);
    }
    CHECK(backwards->stats().lat.percentile(0.01) >= 20'000'000);
  }
  (void)run;
}

namespace {

struct FaultRun {
  std::set<std::size_t> errors, resets;
  QueueStats stats;
};

// 4,000 reads of 4 KiB through faults(mem) at depth 32.
FaultRun fault_run(const FaultsConfig& config, std::size_t n = 4000) {
  auto b = make_faults(mem_with(1, 1 << 20), config).value();
  auto h = b->open("d/obj-0").value();
  auto q = b->make_queue({.depth = 32}).value();
  auto run = read_all(*q, *h, n, 4096, 32);
  const auto expect = testing::pattern_bytes(1 << 20, 0);
  FaultRun out;
  for (std::size_t i = 0; i < n; ++i) {
    const ReadOp& op = run.ops[i];
    if (op.result) {
      INFO("op " << i);
      REQUIRE(*op.result == 4096);  // a short read is read whole by a second request
      REQUIRE(std::memcmp(op.dst.data(), expect.data() + op.offset, 4096) == 0);
      continue;
    }
    const Error& e = op.result.error();
    CHECK(e.code() == Errc::kIo);
    CHECK(e.object() == h->display_name());  // as the handle names it, as every backend does
    CHECK(e.offset() == op.offset);
    if (e.sys_errno() == ECONNRESET) {
      CHECK(e.retryable());
      out.resets.insert(i);
    } else {
      CHECK(e.sys_errno() == EIO);
      CHECK_FALSE(e.retryable());
      out.errors.insert(i);
    }
  }
  out.stats = q->stats();
  return out;
}

// Within 5 standard deviations of n * p (a binomial count): a check that fails by chance about
// once in two million runs, and always when the rate is ignored.
void check_rate(std::uint64_t count, std::size_t n, double p) {
  const double mean = static_cast<double>(n) * p;
  const double sd = std::sqrt(mean * (1 - p));
  INFO("count " << count << ", expected " << mean << " +- " << 5 * sd);
  CHECK(std::abs(static_cast<double>(count) - mean) <= 5 * sd);
}

}  // namespace

TEST_CASE(
    "faults: errors, resets, short reads and spikes arrive at their rates, the same for the same "
    "seed",
    "[storage][decorators]") {
  const FaultsConfig config{.seed = 11,
                            .error_rate = 0.05,
                            .reset_rate = 0.03,
                            .short_read_rate = 0.2,
                            .spike_rate = 0.02,
                            .spike_latency = 1ms};
  constexpr std::size_t kReads = 4000;
  const FaultRun a = fault_run(config, kReads);
  check_rate(a.errors.size(), kReads, 0.05);
  // A read drawn for both an error and a reset fails as an error.
  check_rate(a.resets.size(), kReads, 0.03 * 0.95);
  check_rate(a.stats.counters.at("faults_short_reads"), kReads, 0.2);
  check_rate(a.stats.counters.at("faults_spikes"), kReads, 0.02);
  // Every fault counted, and each as what the caller saw.
  CHECK(a.stats.counters.at("faults_errors") == a.errors.size());
  CHECK(a.stats.counters.at("faults_resets") == a.resets.size());
  CHECK(a.stats.errors == a.errors.size() + a.resets.size());
  CHECK(a.stats.retries == a.stats.counters.at("faults_short_reads"));  // one more request each
  CHECK(a.stats.ops == kReads);

  const FaultRun again = fault_run(config, kReads);
  CHECK(again.errors == a.errors);
  CHECK(again.resets == a.resets);
  CHECK(again.stats.counters.at("faults_short_reads") == a.stats.counters.at("faults_short_reads"));
  FaultsConfig other = config;
  other.seed = 12;
  CHECK(fault_run(other, kReads).errors != a.errors);

  const FaultRun none = fault_run(FaultsConfig{}, 500);
  CHECK(none.errors.empty());
  CHECK(none.resets.empty());
  CHECK(none.stats.counters.at("faults_short_reads") == 0);  // present, and zero
}

TEST_CASE("faults: rates outside [0, 1] are refused", "[storage][decorators]") {
  auto r = make_faults(mem_with(0, 0), {.error_rate = 1.5});
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::kInvalidArgument);
  CHECK(r.error().message().find("error_rate") != std::string::npos);
  CHECK_FALSE(make_faults(mem_with(0, 0), {.spike_rate = -0.1}));
}

TEST_CASE("counting: every call counted by name; the inner queue's counters show through",
          "[storage][decorators]") {
  auto counts = std::make_shared<CallCounts>();
  // faults inside counting: the faults queue's counters must appear in the counting queue's stats.
  auto b =
      make_counting(make_faults(mem_with(2, 8192), {.seed = 1, .error_rate = 1.0}).value(), counts);
  auto h = b->open("d/obj-1").value();
  CHECK(counts->get("open") == 1);
  auto q = b->make_queue({.depth = 4}).value();
  CHECK(counts->get("make_queue") == 1);
  auto buf = AlignedBuffer::allocate(8192).value();
  ReadOp a, c;
  a.object = c.object = h.get();
  a.length = c.length = 4096;
  c.offset = 4096;
  a.dst = buf.span().first(4096);
  c.dst = buf.span().subspan(4096, 4096);
  std::vector<ReadOp*> ops{&a, &c};
  q->submit(ops);
  q->submit(std::span<ReadOp* const>{});  // nothing submitted: not a call that reaches the queue
  CHECK(counts->get("submit") == 1);
  CHECK(counts->get("ops") == 2);
  std::vector<ReadOp*> done;
  for (int i = 0; i < 100 && done.size() < 2; ++i) q->poll(1, 20ms, done);
  REQUIRE(done.size() == 2);
  CHECK_FALSE(a.result);  // error_rate 1: every read fails
  CHECK(counts->get("bytes") == 0);
  CHECK(counts->get("poll") >= 1);
  CHECK(q->stats().counters.at("faults_errors") == 2);  // the inner (faults) queue's, shown here
  CHECK(q->stats().errors == 2);
  q->cancel();
  CHECK(counts->get("cancel") == 1);
  CHECK(counts->get("no such call") == 0);
  CHECK(counts->snapshot().at("ops") == 2);
}

TEST_CASE("poll() hands completed ops back: those without a completion, and those with one too",
          "[storage][decorators]") {
  auto b = mem_with(1, 4096);
  auto h = b->open("d/obj-0").value();
  auto q = b->make_queue({}).value();
  auto buf = AlignedBuffer::allocate(8192).value();
  struct Count final : ReadCompletion {
    int calls = 0;
    void on_read_complete(ReadOp&) noexcept override { ++calls; }
  } count;
  ReadOp plain, called;
  plain.object = called.object = h.get();
  plain.length = called.length = 100;
  plain.dst = buf.span().first(100);
  called.dst = buf.span().subspan(4096, 100);
  called.done = &count;
  std::vector<ReadOp*> ops{&plain, &called};
  q->submit(ops);
  std::vector<ReadOp*> done{nullptr};  // appended to, not replaced
  CHECK(q->poll(2, 1s, done) == 2);
  REQUIRE(done.size() == 3);
  CHECK(done[0] == nullptr);
  CHECK(std::count(done.begin(), done.end(), &plain) == 1);
  CHECK(std::count(done.begin(), done.end(), &called) == 1);
  CHECK(count.calls == 1);
  CHECK(*plain.result == 100);
}

TEST_CASE("device memory is a queue option: only local files offer it, decorators keep the answer",
          "[storage][decorators]") {
  auto m = mem_with(0, 0);
  CHECK_FALSE(m->caps().device_reads);
  auto refused =
      m->make_queue({.memory = QueueMemory::kDevice, .device_reads = make_device_reads(nullptr)});
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::kUnsupported);
  CHECK(refused.error().message().find("mem://") != std::string::npos);

  Registry registry;
  register_builtin_backends(registry);
  const auto dir = testing::scratch_dir("device-option");
  auto f = registry.open(dir.string(), {}).value();
  auto counted = make_counting(std::move(f.backend), nullptr);
  CHECK(counted->caps().device_reads);  // forwarded
  auto no_runtime = counted->make_queue({.memory = QueueMemory::kDevice});
  REQUIRE_FALSE(no_runtime);  // a kDevice queue needs the cuFile runtime
  CHECK(no_runtime.error().code() == Errc::kInvalidArgument);
  CHECK(no_runtime.error().message().find("cuFile") != std::string::npos);
}
