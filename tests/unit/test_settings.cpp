// The settings table (feedline/loader/settings.hpp): the one source of every knob's name, default
// and range, which the command line, config files and Python are made from.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "feedline/loader/report.hpp"
#include "feedline/loader/settings.hpp"

using namespace feedline;
using namespace feedline::loader;

TEST_CASE("settings: every entry is well formed, and its default is one of its own values",
          "[settings]") {
  std::set<std::string_view> names;
  for (const Setting& s : settings()) {
    INFO(s.name);
    CHECK(names.insert(s.name).second);  // one name per knob
    CHECK(!s.name.empty());
    for (char c : s.name) CHECK(((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'));
    CHECK(!s.help.empty());
    CHECK(s.help.find('\n') == std::string_view::npos);
    CHECK(!s.section.empty());
    CHECK(find_setting(s.name) == &s);
    // Its help names other settings only as {name}, which each front end renders in its words.
    for (std::size_t at = s.help.find('{'); at != std::string_view::npos;
         at = s.help.find('{', at + 1)) {
      const std::size_t end = s.help.find('}', at);
      REQUIRE(end != std::string_view::npos);
      CHECK(find_setting(s.help.substr(at + 1, end - at - 1)) != nullptr);
    }
    const std::string def = setting_default(s);
    if (s.type == SettingType::kChoice) {
      CHECK(s.choices.size() >= 2);  // its default, where it has one, is checked below
    }
    if (s.type == SettingType::kCount || s.type == SettingType::kNumber) CHECK(s.min <= s.max);
    if (!def.empty()) {
      // The default is a value the setting takes, and reads back the same.
      LoaderSettings t;
      REQUIRE(set_setting(t, s, def).has_value());
      CHECK(setting_text(t, s) == def);
    }
  }
  CHECK(find_setting("no_such_setting") == nullptr);
  CHECK(find_setting("io-depth") == nullptr);  // the field's name, not a front end's
}

TEST_CASE("settings: values are checked by type and range, and the error is the value's alone",
          "[settings]") {
  LoaderSettings s;
  const Setting& io = *find_setting("io_depth");
  REQUIRE(set_setting(s, io, "128").has_value());
  CHECK(s.io_depth == 128);
  auto zero = set_setting(s, io, "0");
  REQUIRE(!zero);
  CHECK(zero.error().message() == "0 is out of range: 1..65536");
  CHECK(s.io_depth == 128);  // a refused value changes nothing
  CHECK(!set_setting(s, io, "-1"));
  CHECK(!set_setting(s, io, "1e3"));
  CHECK(!set_setting(s, io, ""));

  const Setting& shuffle = *find_setting("shuffle");
  REQUIRE(set_setting(s, shuffle, "false").has_value());
  CHECK(!s.shuffle);
  REQUIRE(set_setting(s, shuffle, "1").has_value());
  CHECK(s.shuffle);
  CHECK(!set_setting(s, shuffle, "maybe"));

  const Setting& budget = *find_setting("memory_budget");
  REQUIRE(set_setting(s, budget, "256MiB").has_value());
  CHECK(s.memory_budget == "256MiB");
  CHECK(!set_setting(s, budget, "lots"));

  const Setting& on_error = *find_setting("on_error");
  auto policy = set_setting(s, on_error, "ignore");
  REQUIRE(!policy);
  CHECK(policy.error().message() == "'ignore' is not one of fail, skip");

  const Setting& au = *find_setting("au_target");
  CHECK(!set_setting(s, au, "0"));  // (0..1]
  REQUIRE(set_setting(s, au, "0.9").has_value());
  CHECK(s.au_target == 0.9);
  CHECK(setting_text(s, au) == "0.9");

  const Setting& rank = *find_setting("rank");
  CHECK(setting_text(s, rank).empty());  // unset
  REQUIRE(set_setting(s, rank, "3").has_value());
  CHECK(s.rank == 3u);

  const Setting& endpoint = *find_setting("endpoint");  // nested: the network's settings
  REQUIRE(set_setting(s, endpoint, "http://127.0.0.1:9000").has_value());
  CHECK(s.net.endpoint == "http://127.0.0.1:9000");
}

TEST_CASE("settings: a message names settings in each front end's words", "[settings]") {
  const std::string m = "{shard_shuffle} shuffles: it cannot go with {!shuffle} ({x} stays)";
  CHECK(render_setting_names(m, SettingVocabulary::kCommandLine) ==
        "--shard-shuffle shuffles: it cannot go with --no-shuffle ({x} stays)");
  CHECK(render_setting_names(m, SettingVocabulary::kPython) ==
        "shard_shuffle shuffles: it cannot go with shuffle=False ({x} stays)");
  CHECK(render_setting_names(m, SettingVocabulary::kConfigFile) ==
        "shard-shuffle shuffles: it cannot go with shuffle = false ({x} stays)");
  const std::string v =
      "{on_error=skip}, {io_depth=64}, {!shuffle}, {shuffle=false}, {direct=true}, {nope=1}";
  CHECK(render_setting_names(v, SettingVocabulary::kCommandLine) ==
        "--on-error skip, --io-depth 64, --no-shuffle, --no-shuffle, --direct, {nope=1}");
  CHECK(render_setting_names(v, SettingVocabulary::kPython) ==
        "on_error=\"skip\", io_depth=64, shuffle=False, shuffle=False, direct=True, {nope=1}");
  CHECK(render_setting_names(v, SettingVocabulary::kConfigFile) ==
        "on-error = \"skip\", io-depth = 64, shuffle = false, shuffle = false, direct = true, "
        "{nope=1}");
  CHECK(render_setting_names("no braces", SettingVocabulary::kPython) == "no braces");
  CHECK(render_setting_names("{io_depth", SettingVocabulary::kPython) == "{io_depth");
  CHECK(setting_name("io_depth", SettingVocabulary::kCommandLine) == "--io-depth");
  CHECK(setting_range(*find_setting("io_depth")) == "1..65536");
  CHECK(setting_range(*find_setting("crop")) == "random-resized, center, none");
  CHECK(setting_range(*find_setting("seed")) == "0..18446744073709551615");
  LoaderSettings s;
  REQUIRE(set_setting(s, *find_setting("seed"), "18446744073709551615").has_value());
  CHECK(s.seed == ~std::uint64_t{0});
  CHECK(!set_setting(s, *find_setting("seed"), "18446744073709551616"));
}

TEST_CASE("settings: every knob the verdict turns is a setting, named as the table names it",
          "[settings]") {
  for (const Knob k :
       {Knob::kIoDepth, Knob::kDecodeThreads, Knob::kPrefetchBatches, Knob::kMemoryBudget,
        Knob::kBatchSize, Knob::kShardShuffle, Knob::kCudaStreams, Knob::kConnections,
        Knob::kPartSize, Knob::kStorageThreads}) {
    INFO(knob_name(k));
    CHECK(find_setting(knob_name(k)) != nullptr);
  }
}
