// feedline: the command-line tool. Only this layer reads argv, the environment and config files.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include "bench_storage_cmd.hpp"
#include "cli_error.hpp"
#include "feedline/loader/codec.hpp"
#include "feedline/transports/file_engine.hpp"
#include "gen_cmd.hpp"
#include "probe_cmd.hpp"
#include "run_cmd.hpp"

int main(int argc, char** argv) {
  using namespace feedline::tools;
  CLI::App app{"feedline: dataset storage -> pipeline -> GPU, and where it stalls"};
  // The version line names the optional parts compiled in, for scripts that need to know.
  app.set_version_flag("--version", fmt::format("feedline 0.1.0 (io_uring: {}, zstd: {})",
                                                feedline::transports::uring_compiled_in() ? "yes" : "no",
                                                feedline::loader::zstd_available() ? "yes" : "no"));
  app.require_subcommand(1);
  int exit_code = kExitOk;
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  add_bench_storage(*bench, exit_code);
  add_gen(app, exit_code);
  add_run(app, exit_code);
  add_probe(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "feedline: error: {} (see feedline --help)\n", e.what());
    return kExitUsage;
  } catch (const UsageError& e) {
    fmt::print(stderr, "feedline: error: {}\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    fmt::print(stderr, "feedline: internal error: {}\n", e.what());
    return kExitRuntime;
  }
  return exit_code;
}
