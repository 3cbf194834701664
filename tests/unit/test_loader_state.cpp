// The loader state a checkpoint holds (Python's Loader.state_dict()): the round trip, the settings
// it must be resumed with, and every malformed document refused with the field named.
#include <catch2/catch.hpp>

#include <string>

#include "feedline/loader/sampler.hpp"
#include "loader_state.hpp"

using feedline::Errc;
using feedline::loader::ResumePoint;
using feedline::loader::SamplerConfig;
using feedline::tools::format_loader_state;
using feedline::tools::loader_state;
using feedline::tools::loader_state_mismatch;
using feedline::tools::LoaderState;
using feedline::tools::parse_loader_state;

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
  const LoaderState s = loader_state("/d", 1000, settings(), ResumePoint{1, {{4, 7}, {2, 3}}});
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
  const LoaderState s =
      loader_state("s3://bucket/train/", 1000, settings(), ResumePoint{1, {{4, 7}, {2, 3}}});
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
  const LoaderState s = loader_state("/d", 1000, settings(), ResumePoint{});
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
  refused(edited("version", "2"), "version 2 is not one this feedline reads");
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
