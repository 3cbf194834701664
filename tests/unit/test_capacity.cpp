// The capacity model (loader/capacity.hpp) on recorded measurements: each planted limit predicts
// what its resources allow, a what-if moves the limit, the calibration carries the efficiency
// the run measured. Pure arithmetic: no timing.
#include "feedline/loader/capacity.hpp"
#include "feedline/loader/diagnose.hpp"

#include <catch2/catch.hpp>

#include <algorithm>

using namespace feedline::loader;

namespace {

// A pipeline that is cheap everywhere: tests raise the one cost they plant.
Measurements cheap() {
  Measurements m;
  m.read_bytes_per_sample = 64 * 1024;
  m.reads_per_sample = 1;
  m.read_latency_seconds = 1e-4;
  m.storage_cpu_seconds = 1e-6;
  m.decode_cpu_seconds = 1e-6;
  m.collate_cpu_seconds = 1e-6;
  return m;
}

Settings two_cores() {
  Settings s;
  s.cores = 2;
  s.decode_threads = 1;
  s.storage_threads = 1;
  s.batch_size = 10;
  s.concurrency.io_depth = 64;
  return s;
}

}  // namespace

TEST_CASE("capacity: decode-bound, more threads help up to the cores", "[capacity]") {
  Measurements m = cheap();
  m.decode_cpu_seconds = 1e-3;  // 1 ms of decode a sample
  const Settings ran = two_cores();
  const CapacityModel model(m, ran, 1000);
  CHECK(model.as_run().limit == StageId::kDecode);
  CHECK(model.as_run().samples_per_second == Approx(1000).epsilon(0.01));
  CHECK(model.efficiency() == Approx(1.0).epsilon(0.01));
  Settings two = ran;
  two.decode_threads = 2;
  const Prediction p = model.predict(two);
  // Two threads on two cores: the cores, shared with the other stages' few microseconds, bound it.
  CHECK(p.samples_per_second == Approx(2 / (1e-3 + 3e-6)).epsilon(0.01));
  CHECK(p.cores_limit);
  CHECK(p.limit == StageId::kDecode);
  Settings eight = ran;
  eight.decode_threads = 8;  // more threads than cores: no better
  CHECK(model.predict(eight).samples_per_second == Approx(p.samples_per_second).epsilon(0.01));
  Settings cores = eight;
  cores.cores = 8;
  CHECK(model.predict(cores).samples_per_second == Approx(8000).epsilon(0.02));
}

TEST_CASE("capacity: storage bandwidth, and the efficiency the run measured", "[capacity]") {
  Measurements m = cheap();
  m.read_bytes_per_sample = 1 << 20;
  m.storage_bytes_per_second_max = 100.0 * (1 << 20);  // saturated at 100 samples/s
  const Settings ran = two_cores();
  const CapacityModel model(m, ran, 95);  // the run reached 95% of it
  CHECK(model.as_run().limit == StageId::kStorage);
  CHECK(model.as_run().bound == "bandwidth");
  CHECK(model.as_run().samples_per_second == Approx(95));
  CHECK(model.efficiency() == Approx(0.95));
  Settings faster = ran;
  faster.storage_bytes_per_second = 50.0 * (1 << 20);  // a what-if can only lower a measured cap
  CHECK(model.predict(faster).samples_per_second == Approx(47.5));
  Measurements unknown = m;
  unknown.storage_bytes_per_second_max = 0;  // never saturated: a what-if's cap is all there is
  unknown.read_latency_seconds = 1e-3;
  const CapacityModel open(unknown, ran, 0);
  Settings capped = ran;
  capped.storage_bytes_per_second = 200.0 * (1 << 20);
  CHECK(open.predict(capped).samples_per_second == Approx(200).epsilon(0.01));
  CHECK(open.predict(capped).bound == "bandwidth");
}

TEST_CASE("capacity: latency-bound storage follows Little's law, and the window caps it",
          "[capacity]") {
  Measurements m = cheap();
  m.read_latency_seconds = 0.010;
  Settings ran = two_cores();
  ran.concurrency.io_depth = 4;
  const CapacityModel model(m, ran, 400);
  CHECK(model.as_run().limit == StageId::kStorage);
  CHECK(model.as_run().bound == "latency");
  CHECK(model.as_run().samples_per_second == Approx(400));
  Settings deeper = ran;
  deeper.concurrency.io_depth = 8;
  CHECK(model.predict(deeper).samples_per_second == Approx(800));
  Settings slower = deeper;
  slower.added_latency_seconds = 0.010;
  CHECK(model.predict(slower).samples_per_second == Approx(400));
  Settings windowed = deeper;
  windowed.concurrency.io_depth = 64;
  windowed.concurrency.window_reads = 16;  // the read-ahead window holds 16 reads
  windowed.concurrency.memory_reads = 12;  // the memory budget 12
  CHECK(model.predict(windowed).samples_per_second == Approx(1200));
  // Tar members coalesced: half a read per sample doubles the samples a read brings.
  Measurements coalesced = m;
  coalesced.reads_per_sample = 0.5;
  CHECK(CapacityModel(coalesced, ran, 0).predict(ran).samples_per_second == Approx(800));
}

TEST_CASE(
    "capacity: near where latency and bandwidth meet, reads in flight read less than either bound "
    "allows, and a latency-bound run's window fill carries to a larger window",
    "[capacity]") {
  // The memory case of bench/diagnose.sh: 1 MiB samples, 11 ms a read at a low depth, the
  // storage saturated at 2.2 GB/s (~2,100 samples/s).
  Measurements m = cheap();
  m.read_bytes_per_sample = 1 << 20;
  m.read_latency_seconds = 0.011;
  m.storage_bytes_per_second_max = 2.2e9;
  const double bandwidth = 2.2e9 / (1 << 20);
  Settings ran = two_cores();
  ran.concurrency.window_reads = 16;  // the read-ahead window: 2 batch buffers of 8
  SECTION("the closed loop: Little's law far below the knee, the bandwidth far past it") {
    const CapacityModel model(m, ran, 0);
    Settings few = ran;
    few.concurrency.window_reads = 2;
    CHECK(model.predict(few).samples_per_second == Approx(2 / 0.011).epsilon(0.05));
    Settings many = ran;
    many.concurrency.window_reads = 0;  // io depth 64: far past the knee (~23 reads)
    CHECK(model.predict(many).samples_per_second == Approx(bandwidth).epsilon(0.02));
    CHECK(model.predict(many).bound == "bandwidth");
    Settings knee = ran;
    knee.concurrency.window_reads = 24;
    const double p = model.predict(knee).samples_per_second;
    CHECK(p < 0.92 * std::min(bandwidth, 24 / 0.011));  // measured: ~0.89 of either bound
    CHECK(p > 0.8 * std::min(bandwidth, 24 / 0.011));
  }
  SECTION("the run's fill of its window, not its rate's ratio, carries to a larger window") {
    const CapacityModel model(m, ran, 1205);  // measured: 14.5 reads in flight of 16
    CHECK(model.as_run().bound == "latency");
    CHECK(model.as_run().held_by == "read-ahead window");
    CHECK(model.as_run().samples_per_second == Approx(1205).epsilon(0.01));
    CHECK(model.window_fill() > 0.8);
    CHECK(model.window_fill() < 1.0);
    Settings wider = ran;
    wider.concurrency.window_reads = 32;  // 4 batch buffers: measured 1,910-1,960 samples/s
    const double p = model.predict(wider).samples_per_second;
    CHECK(p == Approx(1935).epsilon(0.06));
    // The efficiency as a factor on the rate of either bound would have said ~1,830 or ~2,100.
    Settings io_depth_held = ran;
    io_depth_held.concurrency.window_reads = 0;
    io_depth_held.concurrency.io_depth = 8;  // held by something else: no fill carried over
    CHECK(model.predict(io_depth_held).samples_per_second > 0.9 * std::min(bandwidth, 8 / 0.011));
  }
}

TEST_CASE("capacity: the consumer, AU, and several accelerators sharing the storage",
          "[capacity]") {
  Measurements m = cheap();
  m.read_bytes_per_sample = 1 << 20;
  m.storage_bytes_per_second_max = 150.0 * (1 << 20);
  m.consumer_au_ceiling = 0.98;
  Settings ran = two_cores();
  ran.compute_seconds = 0.1;  // 10 samples a step: 100 samples/s
  const CapacityModel model(m, ran, 98);
  const Prediction& p = model.as_run();
  CHECK(p.limit == StageId::kConsumer);
  REQUIRE(p.au);
  CHECK(*p.au == Approx(0.98));
  Settings two = ran;
  two.accelerators = 2;  // 200 samples/s asked of a storage that gives 150
  const Prediction q = model.predict(two);
  CHECK(q.limit == StageId::kStorage);
  CHECK(q.samples_per_second == Approx(150));
  REQUIRE(q.au);
  CHECK(*q.au == Approx(0.75));  // the share of the time they compute: 150 of the 200 asked
  Settings quick = ran;
  quick.compute_seconds = 0.05;  // 200 samples/s asked of one accelerator: the storage again
  CHECK(model.predict(quick).samples_per_second == Approx(150));
}

TEST_CASE("capacity: storage threads bound page-cache reads by their CPU", "[capacity]") {
  Measurements m = cheap();
  m.storage_cpu_bound = true;
  m.storage_cpu_seconds = 20e-6;  // 20 us a file: 50k files/s a thread
  Settings ran = two_cores();
  ran.decode_threads = 2;
  const CapacityModel model(m, ran, 45000);
  CHECK(model.as_run().limit == StageId::kStorage);
  CHECK(model.as_run().bound == "cpu");
  Settings two = ran;
  two.storage_threads = 2;  // two threads on two cores: the cores, with decode's and collate's
  const Prediction p = model.predict(two);
  CHECK(p.cores_limit);
  CHECK(p.samples_per_second == Approx(2 / 22e-6).epsilon(0.01));
}

TEST_CASE("a run's steady rate leaves out its first batch, not the pipeline's start-up burst") {
  using feedline::loader::ConsumerReport;
  using feedline::loader::steady_samples_per_second;
  ConsumerReport c;
  c.samples = 1000;
  c.batches = 10;
  c.wall_seconds = 2.0;
  c.samples_per_second = 500;
  c.first_batch_seconds = 0.2;  // filling the pipeline: left out
  CHECK(steady_samples_per_second(c) == Approx(900 / 1.8));
  // The first batch took most of the run: the nine after it were buffered meanwhile and arrived
  // at once; over that burst the rate would be 9000/s. The whole run's rate stands instead.
  c.first_batch_seconds = 1.9;
  CHECK(steady_samples_per_second(c) == Approx(500));
  // A single batch: the whole run's rate.
  c.batches = 1;
  c.samples = 100;
  c.samples_per_second = 50;
  c.first_batch_seconds = 0.2;
  CHECK(steady_samples_per_second(c) == Approx(50));
}
