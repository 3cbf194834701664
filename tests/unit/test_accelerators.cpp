// N emulated accelerators on one host (loader/accelerators.hpp): shards, aggregate, AU, the host
// verdict, and an error on one accelerator ending them all.
#include "feedline/loader/accelerators.hpp"

#include <catch2/catch.hpp>

#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "feedline/storage/decorators.hpp"
#include "mem_dataset.hpp"

using namespace feedline;
using namespace feedline::loader;
using feedline::testing::MemDataset;

namespace {

LoaderConfig small_config() {
  LoaderConfig c;
  c.sampler.batch_size = 16;
  c.decode_threads = 4;
  c.memory_budget = 64ull << 20;
  c.io_depth = 8;
  return c;
}

StageReport stage(StageId id, double cpu) {
  StageReport s;
  s.stage = id;
  s.threads = 1;
  s.cpu_seconds = cpu;
  return s;
}

PipelineReport planted(StageId verdict, double samples_per_second, double cpu) {
  PipelineReport r;
  r.verdict.stage = verdict;
  r.verdict.evidence = "planted";
  r.consumer.samples_per_second = samples_per_second;
  r.stages = {stage(StageId::kStorage, cpu), stage(StageId::kDecode, 0)};
  return r;
}

}  // namespace

TEST_CASE("accelerators: the host's decode threads, cores and budget are shared out",
          "[loader][accelerators]") {
  LoaderConfig c = small_config();
  c.cores = 4;
  const AcceleratorSplit s = split_host(c, 3);
  CHECK(s.accelerators == 3);
  CHECK(s.decode_threads_each == 1);  // 4 / 3, at least one each
  CHECK(s.cores_each == 1);
  CHECK(s.memory_budget_each == (64ull << 20) / 3);
  const AcceleratorSplit one = split_host(c, 1);
  CHECK(one.decode_threads_each == 4);
  CHECK(one.cores_each == 4);
  CHECK(split_host(c, 8).decode_threads_each == 1);
}

TEST_CASE("accelerators: each reads its own shard, and together they deliver every sample once",
          "[loader][accelerators]") {
  MemDataset mem(960, 2000);  // 960 = 3 x 20 batches of 16: nothing is left out
  LoaderConfig c = small_config();
  ComputeModel compute;
  compute.mean = std::chrono::microseconds(200);
  auto host = run_accelerators(*mem.backend, mem.dataset, c, 3, compute, {}, nullptr);
  REQUIRE(host);
  REQUIRE_FALSE(host->error);
  CHECK_FALSE(host->interrupted);
  REQUIRE(host->accelerators.size() == 3);
  CHECK(host->ranks == std::vector<unsigned>{0, 1, 2});
  CHECK(host->samples == 960);
  CHECK(host->digest == mem.digest_sum);
  std::uint64_t each_sum = 0;
  for (const auto& r : host->accelerators) {
    CHECK(r.consumer.samples == 320);
    CHECK(r.consumer.au_steps > 0);
    CHECK(r.consumer.au > 0);
    each_sum += r.delivered.digest;
  }
  CHECK(each_sum == host->digest);
  CHECK(host->au_measured);
  CHECK(host->au_min <= host->au_mean);
  CHECK(host->au_mean <= host->au_max);
  CHECK(host->samples_per_second > 0);
  CHECK(host->straggler < 3);
  CHECK(host->straggler_ratio > 0);
  CHECK(host->straggler_ratio <= 1);
  for (const auto& r : host->accelerators) {
    CHECK(r.consumer.samples_per_second >=
          host->accelerators[host->straggler].consumer.samples_per_second);
  }
  CHECK(host->verdict.stage.has_value());
  CHECK_THAT(host->verdict.evidence, Catch::Contains("of 3 accelerator(s) name"));
  // Under a world of 2 ranks, rank 1's accelerators are ranks 3..5 of 6.
  c.sampler.rank = 1;
  c.sampler.world_size = 2;
  auto half = run_accelerators(*mem.backend, mem.dataset, c, 3, {}, {}, nullptr);
  REQUIRE(half);
  CHECK(half->ranks == std::vector<unsigned>{3, 4, 5});
  CHECK(half->samples == 480);
}

TEST_CASE("accelerators: a failing accelerator ends every one, and the error names it",
          "[loader][accelerators]") {
  feedline::storage::Registry registry;
  feedline::storage::register_builtin_backends(registry);
  feedline::storage::FaultsConfig fc;
  fc.error_rate = 0.002;
  auto faulty =
      feedline::storage::make_faults(std::move(registry.open("mem://ds/", {})->backend), fc);
  REQUIRE(faulty);
  MemDataset mem(4000, 1000, std::move(*faulty));
  ComputeModel compute;
  compute.mean = std::chrono::milliseconds(2);  // ~250 steps each: a run that would go on
  auto host = run_accelerators(*mem.backend, mem.dataset, small_config(), 2, compute, {}, nullptr);
  REQUIRE(host);
  REQUIRE(host->error);
  CHECK_THAT(host->error->message(), Catch::Contains("accelerator "));
  CHECK_THAT(host->error->message(), Catch::Contains(" of 2)"));
  CHECK(host->samples < 4000);
}

TEST_CASE("accelerators: a stop request ends them all", "[loader][accelerators]") {
  MemDataset mem(2000, 1000);
  ComputeModel compute;
  compute.mean = std::chrono::milliseconds(20);  // 60+ steps of 20 ms each: seconds
  std::stop_source stop;
  std::jthread stopper([&stop] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stop.request_stop();
  });
  auto host = run_accelerators(*mem.backend, mem.dataset, small_config(), 2, compute,
                               stop.get_token(), nullptr);
  REQUIRE(host);
  CHECK(host->interrupted);
  CHECK(host->samples < 2000);
}

TEST_CASE("accelerators: a run for a time lasts that long once open, and is no interruption",
          "[loader][accelerators]") {
  MemDataset mem(2000, 1000);
  LoaderConfig c = small_config();
  c.sampler.epochs = 1u << 20;  // the time bounds it, as a trial's
  ComputeModel compute;
  compute.mean = std::chrono::milliseconds(5);
  auto host = run_accelerators(*mem.backend, mem.dataset, c, 2, compute, {}, nullptr, nullptr,
                               std::chrono::milliseconds(400));
  REQUIRE(host);
  CHECK_FALSE(host->error);
  CHECK_FALSE(host->interrupted);
  CHECK(host->wall_seconds >= 0.39);
  CHECK(host->wall_seconds < 30);
  CHECK(host->au_measured);
}

TEST_CASE("accelerators: bad requests are refused before anything runs", "[loader][accelerators]") {
  MemDataset mem(64, 100);
  CHECK(run_accelerators(*mem.backend, mem.dataset, small_config(), 0, {}, {}, nullptr)
            .error()
            .code() == Errc::kInvalidArgument);
  CHECK(run_accelerators(*mem.backend, mem.dataset, small_config(), kMaxAccelerators + 1, {}, {},
                         nullptr)
            .error()
            .code() == Errc::kInvalidArgument);
  LoaderConfig resumed = small_config();
  resumed.sampler.resume.epoch = 1;  // the second epoch's start: a resume point all the same
  REQUIRE_FALSE(resumed.sampler.resume.at_start());
  auto r = run_accelerators(*mem.backend, mem.dataset, resumed, 2, {}, {}, nullptr);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message(), Catch::Contains("resume point"));
}

TEST_CASE("accelerators: the host verdict names a shared resource", "[loader][accelerators]") {
  AcceleratorSplit split;
  split.accelerators = 3;
  split.cores = 2;
  SECTION("storage named by most accelerators: the storage they share") {
    const std::vector<PipelineReport> rs = {planted(StageId::kStorage, 100, 0.1),
                                            planted(StageId::kStorage, 90, 0.1),
                                            planted(StageId::kDecode, 120, 0.1)};
    const Verdict v = host_verdict(rs, split, 1.0);
    REQUIRE(v.stage);
    CHECK(*v.stage == StageId::kStorage);
    CHECK_THAT(v.evidence, Catch::Contains("2 of 3 accelerator(s) name storage"));
    CHECK_THAT(v.evidence, Catch::Contains("the storage they share"));
    CHECK_THAT(v.evidence, Catch::Contains("slowest accelerator (90 samples/s)"));
    CHECK_THAT(v.advice, Catch::Contains("same storage"));
  }
  SECTION("the cores busy with every accelerator's work: the host's CPU") {
    const std::vector<PipelineReport> rs = {planted(StageId::kDecode, 100, 0.6),
                                            planted(StageId::kDecode, 100, 0.6),
                                            planted(StageId::kDecode, 100, 0.6)};
    const Verdict v = host_verdict(rs, split, 1.0);  // 1.8 CPU-s in 1 s on 2 cores: 90%
    REQUIRE(v.stage);
    CHECK(*v.stage == StageId::kDecode);
    CHECK_THAT(v.evidence,
               Catch::Contains("host's CPU, shared by every accelerator, is saturated"));
    CHECK_THAT(v.advice, Catch::Contains("fewer accelerators on this host"));
  }
  SECTION("no accelerator delivered: nothing to judge") {
    const std::vector<PipelineReport> rs(2);
    CHECK_FALSE(host_verdict(rs, split, 1.0).stage);
  }
}

TEST_CASE("accelerator search: doubling, then bisection, finds the largest N that passes",
          "[loader][accelerators]") {
  for (unsigned max : {1u, 7u, 64u}) {
    for (unsigned threshold = 0; threshold <= max + 2; ++threshold) {
      AcceleratorSearch search(max);
      std::vector<unsigned> tried;
      while (auto n = search.next()) {
        REQUIRE(*n >= 1);
        REQUIRE(*n <= max);
        tried.push_back(*n);
        search.record(*n, *n <= threshold);
        REQUIRE(tried.size() <= 20);
      }
      INFO("max " << max << ", threshold " << threshold);
      CHECK(search.answer() == std::min(threshold, max));
      if (threshold >= max) {
        CHECK(search.capped());
        CHECK_FALSE(search.first_failure());
      } else {
        CHECK_FALSE(search.capped());
        REQUIRE(search.first_failure());
        CHECK(*search.first_failure() == threshold + 1);
      }
      // Never the same N twice, and no more trials than doubling plus bisection need.
      std::set<unsigned> unique(tried.begin(), tried.end());
      CHECK(unique.size() == tried.size());
      CHECK(tried.size() <= 2 * 7 + 1);
    }
  }
}

namespace {

// A job's other hosts, planted: records the epochs the host arrived at (once per epoch for the
// whole host, however many accelerators it has), and fails at `fail_at` when asked to.
struct RecordingSync final : EpochSync {
  std::mutex mu;
  std::vector<std::uint32_t> epochs;
  std::optional<std::uint32_t> fail_at;
  Result<void> arrive(std::uint32_t epoch, std::stop_token) override {
    std::lock_guard lock(mu);
    epochs.push_back(epoch);
    if (fail_at && epoch == *fail_at) {
      return fail(Errc::kIo, "rank 1 of 2 (host far): the storage went away");
    }
    return {};
  }
};

}  // namespace

TEST_CASE("accelerators: the host arrives once at each epoch's barrier, its accelerators together",
          "[loader][accelerators]") {
  MemDataset mem(384, 2000);  // 2 accelerators x 12 batches of 16 per epoch
  LoaderConfig c = small_config();
  c.sampler.epochs = 3;
  RecordingSync job;
  auto host = run_accelerators(*mem.backend, mem.dataset, c, 2, {}, {}, nullptr, &job);
  REQUIRE(host);
  REQUIRE_FALSE(host->error);
  CHECK(host->samples == 384 * 3);
  // Epoch 0 before the first batch (the ranks start together), then each later epoch.
  CHECK(job.epochs == std::vector<std::uint32_t>{0, 1, 2});
  CHECK(host->sync_seconds >= 0);
}

TEST_CASE("accelerators: a failure at an epoch barrier ends every accelerator with it",
          "[loader][accelerators]") {
  MemDataset mem(384, 2000);
  LoaderConfig c = small_config();
  c.sampler.epochs = 4;
  RecordingSync job;
  job.fail_at = 2;
  auto host = run_accelerators(*mem.backend, mem.dataset, c, 2, {}, {}, nullptr, &job);
  REQUIRE(host);
  REQUIRE(host->error);
  CHECK(host->error->message().find("the storage went away") != std::string::npos);
  // Two epochs delivered, not the third nor the fourth.
  CHECK(host->samples <= 384 * 2 + 2 * 16 * 3);
  CHECK(job.epochs == std::vector<std::uint32_t>{0, 1, 2});
}

TEST_CASE("emulate: a stop ends a wait at an epoch barrier", "[loader][accelerators]") {
  // A barrier nobody else reaches: only the stop ends it, and the run is interrupted, not failed.
  struct NeverSync final : EpochSync {
    Result<void> arrive(std::uint32_t, std::stop_token stop) override {
      while (!stop.stop_requested()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return fail(Errc::kCancelled, "stopped at an epoch barrier");
    }
  } never;
  MemDataset mem(64, 1000);
  auto loader = Loader::open(*mem.backend, mem.dataset, small_config());
  REQUIRE(loader);
  std::stop_source stop;
  std::jthread stopper([&stop] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stop.request_stop();
  });
  const auto t0 = std::chrono::steady_clock::now();
  const PipelineReport r = run_emulated(**loader, {}, stop.get_token(), nullptr, &never);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK_FALSE(r.error);
  CHECK(r.interrupted);
  CHECK(r.consumer.samples == 0);
  CHECK(r.consumer.sync_seconds > 0.05);
}

TEST_CASE("accelerators: a trial needs two full steps an epoch for each accelerator",
          "[loader][accelerators]") {
  // 2,000 resnet50 samples, batch 400: 16 accelerators get 125 each, no full step.
  CHECK(full_steps_per_epoch(2000, 400, 1, 16) == 0);
  CHECK(full_steps_per_epoch(2000, 400, 1, 2) == 2);
  CHECK(full_steps_per_epoch(2000, 400, 1, 3) == 1);  // 666 each: one full, a short one dropped
  CHECK(most_accelerators_measurable(2000, 400, 1) == 2);
  CHECK(samples_needed(3, 400, 1) == 2400);
  // The README's demo: 10,000 samples measure up to 12 accelerators (14 got one full step).
  CHECK(most_accelerators_measurable(10000, 400, 1) == 12);
  CHECK(full_steps_per_epoch(10000, 400, 1, 14) == 1);
  CHECK(most_accelerators_measurable(12800, 400, 1) == 16);
  // Over a job's ranks: each rank's accelerators share its part.
  CHECK(most_accelerators_measurable(12800, 400, 2) == 8);
  CHECK(samples_needed(9, 400, 2) == 14400);
  // Too few for one accelerator.
  CHECK(most_accelerators_measurable(799, 400, 1) == 0);
  CHECK(samples_needed(1, 400, 1) == 800);
  // Never more than a run may have.
  CHECK(most_accelerators_measurable(1ull << 40, 1, 1) == kMaxAccelerators);
}
