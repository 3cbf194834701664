// A run's trace (loader/trace.hpp, loader/chrome_trace.hpp): its bounds (the event cap, the
// windows of detail kept past the detail cap, counters at most once a millisecond), lanes
// recorded from several threads at once, a loader's run recorded into it (the tracks and the
// spans per batch), and the Chrome trace-event JSON written from it (spans that do not nest on
// their thread's track moved to a second track; bytes that are not UTF-8 and secrets not
// written).
#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "feedline/core/clock.hpp"
#include "feedline/loader/chrome_trace.hpp"
#include "feedline/loader/emulate.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/loader/trace.hpp"
#include "feedline/storage/registry.hpp"
#include "output.hpp"
#include "test_support.hpp"

using namespace feedline;
using namespace feedline::loader;
using nlohmann::json;

namespace {

json written(const TraceLog& log) {
  std::string text;
  REQUIRE(write_chrome_trace(
      log, R"({"command":"test"})", [&](std::string_view piece) { text += piece; },
      tools::out::scrub));
  return json::parse(text);  // throws (fails the test) on anything but one valid document
}

std::map<std::string, int> span_counts(const json& doc) {
  std::map<std::string, int> n;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X") ++n[e["name"].get<std::string>()];
  }
  return n;
}

}  // namespace

TEST_CASE("the trace keeps at most max_events, and counts what it dropped", "[trace]") {
  TraceOptions o;
  o.max_events = 10;
  TraceLog log(o);
  TraceLane& lane = log.lane("t");
  const std::uint64_t t = log.origin_ns();
  for (int i = 0; i < 25; ++i) lane.span("test", "work", t + i * 10, t + i * 10 + 5);
  CHECK(log.kept() == 10);
  CHECK(log.dropped() == 15);
  CHECK(lane.events().size() == 10);
  const json doc = written(log);
  CHECK(doc["otherData"]["complete"] == false);
  CHECK(doc["otherData"]["events_dropped"] == 15);
  CHECK(doc["otherData"].contains("truncated"));
}

TEST_CASE("past the detail cap, detail is kept in whole windows of time, the same on every thread",
          "[trace]") {
  TraceOptions o;
  o.detail_events = 2;
  o.detail_stride = 4;
  o.detail_window_ns = 1'000'000;  // 1 ms windows: 0, 4, 8, ... kept
  TraceLog log(o);
  TraceLane& a = log.lane("a");
  TraceLane& b = log.lane("b");
  const std::uint64_t t = log.origin_ns();
  a.span("io", "early", t + 1'500'000, t + 1'600'000, -1, true);  // within the cap: kept
  a.span("io", "early", t + 2'500'000, t + 2'600'000, -1, true);  // within the cap: kept
  a.span("io", "w1", t + 1'200'000, t + 1'300'000, -1, true);     // window 1: out
  b.span("io", "w4", t + 4'200'000, t + 4'300'000, -1, true);     // window 4: kept
  a.span("io", "w4", t + 4'700'000, t + 4'800'000, -1, true);     // window 4: kept
  b.span("io", "w5", t + 5'100'000, t + 5'200'000, -1, true);     // window 5: out
  a.span("batch", "not detail", t + 5'100'000, t + 5'200'000);    // not detail: kept
  CHECK(log.detail_seen() == 6);
  CHECK(log.detail_sampled_out() == 2);
  CHECK(log.kept() == 5);
  const auto n = span_counts(written(log));
  CHECK(n.count("w1") == 0);
  CHECK(n.count("w5") == 0);
  CHECK(n.at("w4") == 2);
  CHECK(n.at("not detail") == 1);
}

TEST_CASE("a counter is kept at most once a millisecond per lane, unless forced", "[trace]") {
  TraceLog log;
  TraceLane& lane = log.lane("t");
  const std::uint64_t t = log.origin_ns();
  lane.counter("depth", t, 1);
  lane.counter("depth", t + 100'000, 2);        // 0.1 ms later: not kept
  lane.counter("other", t + 100'000, 7);        // another counter: kept
  lane.counter("depth", t + 200'000, 3, true);  // forced: kept
  lane.counter("depth", t + 1'300'000, 4);      // 1.1 ms after the last kept: kept
  std::vector<double> depth;
  for (const TraceEvent& e : lane.events()) {
    if (std::string_view(e.name) == "depth") depth.push_back(e.value);
  }
  CHECK(depth == std::vector<double>{1, 3, 4});
}

TEST_CASE("lanes record from their own threads at once", "[trace]") {
  TraceLog log;
  std::vector<std::jthread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&log, i] {
      TraceLane& lane = log.lane(fmt::format("worker-{}", i));
      const char* name = lane.intern(fmt::format("queue {}", i % 2));  // shared names
      for (int k = 0; k < 5000; ++k) {
        const std::uint64_t t = now_ns();
        lane.span("test", "work", t, t + 1, -1, k % 2 == 0);
        lane.counter(name, t, k, true);
      }
    });
  }
  threads.clear();
  CHECK(log.kept() == 4 * 10000);
  CHECK(log.lanes().size() == 4);
  CHECK(std::string_view(log.intern("queue 1")) == "queue 1");
  const json doc = written(log);
  std::set<std::string> tracks;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") tracks.insert(e["args"]["name"]);
  }
  CHECK(tracks == std::set<std::string>{"worker-0", "worker-1", "worker-2", "worker-3"});
}

TEST_CASE("the written trace: spans that do not nest go to a second track; reads as async pairs",
          "[trace]") {
  TraceLog log;
  TraceLane& lane = log.lane("fl-collate");
  const std::uint64_t t = log.origin_ns();
  lane.span("state", "busy", t, t + 10'000);
  lane.span("state", "starved", t + 10'000, t + 20'000);
  lane.span("collate", "collate batch", t + 5'000, t + 15'000, 32);  // across both: no nesting
  lane.span("decode", "decode", t + 1'000, t + 2'000, 4096);         // inside busy
  lane.async_span("io", "read", t + 1'000, t + 30'000, 65536);
  lane.async_span("io", "read", t + 2'000, t + 3'000, 65536);
  const json doc = written(log);
  std::map<std::string, int> tid_of_track;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") tid_of_track[e["args"]["name"]] = e["tid"];
  }
  REQUIRE(tid_of_track.count("fl-collate (2)") == 1);
  int begins = 0, ends = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X") {
      const bool second = e["name"] == "collate batch";
      CHECK(e["tid"] == tid_of_track.at(second ? "fl-collate (2)" : "fl-collate"));
      if (second) {
        CHECK(e["ts"].get<double>() == Approx(5.0));
        CHECK(e["dur"].get<double>() == Approx(10.0));
        CHECK(e["args"]["samples"] == 32);
      }
    }
    begins += e["ph"] == "b";
    ends += e["ph"] == "e";
  }
  CHECK(begins == 2);
  CHECK(ends == 2);
}

TEST_CASE("the written trace is valid JSON whatever the messages hold, and scrubs secrets",
          "[trace]") {
  tools::out::add_secret("trace-test-secret-value");
  TraceLog log;
  TraceLane& lane = log.lane("fl-storage");
  lane.instant("error", "error", log.origin_ns(),
               "GET s3://b/k?sig=trace-test-secret-value: \xff\xfe not UTF-8 \"quoted\"\n");
  const json doc = written(log);
  bool found = false;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] != "i") continue;
    found = true;
    const std::string m = e["args"]["message"];
    CHECK(m.find("trace-test-secret-value") == std::string::npos);
    CHECK(m.find("\"quoted\"") != std::string::npos);
  }
  CHECK(found);
}

TEST_CASE("a loader's run recorded in its trace: a track per thread, a span per batch",
          "[trace][loader]") {
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto backend = std::move(registry.open("mem://tr/", {})->backend);
  for (std::size_t i = 0; i < 96; ++i) {
    REQUIRE(backend->write(fmt::format("tr/{:04}.bin", i), testing::pattern_bytes(3000, i + 1)));
  }
  const Dataset dataset = open_dataset(*backend, "tr/", {}).value();
  LoaderConfig c;
  c.sampler.batch_size = 8;
  c.sampler.epochs = 2;
  c.memory_budget = 64 << 20;
  c.io_depth = 8;
  c.trace = std::make_shared<TraceLog>();
  auto loader = Loader::open(*backend, dataset, c).value();
  std::uint64_t batches = 0;
  while (true) {
    auto b = loader->next();
    REQUIRE(b);
    if (b->end()) break;
    ++batches;
  }
  loader.reset();  // every thread done
  REQUIRE(batches == 24);
  const json doc = written(*c.trace);
  std::set<std::string> tracks;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") tracks.insert(e["args"]["name"]);
  }
  CHECK(tracks.count("fl-storage") + tracks.count("fl-storage-0") == 1);
  CHECK(tracks.count("fl-collate") == 1);
  CHECK(tracks.count("consumer") == 1);
  const auto n = span_counts(doc);
  CHECK(n.at("wait for batch") == 24);
  CHECK(n.at("collate batch") == 24);
  CHECK(n.at("busy") > 0);
  bool budget = false;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "C" && e["name"] == "memory budget") {
      budget = true;
      CHECK(e["args"]["value"].get<double>() == Approx(64 << 20));
    }
  }
  CHECK(budget);
  CHECK(doc["otherData"]["complete"] == true);
}
