// The user's per-sample transform (LoaderConfig::transform): it runs on the decode threads, its
// results reach the batch in sample order, its errors name the sample and follow on_error, and
// the report tells its time, and its wait for the lock it runs under, apart from decode's.
#include <pthread.h>
#include <xxhash.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "feedline/loader/emulate.hpp"
#include "feedline/loader/loader.hpp"
#include "mem_dataset.hpp"

using namespace feedline;
using namespace feedline::loader;
using namespace std::chrono_literals;
using feedline::testing::MemDataset;

namespace {

// Behaves as a Python function does under the GIL: one lock for every call, held while it
// works, the wait for it reported. Its result is the XXH3 of the sample's only member.
struct LockedTransform : SampleTransform {
  std::mutex gil;
  std::chrono::nanoseconds work{0};
  std::string fail_key;
  std::mutex names_mu;
  std::set<std::string> thread_names;

  Result<TransformResult> apply(const TransformInput& in, TransformCall& call) override {
    const auto asked = std::chrono::steady_clock::now();
    std::lock_guard lock(gil);
    const auto got = std::chrono::steady_clock::now();
    call.lock_wait = got - asked;
    {
      char name[16] = {};
      pthread_getname_np(pthread_self(), name, sizeof name);
      std::lock_guard n(names_mu);
      thread_names.insert(name);
    }
    if (in.key == fail_key) return fail(Errc::kInvalidArgument, "it did not like this one");
    while (std::chrono::steady_clock::now() - got < work) {
    }
    REQUIRE(in.members.size() == 1);
    const ConstBytes b = in.members[0].bytes;
    return std::make_shared<const std::uint64_t>(XXH3_64bits(b.data(), b.size()));
  }
};

LoaderConfig config_with(std::shared_ptr<SampleTransform> t, std::uint32_t batch) {
  LoaderConfig c;
  c.sampler.batch_size = batch;
  c.sampler.seed = 3;
  c.memory_budget = 64 << 20;
  c.io_depth = 16;
  c.decode_threads = 2;
  c.transform = std::move(t);
  return c;
}

}  // namespace

TEST_CASE("a transform's results reach the batch in sample order, made on the decode threads",
          "[loader][transform]") {
  MemDataset ds(300, 3000);
  auto t = std::make_shared<LockedTransform>();
  auto loader = Loader::open(*ds.backend, ds.dataset, config_with(t, 16)).value();
  std::size_t seen = 0;
  for (;;) {
    auto b = loader->next();
    REQUIRE(b);
    if (b->end()) break;
    REQUIRE(b->results().size() == b->samples().size());
    for (std::size_t i = 0; i < b->samples().size(); ++i) {
      const auto* h = static_cast<const std::uint64_t*>(b->results()[i].get());
      REQUIRE(h);
      CHECK(*h == ds.digest_by_key.at(std::string(b->samples()[i].key)));
      ++seen;
    }
  }
  CHECK(seen == 300);
  const PipelineReport r = loader->report();
  REQUIRE_FALSE(r.error);
  CHECK(r.delivered.digest == ds.digest_sum);
  CHECK(r.transform.enabled);
  CHECK(r.transform.samples == 300);
  CHECK(r.transform.errors == 0);
  CHECK(r.transform.seconds > 0);
  CHECK(t->thread_names == std::set<std::string>{"fl-decode-0", "fl-decode-1"});
}

TEST_CASE("a transform's error names the sample and follows on_error", "[loader][transform]") {
  MemDataset ds(100, 3000);
  auto t = std::make_shared<LockedTransform>();
  t->fail_key = "000042";
  SECTION("fail: the run ends with it") {
    auto loader = Loader::open(*ds.backend, ds.dataset, config_with(t, 8)).value();
    std::optional<Error> error;
    for (;;) {
      auto b = loader->next();
      if (!b) {
        error = b.error();
        break;
      }
      if (b->end()) break;
    }
    REQUIRE(error);
    const std::string what = error->what();
    CHECK_THAT(what, Catch::Matchers::Contains("the transform of sample '000042' failed"));
    CHECK_THAT(what, Catch::Matchers::Contains("it did not like this one"));
    CHECK_THAT(what, Catch::Matchers::Contains("ds/000042.bin"));
  }
  SECTION("skip: the sample is left out and counted") {
    auto config = config_with(t, 8);
    config.on_error = OnError::kSkip;
    auto loader = Loader::open(*ds.backend, ds.dataset, config).value();
    std::size_t samples = 0;
    for (;;) {
      auto b = loader->next();
      REQUIRE(b);
      if (b->end()) break;
      for (const auto& s : b->samples()) CHECK(s.key != "000042");
      samples += b->samples().size();
    }
    CHECK(samples == 99);
    const PipelineReport r = loader->report();
    CHECK(r.delivered.skipped == 1);
    CHECK(r.transform.errors == 1);
    CHECK(r.transform.samples == 99);
  }
}

TEST_CASE("a transform bound by its lock is told apart, and more threads are not the advice",
          "[loader][transform][verdict]") {
  MemDataset ds(120, 3000);
  auto t = std::make_shared<LockedTransform>();
  t->work = 2ms;  // 4 threads queue for one lock: most of their time is the wait
  auto config = config_with(t, 4);
  config.decode_threads = 4;
  auto loader = Loader::open(*ds.backend, ds.dataset, config).value();
  const PipelineReport r = run_emulated(*loader, ComputeModel{0ns, {}, 1}, {}, nullptr);
  INFO(r.verdict.evidence << " -> " << r.verdict.advice);
  REQUIRE_FALSE(r.error);
  CHECK(r.transform.samples == 120);
  CHECK(r.transform.off_cpu_share > 0.3);
  CHECK(r.transform.lock_wait_seconds <= r.transform.off_cpu_seconds);
  CHECK(r.transform.cpu_seconds + r.transform.off_cpu_seconds <= r.transform.seconds * 1.001);
  CHECK(r.verdict.stage == StageId::kDecode);
  CHECK_THAT(r.verdict.advice, Catch::Matchers::Contains("GIL"));
  for (const auto& k : r.verdict.next) CHECK(k.knob != Knob::kDecodeThreads);
}

namespace {

// Returns a block of `bytes` per sample (as a Python function returning an array does), says
// how large, and counts how many of them are alive at once.
struct LargeResults : SampleTransform {
  std::uint64_t bytes = 4 << 20;
  std::atomic<int> alive{0};
  std::atomic<int> most{0};

  Result<TransformResult> apply(const TransformInput&, TransformCall& call) override {
    const int now = ++alive;
    for (int m = most.load(); now > m && !most.compare_exchange_weak(m, now);) {
    }
    call.result_bytes = bytes;
    auto block = std::make_shared<std::vector<char>>(bytes);
    return TransformResult(block.get(), [block, this](const void*) mutable {
      --alive;
      block.reset();
    });
  }
};

// Blocks every call until released (a Python function that sleeps), counting the calls made.
struct BlockingTransform : SampleTransform {
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  std::atomic<int> calls{0};

  Result<TransformResult> apply(const TransformInput&, TransformCall&) override {
    ++calls;
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return released; });
    return TransformResult();
  }
  void release() {
    {
      std::lock_guard lock(mu);
      released = true;
    }
    cv.notify_all();
  }
};

}  // namespace

TEST_CASE("what a transform returns is held in the memory budget", "[loader][transform][memory]") {
  // 4 MiB results of 3 KB samples, a 32 MiB budget: without them in it, reads ahead (16 deep,
  // 64 decoded, 4 batch buffers) would keep ~80 results (320 MiB) alive.
  MemDataset ds(120, 3000);
  auto t = std::make_shared<LargeResults>();
  auto config = config_with(t, 2);
  config.memory_budget = 32 << 20;
  auto loader = Loader::open(*ds.backend, ds.dataset, config).value();
  std::size_t samples = 0;
  for (;;) {
    auto b = loader->next();
    REQUIRE(b);
    if (b->end()) break;
    samples += b->samples().size();
    std::this_thread::sleep_for(1ms);  // the pipeline runs ahead while the caller computes
  }
  CHECK(samples == 120);
  const PipelineReport r = loader->report();
  REQUIRE_FALSE(r.error);
  // The budget's 8 results, and the batch being filled beyond it (results only the consumer
  // frees never hold that one up).
  INFO("results alive at most: " << t->most.load());
  CHECK(t->most.load() <= 8 + 2);
  CHECK(r.memory.peak >= 4u * (4 << 20));
  CHECK(r.memory.peak <= (32u << 20) + 2u * (4 << 20));
}

TEST_CASE("a result larger than the whole budget still goes on, a batch at a time",
          "[loader][transform][memory]") {
  MemDataset ds(20, 3000);
  auto t = std::make_shared<LargeResults>();
  t->bytes = 40 << 20;  // more than the 32 MiB budget
  auto config = config_with(t, 2);
  config.memory_budget = 32 << 20;
  auto loader = Loader::open(*ds.backend, ds.dataset, config).value();
  std::size_t samples = 0;
  for (;;) {
    auto b = loader->next();
    REQUIRE(b);
    if (b->end()) break;
    samples += b->samples().size();
  }
  CHECK(samples == 20);
  CHECK(t->most.load() <= 2 + 2);  // the caller's batch and the one being filled
}

TEST_CASE("stop() starts no queued transform and snapshot() waits for none under way",
          "[loader][transform]") {
  MemDataset ds(64, 3000);
  auto t = std::make_shared<BlockingTransform>();
  auto loader = Loader::open(*ds.backend, ds.dataset, config_with(t, 4)).value();
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (t->calls.load() < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  REQUIRE(t->calls.load() == 2);  // both decode threads are in a call, samples queue behind
  loader->stop();
  const auto t0 = std::chrono::steady_clock::now();
  const PipelineReport mid = loader->snapshot();
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  CHECK(mid.snapshot);
  CHECK(mid.transform.samples == 0);
  t->release();
  const PipelineReport end = loader->report();
  CHECK_FALSE(end.snapshot);
  CHECK_FALSE(end.error);  // what stop() cut short is no failure
  CHECK(t->calls.load() == 2);
}
