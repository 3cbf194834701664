#include "gen_cmd.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <thread>

#include "cli_error.hpp"
#include "net_options.hpp"
#include "feedline/core/units.hpp"
#include "feedline/loader/gen.hpp"
#include "feedline/storage/registry.hpp"
#include "progress.hpp"
#include "signals.hpp"

namespace feedline::tools {
namespace {

struct Options {
  std::string url;
  NetOptions net;
  std::string format = "files";
  std::uint64_t samples = 1000;
  std::string sample_size = "128KiB";
  std::string max_sample_size = "1GiB";
  std::uint64_t samples_per_shard = 1000;
  std::string compress = "none";
  double compressibility = 0;
  bool no_label = false;
  std::uint64_t seed = 0;
  std::string output = "text";
};

int run(const Options& o) {
  loader::GenConfig c;
  c.format = value_or_usage(loader::parse_format(o.format));
  c.samples = o.samples;
  {
    auto d = loader::SizeDistribution::parse(o.sample_size);
    if (!d) throw UsageError(fmt::format("--sample-size: {}", d.error().message()));
    c.sample_size = *d;
  }
  {
    auto m = parse_size(o.max_sample_size);
    if (!m) throw UsageError(fmt::format("--max-sample-size: {}", m.error().message()));
    c.max_sample_size = *m;
  }
  c.samples_per_shard = o.samples_per_shard;
  {
    auto cs = loader::CompressionSpec::parse(o.compress);
    if (!cs) throw UsageError(fmt::format("--compress: {}", cs.error().message()));
    c.compress = *cs;
  }
  c.compressibility = o.compressibility;
  c.with_label = !o.no_label;
  c.seed = o.seed;
  if (o.output != "text" && o.output != "json") {
    throw UsageError(fmt::format("--output: unknown format '{}' (choose text or json)", o.output));
  }
  value_or_usage(loader::validate(c));

  storage::Registry registry;
  storage::register_builtin_backends(registry);
  storage::BackendConfig bc;
  {
    std::vector<std::string> notes;
    apply_net_options(o.net, o.url, bc, notes);
    for (const auto& n : notes) std::fprintf(stderr, "feedline: note: %s\n", n.c_str());
  }
  storage::Resolved resolved = value_or_usage(registry.open(o.url, bc));

  const std::atomic<bool>& stop_flag = install_stop_handlers();
  std::stop_source stop;
  std::jthread watcher([&stop, &stop_flag](std::stop_token st) {
    while (!st.stop_requested()) {
      if (stop_flag.load()) {
        stop.request_stop();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::atomic<std::uint64_t> done{0};
  loader::GenHooks hooks;
  hooks.stop = stop.get_token();
  hooks.progress = [&done](std::uint64_t n) { done.store(n, std::memory_order_relaxed); };
  Result<loader::GenSummary> summary = [&] {
    ProgressLine line(o.output == "text" && stdout_is_tty(), [&done, &o](double s) {
      const double n = static_cast<double>(done.load(std::memory_order_relaxed));
      return fmt::format("[{:5.1f}s] {:.0f}/{} samples written", s, n, o.samples);
    });
    return loader::generate_dataset(*resolved.backend, resolved.key, c, hooks);
  }();
  watcher.request_stop();
  if (!summary) {
    fmt::print(stderr, "feedline: error: {}\n", summary.error().what());
    return summary.error().code() == Errc::kCancelled ? exit_code_for_stop() : kExitRuntime;
  }
  const auto& s = *summary;
  if (o.output == "json") {
    nlohmann::json j = {{"url", o.url},
                        {"format", loader::format_name(c.format)},
                        {"samples", s.samples},
                        {"members", s.members},
                        {"objects", s.objects},
                        {"index_objects", s.index_objects},
                        {"bytes_stored", s.bytes_stored},
                        {"bytes_decoded", s.bytes_decoded},
                        {"digest", s.digest},
                        {"sample_size", c.sample_size.to_string()},
                        {"compress", c.compress.to_string()},
                        {"compressibility", c.compressibility},
                        {"seed", c.seed}};
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("feedline gen: {} ({}, {} samples, sizes {}, compress {}, seed {})\n", o.url,
               loader::format_name(c.format), s.samples, c.sample_size.to_string(), c.compress.to_string(), c.seed);
    fmt::print("  wrote {} object(s){}, {} stored, {} decoded\n", s.objects,
               s.index_objects ? fmt::format(" + {} index(es)", s.index_objects) : "",
               format_bytes(static_cast<double>(s.bytes_stored)), format_bytes(static_cast<double>(s.bytes_decoded)));
    fmt::print("  digest {} (sum of XXH3-64 over decoded members; `feedline run` reports the same per epoch)\n",
               s.digest);
  }
  return kExitOk;
}

}  // namespace

void add_gen(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("gen", "Write a synthetic dataset (deterministic for a seed)");
  cmd->add_option("url", o->url, "Where: a directory, file:///path or mem://prefix")->required();
  add_net_options(*cmd, o->net);
  cmd->add_option("--format", o->format, "files (one sample per file) or tar (WebDataset shards)")->capture_default_str();
  cmd->add_option("--samples", o->samples, "Number of samples")->capture_default_str();
  cmd->add_option("--sample-size", o->sample_size, "Size: 128KiB, normal:MEAN:STDEV, lognormal:MEAN:STDEV, uniform:MIN:MAX")
      ->capture_default_str();
  cmd->add_option("--max-sample-size", o->max_sample_size, "Clamp drawn sizes to this")->capture_default_str();
  cmd->add_option("--samples-per-shard", o->samples_per_shard, "Samples per tar shard")->capture_default_str();
  cmd->add_option("--compress", o->compress, "none or zstd[:LEVEL] (per sample)")->capture_default_str();
  cmd->add_option("--compressibility", o->compressibility, "Fraction of each sample that compresses, 0..1")
      ->capture_default_str();
  cmd->add_flag("--no-label", o->no_label, "tar: no .cls member per sample");
  cmd->add_option("--seed", o->seed, "Seed: the same arguments give the same bytes")->capture_default_str();
  cmd->add_option("--output", o->output, "text or json")->capture_default_str();
  cmd->callback([o, &exit_code] { exit_code = run(*o); });
}

}  // namespace feedline::tools
