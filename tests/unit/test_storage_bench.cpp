#include <catch2/catch.hpp>

#include <thread>

#include "feedline/loader/storage_bench.hpp"
#include "feedline/storage/registry.hpp"
#include "test_support.hpp"

using namespace feedline;
using namespace feedline::loader;
using namespace std::chrono_literals;

namespace {
storage::Resolved mem_backend() {
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  return registry.open("mem://bench/obj", {}).value();
}
}  // namespace

TEST_CASE("one sequential pass reads every block once", "[loader][bench]") {
  auto r = mem_backend();
  REQUIRE(create_random_object(*r.backend, r.key, 4 << 20, 1));
  auto h = r.backend->open(r.key).value();
  StorageBenchConfig c;
  c.block_size = 64 << 10;
  c.iodepth = 8;
  auto res = run_storage_bench(*r.backend, *h, c, nullptr);
  REQUIRE(res);
  CHECK(res->stats.ops == 64);
  CHECK(res->stats.bytes == (4u << 20));
  CHECK_FALSE(res->interrupted);
  CHECK_FALSE(res->error);
  CHECK(res->info.engine == "mem");
}

TEST_CASE("numjobs each read the whole object; progress counts them all", "[loader][bench]") {
  auto r = mem_backend();
  REQUIRE(create_random_object(*r.backend, r.key, 1 << 20, 1));
  auto h = r.backend->open(r.key).value();
  StorageBenchConfig c;
  c.block_size = 4096;
  c.iodepth = 4;
  c.numjobs = 3;
  c.pattern = AccessPattern::kRandom;
  BenchProgress progress;
  auto res = run_storage_bench(*r.backend, *h, c, &progress);
  REQUIRE(res);
  CHECK(res->stats.ops == 3 * 256);
  CHECK(progress.ios.load() == 3 * 256);
  CHECK(progress.bytes.load() == 3u << 20);
}

TEST_CASE("the stop flag ends a time-based run early with a partial result", "[loader][bench]") {
  const auto dir = testing::scratch_dir("bench-stop");
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto r = registry.open((dir / "f.bin").string(), {}).value();
  REQUIRE(create_random_object(*r.backend, r.key, 8 << 20, 3));
  auto h = r.backend->open(r.key).value();
  StorageBenchConfig c;
  c.block_size = 4096;
  c.pattern = AccessPattern::kRandom;
  c.runtime = 60s;
  c.time_based = true;
  std::stop_source stop;
  c.stop = stop.get_token();
  std::jthread stopper([&] {
    std::this_thread::sleep_for(300ms);
    stop.request_stop();
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto res = run_storage_bench(*r.backend, *h, c, nullptr);
  const auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE(res);
  CHECK(res->interrupted);
  CHECK(res->stats.ops > 0);
  CHECK(took < 5s);  // a bound on hanging, not a performance assertion
  std::filesystem::remove_all(dir);
}

TEST_CASE("validation names the problem and the fix", "[loader][bench]") {
  auto r = mem_backend();
  REQUIRE(create_random_object(*r.backend, r.key, 100, 1));
  auto h = r.backend->open(r.key).value();
  StorageBenchConfig c;
  c.block_size = 4096;
  auto v = validate(c, *h, r.backend->caps());
  REQUIRE_FALSE(v);
  CHECK(v.error().what().find("smaller than one block") != std::string::npos);

  REQUIRE(r.backend->write("empty", {}));
  auto empty = r.backend->open("empty").value();
  auto e = validate(c, *empty, r.backend->caps());
  REQUIRE_FALSE(e);
  CHECK(e.error().what().find("empty") != std::string::npos);

  storage::BackendCaps direct{4096, 1ull << 30, true};
  c.block_size = 6000;
  REQUIRE(create_random_object(*r.backend, "big", 1 << 20, 1));
  auto big = r.backend->open("big").value();
  auto d = validate(c, *big, direct);
  REQUIRE_FALSE(d);
  CHECK(d.error().what().find("multiple of 4096") != std::string::npos);
}

TEST_CASE("created objects are deterministic per seed and incompressible-looking",
          "[loader][bench]") {
  auto r = mem_backend();
  REQUIRE(create_random_object(*r.backend, "a", 1 << 16, 42));
  REQUIRE(create_random_object(*r.backend, "b", 1 << 16, 42));
  REQUIRE(create_random_object(*r.backend, "c", 1 << 16, 43));
  auto read_all = [&](const char* key) {
    auto h = r.backend->open(key).value();
    auto q = r.backend->make_queue({}).value();
    std::vector<std::byte> out(h->size());
    storage::ReadOp op;
    op.object = h.get();
    op.length = out.size();
    op.dst = out;
    q->submit(op);
    q->poll(1, 1s);
    return out;
  };
  const auto a = read_all("a"), b = read_all("b"), c = read_all("c");
  CHECK(a == b);
  CHECK(a != c);
  std::array<int, 256> hist{};
  for (auto x : a) ++hist[static_cast<unsigned char>(x)];
  for (int n : hist) CHECK(n > 128);  // ~256 expected per value: no value missing or dominant
}
