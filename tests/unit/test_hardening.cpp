// Hostile inputs and stops, below the CLI: objects that shrink under a read, decoders asked to
// allocate what a frame declares, waits that must end on a stop request.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "feedline/loader/codec.hpp"
#include "feedline/loader/emulate.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/loader/storage_bench.hpp"
#include "feedline/storage/decorators.hpp"
#include "feedline/storage/registry.hpp"
#include "test_support.hpp"

using namespace feedline;
using namespace feedline::loader;
using namespace std::chrono_literals;

namespace {

struct Collect final : storage::ReadCompletion {
  std::vector<storage::ReadOp*> done;
  void on_read_complete(storage::ReadOp& op) noexcept override { done.push_back(&op); }
};

storage::ReadOp make_op(const storage::ObjectHandle* h, std::uint64_t offset, std::uint64_t length,
                        MutableBytes dst, storage::ReadCompletion* done) {
  storage::ReadOp op;
  op.object = h;
  op.offset = offset;
  op.length = length;
  op.dst = dst;
  op.done = done;
  return op;
}

// Polls until the op completed or `limit` passed; true when it completed.
bool wait_done(storage::IoQueue& q, Collect& c, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (c.done.empty() && std::chrono::steady_clock::now() < until) q.poll(1, 20ms);
  return !c.done.empty();
}

// A valid zstd frame that decodes to `size` zero bytes from a few bytes per 128 KiB: one RLE
// block each (RFC 8878: single-segment frame header with an 8-byte content size, no checksum).
std::vector<std::byte> zstd_bomb(std::uint64_t size) {
  std::vector<std::byte> f;
  auto put = [&](std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) f.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
  };
  put(0xFD2FB528u, 4);  // magic
  put(0xE0, 1);         // FCS field 8 bytes, single segment
  put(size, 8);
  constexpr std::uint64_t kBlock = 128 << 10;
  for (std::uint64_t left = size; left > 0;) {
    const std::uint64_t n = std::min(left, kBlock);
    left -= n;
    put((left == 0 ? 1u : 0u) | (1u << 1) | (n << 3), 3);  // last?, RLE, size
    put(0, 1);                                             // the byte repeated
  }
  return f;
}

}  // namespace

TEST_CASE(
    "a read of an object that shrank since it was opened is an error naming object and offset",
    "[storage][hardening]") {
  const auto dir = testing::scratch_dir("shrinks");
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto r = registry.open((dir / "f.bin").string(), {}).value();
  REQUIRE(r.backend->write(r.key, testing::pattern_bytes(1 << 20, 3)));
  auto h = r.backend->open(r.key).value();
  REQUIRE(h->size() == (1u << 20));
  auto q = r.backend->make_queue({.depth = 4, .single_thread = true}).value();
  AlignedBuffer buf = AlignedBuffer::allocate(64 << 10).value();

  SECTION("reading up to the end the object had is fine") {
    Collect c;
    storage::ReadOp op = make_op(h.get(), (1u << 20) - 1000, 64 << 10, buf.span(), &c);
    q->submit(op);
    REQUIRE(wait_done(*q, c, 5s));
    REQUIRE(op.result);
    CHECK(*op.result == 1000);  // a short read: the object ends there, as it did when opened
    CHECK(q->stats().short_reads == 1);
  }
  SECTION("after a truncation the missing bytes are an I/O error, not a fast read of fewer bytes") {
    REQUIRE(::truncate((dir / "f.bin").c_str(), 100 << 10) == 0);
    Collect c;
    storage::ReadOp op = make_op(h.get(), 512 << 10, 64 << 10, buf.span(), &c);
    q->submit(op);
    REQUIRE(wait_done(*q, c, 5s));
    REQUIRE_FALSE(op.result);
    CHECK(op.result.error().code() == Errc::kIo);
    CHECK(op.result.error().object() == r.key);
    CHECK(op.result.error().offset() == (512u << 10));
    CHECK(op.result.error().message().find("truncated") != std::string::npos);
    CHECK(q->stats().errors == 1);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("bench storage: a file truncated mid-run fails, it does not count zero-byte reads",
          "[bench][hardening]") {
  const auto dir = testing::scratch_dir("bench-shrinks");
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto r = registry.open((dir / "f.bin").string(), {}).value();
  REQUIRE(create_random_object(*r.backend, r.key, 16 << 20, 1));
  auto h = r.backend->open(r.key).value();
  StorageBenchConfig c;
  c.block_size = 64 << 10;
  c.pattern = AccessPattern::kRandom;
  c.runtime = 30s;
  c.time_based = true;
  std::jthread shrink([&] {
    std::this_thread::sleep_for(200ms);
    (void)::truncate((dir / "f.bin").c_str(), 1 << 20);
  });
  auto res = run_storage_bench(*r.backend, *h, c, nullptr);
  REQUIRE(res);
  REQUIRE(res->error);
  CHECK(res->error->code() == Errc::kIo);
  CHECK(res->error->object() == r.key);
  CHECK(res->error->offset().has_value());
  std::filesystem::remove_all(dir);
}

TEST_CASE("throttle: cancel() ends reads waiting for tokens or for their added latency at once",
          "[storage][hardening][stop]") {
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto r = registry.open("mem://t/x", {}).value();
  REQUIRE(r.backend->write("t/x", testing::pattern_bytes(1 << 16, 1)));
  SECTION("an hour of latency") {
    auto b = storage::make_throttle(std::move(r.backend), {.latency = std::chrono::hours(1)});
    auto h = b->open("t/x").value();
    auto q = b->make_queue({.depth = 4, .single_thread = true}).value();
    AlignedBuffer buf = AlignedBuffer::allocate(1 << 16).value();
    Collect c;
    storage::ReadOp op = make_op(h.get(), 0, 4096, buf.span(), &c);
    q->submit(op);
    q->poll(1, 50ms);
    CHECK(c.done.empty());
    const auto t0 = std::chrono::steady_clock::now();
    q->cancel();
    REQUIRE(wait_done(*q, c, 2s));
    CHECK(std::chrono::steady_clock::now() - t0 < 1s);
    CHECK(op.result);  // it had been read: delivered, without the rest of its latency
  }
  SECTION("one byte per second") {
    auto b = storage::make_throttle(std::move(r.backend), {.bytes_per_second = 1});
    auto h = b->open("t/x").value();
    auto q = b->make_queue({.depth = 4, .single_thread = true}).value();
    AlignedBuffer buf = AlignedBuffer::allocate(1 << 16).value();
    Collect c;
    storage::ReadOp first = make_op(h.get(), 0, 4096, buf.span().first(4096), &c);
    storage::ReadOp second = make_op(h.get(), 4096, 4096, buf.span().subspan(4096, 4096), &c);
    q->submit(first);
    q->submit(second);
    const auto t0 = std::chrono::steady_clock::now();
    while (c.done.size() < 1 && std::chrono::steady_clock::now() - t0 < 3s) q->poll(1, 20ms);
    q->cancel();
    const auto t1 = std::chrono::steady_clock::now();
    while (c.done.size() < 2 && std::chrono::steady_clock::now() - t1 < 2s) q->poll(1, 20ms);
    REQUIRE(c.done.size() == 2);
    CHECK(std::chrono::steady_clock::now() - t1 < 1s);
    CHECK(q->stats().cancelled >= 1);
    CHECK(q->stats().errors == 0);  // cancelled reads are not storage errors
  }
}

TEST_CASE("a stop request ends a run within a second whatever it waits on",
          "[loader][hardening][stop]") {
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto r = registry.open("mem://ds/", {}).value();
  for (int i = 0; i < 64; ++i)
    REQUIRE(r.backend->write(fmt::format("ds/{:03}.bin", i), testing::pattern_bytes(4096, i)));
  DatasetOptions o;
  o.format = DatasetFormat::kFiles;
  auto ds = open_dataset(*r.backend, "ds/", o).value();
  LoaderConfig base;
  base.sampler.batch_size = 4;
  base.memory_budget = 64 << 20;
  base.io_depth = 8;
  struct Case {
    const char* name;
    std::chrono::nanoseconds decode_cost{0}, collate_cost{0}, compute{0};
  };
  for (const Case& k : {Case{"an hour of decode cost", std::chrono::hours(1), {}, {}},
                        Case{"an hour of collate cost", {}, std::chrono::hours(1), {}},
                        Case{"an hour-long compute step", {}, {}, std::chrono::hours(1)}}) {
    SECTION(k.name) {
      std::stop_source stop;
      LoaderConfig c = base;
      c.diagnostics.decode_cost = k.decode_cost;
      c.diagnostics.collate_cost = k.collate_cost;
      c.stop = stop.get_token();
      auto loader = Loader::open(*r.backend, ds, c).value();
      std::jthread t([&] {
        std::this_thread::sleep_for(300ms);
        stop.request_stop();
      });
      const auto t0 = std::chrono::steady_clock::now();
      auto report =
          run_emulated(*loader, ComputeModel{k.compute, {}, 1}, stop.get_token(), nullptr);
      CHECK(std::chrono::steady_clock::now() - t0 < 1300ms);
      CHECK(report.interrupted);
      CHECK_FALSE(report.error);
    }
  }
}

TEST_CASE(
    "a zstd frame's declared size is untrusted: a bomb is a data error, nothing allocated for it",
    "[loader][hardening][decode]") {
  if (!zstd_available()) return testing::skip_test("built without zstd: no frames to decode");
  const auto bomb = zstd_bomb(std::uint64_t{2} << 30);
  REQUIRE(bomb.size() < (128u << 10));
  REQUIRE(Decompressor::content_size(bomb).value() == (std::uint64_t{2} << 30));
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto r = registry.open("mem://z/", {}).value();
  REQUIRE(r.backend->write("z/000.bin.zst", bomb));
  REQUIRE(r.backend->write("z/001.bin", testing::pattern_bytes(1000, 1)));
  DatasetOptions o;
  o.format = DatasetFormat::kFiles;
  auto ds = open_dataset(*r.backend, "z/", o).value();
  LoaderConfig c;
  c.sampler.batch_size = 2;
  c.sampler.shuffle = false;
  c.memory_budget = 64 << 20;
  for (OnError policy : {OnError::kFail, OnError::kSkip}) {
    c.on_error = policy;
    auto loader = Loader::open(*r.backend, ds, c).value();
    auto report = run_emulated(*loader, {}, {}, nullptr);
    CHECK(report.memory.peak <= c.memory_budget);
    CHECK(report.memory.overshoot == 0);
    if (policy == OnError::kFail) {
      REQUIRE(report.error);
      CHECK(report.error->what().find("000.bin.zst") != std::string::npos);
      CHECK(report.error->what().find("declares 2147483648") != std::string::npos);
    } else {
      CHECK_FALSE(report.error);
      CHECK(report.delivered.skipped == 1);
      CHECK(report.consumer.samples == 1);
    }
  }
  SECTION("max_sample_bytes refuses at the frame's declaration, also within the budget") {
    auto small = zstd_bomb(8 << 20);
    REQUIRE(r.backend->write("z/000.bin.zst", small));
    auto ds2 = open_dataset(*r.backend, "z/", o).value();
    c.on_error = OnError::kFail;
    c.max_sample_bytes = 1 << 20;
    auto loader = Loader::open(*r.backend, ds2, c).value();
    auto report = run_emulated(*loader, {}, {}, nullptr);
    REQUIRE(report.error);
    CHECK(report.error->what().find("declares 8388608") != std::string::npos);
  }
}

TEST_CASE("counts beyond the loader's limits are refused before anything is allocated",
          "[loader][hardening]") {
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto r = registry.open("mem://ds/", {}).value();
  REQUIRE(r.backend->write("ds/0.bin", testing::pattern_bytes(100, 1)));
  DatasetOptions o;
  o.format = DatasetFormat::kFiles;
  auto ds = open_dataset(*r.backend, "ds/", o).value();
  auto refused = [&](auto change, std::string_view field) {
    LoaderConfig c;
    change(c);
    auto l = Loader::open(*r.backend, ds, c);
    REQUIRE_FALSE(l);
    CHECK(l.error().code() == Errc::kInvalidArgument);
    CHECK(l.error().message().find(field) != std::string::npos);
  };
  refused([](LoaderConfig& c) { c.io_depth = 1'000'000'000; }, "io_depth");
  refused([](LoaderConfig& c) { c.io_depth = 0; }, "io_depth");
  refused([](LoaderConfig& c) { c.prefetch_batches = 100'000; }, "prefetch_batches");
  refused([](LoaderConfig& c) { c.decode_threads = 10'000; }, "decode_threads");
  refused([](LoaderConfig& c) { c.sampler.batch_size = 4'000'000'000u; }, "batch_size");
}
