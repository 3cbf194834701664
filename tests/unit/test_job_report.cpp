// A job's report from its ranks' documents (feedline/loader/job_report.hpp, its text
// tools/src/job_report.hpp): sums, the digest mod 2^64, AU over every accelerator of every rank,
// the straggler over each rank's own time, the job's verdict and the failing rank named. Planted
// documents: no MPI or process group needed.
#include "feedline/loader/job_report.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "job_report.hpp"

using feedline::loader::JobSetup;
using feedline::tools::job_text;
using nlohmann::json;

namespace {

// The library's document of planted rank documents, as the CLI and the Python package make it.
json job_document(const std::vector<json>& ranks, const JobSetup& setup) {
  std::vector<std::string> texts;
  for (const json& r : ranks) texts.push_back(r.dump());
  auto doc = feedline::loader::job_report_json(texts, setup);
  REQUIRE(doc);
  return json::parse(*doc);
}

json stage_row(const char* name, unsigned threads, double busy) {
  return {{"name", name},
          {"threads", threads},
          {"busy_fraction", busy},
          {"starved_fraction", 0.0},
          {"blocked_fraction", 1 - busy},
          {"cpu_seconds", busy},
          {"items", 100u},
          {"items_inline", 0u},
          {"bytes", 1000u}};
}

// A rank's document as host_document() writes it, reduced to what the job reads.
json rank_doc(unsigned rank, std::uint64_t samples, double wall, double sync, const char* stage,
              std::vector<double> aus, std::uint64_t digest) {
  json each = json::array();
  for (double au : aus) each.push_back({{"au", au}});
  return {{"rank", rank},
          {"host", rank < 2 ? "alpha" : "beta"},
          {"url", "/data"},
          {"format", "tar"},
          {"samples", samples},
          {"bytes", samples * 1000},
          {"batches", samples / 10},
          {"wall_seconds", wall},
          {"sync_seconds", sync},
          {"samples_per_second", samples / wall},
          {"accelerators", aus.size()},
          {"au", nullptr},
          {"consumer_wait", {{"fraction", 0.1}}},
          {"stages", json::array({stage_row("storage", 2, 0.5), stage_row("decode", 2, 0.2)})},
          {"queues", json::array({{{"name", "reads"},
                                   {"capacity", 8u},
                                   {"mean_occupancy", 1.0},
                                   {"producer_blocked_fraction", 0.0},
                                   {"consumer_starved_fraction", 0.0},
                                   {"items", 100u}}})},
          {"io", {{"reads", 100u}, {"bytes", samples * 1000}}},
          {"memory", {{"peak_rss_bytes", 1000u + rank}}},
          {"bottleneck",
           {{"stage", stage},
            {"evidence", std::string("planted ") + stage},
            {"suggestion", std::string("turn a knob for ") + stage},
            {"next", json::array()}}},
          {"delivered", {{"samples", samples}, {"digest", digest}}},
          {"skipped", {{"samples", 0u}}},
          {"per_accelerator", each},
          {"interrupted", false},
          {"error", nullptr}};
}

}  // namespace

TEST_CASE("job report: sums, rates over the longest rank, the digest mod 2^64", "[tools][mpi]") {
  const std::uint64_t big = ~std::uint64_t{0} - 5;  // the sum wraps, as the digest does
  std::vector<json> ranks = {rank_doc(0, 1000, 10, 0.5, "storage", {0.9, 0.95}, big),
                             rank_doc(1, 1000, 10, 0.4, "storage", {0.92, 0.97}, 10),
                             rank_doc(2, 1000, 10.5, 0.1, "storage", {0.91, 0.93}, 7)};
  JobSetup setup;
  setup.hosts = 2;
  setup.au_target = 0.90;
  setup.emulated = true;
  const json j = job_document(ranks, setup);
  CHECK(j["samples"] == 3000);
  CHECK(j["bytes"] == 3000000);
  CHECK(j["wall_seconds"] == 10.5);
  CHECK(j["samples_per_second"].get<double>() == Approx(3000 / 10.5));
  CHECK(j["delivered"]["digest"].get<std::uint64_t>() == big + 10 + 7);  // mod 2^64
  CHECK(j["accelerators"] == 6);
  CHECK(j["accelerators_per_rank"] == 2);
  CHECK(j["hosts"] == 2);
  CHECK(j["au_min"].get<double>() == Approx(0.9));
  CHECK(j["au_min_at"]["rank"] == 0);
  CHECK(j["au_min_at"]["accelerator"] == 0);
  CHECK(j["au_max"].get<double>() == Approx(0.97));
  CHECK(j["au_mean"].get<double>() == Approx((0.9 + 0.95 + 0.92 + 0.97 + 0.91 + 0.93) / 6));
  CHECK(j["au_pass"] == true);
  CHECK(j["ranks"].size() == 3);
  CHECK(j["ranks"][2]["host"] == "beta");
  CHECK(j["stages"][0]["threads"] == 6);  // summed over the ranks
  CHECK(j["io"]["reads"] == 300);
  CHECK(j["memory"]["peak_rss_bytes"] == 1002);
  CHECK(j["mlperf"]["num_accelerators"] == 6);
  CHECK(j["mlperf"]["num_hosts"] == 2);
  CHECK(j["mlperf"]["train_au_meet_expectation"] == "success");
  CHECK(j["error"].is_null());
  CHECK_FALSE(j["stragglers"]["straggler"].get<bool>());
  CHECK(j["bottleneck"]["stage"] == "storage");
}

TEST_CASE("job report: the straggler is the slowest over its own time, with what held it back",
          "[tools][mpi]") {
  // Rank 1 read slowly; ranks 0 and 2 waited for it at the barriers, so all three took 10 s.
  // Over their own time (barrier waits left out) rank 1 is the slow one.
  std::vector<json> ranks = {rank_doc(0, 1000, 10, 6, "consumer", {0.5}, 1),
                             rank_doc(1, 1000, 10, 0.1, "storage", {0.45}, 2),
                             rank_doc(2, 1000, 10, 5.5, "decode", {0.55}, 3)};
  const json j = job_document(ranks, JobSetup{});
  const json& s = j["stragglers"];
  CHECK(s["rank"] == 1);
  CHECK(s["straggler"] == true);
  CHECK(s["bottleneck"] == "storage");
  CHECK(s["cause"].get<std::string>().find("storage link") != std::string::npos);
  CHECK(s["ratio"].get<double>() < 0.5);
  // The others wait for it: its stage is the job's, though each rank names a different one.
  CHECK(j["bottleneck"]["stage"] == "storage");
  CHECK(j["bottleneck"]["evidence"].get<std::string>().find("wait for rank 1") !=
        std::string::npos);
  CHECK(j["bottleneck"]["suggestion"] == "turn a knob for storage");
  CHECK(job_text(j).find("a straggler, held back by its own storage link") != std::string::npos);

  // Held back by decode instead: the cause says so.
  ranks = {rank_doc(0, 1000, 10, 6, "storage", {}, 1), rank_doc(1, 1000, 10, 0, "decode", {}, 2)};
  const json k = job_document(ranks, JobSetup{});
  CHECK(k["stragglers"]["rank"] == 1);
  CHECK(k["stragglers"]["cause"] == "decode CPU");
  CHECK(k["au"].is_null());  // no accelerator measured AU
}

TEST_CASE("job report: the first failing rank's error is the job's, naming rank and host",
          "[tools][mpi]") {
  json failed = {{"rank", 2u},
                 {"host", "beta"},
                 {"error", "not found: /data: no samples"},
                 {"exit_code", 1},
                 {"interrupted", false}};
  json stopped = rank_doc(0, 10, 1, 0, "storage", {}, 1);
  stopped["interrupted"] = true;  // stopped because rank 2 failed: not an error of its own
  std::vector<json> ranks = {stopped, rank_doc(1, 10, 1, 0, "storage", {}, 2), failed};
  const json j = job_document(ranks, JobSetup{});
  REQUIRE(j["error"].is_string());
  CHECK(j["error"] == "rank 2 (host beta): not found: /data: no samples");
  CHECK_FALSE(j["interrupted"].get<bool>());
  CHECK(j["samples"] == 20);  // the ranks that ran
  CHECK(job_text(j).find("failed: not found") != std::string::npos);
}

TEST_CASE("job agreement: the first option a rank has otherwise is named with the ranks",
          "[tools][mpi]") {
  using feedline::tools::agreement_json;
  using feedline::tools::first_disagreement;
  auto who = [](unsigned r) { return "rank " + std::to_string(r) + " of 3 (host h)"; };
  const feedline::tools::Agreement base = {
      {"--epochs", "1"}, {"--seed", "0"}, {"--batch-size", "32"}, {"the dataset", "600 samples"}};
  auto with = [&](const std::string& name, const std::string& value) {
    auto a = base;
    for (auto& [n, v] : a) {
      if (n == name) v = value;
    }
    return agreement_json(a);
  };
  CHECK_FALSE(
      first_disagreement({agreement_json(base), agreement_json(base), agreement_json(base)}, who));
  auto why =
      first_disagreement({agreement_json(base), with("--epochs", "3"), agreement_json(base)}, who);
  REQUIRE(why);
  CHECK(why->find("--epochs: rank 0 of 3 (host h) has 1, rank 1 of 3 (host h) has 3") !=
        std::string::npos);
  CHECK(why->find("give every rank the same --epochs") != std::string::npos);
  // Rank 0's order decides which is named first; every rank that differs is listed.
  why = first_disagreement({agreement_json(base), with("--batch-size", "16"), with("--seed", "7")},
                           who);
  REQUIRE(why);
  CHECK(why->find("--seed: rank 0 of 3 (host h) has 0, rank 2 of 3 (host h) has 7") !=
        std::string::npos);
  why = first_disagreement({agreement_json(base), agreement_json(base), with("the dataset", "1")},
                           who);
  REQUIRE(why);
  CHECK(why->find("every rank must read the same dataset") != std::string::npos);
  // A rank that lacks an item (another build) differs in it.
  auto fewer = base;
  fewer.pop_back();
  why = first_disagreement({agreement_json(base), agreement_json(fewer)}, who);
  REQUIRE(why);
  CHECK(why->find("rank 1 of 3 (host h) has none") != std::string::npos);
}

TEST_CASE("job report: a rank's text that is not a JSON object is an error naming the rank",
          "[job]") {
  auto doc = feedline::loader::job_report_json({"{}", "{\"samples\": 1", "[]"}, JobSetup{});
  REQUIRE_FALSE(doc);
  CHECK(doc.error().code() == feedline::Errc::kInvalidArgument);
  CHECK_THAT(doc.error().message(), Catch::Contains("rank 1"));
}
