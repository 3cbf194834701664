#include "gen_cmd.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "cli_checks.hpp"
#include "cli_error.hpp"
#include "feedline/core/redact.hpp"
#include "feedline/core/units.hpp"
#include "feedline/loader/format.hpp"
#include "feedline/loader/gen.hpp"
#include "feedline/storage/registry.hpp"
#include "json_render.hpp"
#include "net_options.hpp"
#include "output.hpp"
#include "progress.hpp"
#include "signals.hpp"

namespace feedline::tools {
namespace {

struct GenOptions {
  std::string url;
  loader::LoaderSettings settings;  // its network settings (the only ones it takes)
  std::string format = "files";
  std::uint64_t samples = 1000;
  std::string sample_size = "128KiB";
  std::string max_sample_size = "1GiB";
  std::uint64_t samples_per_shard = 1000;
  bool samples_per_shard_given = false;  // --samples-per-file (or --samples-per-shard) was given
  std::string compress = "none";
  double compressibility = 0;
  std::string image = "none";
  bool no_label = false;
  std::uint32_t classes = 1000;
  std::uint64_t seed = 0;
  std::string output = "text";
  // --for-host[=MEMORY]: at least 5x this host's memory (or MEMORY) of samples, MLPerf Storage's
  // rule so that the page cache cannot hold the dataset. nullopt: not asked.
  std::optional<std::string> for_host;
  bool no_space_check = false;
};

// A sample is built whole in memory before it is written (twice with compression): larger than
// this it could not be, whatever --max-sample-size says.
std::uint64_t largest_buildable_sample() {
  return std::min<std::uint64_t>(physical_memory_bytes() / 4, 4ull << 30);
}

loader::GenConfig make_config(const GenOptions& o) {
  loader::GenConfig c;
  c.format = value_or_usage(loader::parse_format(o.format));
  c.samples = o.samples;
  {
    auto d = loader::SizeDistribution::parse(o.sample_size);
    if (!d) throw UsageError(fmt::format("--sample-size: {}", d.error().message()));
    c.sample_size = *d;
  }
  if (o.for_host) {
    std::uint64_t memory = physical_memory_bytes();
    if (!o.for_host->empty()) {
      auto m = parse_size(*o.for_host);
      if (!m || *m == 0) {
        throw UsageError(
            fmt::format("--for-host: {}", m ? "the memory must be positive" : m.error().message()));
      }
      memory = *m;
    }
    const double mean = std::max(1.0, c.sample_size.mean());
    const auto need =
        static_cast<std::uint64_t>(std::ceil(5.0 * static_cast<double>(memory) / mean));
    if (need > (1ull << 32)) {
      throw UsageError(fmt::format(
          "--for-host: 5 x {} of samples of {} is {} samples, more than gen writes (2^32): use "
          "larger samples",
          format_bytes(static_cast<double>(memory)), format_bytes(mean), need));
    }
    if (need > c.samples) {
      out::note(fmt::format(
          "--for-host: {} samples (5 x {} of memory over a mean sample of {}: MLPerf Storage's "
          "minimum, so that the page cache cannot hold the dataset)",
          need, format_bytes(static_cast<double>(memory)), format_bytes(mean)));
      c.samples = need;
    }
  }
  {
    auto m = parse_size(o.max_sample_size);
    if (!m) throw UsageError(fmt::format("--max-sample-size: {}", m.error().message()));
    if (*m == 0) throw UsageError("--max-sample-size must be positive");
    const std::uint64_t limit = largest_buildable_sample();
    if (*m > limit) {
      throw UsageError(fmt::format(
          "--max-sample-size {} is more than feedline gen can build in this machine's "
          "memory (at most {}: a sample is built whole before it is written)",
          format_bytes(static_cast<double>(*m)), format_bytes(static_cast<double>(limit))));
    }
    c.max_sample_size = *m;
  }
  // Clamping draws to --max-sample-size is for the tails of a distribution; a size (or a mean)
  // above it would silently write other samples than asked for.
  const double asked = c.sample_size.kind == loader::SizeDistribution::Kind::kUniform
                           ? c.sample_size.b
                           : c.sample_size.a;
  if (asked > static_cast<double>(c.max_sample_size)) {
    throw UsageError(
        fmt::format("--sample-size {}: {} {} is larger than --max-sample-size {}", o.sample_size,
                    c.sample_size.kind == loader::SizeDistribution::Kind::kFixed     ? "the size"
                    : c.sample_size.kind == loader::SizeDistribution::Kind::kUniform ? "the maximum"
                                                                                     : "the mean",
                    format_bytes(asked), format_bytes(static_cast<double>(c.max_sample_size))));
  }
  c.samples_per_shard = o.samples_per_shard;
  if (!c.format.is_auto() && c.format.spec().gen.refuses_samples_per_object &&
      o.samples_per_shard_given && o.samples_per_shard != 1) {
    throw UsageError(fmt::format("--samples-per-file {}: {} writes one sample per file",
                                 o.samples_per_shard, o.format));
  }
  {
    auto cs = loader::CompressionSpec::parse(o.compress);
    if (!cs) throw UsageError(fmt::format("--compress: {}", cs.error().message()));
    c.compress = *cs;
  }
  c.compressibility = o.compressibility;
  {
    auto im = loader::ImageSpec::parse(o.image);
    if (!im) throw UsageError(fmt::format("--image: {}", im.error().what()));
    c.image = *im;
  }
  c.with_label = !o.no_label;
  c.num_classes = o.classes;
  c.seed = o.seed;
  value_or_usage(loader::validate(c));
  return c;
}

int run_checked(const GenOptions& o, const loader::GenConfig& c) {
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  storage::BackendConfig bc;
  bc.stop = stop_token();
  {
    std::vector<std::string> notes;
    apply_net_options(o.settings.net, o.url, bc, notes);
    for (const auto& n : notes) out::note(n);
  }
  storage::Resolved resolved = value_or_exit(registry.open(o.url, bc));
  std::atomic<std::uint64_t> done{0};
  loader::GenHooks hooks;
  hooks.stop = stop_token();
  hooks.check_space = !o.no_space_check;
  hooks.progress = [&done](std::uint64_t n) { done.store(n, std::memory_order_relaxed); };
  Result<loader::GenSummary> summary = [&] {
    ProgressLine line(o.output == "text" && stdout_is_tty(), [&done, &o](double s) {
      const double n = static_cast<double>(done.load(std::memory_order_relaxed));
      return fmt::format("[{:5.1f}s] {:.0f}/{} samples written", s, n, o.samples);
    });
    return loader::generate_dataset(*resolved.backend, resolved.key, c, hooks);
  }();
  const auto& s = value_or_exit(std::move(summary));
  const std::string url = redact_url(o.url);
  if (o.output == "json") {
    nlohmann::json j = {{"url", url},
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
                        {"image", c.image.to_string()},
                        {"seed", c.seed},
                        {"manifest", s.manifest},
                        {"error", nullptr}};
    out::print("{}\n", dump_json(j, 2, Json::kAscii));
  } else {
    out::print("feedline gen: {} ({}, {} samples, {}, compress {}, seed {})\n", url,
               loader::format_name(c.format), s.samples,
               c.image.jpeg ? fmt::format("JPEG images {}x{} at quality {}", c.image.width,
                                          c.image.height, c.image.quality)
                            : "sizes " + c.sample_size.to_string(),
               c.compress.to_string(), c.seed);
    out::print("  wrote {} object(s){}, {} stored, {} decoded\n", s.objects,
               s.index_objects ? fmt::format(" + {} index(es)", s.index_objects) : "",
               format_bytes(static_cast<double>(s.bytes_stored)),
               format_bytes(static_cast<double>(s.bytes_decoded)));
    out::print(
        "  digest {} (sum of XXH3-64 over decoded members; `feedline run` reports the same per "
        "epoch)\n",
        s.digest);
    out::print(
        "  manifest {} (written last: `feedline run` refuses a dataset whose generation did not "
        "finish)\n",
        s.manifest);
  }
  return kExitOk;
}

int run(const GenOptions& o) {
  if (o.output != "text" && o.output != "json") {
    throw UsageError(fmt::format("--output: unknown format '{}' (choose text or json)", o.output));
  }
  try {
    const loader::GenConfig c = make_config(o);
    return run_checked(o, c);
  } catch (const CommandError& e) {
    // --output json: a failure is a JSON document too (the error line still goes to stderr).
    if (o.output == "json") {
      nlohmann::json j = {
          {"url", redact_url(o.url)}, {"error", e.error().what()}, {"exit_code", e.code()}};
      out::print("{}\n", dump_json(j, 2, Json::kAscii));
    }
    throw;
  }
}

}  // namespace

void add_gen(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<GenOptions>();
  CLI::App* cmd = app.add_subcommand("gen", "Write a synthetic dataset (deterministic for a seed)");
  cmd->add_option("url", o->url,
                  "Where: a directory, file:///path, s3://bucket/prefix/, nfs://server/export/dir "
                  "or mem://prefix")
      ->required();
  add_net_options(*cmd, o->settings);
  cmd->add_option("--format", o->format, loader::builtin_formats().gen_help())
      ->capture_default_str();
  cmd->add_option("--samples", o->samples, "Number of samples")
      ->capture_default_str()
      ->check(whole_number(1, 1ull << 32));
  cmd->add_option("--for-host", o->for_host,
                  "Raise --samples to 5x this host's memory (or the MEMORY given: the training "
                  "host's) of data, MLPerf Storage's minimum so that the page cache cannot hold it")
      ->expected(0, 1);
  cmd->add_option("--sample-size", o->sample_size,
                  "Size: 128KiB, normal:MEAN:STDEV, lognormal:MEAN:STDEV, uniform:MIN:MAX")
      ->capture_default_str();
  cmd->add_option("--max-sample-size", o->max_sample_size, "Clamp drawn sizes to this")
      ->capture_default_str();
  cmd->add_option("--samples-per-file,--samples-per-shard", o->samples_per_shard,
                  "Samples per object: records per TFRecord file, samples per tar shard (npz and "
                  "npy: one per file)")
      ->capture_default_str()
      ->check(whole_number(1, 1ull << 32));
  cmd->add_option("--compress", o->compress, "none or zstd[:LEVEL] (per sample)")
      ->capture_default_str();
  cmd->add_option(
         "--image", o->image,
         "Samples as pictures: jpeg:WIDTHxHEIGHT[:QUALITY] writes each sample's payload as "
         "a JPEG (.jpg) of image-like content, ~110 KiB at jpeg:400x350:90 (files and "
         "tar; --sample-size is then unused)")
      ->capture_default_str();
  cmd->add_option("--compressibility", o->compressibility,
                  "Fraction of each sample that compresses, 0..1")
      ->capture_default_str()
      ->check(number_in(0, 1, true));
  cmd->add_flag("--no-label", o->no_label,
                "No label: tar writes no .cls member per sample, npz no array y");
  cmd->add_option("--classes", o->classes,
                  "Labels drawn in 0..N-1 (tar's .cls members, npz's y; ImageNet's 1000)")
      ->capture_default_str()
      ->check(whole_number(1, std::numeric_limits<std::uint32_t>::max()));
  cmd->add_option("--seed", o->seed, "Seed: the same arguments give the same bytes")
      ->capture_default_str()
      ->check(whole_number(0, ~std::uint64_t{0}));
  cmd->add_flag("--no-space-check", o->no_space_check,
                "Write even where the dataset's estimated size exceeds the free space the local "
                "filesystem reports (one that compresses or deduplicates holds more)");
  cmd->add_option("--output", o->output, "text or json")->capture_default_str();
  cmd->callback([o, cmd, &exit_code] {
    o->samples_per_shard_given = cmd->get_option("--samples-per-file")->count() > 0;
    exit_code = run(*o);
  });
}

}  // namespace feedline::tools
