// The loader's public API and the pipeline's seams: a Batch that outlives its Loader, next()'s
// end and errors, the sampler settings open() fills in, a budget that holds only two batches,
// and the stage runner's accounting that every stage gets; next_for()'s timed waits;
// resume_point(), where the batches handed out stand.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>
#include <utility>

#include "feedline/loader/emulate.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/storage/registry.hpp"
#include "pipeline/batch_pool.hpp"     // internal: the batch buffers handed back
#include "pipeline/memory_budget.hpp"  // internal: what admission waits on
#include "pipeline/stage.hpp"          // internal: the stage runner every stage is built on
#include "test_support.hpp"

using namespace feedline;
using namespace feedline::loader;
using namespace std::chrono_literals;

namespace {

struct MemFiles {
  std::unique_ptr<storage::Backend> backend;
  Dataset dataset;
  MemFiles(std::size_t n, std::size_t size) {
    storage::Registry registry;
    storage::register_builtin_backends(registry);
    backend = std::move(registry.open("mem://api/", {})->backend);
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(backend->write(fmt::format("api/{:04}.bin", i), testing::pattern_bytes(size, i + 1)));
    }
    dataset = open_dataset(*backend, "api/", {}).value();  // format kAuto: files
    REQUIRE(dataset.format == DatasetFormat::kFiles);
  }
};

LoaderConfig small(std::uint32_t batch, std::uint32_t epochs) {
  LoaderConfig c;
  c.sampler.batch_size = batch;
  c.sampler.epochs = epochs;
  c.memory_budget = 64 << 20;
  c.io_depth = 8;
  return c;
}

}  // namespace

TEST_CASE("a Batch may outlive its Loader: its memory stays valid until it dies", "[loader][api]") {
  MemFiles f(64, 5000);
  for (GpuDirect mode : {GpuDirect::kAuto, GpuDirect::kOff}) {  // host-direct and bounce buffers
    LoaderConfig c = small(8, 1);
    c.gpu_direct = mode;
    std::vector<Batch> kept;
    std::vector<std::vector<std::byte>> copies;
    {
      auto loader = Loader::open(*f.backend, f.dataset, c).value();
      for (int i = 0; i < 2; ++i) {
        auto b = loader->next();
        REQUIRE(b);
        REQUIRE_FALSE(b->end());
        copies.emplace_back(b->data().begin(), b->data().end());
        kept.push_back(std::move(*b));
      }
      // The loader (and its pipeline) is destroyed here, with two batches still held.
    }
    for (std::size_t i = 0; i < kept.size(); ++i) {
      const ConstBytes data = kept[i].data();
      REQUIRE(data.size() == copies[i].size());
      CHECK(std::equal(data.begin(), data.end(), copies[i].begin()));  // ASan: no use after free
      for (const auto& s : kept[i].samples()) CHECK(s.size == 5000);
    }
    kept.clear();  // the last owners free the pool
  }
}

TEST_CASE("next(): batches, then a Batch with end(); an error is returned, and again after",
          "[loader][api]") {
  MemFiles f(20, 1000);
  auto loader = Loader::open(*f.backend, f.dataset, small(6, 1)).value();
  std::uint64_t samples = 0, batches = 0;
  for (;;) {
    auto b = loader->next();
    REQUIRE(b);
    if (b->end()) break;
    CHECK(b->data().size() > 0);
    samples += b->samples().size();
    ++batches;
  }
  CHECK(samples == 20);
  CHECK(batches == 4);
  auto again = loader->next();  // after the end: the end again
  REQUIRE(again);
  CHECK(again->end());
  CHECK(Batch().end());

  // A sample that vanished after the listing: the error names it, and stays.
  REQUIRE(f.backend->write("api/0003.bin", {}));  // now 0 bytes: the sample's read comes back short
  LoaderConfig c = small(4, 1);
  c.sampler.shuffle = false;
  auto failing = Loader::open(*f.backend, f.dataset, c).value();
  std::optional<Error> err;
  for (int i = 0; i < 100 && !err; ++i) {
    auto b = failing->next();
    if (!b)
      err = b.error();
    else if (b->end())
      break;
  }
  REQUIRE(err);
  CHECK(err->what().find("0003.bin") != std::string::npos);
  auto later = failing->next();
  REQUIRE_FALSE(later);
  CHECK(later.error().what() == err->what());
}

TEST_CASE("open() fills the sampler's dataset settings and refuses ones that disagree",
          "[loader][api]") {
  MemFiles f(10, 100);
  LoaderConfig c = small(4, 1);
  c.sampler.num_samples = 11;
  auto wrong = Loader::open(*f.backend, f.dataset, c);
  REQUIRE_FALSE(wrong);
  CHECK(wrong.error().code() == Errc::kInvalidArgument);
  CHECK(wrong.error().message().find("num_samples") != std::string::npos);
  c.sampler.num_samples = 10;  // the right value is fine
  CHECK(Loader::open(*f.backend, f.dataset, c));
  c.sampler.num_samples = 0;
  c.sampler.shard_shuffle = 2;
  c.sampler.shard_starts = {0, 5};  // files: every file is a shard of its own
  auto shards = Loader::open(*f.backend, f.dataset, c);
  REQUIRE_FALSE(shards);
  CHECK(shards.error().message().find("shard_starts") != std::string::npos);
}

TEST_CASE(
    "a budget that holds two batches and the reads in flight runs, prefetching less, and says so",
    "[loader][api][budget]") {
  // Two samples of 32 MiB per batch, 256 MiB of budget: prefetch 2 wants 4 batch buffers of
  // ~64 MiB, which with the recycled buffers and a sample in flight do not fit. Two do.
  MemFiles f(6, 32 << 20);
  LoaderConfig c = small(2, 1);
  c.memory_budget = 256ull << 20;
  c.prefetch_batches = 2;
  c.gpu_direct = GpuDirect::kOff;  // the bounce path: samples in flight take budget too
  c.lock_memory = false;
  auto loader = Loader::open(*f.backend, f.dataset, c);
  REQUIRE(loader);
  auto report = run_emulated(**loader, {}, {}, nullptr);
  REQUIRE_FALSE(report.error);
  CHECK(report.consumer.samples == 6);
  CHECK(report.io.batch_buffers == 2);
  REQUIRE(report.memory.fitted.size() == 1);
  CHECK(report.memory.fitted[0].find("2 batch buffers") != std::string::npos);
  CHECK(report.memory.fitted[0].find("prefetch_batches 2") != std::string::npos);
  CHECK(report.memory.peak <= c.memory_budget);

  // Below two batches and the largest sample, it is an error naming the budget.
  c.memory_budget = 128ull << 20;
  auto refused = Loader::open(*f.backend, f.dataset, c);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::kInvalidArgument);
  CHECK(refused.error().what().find("memory budget") != std::string::npos);
}

TEST_CASE(
    "a stage gets its accounting from the runner: blocked on push, starved on pop, busy otherwise",
    "[loader][api][stage]") {
  using detail::StageRunner;
  using detail::Worker;
  BoundedQueue<int> q("q", 1);
  q.start();
  StageRunner producer(StageId::kDecode, 1, true), consumer(StageId::kCollate, 1, true);
  std::atomic<int> got{0};
  consumer.start([&](Worker& w) {
    std::this_thread::sleep_for(100ms);   // busy (its own work) while the producer fills the queue
    while (auto v = w.pop(q)) got += *v;  // then starved while it waits for more
  });
  producer.start([&](Worker& w) {
    for (int i = 0; i < 3; ++i) {
      int v = i + 1;
      w.push(q, v);  // blocked: the queue holds one
    }
    w.blocked([] { std::this_thread::sleep_for(50ms); });  // any other wait, accounted as blocked
    q.close();
  });
  producer.join();
  consumer.join();
  CHECK(got == 6);
  const StageReport p = producer.report(0.2), c = consumer.report(0.2);
  CHECK(p.stage == StageId::kDecode);
  CHECK(p.blocked_fraction > 0.4);  // ~100 ms waiting for room + 50 ms blocked of 200 ms
  CHECK(c.busy_fraction > 0.3);     // the 100 ms of sleep counts as its busy time
  CHECK(c.starved_fraction > 0.1);  // waiting for the last items and for the close
  CHECK(p.busy_fraction + p.starved_fraction + p.blocked_fraction == Approx(1.0).margin(1e-6));
}

TEST_CASE(
    "a worker that outlives the run's window is set against its own lifetime, never over 100%",
    "[loader][api][stage]") {
  using detail::StageRunner;
  using detail::Worker;
  StageRunner runner(StageId::kStorage, 1, true);
  runner.start([](Worker& w) {
    std::this_thread::sleep_for(60ms);                     // busy
    w.blocked([] { std::this_thread::sleep_for(60ms); });  // blocked
  });
  runner.join();
  // The run's window (the consumer's) was shorter than the worker's 120 ms: a drain after a stop.
  const StageReport r = runner.report(0.05);
  CHECK(r.busy_fraction <= 1.0);
  CHECK(r.busy_fraction > 0.3);
  CHECK(r.blocked_fraction > 0.3);
  CHECK(r.busy_fraction + r.starved_fraction + r.blocked_fraction == Approx(1.0).margin(1e-6));
  CHECK(r.busy_seconds > 0.05);
}

TEST_CASE("snapshot() reports the run so far and the run goes on", "[loader][api]") {
  MemFiles f(200, 3000);
  LoaderConfig c = small(10, 1);
  c.decode_threads = 2;
  auto loader = Loader::open(*f.backend, f.dataset, c).value();
  std::uint64_t digest = 0;
  for (int i = 0; i < 5; ++i) {
    auto b = loader->next();
    REQUIRE(b);
    REQUIRE_FALSE(b->end());
    digest += b->digest();
  }
  const PipelineReport mid = loader->snapshot();
  CHECK(mid.snapshot);
  CHECK_FALSE(mid.interrupted);
  CHECK(mid.consumer.batches == 5);
  CHECK(mid.consumer.samples == 50);
  CHECK(mid.delivered.digest == digest);
  CHECK(mid.consumer.wall_seconds > 0);
  CHECK_FALSE(mid.verdict.stage);  // the verdict comes at the end
  REQUIRE(mid.stages.size() >= 4);
  for (const StageReport& s : mid.stages) {
    INFO(stage_name(s.stage));
    CHECK(s.busy_fraction + s.starved_fraction + s.blocked_fraction == Approx(1.0).margin(0.02));
  }
  const StageReport* decode = mid.stage(StageId::kDecode);
  REQUIRE(decode);
  CHECK(decode->threads == 2);
  const StageReport* storage = mid.stage(StageId::kStorage);
  REQUIRE(storage);
  CHECK(storage->items >= 50);  // storage ran ahead of the consumer
  // The run goes on to the end, every sample once.
  std::uint64_t samples = 50;
  for (;;) {
    auto b = loader->next();
    REQUIRE(b);
    if (b->end()) break;
    samples += b->samples().size();
    digest += b->digest();
  }
  CHECK(samples == 200);
  const PipelineReport end = loader->report();
  CHECK_FALSE(end.snapshot);
  CHECK(end.delivered.digest == digest);
  CHECK(end.consumer.samples == 200);
  CHECK(end.verdict.stage);
  CHECK(loader->snapshot().snapshot == false);  // over: the report itself
}

TEST_CASE("a loader iterated on another thread than its open()'s counts the consumer's CPU there",
          "[loader][accounting]") {
  MemFiles mem(256, 1000);
  auto loader = Loader::open(*mem.backend, mem.dataset, small(16, 1));
  REQUIRE(loader);
  PipelineReport report;
  std::thread([&] { report = run_emulated(**loader, {}, {}, nullptr); }).join();
  const StageReport* consumer = report.stage(StageId::kConsumer);
  REQUIRE(consumer);
  CHECK(consumer->cpu_seconds >= 0);
  // Counted on the threads that did the work: never more than the process's whole CPU time.
  CHECK(consumer->cpu_seconds <= process_cpu_times().total() + 0.01);
}

TEST_CASE(
    "the consumer's CPU starts at its first next(): what its opener's thread did before is not its",
    "[loader][accounting]") {
  // A host of accelerators opens every loader on one thread, then iterates each on its own: the
  // opener's work in between (the other loaders' opens) was counted n times over (66 CPU-s in a
  // 0.5 s run of 256 accelerators).
  MemFiles mem(64, 1000);
  auto loader = Loader::open(*mem.backend, mem.dataset, small(16, 1));
  REQUIRE(loader);
  const double opener0 = thread_cpu_ns() / 1e9;
  volatile std::uint64_t spin = 0;
  while (thread_cpu_ns() / 1e9 - opener0 < 0.3) spin = spin + 1;  // 0.3 s of the opener's CPU
  double consumer_thread_cpu = 0;
  PipelineReport report;
  std::thread([&] {
    const double t0 = thread_cpu_ns() / 1e9;
    report = run_emulated(**loader, {}, {}, nullptr);
    consumer_thread_cpu = thread_cpu_ns() / 1e9 - t0;
  }).join();
  const StageReport* consumer = report.stage(StageId::kConsumer);
  REQUIRE(consumer);
  CHECK(consumer->cpu_seconds <= consumer_thread_cpu + 0.01);
  CHECK(consumer->cpu_seconds < 0.3);
}

TEST_CASE("admission waits on memory until something comes free, a batch buffer handed back too",
          "[loader][memory]") {
  using Clock = std::chrono::steady_clock;
  detail::MemoryBudget budget(1 << 20);
  // Freed between taking freed() and the wait (a storage thread trying to admit meanwhile): not
  // slept through.
  std::uint64_t seen = budget.freed();
  REQUIRE(budget.try_acquire(4096));
  budget.release(4096);
  auto t0 = Clock::now();
  budget.wait_release(seen, 30s);
  CHECK(Clock::now() - t0 < 10s);

  // A storage thread waiting for a free buffer to lay out its next batch in wakes when the
  // caller drops a batch, on whichever thread that happens (a Python loop's), not at its timeout.
  auto pool = std::make_shared<detail::BatchPool>(2, false, nullptr);
  pool->add(detail::BatchBuffer::allocate(4096, false).value());
  int calls = 0;
  pool->on_give_back([&] {
    ++calls;
    budget.notify_freed();
  });
  auto taken = pool->free().pop();
  REQUIRE(taken);
  seen = budget.freed();
  std::thread caller([&] {
    std::this_thread::sleep_for(20ms);
    pool->give_back(*taken, false);
  });
  t0 = Clock::now();
  budget.wait_release(seen, 30s);
  CHECK(Clock::now() - t0 < 10s);
  caller.join();
  CHECK(calls == 1);

  // Once the run's state is gone (a Batch outliving its Loader), a buffer handed back reaches
  // nothing of it.
  pool->on_give_back(nullptr);
  taken = pool->free().pop();
  REQUIRE(taken);
  pool->give_back(*taken, false);
  CHECK(calls == 1);
  CHECK(pool->free().size() == 1);
}

TEST_CASE("next_for(): nullopt while no batch comes in time; the calls' waits are one wait",
          "[loader][api]") {
  MemFiles f(16, 1000);
  LoaderConfig c = small(4, 1);
  c.diagnostics.collate_cost = 60ms;  // each batch takes at least 60 ms of collate's CPU
  auto loader = Loader::open(*f.backend, f.dataset, c).value();
  std::uint64_t batches = 0, timeouts = 0;
  for (;;) {
    auto r = loader->next_for(5ms);
    if (!r) {
      ++timeouts;
      continue;
    }
    REQUIRE(r->has_value());
    if ((*r)->end()) break;
    CHECK((*r)->samples().size() == 4);
    ++batches;
  }
  CHECK(batches == 4);
  CHECK(timeouts >= 4);                // at least one per batch: none is ready 5 ms after the last
  auto again = loader->next_for(5ms);  // after the end: the end again, at once
  REQUIRE(again.has_value());
  REQUIRE(again->has_value());
  CHECK((*again)->end());
  const PipelineReport rep = loader->report();
  CHECK(rep.consumer.batches == 4);
  CHECK(rep.consumer.wait_ns.count() == 4);  // one wait per batch, however many calls it took
  CHECK(rep.consumer.wait_seconds >= 0.9 * 4 * 0.060);
}

TEST_CASE("resume_point(): where the batches handed out stand; a Loader from it does the rest",
          "[loader][api][resume]") {
  // (epoch, sample) of every sample delivered, counted.
  using Seen = std::map<std::pair<std::uint32_t, std::uint32_t>, int>;
  auto take = [](Loader& l, Seen& seen, std::uint64_t batches) {
    std::uint64_t n = 0;
    for (; n < batches; ++n) {
      auto b = l.next();
      REQUIRE(b);
      if (b->end()) break;
      for (const BatchSample& s : b->samples()) ++seen[{b->epoch(), s.sample}];
    }
    return n;
  };
  MemFiles f(50, 3000);
  SECTION("one rank: stopped in either epoch, resumed in a new Loader") {
    // 50 samples in batches of 8: 7 batches an epoch (the last of 2), 14 in all.
    for (const std::uint64_t k : {0u, 1u, 6u, 7u, 9u, 13u, 14u}) {
      INFO("stopped after " << k << " batches");
      LoaderConfig c = small(8, 2);
      c.sampler.seed = 3;
      Seen seen;
      ResumePoint at;
      {
        auto first = Loader::open(*f.backend, f.dataset, c).value();
        CHECK(first->resume_point() == ResumePoint{});  // nothing handed out yet
        REQUIRE(take(*first, seen, k) == k);
        // Let storage read ahead: what it prefetched is not what the caller has.
        std::this_thread::sleep_for(50ms);
        at = first->resume_point();
        SamplerConfig sc = c.sampler;
        sc.num_samples = f.dataset.samples.size();
        CHECK(at == Sampler::create(sc).value().resume_point_after(k));
      }
      c.sampler.resume = at;
      auto second = Loader::open(*f.backend, f.dataset, c).value();
      take(*second, seen, ~std::uint64_t{0});
      CHECK(second->resume_point() == ResumePoint{2, {}});  // the job is over
      CHECK(seen.size() == 100);                            // every sample of both epochs ...
      CHECK(std::all_of(seen.begin(), seen.end(), [](const auto& e) { return e.second == 1; }));
    }
  }
  SECTION("two ranks stopped together, resumed on one") {
    MemFiles g(48, 2000);  // 24 samples a rank: 3 batches of 8 an epoch
    Seen seen;
    ResumePoint at;
    for (std::uint32_t rank : {0u, 1u}) {
      LoaderConfig c = small(8, 2);
      c.sampler.rank = rank;
      c.sampler.world_size = 2;
      auto l = Loader::open(*g.backend, g.dataset, c).value();
      REQUIRE(take(*l, seen, 2) == 2);
      const ResumePoint mine = l->resume_point();
      CHECK(mine == ResumePoint{0, {{2, 2}}});
      if (rank == 0) at = mine;
      CHECK(mine == at);  // ranks that step together stand at the same point
    }
    LoaderConfig c = small(8, 2);
    c.sampler.resume = at;
    auto l = Loader::open(*g.backend, g.dataset, c).value();
    take(*l, seen, ~std::uint64_t{0});
    CHECK(seen.size() == 96);
    CHECK(std::all_of(seen.begin(), seen.end(), [](const auto& e) { return e.second == 1; }));
  }
}
