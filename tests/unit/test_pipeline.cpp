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
#include <optional>
#include <set>
#include <thread>

#include "feedline/loader/bounded_queue.hpp"
#include "feedline/loader/emulate.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/storage/decorators.hpp"
#include "feedline/storage/registry.hpp"
#include "mem_dataset.hpp"
#include "test_support.hpp"

using namespace feedline;
using namespace feedline::loader;
using namespace std::chrono_literals;
using feedline::testing::MemDataset;

namespace {

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

namespace {

// Runs `sc` on every rank of its world for at most `batches` batches of each (all: UINT64_MAX):
// the samples each rank delivered per epoch, and each rank's batch count per epoch.
struct RanksRun {
  std::vector<std::vector<std::vector<std::uint32_t>>> samples;  // [rank][epoch]
  std::vector<std::vector<std::uint64_t>> batches;               // [rank][epoch]
};
RanksRun run_ranks(SamplerConfig sc, std::uint64_t batches = UINT64_MAX) {
  RanksRun out;
  for (std::uint32_t r = 0; r < sc.world_size; ++r) {
    sc.rank = r;
    auto s = Sampler::create(sc).value();
    std::vector<std::vector<std::uint32_t>> mine(sc.epochs);
    std::vector<std::uint64_t> count(sc.epochs, 0);
    std::uint64_t seen = 0, last_batch = UINT64_MAX;
    while (auto slot = s.next()) {
      if (slot->batch != last_batch) {
        if (seen == batches) break;
        if (last_batch != UINT64_MAX) CHECK(slot->batch > last_batch);  // numbered upwards
        last_batch = slot->batch;
        ++seen;
        ++count[slot->epoch];
      }
      mine[slot->epoch].push_back(slot->sample);
    }
    out.samples.push_back(std::move(mine));
    out.batches.push_back(std::move(count));
  }
  return out;
}

}  // namespace

TEST_CASE("sampler: a job resumed on another number of ranks delivers the rest of the epoch once",
          "[loader][sampler]") {
  for (const bool shards : {false, true}) {
    SamplerConfig c;
    c.num_samples = 1000;
    c.batch_size = 8;
    c.epochs = 3;
    c.seed = 11;
    if (shards) {
      c.shard_shuffle = 2;
      for (std::uint32_t i = 0; i < 10; ++i) c.shard_starts.push_back(i * 100);
    }
    struct Case {
      std::vector<std::pair<std::uint32_t, std::uint64_t>> runs;  // (world size, batches each)
      std::uint32_t resume_world;
    };
    const std::vector<Case> cases = {{{{4, 10}}, 2},        {{{2, 20}}, 3}, {{{1, 50}}, 4},
                                     {{{4, 0}}, 1},         {{{3, 7}}, 3},  {{{4, 5}, {3, 6}}, 2},
                                     {{{2, 30}, {2, 4}}, 5}};
    for (const Case& k : cases) {
      INFO("shard shuffle " << shards << ", runs " << k.runs.size() << " first world "
                            << k.runs[0].first << ", resumed on " << k.resume_world);
      // The earlier runs, each resumed from the one before: what they delivered of epoch 0.
      std::multiset<std::uint32_t> delivered;
      ResumePoint point;
      for (const auto& [world, batches] : k.runs) {
        SamplerConfig rc = c;
        rc.world_size = world;
        rc.resume = point;
        const RanksRun part = run_ranks(rc, batches);
        for (const auto& rank : part.samples) delivered.insert(rank[0].begin(), rank[0].end());
        // Every rank of a run that stepped together stands at the same point.
        std::optional<ResumePoint> same;
        for (std::uint32_t r = 0; r < world; ++r) {
          rc.rank = r;
          const ResumePoint p = Sampler::create(rc).value().resume_point_after(batches);
          if (same) CHECK(p == *same);
          same = p;
        }
        point = *same;
      }
      REQUIRE(point.epoch == 0);
      // The rest, on the new world size.
      SamplerConfig rc = c;
      rc.world_size = k.resume_world;
      rc.resume = point;
      const RanksRun rest = run_ranks(rc);
      for (std::uint32_t r = 0; r < k.resume_world; ++r) {
        const auto& mine = rest.samples[r][0];
        delivered.insert(mine.begin(), mine.end());
        CHECK(rest.batches[r][0] == rest.batches[0][0]);  // no DDP hang: as many batches each
      }
      // Exactly once: no sample twice, and only the few a split leaves to no rank missing.
      const std::set<std::uint32_t> distinct(delivered.begin(), delivered.end());
      CHECK(distinct.size() == delivered.size());
      std::uint64_t may_miss = k.resume_world - 1;
      for (const auto& run : k.runs) may_miss += run.first - 1;
      CHECK(delivered.size() + may_miss >= c.num_samples);
      // The later epochs are whole, as a fresh run on the new world size gives them.
      SamplerConfig fresh = c;
      fresh.world_size = k.resume_world;
      const RanksRun whole = run_ranks(fresh);
      for (std::uint32_t r = 0; r < k.resume_world; ++r) {
        CHECK(rest.samples[r][1] == whole.samples[r][1]);
        CHECK(rest.samples[r][2] == whole.samples[r][2]);
      }
    }
  }

  SamplerConfig c;
  c.num_samples = 100;
  c.batch_size = 4;
  c.epochs = 2;
  c.world_size = 2;
  c.seed = 3;
  SECTION("resumed on the same world size, each rank goes on with its own list") {
    const RanksRun whole = run_ranks(c);
    SamplerConfig rc = c;
    rc.resume = ResumePoint{0, {{2, 5}}};
    const RanksRun rest = run_ranks(rc);
    for (std::uint32_t r = 0; r < 2; ++r) {
      const auto& all = whole.samples[r][0];
      CHECK(rest.samples[r][0] == std::vector<std::uint32_t>(all.begin() + 20, all.end()));
    }
    // Batch numbers go on where the stopped run's left off (batch 5 of 13 per epoch).
    rc.rank = 0;
    auto s = Sampler::create(rc).value();
    CHECK(s.next()->batch == 5);
    CHECK(s.total_batches() == 13 - 5 + 13);
  }
  SECTION("the resume point moves on through the epochs") {
    auto s = Sampler::create(c).value();  // 50 samples per rank per epoch: 13 batches
    CHECK(s.resume_point_after(0) == ResumePoint{0, {}});
    CHECK(s.resume_point_after(3) == ResumePoint{0, {{2, 3}}});
    CHECK(s.resume_point_after(13) == ResumePoint{1, {}});
    CHECK(s.resume_point_after(16) == ResumePoint{1, {{2, 3}}});
    CHECK(s.resume_point_after(26) == ResumePoint{2, {}});  // over: resumes to nothing
    SamplerConfig over = c;
    over.resume = ResumePoint{2, {}};
    auto done = Sampler::create(over).value();
    CHECK_FALSE(done.next());
    CHECK(done.total_batches() == 0);
  }
  SECTION("a resume point that does not fit the settings is refused") {
    auto refused = [&](ResumePoint p, const std::string& what) {
      SamplerConfig rc = c;
      rc.resume = std::move(p);
      auto s = Sampler::create(rc);
      REQUIRE_FALSE(s);
      CHECK_THAT(std::string(s.error().what()), Catch::Matchers::Contains(what));
    };
    refused(ResumePoint{0, {{2, 14}}}, "14 batches per rank, of the 13");
    refused(ResumePoint{3, {}}, "the run has 2 epochs");
    refused(ResumePoint{2, {{2, 1}}}, "the run has 2 epochs");
    refused(ResumePoint{0, {{0, 1}}}, "world size is 0");
    refused(ResumePoint{0, std::vector<EpochProgress>(65, EpochProgress{2, 0})}, "at most 64");
  }
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

TEST_CASE(
    "bounded queue: push_all with an awaited item wakes an in-order consumer when it can go on",
    "[loader][queue]") {
  // A consumer that takes items in order (as collate does) publishes the one it needs before it
  // waits; producers wake it only for that item or a full queue. Items come in reverse runs, so
  // most pushes hold nothing it awaits, and the queue (8) is smaller than a run (32): a run whose
  // first item comes last fills it. Every item must arrive, in order, and nothing may hang.
  BoundedQueue<int> q("q", 8);
  q.start();
  std::atomic<int> cursor{0};
  const auto awaited = [&](const int& v) { return v == cursor.load(std::memory_order_acquire); };
  constexpr int kItems = 320;
  std::jthread producer([&] {
    for (int run = 0; run < kItems; run += 32) {
      for (int i = run + 31; i >= run; i -= 4) {  // 4 at a time, the run's last first
        std::vector<int> items{i, i - 1, i - 2, i - 3};
        CHECK(q.push_all(items, nullptr, awaited));
      }
    }
    q.close();
  });
  std::set<int> arrived;
  std::vector<int> taken;
  std::vector<int> got;
  while (true) {
    while (!arrived.empty() && *arrived.begin() == cursor.load()) {
      taken.push_back(*arrived.begin());
      arrived.erase(arrived.begin());
      cursor.fetch_add(1, std::memory_order_release);
    }
    got.clear();
    if (!q.pop_some(got, 64)) break;
    arrived.insert(got.begin(), got.end());
  }
  producer.join();
  REQUIRE(static_cast<int>(taken.size()) == kItems);
  for (int i = 0; i < kItems; ++i) CHECK(taken[static_cast<std::size_t>(i)] == i);
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

TEST_CASE("the dataset's tables count against the memory budget, in the report too",
          "[loader][pipeline]") {
  // 20,000 tiny samples: their table (keys, members, names, offsets) is held for the whole run,
  // as the buffers are; a budget it does not fit is refused naming it, one it fits reports it.
  MemDataset ds(20'000, 16);
  const std::uint64_t table = dataset_table_bytes(ds.dataset);
  CHECK(table >= 20'000 * (sizeof(Sample) + sizeof(Member)));
  auto config = small_config(100, 1);
  config.memory_budget = 1 << 20;
  REQUIRE(table > config.memory_budget);
  auto refused = Loader::open(*ds.backend, ds.dataset, config);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::kInvalidArgument);
  CHECK(refused.error().message().find("dataset's tables take") != std::string::npos);
  CHECK(refused.error().message().find("20000 samples") != std::string::npos);

  config.memory_budget = 16 << 20;
  auto loader = Loader::open(*ds.backend, ds.dataset, config).value();
  while (true) {
    auto b = loader->next();
    REQUIRE(b);
    if (b->end()) break;
  }
  auto r = loader->report();
  CHECK(r.consumer.samples == 20'000);
  CHECK(r.memory.peak >= table);
  CHECK(r.memory.peak <= config.memory_budget);
  CHECK(r.memory.overshoot == 0);
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

TEST_CASE("a bad sample's error comes in order: every batch before its batch is delivered first",
          "[loader][pipeline]") {
  const auto dir = testing::scratch_dir("pipeline-error-order");
  std::filesystem::remove_all(dir);
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto r = registry.open((dir / "").string(), {}).value();
  for (int i = 0; i < 100; ++i) {
    REQUIRE(r.backend->write(r.key + fmt::format("{:03}.bin", i), testing::pattern_bytes(3000, i)));
  }
  DatasetOptions o;
  o.format = DatasetFormat::kFiles;
  auto dataset = open_dataset(*r.backend, r.key, o).value();
  std::filesystem::remove(dir / "057.bin");  // vanishes after the listing
  auto config = small_config(10, 1);
  config.sampler.shuffle = false;
  for (const unsigned threads : {1u, 2u}) {
    INFO(threads << " storage thread(s)");
    config.storage_threads = threads;
    auto loader = Loader::open(*r.backend, dataset, config).value();
    std::vector<std::string> keys;
    std::optional<Error> err;
    for (;;) {
      auto b = loader->next();
      if (!b) {
        err = b.error();
        break;
      }
      if (b->end()) break;
      for (const auto& s : b->samples()) keys.emplace_back(s.key);
      std::this_thread::sleep_for(5ms);  // a slow consumer: the rest of the pipeline runs ahead
    }
    REQUIRE(err);
    CHECK(err->what().find("057.bin") != std::string::npos);
    // Batches 0-4 (samples 000-049), then the error of batch 5; nothing of batch 5 or later.
    REQUIRE(keys.size() == 50);
    for (std::size_t i = 0; i < keys.size(); ++i) CHECK(keys[i] == fmt::format("{:03}", i));
    // Every later call says the same.
    auto again = loader->next();
    REQUIRE_FALSE(again);
    CHECK(again.error().what() == err->what());
  }
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

TEST_CASE("a knob change is typed, and each front end spells it", "[loader][verdict]") {
  // The library's words are LoaderConfig's fields; a size reads as one (format_bytes).
  CHECK(knob_change_text({Knob::kIoDepth, 64, 128}) == "io_depth=64 -> 128");
  CHECK(knob_change_text({Knob::kMemoryBudget, 1ull << 30, 2ull << 30}) ==
        "memory_budget=1.00 GiB -> 2.00 GiB");
  for (const Knob k :
       {Knob::kIoDepth, Knob::kDecodeThreads, Knob::kPrefetchBatches, Knob::kMemoryBudget,
        Knob::kBatchSize, Knob::kShardShuffle, Knob::kCudaStreams, Knob::kConnections,
        Knob::kPartSize, Knob::kStorageThreads}) {
    CHECK(knob_from_name(knob_name(k)) == k);  // a document's "knob" reads back
  }
  CHECK_FALSE(knob_from_name("--io-depth"));
  Verdict v{StageId::kStorage,
            "",
            {{Knob::kIoDepth, 2, 4}, {Knob::kConnections, 2, 4}},
            "more reads in flight"};
  CHECK(suggestion_text(v) == "io_depth=2 -> 4, or connections=2 -> 4: more reads in flight");
  // A front end's own words (the CLI's flags).
  auto flags = [](const KnobChange& k) {
    return fmt::format("--{} {} -> {}", knob_name(k.knob), k.from, k.to);
  };
  CHECK(suggestion_text(v, flags) ==
        "--io_depth 2 -> 4, or --connections 2 -> 4: more reads in flight");
  v.next.clear();
  CHECK(suggestion_text(v) == "more reads in flight");
}

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
    CHECK(r.verdict.next.front().from == 2);
    CHECK(r.verdict.next.front().to == 4);
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
