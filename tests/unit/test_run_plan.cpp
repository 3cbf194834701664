// The run plan (feedline/loader/run_plan.hpp): what settings and a URL make, checked once for every
// front end, with errors that name settings as {name} placeholders each front end renders.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "feedline/loader/run_plan.hpp"
#include "feedline/loader/settings.hpp"
#include "test_support.hpp"

using namespace feedline;
using namespace feedline::loader;

namespace {

storage::EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// The plan's error in each front end's words.
std::pair<std::string, std::string> both_words(const Error& e) {
  return {render_setting_names(e.message(), SettingVocabulary::kCommandLine),
          render_setting_names(e.message(), SettingVocabulary::kPython)};
}

}  // namespace

TEST_CASE("run plan: settings make the loader's, the backend's and the dataset's configuration",
          "[run_plan]") {
  LoaderSettings s;
  s.batch_size = 8;
  s.epochs = 3;
  s.seed = 7;
  s.io_depth = 16;
  s.memory_budget = "64MiB";
  s.max_sample_size = "1MiB";
  s.on_error = "skip";
  s.index = false;
  s.format = "tar";
  s.throttle_bw = "100MiB";
  s.throttle_seek = "2ms";
  s.net.part_size = "16MiB";
  s.net.insecure = true;
  s.compute_time = "5ms";
  auto p = plan_run(s, "mem://ds/", env_of({}));
  REQUIRE(p);
  const LoaderConfig& c = p->ctx.config;
  CHECK(c.sampler.batch_size == 8);
  CHECK(c.sampler.epochs == 3);
  CHECK(c.sampler.seed == 7);
  CHECK(c.sampler.rank == 0);
  CHECK(c.sampler.world_size == 1);
  CHECK(c.io_depth == 16);
  CHECK(c.memory_budget == 64u << 20);
  CHECK(c.max_sample_bytes == 1u << 20);
  CHECK(c.on_error == OnError::kSkip);
  CHECK(p->dataset.skip_bad_objects);
  CHECK_FALSE(p->dataset.use_index);
  REQUIRE(p->format);
  CHECK(p->dataset.format == *p->format);
  REQUIRE(p->throttle);
  CHECK(p->throttle->bytes_per_second == 100.0 * (1u << 20));
  CHECK(p->throttle->seek == std::chrono::milliseconds(2));
  CHECK(p->backend.http.part_size == 16u << 20);
  CHECK(p->backend.http.insecure);
  CHECK(p->ctx.compute_time == "5ms");
  CHECK(p->ctx.url == "mem://ds/");
  // What the user should know, in each front end's words.
  REQUIRE(p->notes.size() == 1);
  CHECK(render_setting_names(p->notes[0], SettingVocabulary::kCommandLine) ==
        "--insecure: TLS certificates are NOT verified");
  CHECK(render_setting_names(p->notes[0], SettingVocabulary::kPython) ==
        "insecure: TLS certificates are NOT verified");
}

TEST_CASE("run plan: a bad value's error names the setting in each front end's words",
          "[run_plan]") {
  LoaderSettings s;
  s.memory_budget = "1KiB";
  auto p = plan_run(s, "mem://ds/", env_of({}));
  REQUIRE_FALSE(p);
  CHECK(p.error().code() == Errc::kInvalidArgument);
  CHECK(p.error().message() == "{memory_budget} must be at least 1 MiB");
  auto [cli, py] = both_words(p.error());
  CHECK(cli == "--memory-budget must be at least 1 MiB");
  CHECK(py == "memory_budget must be at least 1 MiB");

  LoaderSettings shuffled;
  shuffled.shard_shuffle = 4;
  shuffled.shuffle = false;
  auto q = plan_run(shuffled, "mem://ds/", env_of({}));
  REQUIRE_FALSE(q);
  std::tie(cli, py) = both_words(q.error());
  CHECK(cli == "--shard-shuffle shuffles: it cannot go with --no-shuffle");
  CHECK(py == "shard_shuffle shuffles: it cannot go with shuffle=False");

  LoaderSettings net;
  net.net.endpoint = "http://127.0.0.1:9000";
  auto r = plan_run(net, "/data/train", env_of({}));
  REQUIRE_FALSE(r);
  std::tie(cli, py) = both_words(r.error());
  CHECK(cli == "--endpoint, --region, --profile and --no-sign-request are for s3:// URLs");
  CHECK(py == "endpoint, region, profile and sign_request=False are for s3:// URLs");
}

TEST_CASE("run plan: rank and world size from the settings, else from the launcher's environment",
          "[run_plan]") {
  LoaderSettings s;
  auto torchrun = plan_run(s, "mem://ds/", env_of({{"RANK", "2"}, {"WORLD_SIZE", "4"}}));
  REQUIRE(torchrun);
  CHECK(torchrun->ctx.config.sampler.rank == 2);
  CHECK(torchrun->ctx.config.sampler.world_size == 4);
  // The settings beat the environment; no lookup at all is an empty environment.
  s.rank = 1;
  s.world_size = 2;
  auto given = plan_run(s, "mem://ds/", env_of({{"RANK", "2"}, {"WORLD_SIZE", "4"}}));
  REQUIRE(given);
  CHECK(given->ctx.config.sampler.rank == 1);
  CHECK(plan_run(s, "mem://ds/", storage::EnvLookup{}));
  // Errors name the variable, or the setting.
  LoaderSettings none;
  auto half = plan_run(none, "mem://ds/", env_of({{"SLURM_NTASKS", "4"}}));
  REQUIRE_FALSE(half);
  CHECK(both_words(half.error()).first ==
        "SLURM_NTASKS is set but SLURM_PROCID is not: set both, or give --rank");
  CHECK(both_words(half.error()).second ==
        "SLURM_NTASKS is set but SLURM_PROCID is not: set both, or give rank");
  LoaderSettings beyond;
  beyond.rank = 3;
  beyond.world_size = 2;
  auto past = plan_run(beyond, "mem://ds/", env_of({}));
  REQUIRE_FALSE(past);
  CHECK(both_words(past.error()).first == "--rank 3 must be below --world-size 2");
  CHECK(both_words(past.error()).second == "rank 3 must be below world_size 2");
}

TEST_CASE("run plan: open_run opens the dataset the plan names and fills its figures",
          "[run_plan]") {
  const std::filesystem::path dir = feedline::testing::scratch_dir("run-plan-files");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (int i = 0; i < 3; ++i) std::ofstream(dir / ("s" + std::to_string(i) + ".bin")) << "abcd";
  LoaderSettings s;
  s.shard_shuffle = 2;
  auto p = plan_run(s, dir.string(), env_of({}));
  REQUIRE(p);
  auto run = open_run(*p, dir.string());
  REQUIRE(run);
  CHECK(run->dataset.samples.size() == 3);
  CHECK(p->ctx.dataset_samples == 3);
  CHECK(p->ctx.dataset_bytes == 12);
  CHECK(p->ctx.format == "files");
  CHECK(p->ctx.potential_caching);
  // Shuffling shards of one file each: said, in each front end's words, never printed.
  REQUIRE(run->notes.size() == 1);
  CHECK(render_setting_names(run->notes[0], SettingVocabulary::kCommandLine)
            .starts_with("--shard-shuffle shuffles the shards"));
  CHECK(render_setting_names(run->notes[0], SettingVocabulary::kPython)
            .starts_with("shard_shuffle shuffles the shards"));
  // A URL with nothing there: the storage's error, as it is.
  auto missing = open_run(*p, (dir / "nothing-here").string());
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code() == Errc::kNotFound);
}
