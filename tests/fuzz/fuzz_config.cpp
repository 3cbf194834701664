// libFuzzer target: the --config TOML mapping (tools/src/config_file.cpp, apply_config_text) on
// arbitrary bytes, against a subcommand with options of each kind the real commands use (string,
// unsigned, uint64, double, int, bool flags, optional<unsigned>, with the CLI's own validators).
// The expected outcomes are success or a UsageError that names the file; any other exception
// (a CLI11 one included: main() would give it CLI11's exit code, not 2) or a crash is a finding.
// The first byte chooses which options the command line gives, which the file must not override
// (its tables for the accelerator type chosen included).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "cli_checks.hpp"
#include "cli_error.hpp"
#include "config_file.hpp"

namespace {

struct Opts {
  std::string url, format = "auto", compute_time, memory_budget = "1GiB";
  unsigned batch_size = 32, epochs = 1, io_depth = 64, decode_threads = 2, prefetch = 2;
  std::uint64_t seed = 0;
  std::optional<double> au_target;
  double compressibility = 0.5;
  int decode_nice = 5;
  bool direct = false, no_shuffle = false;
  std::optional<unsigned> rank, world_size;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace feedline::tools;
  const std::uint8_t given = size > 0 ? data[0] : 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + (size > 0),
                              size > 0 ? size - 1 : 0);

  CLI::App app("fuzz");
  CLI::App* cmd = app.add_subcommand("run", "run");
  Opts o;
  std::string config, accelerator_type;
  cmd->add_option("--config", config, "workload file");
  cmd->add_option("--accelerator-type", accelerator_type, "[accelerator-types.NAME]");
  cmd->add_option("url", o.url, "dataset");
  cmd->add_option("--format", o.format, "files, tar or auto")
      ->check(CLI::IsMember({"files", "tar", "auto"}));
  cmd->add_option("--compute-time", o.compute_time, "duration");
  cmd->add_option("--batch-size", o.batch_size, "batch")->check(whole_number(1, 1u << 20));
  cmd->add_option("--epochs", o.epochs, "epochs")->check(CLI::Range(1u, 1000000u));
  cmd->add_option("--seed", o.seed, "seed")->check(whole_number(0, ~std::uint64_t{0}));
  cmd->add_option("--memory-budget", o.memory_budget, "bytes");
  cmd->add_option("--io-depth", o.io_depth, "reads in flight")->check(whole_number(1, 1u << 16));
  cmd->add_option("--decode-threads", o.decode_threads, "threads")->check(whole_number(1, 1024));
  cmd->add_option("--prefetch", o.prefetch, "batches");
  cmd->add_option("--au-target", o.au_target, "au")->check(number_in(0, 1, false));
  cmd->add_option("--compressibility", o.compressibility, "ratio")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--decode-nice", o.decode_nice, "nice")->check(CLI::Range(0, 19));
  cmd->add_flag("--direct", o.direct, "flag");
  cmd->add_flag("--no-shuffle", o.no_shuffle, "flag");
  cmd->add_option("--rank", o.rank, "rank")->check(whole_number(0, 1u << 20));
  cmd->add_option("--world-size", o.world_size, "ranks");

  std::string args = "run";
  if (given & 1) args += " --batch-size 7";
  if (given & 2) args += " --direct";
  if (given & 4) args += " --format tar";
  if (given & 8) args += " --rank 2";
  if (given & 16) args += " --au-target 0.5";
  if (given & 32) args += " --accelerator-type a100";
  app.parse(args, false);

  try {
    apply_config_text(*cmd, text, "fuzz.toml");
  } catch (const UsageError& e) {
    if (std::strstr(e.what(), "--config fuzz.toml") == nullptr) __builtin_trap();  // names the file
    return 0;
  }
  // The command line wins.
  if ((given & 1) && o.batch_size != 7) __builtin_trap();
  if ((given & 2) && !o.direct) __builtin_trap();
  if ((given & 4) && o.format != "tar") __builtin_trap();
  if ((given & 8) && o.rank != 2u) __builtin_trap();
  if ((given & 16) && o.au_target != 0.5) __builtin_trap();
  // Values the validators accepted are in range.
  if (o.batch_size < 1 || o.batch_size > (1u << 20)) __builtin_trap();
  if (o.decode_nice < 0 || o.decode_nice > 19) __builtin_trap();
  if (o.au_target && !(*o.au_target > 0 && *o.au_target <= 1)) __builtin_trap();
  if (o.io_depth < 1 || o.io_depth > (1u << 16)) __builtin_trap();
  if (o.format != "files" && o.format != "tar" && o.format != "auto") __builtin_trap();
  return 0;
}
