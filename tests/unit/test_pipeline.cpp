// The pipeline: exactly-once delivery, order, bounds, stall accounting and the verdict.
#include <fmt/format.h>
#include <xxhash.h>
#include <algorithm>
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "feedline/loader/bounded_queue.hpp"
#include "feedline/loader/emulate.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/storage/decorators.hpp"
#include "feedline/storage/registry.hpp"
#include "test_support.hpp"

using namespace feedline;
using namespace feedline::loader;
using namespace std::chrono_literals;

namespace {

// A files-format dataset in memory: n samples of `size` bytes (size varies a little per sample).
struct MemDataset {
  std::unique_ptr<storage::Backend> backend;
  Dataset dataset;
  std::map<std::string, std::uint64_t> digest_by_key;  // independent: XXH3 of what we wrote
  std::uint64_t digest_sum = 0;

  MemDataset(std::size_t n, std::size_t size, std::unique_ptr<storage::Backend> b = nullptr) {
    storage::Registry registry;
    storage::register_builtin_backends(registry);
    backend = b ? std::move(b) : std::move(registry.open("mem://ds/", {})->backend);
    for (std::size_t i = 0; i < n; ++i) {
      const std::string key = fmt::format("ds/{:06}.bin", i);
      const auto bytes = testing::pattern_bytes(size + (i % 7) * 100, i + 1);
      REQUIRE(backend->write(key, bytes));
      const std::uint64_t h = XXH3_64bits(bytes.data(), bytes.size());
      digest_by_key[fmt::format("{:06}", i)] = h;
      digest_sum += h;
    }
    DatasetOptions o;
    o.format = DatasetFormat::kFiles;
    auto d = open_dataset(*backend, "ds/", o);
    REQUIRE(d);
    dataset = std::move(*d);
    REQUIRE(dataset.samples.size() == n);
  }
};

LoaderConfig small_config(std::uint32_t batch, std::uint32_t epochs) {
  LoaderConfig c;
  c.sampler.batch_size = batch;
  c.sampler.epochs = epochs;
  c.sampler.seed = 7;
  c.memory_budget = 64 << 20;
  c.io_depth = 16;
  c.decode_threads = 2;
  return c;
}

}  // namespace

TEST_CASE("sampler: every sample once per epoch, seeded order, disjoint shards",
          "[loader][sampler]") {
  SamplerConfig c;
  c.num_samples = 103;
  c.batch_size = 10;
  c.epochs = 3;
  c.seed = 42;
  auto s = Sampler::create(c).value();
  std::vector<std::vector<std::uint32_t>> epochs(3);
  std::uint64_t seq = 0;
  while (auto slot = s.next()) {
    REQUIRE(slot->seq == seq++);
    epochs[slot->epoch].push_back(slot->sample);
    CHECK(slot->slot < slot->batch_len);
  }
  for (auto& e : epochs) {
    REQUIRE(e.size() == 103);
    CHECK(std::set<std::uint32_t>(e.begin(), e.end()).size() == 103);
  }
  CHECK(epochs[0] != epochs[1]);  // reshuffled per epoch
  auto again = Sampler::create(c).value();
  for (std::uint32_t expected : epochs[0]) CHECK(again.next()->sample == expected);

  // Sharding: the ranks' samples are disjoint and cover the epoch.
  std::set<std::uint32_t> all;
  std::size_t total = 0;
  for (std::uint32_t r = 0; r < 4; ++r) {
    SamplerConfig rc = c;
    rc.epochs = 1;
    rc.rank = r;
    rc.world_size = 4;
    auto rs = Sampler::create(rc).value();
    while (auto slot = rs.next()) {
      all.insert(slot->sample);
      ++total;
    }
  }
  CHECK(total == 103);
  CHECK(all.size() == 103);

  // drop_last: 103 -> 100 per epoch, 10 full batches.
  SamplerConfig dc = c;
  dc.drop_last = true;
  auto ds = Sampler::create(dc).value();
  CHECK(ds.samples_per_epoch() == 100);
  CHECK(ds.batches_per_epoch() == 10);
  CHECK_FALSE(Sampler::create(SamplerConfig{}));  // no samples
}

TEST_CASE("sampler: shard shuffle keeps runs of a shard together, every sample once",
          "[loader][sampler]") {
  // 20 shards of 7..26 samples (storage order, shard by shard).
  SamplerConfig c;
  std::vector<std::uint32_t> shard_of;
  for (std::uint32_t shard = 0; shard < 20; ++shard) {
    c.shard_starts.push_back(static_cast<std::uint32_t>(shard_of.size()));
    for (std::uint32_t i = 0; i < 7 + shard; ++i) shard_of.push_back(shard);
  }
  c.num_samples = shard_of.size();  // 330
  c.batch_size = 16;
  c.epochs = 2;
  c.seed = 5;
  c.shard_shuffle = 4;  // runs of 16 / 4 = 4 samples

  auto epoch_orders = [](const SamplerConfig& sc) {
    auto s = Sampler::create(sc).value();
    std::vector<std::vector<std::uint32_t>> epochs(sc.epochs);
    while (auto slot = s.next()) epochs[slot->epoch].push_back(slot->sample);
    return epochs;
  };
  const auto epochs = epoch_orders(c);
  for (const auto& e : epochs) {
    REQUIRE(e.size() == c.num_samples);
    CHECK(std::set<std::uint32_t>(e.begin(), e.end()).size() == c.num_samples);
    // Within a shard, storage order; runs of 4 from one shard; at most 4 shards open at once.
    std::map<std::uint32_t, std::uint32_t> last;
    std::set<std::uint32_t> open, done;
    std::map<std::uint32_t, std::uint32_t> left;
    for (std::uint32_t sh = 0; sh < 20; ++sh) left[sh] = 7 + sh;
    std::size_t runs = 0;
    for (std::size_t i = 0; i < e.size(); ++i) {
      const std::uint32_t sh = shard_of[e[i]];
      if (last.contains(sh)) CHECK(e[i] == last[sh] + 1);
      last[sh] = e[i];
      CHECK_FALSE(done.contains(sh));
      open.insert(sh);
      CHECK(open.size() <= 4);
      if (--left[sh] == 0) {
        open.erase(sh);
        done.insert(sh);
      }
      if (i == 0 || shard_of[e[i - 1]] != sh) ++runs;
    }
    CHECK(runs <
          c.num_samples / 3);  // stretches of one shard, mostly of 4 or more: reads side by side
  }
  CHECK(epochs[0] != epochs[1]);     // a new shard order per epoch
  CHECK(epoch_orders(c) == epochs);  // seeded
  SamplerConfig other = c;
  other.seed = 6;
  CHECK(epoch_orders(other) != epochs);

  // Ranks: contiguous blocks of the same order, disjoint, together the epoch, sizes as striding's.
  SamplerConfig one = c;
  one.epochs = 1;
  std::vector<std::uint32_t> joined;
  for (std::uint32_t r = 0; r < 3; ++r) {
    SamplerConfig rc = one;
    rc.rank = r;
    rc.world_size = 3;
    const auto mine = epoch_orders(rc)[0];
    CHECK(mine.size() == 110);
    joined.insert(joined.end(), mine.begin(), mine.end());
  }
  CHECK(joined == epoch_orders(one)[0]);

  // No shard starts: every sample its own shard (a shuffle of samples).
  SamplerConfig flat = one;
  flat.shard_starts.clear();
  const auto f = epoch_orders(flat)[0];
  CHECK(std::set<std::uint32_t>(f.begin(), f.end()).size() == c.num_samples);

  SamplerConfig bad = one;
  bad.shard_starts = {0, 5, 5};
  CHECK_FALSE(Sampler::create(bad));
  bad.shard_starts = {1, 5};
  CHECK_FALSE(Sampler::create(bad));
}

TEST_CASE("bounded queue accounts producer-blocked and consumer-starved time", "[loader][queue]") {
  BoundedQueue<int> q("q", 2);
  q.start();
  WorkerClock producer, consumer;
  producer.start();
  consumer.start();
  std::jthread t([&] {
    for (int i = 0; i < 6; ++i) q.push(i, &producer);
    q.close();
  });
  std::this_thread::sleep_for(100ms);  // the producer fills the queue and blocks
  std::vector<int> got;
  while (auto v = q.pop(&consumer)) got.push_back(*v);
  t.join();
  producer.stop();
  consumer.stop();
  CHECK(got == std::vector<int>{0, 1, 2, 3, 4, 5});
  auto r = q.report(0.2);
  CHECK(r.max_occupancy == 2);
  CHECK(r.items == 6);
  CHECK(r.producer_blocked_fraction > 0.2);  // blocked ~100 ms of 200
  CHECK(producer.ns(WorkState::kBlocked) > 50'000'000u);
  CHECK(r.mean_occupancy > 0.5);
}

TEST_CASE("bounded queue hands runs of items over in order, fairly, and stops at close",
          "[loader][queue]") {
  // push_all of more than the capacity blocks until consumers make room; pop_some takes no more
  // than its share, so two consumers split a run instead of one taking it all.
  BoundedQueue<int> q("q", 4, true, 1, 2);
  q.start();
  WorkerClock producer;
  producer.start();
  std::vector<int> all(100);
  for (int i = 0; i < 100; ++i) all[static_cast<std::size_t>(i)] = i;
  std::jthread t([&] {
    std::vector<int> items = all;
    CHECK(q.push_all(items, &producer));
    CHECK(items.empty());
    q.close();
  });
  std::vector<int> got_a, got_b;
  std::size_t max_run = 0;
  std::jthread b([&] {
    std::vector<int> run;
    while (q.pop_some(run, 3)) {
      max_run = std::max(max_run, run.size());
      got_b.insert(got_b.end(), run.begin(), run.end());
      run.clear();
    }
  });
  std::vector<int> run;
  while (q.pop_some(run, 3)) {
    got_a.insert(got_a.end(), run.begin(), run.end());
    run.clear();
  }
  t.join();
  b.join();
  CHECK(max_run <= 3);
  CHECK(std::is_sorted(got_a.begin(), got_a.end()));  // each consumer sees its items in order
  CHECK(std::is_sorted(got_b.begin(), got_b.end()));
  std::vector<int> merged = got_a;
  merged.insert(merged.end(), got_b.begin(), got_b.end());
  std::sort(merged.begin(), merged.end());
  CHECK(merged == all);  // every item once
  auto r = q.report(0.1);
  CHECK(r.items == 100);
  CHECK(r.max_occupancy <= 4);

  // A fair share: 4 queued, 2 consumers -> one pop takes 2 even when allowed 10.
  BoundedQueue<int> f("f", 8, true, 1, 2);
  std::vector<int> four{1, 2, 3, 4};
  REQUIRE(f.push_all(four));
  std::vector<int> share;
  REQUIRE(f.pop_some(share, 10));
  CHECK(share == std::vector<int>{1, 2});

  // Closed while full: push_all returns false and keeps what it could not push.
  BoundedQueue<int> c("c", 2);
  std::vector<int> five{1, 2, 3, 4, 5};
  std::jthread closer([&] {
    std::this_thread::sleep_for(50ms);
    c.close();
  });
  CHECK_FALSE(c.push_all(five));
  CHECK(five == std::vector<int>{3, 4, 5});
  std::vector<int> drained;
  while (c.pop_some(drained, 10)) {
  }
  CHECK(drained == std::vector<int>{1, 2});  // what was in is still delivered after close
}

TEST_CASE("exactly once: the digest of delivered samples matches what was written",
          "[loader][pipeline]") {
  MemDataset ds(200, 3000);
  auto config = small_config(16, 2);
  auto loader = Loader::open(*ds.backend, ds.dataset, config).value();
  std::map<std::string, int> seen;
  std::vector<std::uint32_t> order;
  std::uint64_t digest = 0;
  for (;;) {
    auto b = loader->next();
    REQUIRE(b);
    if (b->end()) break;
    const Batch& batch = *b;
    std::uint64_t batch_digest = 0;
    for (const auto& s : batch.samples()) {
      ++seen[std::string(s.key)];
      order.push_back(s.sample);
      // The bytes in the batch are the sample's bytes.
      const auto m = batch.members_of(s);
      REQUIRE(m.size() == 1);
      const std::uint64_t h = XXH3_64bits(batch.data().data() + m[0].offset, m[0].size);
      CHECK(h == ds.digest_by_key[std::string(s.key)]);
      batch_digest += h;
    }
    CHECK(batch_digest == batch.digest());
    digest += batch.digest();
  }
  auto report = loader->report();
  REQUIRE(seen.size() == 200);
  for (const auto& [k, n] : seen) REQUIRE(n == 2);  // once per epoch
  CHECK(report.consumer.samples == 400);
  CHECK(report.consumer.epochs == 2);
  CHECK(report.delivered.digest == digest);
  CHECK(report.delivered.digest == 2 * ds.digest_sum);  // sum mod 2^64 over both epochs

  // Order follows the seed: the sampler alone gives the same sequence.
  SamplerConfig sc = config.sampler;
  sc.num_samples = 200;
  auto sampler = Sampler::create(sc).value();
  for (std::uint32_t got : order) REQUIRE(sampler.next()->sample == got);
}

TEST_CASE("the memory budget bounds the pipeline and rejects a sample that cannot fit",
          "[loader][pipeline]") {
  MemDataset ds(64, 64 << 10);
  auto config = small_config(4, 1);
  config.memory_budget = 2 << 20;
  auto loader = Loader::open(*ds.backend, ds.dataset, config).value();
  while (true) {
    auto b = loader->next();
    REQUIRE(b);
    if (b->end()) break;
  }
  auto r = loader->report();
  CHECK(r.consumer.samples == 64);
  CHECK(r.memory.peak <= config.memory_budget);
  CHECK(r.memory.overshoot == 0);

  MemDataset big(2, 8 << 20);
  auto tight = small_config(1, 1);
  tight.memory_budget = 4 << 20;
  auto refused = Loader::open(*big.backend, big.dataset, tight);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::kInvalidArgument);
  CHECK(refused.error().what().find("memory budget") != std::string::npos);
}

TEST_CASE("a read error fails the run naming the object; skip counts it instead",
          "[loader][pipeline]") {
  const auto dir = testing::scratch_dir("pipeline-errors");
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto r = registry.open((dir / "").string(), {}).value();
  for (int i = 0; i < 20; ++i) {
    REQUIRE(r.backend->write(r.key + fmt::format("{:03}.bin", i), testing::pattern_bytes(5000, i)));
  }
  DatasetOptions o;
  o.format = DatasetFormat::kFiles;
  auto dataset = open_dataset(*r.backend, r.key, o).value();
  std::filesystem::remove(dir / "007.bin");  // vanishes after the listing

  auto config = small_config(4, 1);
  {
    auto loader = Loader::open(*r.backend, dataset, config).value();
    std::optional<Error> err;
    for (;;) {
      auto b = loader->next();
      if (!b) {
        err = b.error();
        break;
      }
      if (b->end()) break;
    }
    REQUIRE(err);
    CHECK(err->what().find("007.bin") != std::string::npos);
  }
  config.on_error = OnError::kSkip;
  auto loader = Loader::open(*r.backend, dataset, config).value();
  std::size_t n = 0;
  for (;;) {
    auto b = loader->next();
    REQUIRE(b);
    if (b->end()) break;
    n += b->samples().size();
  }
  auto report = loader->report();
  CHECK(n == 19);
  CHECK(report.delivered.skipped == 1);
  REQUIRE_FALSE(report.delivered.skipped_examples.empty());
  CHECK(report.delivered.skipped_examples[0].find("007.bin") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("stop() ends a run promptly with a partial report", "[loader][pipeline]") {
  MemDataset ds(50, 1000);
  auto config = small_config(1, 1000);
  auto loader = Loader::open(*ds.backend, ds.dataset, config).value();
  std::stop_source stop;
  std::jthread t([&] {
    std::this_thread::sleep_for(200ms);
    stop.request_stop();
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto report = run_emulated(*loader, ComputeModel{1ms, {}, 1}, stop.get_token(), nullptr);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  CHECK(report.interrupted);
  CHECK(report.consumer.samples > 0);
  CHECK(report.consumer.samples < 50000);
}

// Planted bottlenecks: each run makes one stage clearly the slowest and checks the verdict.
namespace {
PipelineReport run_planted(MemDataset& ds, const LoaderConfig& config,
                           std::chrono::nanoseconds compute) {
  auto loader = Loader::open(*ds.backend, ds.dataset, config).value();
  auto report = run_emulated(*loader, ComputeModel{compute, {}, 1}, {}, nullptr);
  const std::string_view stage = report.verdict.stage ? stage_name(*report.verdict.stage) : "none";
  INFO("verdict " << stage << ": " << report.verdict.evidence << " -> " << report.verdict.advice);
  REQUIRE_FALSE(report.error);
  REQUIRE(report.consumer.samples == ds.dataset.samples.size() * config.sampler.epochs);
  UNSCOPED_INFO("verdict " << stage << ": " << report.verdict.evidence);
  return report;
}
}  // namespace

TEST_CASE("the verdict blames the planted bottleneck", "[loader][verdict]") {
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  SECTION("storage: a bandwidth-capped backend") {
    auto inner = std::move(registry.open("mem://ds/", {})->backend);
    MemDataset ds(40, 64 << 10, storage::make_throttle(std::move(inner), {8.0 * (1 << 20), 0ns}));
    auto r = run_planted(ds, small_config(4, 1), 0ns);
    CHECK(r.verdict.stage == StageId::kStorage);
    CHECK(r.consumer.input_bound == InputBound::kHigh);
    CHECK_FALSE(r.verdict.advice.empty());
  }
  SECTION("storage: added latency with a shallow queue points at the IO depth") {
    auto inner = std::move(registry.open("mem://ds/", {})->backend);
    MemDataset ds(60, 4096, storage::make_throttle(std::move(inner), {0, 10ms}));
    auto config = small_config(4, 1);
    config.io_depth = 2;
    auto r = run_planted(ds, config, 0ns);
    CHECK(r.verdict.stage == StageId::kStorage);
    REQUIRE_FALSE(r.verdict.next.empty());
    CHECK(r.verdict.next.front().knob == Knob::kIoDepth);
    CHECK(r.verdict.next.front().from == "2");
    CHECK(r.verdict.next.front().to == "4");
  }
  SECTION("decode: expensive per-sample work") {
    MemDataset ds(100, 4096);
    auto config = small_config(4, 1);
    config.diagnostics.decode_cost = 5ms;
    auto r = run_planted(ds, config, 0ns);
    CHECK(r.verdict.stage == StageId::kDecode);
    CHECK(r.verdict.advice.find("decode") != std::string::npos);
  }
  SECTION("collate: expensive per-batch work") {
    MemDataset ds(100, 4096);
    auto config = small_config(4, 1);
    config.diagnostics.collate_cost = 20ms;
    auto r = run_planted(ds, config, 0ns);
    CHECK(r.verdict.stage == StageId::kCollate);
  }
  SECTION("consumer: the accelerator is slower than the pipeline") {
    MemDataset ds(100, 4096);
    auto r = run_planted(ds, small_config(4, 1), 20ms);
    CHECK(r.verdict.stage == StageId::kConsumer);
    CHECK(r.consumer.input_bound == InputBound::kNo);
    CHECK(r.consumer.au > 0.8);
  }
}

TEST_CASE("decode threads run at the configured nice increment, the other stages do not",
          "[loader][pipeline]") {
  // A dataset four times the memory budget: with the first batch held, the pipeline fills the
  // budget and waits, so the decode threads are still alive (starved) while we look; in one that
  // fits they could finish every sample and exit before the scan on a busy machine.
  MemDataset ds(4000, 3000);
  auto config = small_config(8, 1);
  config.memory_budget = 3 << 20;
  config.decode_nice = 7;
  errno = 0;
  const int base = ::getpriority(PRIO_PROCESS, 0);
  REQUIRE(errno == 0);
  auto loader = Loader::open(*ds.backend, ds.dataset, config).value();
  auto first = loader->next();
  REQUIRE(first);
  REQUIRE_FALSE(first->end());
  std::map<std::string, int> nice_of;  // thread name -> nice
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (!name.starts_with("fl-")) continue;
    errno = 0;
    const int n =
        ::getpriority(PRIO_PROCESS, static_cast<id_t>(std::stoi(task.path().filename().string())));
    if (errno == 0) nice_of[name] = n;
  }
  CHECK(nice_of.count("fl-decode-0") == 1);
  CHECK(nice_of.count("fl-decode-1") == 1);
  for (const auto& [name, n] : nice_of) {
    INFO(name);
    CHECK(n == (name.starts_with("fl-decode-") ? std::min(19, base + 7) : base));
  }
  *first = Batch();  // hands the buffer back
  loader->stop();
}
