// The loader state a checkpoint holds (Python's Loader.state_dict()): the round trip, the settings
// it must be resumed with, and every malformed document refused with the field named.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "feedline/loader/dataset.hpp"
#include "feedline/loader/digest.hpp"
#include "feedline/loader/sampler.hpp"
#include "feedline/loader/state.hpp"

using feedline::Errc;
using feedline::loader::format_loader_state;
using feedline::loader::loader_state;
using feedline::loader::loader_state_dataset_mismatch;
using feedline::loader::loader_state_mismatch;
using feedline::loader::LoaderState;
using feedline::loader::parse_loader_state;
using feedline::loader::ResumePoint;
using feedline::loader::SamplerConfig;

namespace {

SamplerConfig settings() {
  SamplerConfig c;
  c.num_samples = 1000;
  c.batch_size = 32;
  c.epochs = 3;
  c.seed = 9;
  c.rank = 1;
  c.world_size = 4;
  c.shard_shuffle = 2;
  return c;
}

// The formatted state with one field's JSON text replaced (or removed: an empty value).
std::string edited(const std::string& field, const std::string& value) {
  const LoaderState s =
      loader_state("/d", 1000, 0xfeed, settings(), ResumePoint{1, {{4, 7}, {2, 3}}});
  std::string text = format_loader_state(s);
  const std::string key = "\"" + field + "\":";
  const auto at = text.find(key);
  REQUIRE(at != std::string::npos);
  auto end = at + key.size();
  int depth = 0;
  for (; end < text.size(); ++end) {
    const char ch = text[end];
    if (ch == '[' || ch == '{') ++depth;
    if (ch == ']' || ch == '}') {
      if (depth == 0) break;
      --depth;
    }
    if (ch == ',' && depth == 0) break;
  }
  if (value.empty()) {
    const bool comma = text[end] == ',';
    text.erase(at, end - at + (comma ? 1 : 0));
    if (!comma && text[at - 1] == ',') text.erase(at - 1, 1);
  } else {
    text.replace(at + key.size(), end - at - key.size(), value);
  }
  return text;
}

}  // namespace

TEST_CASE("loader state: what state_dict() writes reads back the same") {
  const LoaderState s = loader_state("s3://bucket/train/", 1000, 0x0123456789abcdefull, settings(),
                                     ResumePoint{1, {{4, 7}, {2, 3}}});
  auto back = parse_loader_state(format_loader_state(s));
  REQUIRE(back);
  CHECK(*back == s);
  CHECK(back->resume.progress.size() == 2);
  CHECK(back->resume.progress[0].world_size == 4);
  CHECK(back->resume.progress[1].batches == 3);
  CHECK_FALSE(loader_state_mismatch(*back, settings()));
  // Another rank and world size resume from it: the rest is split over the new ranks.
  SamplerConfig other = settings();
  other.rank = 0;
  other.world_size = 2;
  CHECK_FALSE(loader_state_mismatch(*back, other));
}

TEST_CASE("loader state: a setting that differs is named as the option") {
  const LoaderState s = loader_state("/d", 1000, 7, settings(), ResumePoint{});
  SamplerConfig c = settings();
  c.batch_size = 64;
  auto why = loader_state_mismatch(s, c);
  REQUIRE(why);
  CHECK(why->find("batch_size=32") != std::string::npos);
  CHECK(why->find("batch_size=64") != std::string::npos);
  c = settings();
  c.shuffle = false;
  why = loader_state_mismatch(s, c);
  REQUIRE(why);
  CHECK(why->find("shuffle=true") != std::string::npos);
}

TEST_CASE("loader state: malformed documents are refused, naming the field") {
  auto refused = [](const std::string& text, const std::string& says) {
    auto r = parse_loader_state(text);
    INFO(text);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kInvalidArgument);
    CHECK(r.error().object() == "state");
    CHECK(r.error().message().find(says) != std::string::npos);
  };
  refused("", "not a feedline loader state");
  refused("[1,2]", "not a feedline loader state");
  refused("{\"format\": \"something else\"}", "not a feedline loader state");
  refused(edited("version", "3"), "version 3 is not one this feedline reads");
  refused(edited("dataset", ""), "it has no \"dataset\"");
  refused(edited("dataset", "\"xyz\""), "dataset is not a fingerprint");
  refused(edited("dataset", "12"), "dataset is not a string");
  refused(edited("version", ""), "version none");
  refused(edited("batch_size", "-1"), "batch_size is not a count");
  refused(edited("batch_size", "4294967296"), "batch_size is 4294967296, above 4294967295");
  refused(edited("seed", "1.5"), "seed is not a count");
  refused(edited("shuffle", "1"), "shuffle is not true or false");
  refused(edited("url", "7"), "url is not a string");
  refused(edited("epochs", ""), "it has no \"epochs\"");
  refused(edited("epoch", "4"), "epoch 4 is past epochs 3");
  refused(edited("progress", "{}"), "progress is not a list");
  refused(edited("progress", "[3]"), "an entry of progress is not an object");
  refused(edited("progress", "[{\"world_size\": 0, \"batches\": 1}]"), "progress.world_size is 0");
  refused(edited("progress", "[{\"world_size\": 2}]"), "it has no \"progress.batches\"");
  std::string many = "[";
  for (int i = 0; i < 65; ++i)
    many += std::string(i ? "," : "") + "{\"world_size\":1,\"batches\":0}";
  refused(edited("progress", many + "]"), "progress lists 65 runs, at most 64");
}

namespace {

// Two tar shards of three samples each, at root /data/ds.
feedline::loader::Dataset two_shards(const std::string& root = "/data/ds") {
  feedline::loader::Dataset d;
  d.format = feedline::loader::DatasetFormat::kTar;
  d.root = root;
  for (int o = 0; o < 2; ++o) {
    d.objects.push_back({root + "/shard-00000" + std::to_string(o) + ".tar", 3 * 1536});
    for (int i = 0; i < 3; ++i) {
      feedline::loader::Sample s;
      s.object = static_cast<std::uint32_t>(o);
      s.offset = 512 + static_cast<std::uint64_t>(i) * 1536;
      s.length = 1024;
      s.member_count = 1;
      s.key = "sample_" + std::to_string(o * 3 + i);
      d.samples.push_back(s);
    }
  }
  return d;
}

}  // namespace

TEST_CASE("loader state: a state resumes only on the dataset it was saved on") {
  using feedline::loader::listing_fingerprint;
  const auto saved_on = two_shards();
  const LoaderState s = loader_state("/data/ds", saved_on, settings(), ResumePoint{0, {{1, 1}}});
  CHECK(s.dataset_fingerprint == listing_fingerprint(saved_on));
  auto back = parse_loader_state(format_loader_state(s));
  REQUIRE(back);
  CHECK(back->dataset_fingerprint == s.dataset_fingerprint);
  CHECK_FALSE(loader_state_dataset_mismatch(*back, saved_on, "/data/ds"));
  // The same dataset moved elsewhere: the same listing.
  CHECK_FALSE(loader_state_dataset_mismatch(*back, two_shards("/mnt/elsewhere"), "/mnt/elsewhere"));
  // Another dataset of the same size: its samples are others.
  auto other = saved_on;
  for (auto& smp : other.samples) smp.key = "other_" + smp.key;
  auto why = loader_state_dataset_mismatch(*back, other, "/data/other");
  REQUIRE(why);
  CHECK(why->find("fingerprint") != std::string::npos);
  CHECK(why->find("/data/other") != std::string::npos);
  CHECK(why->find("start epoch 0 afresh") != std::string::npos);
  // The shards' contents swapped: the same names and sizes, the members moved.
  auto swapped = saved_on;
  for (auto& smp : swapped.samples) smp.object = 1 - smp.object;
  std::stable_sort(swapped.samples.begin(), swapped.samples.end(),
                   [](const auto& a, const auto& b) { return a.object < b.object; });
  CHECK(loader_state_dataset_mismatch(*back, swapped, "/data/ds"));
  // A shard resized; one sample fewer (the count says it first).
  auto resized = saved_on;
  resized.objects[1].size += 512;
  CHECK(loader_state_dataset_mismatch(*back, resized, "/data/ds"));
  auto fewer = saved_on;
  fewer.samples.pop_back();
  why = loader_state_dataset_mismatch(*back, fewer, "/data/ds");
  REQUIRE(why);
  CHECK(why->find("a dataset of 6 samples") != std::string::npos);
  // The same objects read in another format (--format files over tar shards): other samples.
  auto as_files = saved_on;
  as_files.format = feedline::loader::DatasetFormat::kFiles;
  CHECK(loader_state_dataset_mismatch(*back, as_files, "/data/ds"));
  // gen's digest of the bytes: another generation of the same shape differs.
  auto regenerated = saved_on;
  regenerated.manifest_digest = 42;
  CHECK(loader_state_dataset_mismatch(*back, regenerated, "/data/ds"));
}

TEST_CASE(
    "loader state: a version 1 state (no dataset fingerprint) is refused, saying what to do") {
  std::string text =
      format_loader_state(loader_state("/d", 1000, 7, settings(), ResumePoint{2, {}}));
  const auto at = text.find("\"version\":2");
  REQUIRE(at != std::string::npos);
  text.replace(at, 11, "\"version\":1");
  auto r = parse_loader_state(text);
  REQUIRE_FALSE(r);
  CHECK(r.error().message().find("version 1") != std::string::npos);
  CHECK(r.error().message().find("start epoch 2 afresh") != std::string::npos);
}

TEST_CASE("loader state: resume_from() checks the settings, then the dataset, then resumes") {
  using feedline::loader::resume_from;
  const auto ds = two_shards();
  SamplerConfig c = settings();
  const LoaderState s = loader_state("/data/ds", ds, c, ResumePoint{1, {{2, 1}}});
  // Another batch size: refused, naming it; nothing is changed.
  SamplerConfig other = c;
  other.batch_size = 16;
  auto r = resume_from(s, ds, "/data/ds", other);
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::kInvalidArgument);
  CHECK(r.error().message().starts_with("state: it was saved with batch_size=32"));
  CHECK(other.resume.at_start());
  // Another dataset: refused, naming it.
  auto fewer = ds;
  fewer.samples.pop_back();
  r = resume_from(s, fewer, "/data/fewer", c);
  REQUIRE_FALSE(r);
  CHECK(r.error().message().find("/data/fewer") != std::string::npos);
  CHECK(c.resume.at_start());
  // The same: the sampler starts where the state stood.
  REQUIRE(resume_from(s, ds, "/data/ds", c));
  CHECK(c.resume == ResumePoint{1, {{2, 1}}});
}
