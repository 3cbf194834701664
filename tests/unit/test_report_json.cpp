// The run's report as the library writes it (report_json.hpp): one schema for every front end,
// versioned; the verdict's knobs typed and in the library's words; UTF-8 whatever the names;
// the CLI's document is the library's with the CLI's own keys on top.
#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <set>
#include <string>

#include "feedline/core/text.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/loader/report_json.hpp"
#include "mem_dataset.hpp"
#include "run_options.hpp"

using namespace feedline;
using namespace feedline::loader;
using feedline::testing::MemDataset;
using json = nlohmann::json;

namespace {

LoaderConfig config_of(std::uint32_t batch, std::uint32_t epochs) {
  LoaderConfig c;
  c.sampler.batch_size = batch;
  c.sampler.epochs = epochs;
  c.memory_budget = 64 << 20;
  c.io_depth = 8;
  return c;
}

PipelineReport run_all(const MemDataset& ds, const LoaderConfig& c) {
  auto loader = Loader::open(*ds.backend, ds.dataset, c).value();
  for (;;) {
    auto b = loader->next();
    REQUIRE(b);
    if (b->end()) break;
  }
  return loader->report();
}

// Every key path of a document ("a.b", lists by their first element as "a[].b").
void paths(const json& j, const std::string& at, std::set<std::string>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      const std::string p = at.empty() ? k : at + "." + k;
      out.insert(p);
      paths(v, p, out);
    }
  } else if (j.is_array() && !j.empty()) {
    paths(j.front(), at + "[]", out);
  }
}

}  // namespace

TEST_CASE("report_json: the schema's version, the run's figures, the knobs typed", "[report]") {
  MemDataset ds(40, 4096);
  const LoaderConfig c = config_of(8, 2);
  PipelineReport r = run_all(ds, c);
  // A verdict with knobs to turn (whatever this run's was): how they are written.
  r.verdict.next = {{Knob::kIoDepth, 8, 16}, {Knob::kMemoryBudget, 64 << 20, 128 << 20}};
  r.verdict.advice = "more reads in flight";
  ReportOptions o;
  o.url = "mem://ds/";
  const json d = json::parse(report_json(r, ds.dataset, c, o));
  CHECK(d["schema"] == kReportSchema);
  CHECK(d["url"] == "mem://ds/");
  CHECK(d["format"] == "files");
  CHECK(d["samples"] == 80);
  CHECK(d["config"]["batch_size"] == 8);
  CHECK(d["dataset"]["samples"] == 40);
  CHECK(d["delivered"]["digest"] == 2 * ds.digest_sum);
  CHECK(d["memory"]["peak_rss_bytes"].get<std::uint64_t>() > 0);
  CHECK(d["runs"].is_null());  // the CLI's --runs fills it
  CHECK_FALSE(d.contains("resumed_from"));
  const json& next = d["bottleneck"]["next"];
  REQUIRE(next.size() == 2);
  CHECK(next[0] == json{{"knob", "io_depth"}, {"from", 8}, {"to", 16}});
  CHECK(next[1] == json{{"knob", "memory_budget"}, {"from", 64 << 20}, {"to", 128 << 20}});
  CHECK(d["bottleneck"]["suggestion"] ==
        "io_depth=8 -> 16, or memory_budget=64.0 MiB -> 128 MiB: more reads in flight");
  // A front end's own words for the knobs.
  o.knob_text = [](const KnobChange& k) { return fmt::format("{}:{}", knob_name(k.knob), k.to); };
  CHECK(json::parse(report_json(r, ds.dataset, c, o))["bottleneck"]["suggestion"] ==
        "io_depth:16, or memory_budget:134217728: more reads in flight");
  // Pretty-printed on request, the same document.
  CHECK(json::parse(report_json(r, ds.dataset, c, o, 2)) ==
        json::parse(report_json(r, ds.dataset, c, o)));
}

TEST_CASE("report_json: names that are not UTF-8 are written as \\xHH, never refused", "[report]") {
  MemDataset ds(8, 1024);
  const LoaderConfig c = config_of(4, 1);
  PipelineReport r = run_all(ds, c);
  ds.dataset.skipped.push_back("shard-\xff.tar: not a tar archive");  // an object left out
  r.error = Error(Errc::kCorrupt, "bad member").with_object("mem://ds/\xfe\xff");
  ReportOptions o;
  o.url = "mem://ds-\xe9/";
  const std::string text = report_json(r, ds.dataset, c, o);
  CHECK(is_utf8(text));
  const json d = json::parse(text);
  CHECK(d["url"] == "mem://ds-\\xe9/");
  CHECK(d["skipped"]["objects"] == 1);
  CHECK(d["skipped"]["examples"].front() == "shard-\\xff.tar: not a tar archive");
  CHECK(d["error"].get<std::string>().find("\\xfe\\xff") != std::string::npos);
}

TEST_CASE("report_json: where a resumed run started, and gen's digest checked", "[report]") {
  MemDataset ds(20, 2048);
  LoaderConfig c = config_of(4, 1);
  const ResumePoint from{0, {{2, 1}}};
  ReportOptions o;
  o.resumed_from = &from;
  const json d = json::parse(report_json(run_all(ds, c), ds.dataset, c, o));
  CHECK(d["resumed_from"] ==
        json{{"epoch", 0}, {"progress", json::array({{{"world_size", 2}, {"batches", 1}}})}});
  CHECK(d["delivered"]["verified"].is_null());  // no manifest: nothing to check against

  // A dataset gen wrote: every sample of every epoch must add up to its manifest's digest.
  ds.dataset.manifest = "mem://ds/.feedline-dataset";
  const PipelineReport whole = run_all(ds, c);
  ds.dataset.manifest_digest = ds.digest_sum;
  std::optional<Error> mismatch;
  o.resumed_from = nullptr;
  o.mismatch = &mismatch;
  CHECK(json::parse(report_json(whole, ds.dataset, c, o))["delivered"]["verified"] == true);
  CHECK_FALSE(mismatch);
  ds.dataset.manifest_digest = ds.digest_sum + 1;
  const json bad = json::parse(report_json(whole, ds.dataset, c, o));
  CHECK(bad["delivered"]["verified"] == false);
  REQUIRE(mismatch);
  CHECK(mismatch->code() == Errc::kCorrupt);
  // The library's error names the setting as a placeholder; the document, in its front end's
  // words (ReportOptions::names: the command line's by default, Python's when it asks).
  CHECK(std::string(mismatch->what()).find("{!index}") != std::string::npos);
  CHECK(bad["error"] == render_setting_names(mismatch->what(), SettingVocabulary::kCommandLine));
  CHECK(bad["error"].get<std::string>().find("--no-index") != std::string::npos);
  o.names = SettingVocabulary::kPython;
  const json in_python = json::parse(report_json(whole, ds.dataset, c, o));
  CHECK(in_python["error"].get<std::string>().find("rerun with index=False") != std::string::npos);
}

TEST_CASE("the CLI's run document is the library's, with each knob's flag on top", "[report]") {
  MemDataset ds(24, 2048);
  tools::RunSetup st;
  st.ctx.url = "mem://ds/";
  st.ctx.config = config_of(4, 1);
  PipelineReport r = run_all(ds, st.ctx.config);
  r.verdict.next = {{Knob::kDecodeThreads, 2, 4}};
  r.verdict.advice = "decode is CPU-bound";
  ReportOptions o;
  o.url = st.ctx.url;
  const json lib = json::parse(report_json(r, ds.dataset, st.ctx.config, o));
  const json cli = tools::run_document(r, st, ds.dataset, nullptr);
  std::set<std::string> lib_paths, cli_paths;
  paths(lib, "", lib_paths);
  paths(cli, "", cli_paths);
  lib_paths.insert("bottleneck.next[].flag");
  CHECK(cli_paths == lib_paths);
  CHECK(cli["bottleneck"]["next"][0]["flag"] == "--decode-threads");
  CHECK(cli["bottleneck"]["suggestion"] == "--decode-threads 2 -> 4: decode is CPU-bound");
  CHECK(lib["bottleneck"]["suggestion"] == "decode_threads=2 -> 4: decode is CPU-bound");
}
