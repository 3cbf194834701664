// The user's per-sample transform (LoaderConfig::transform): it runs on the decode threads, its
// results reach the batch in sample order, its errors name the sample and follow on_error, and
// the report tells its time, and its wait for the lock it runs under, apart from decode's.
#include <pthread.h>
#include <xxhash.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <string>

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
