// feedline: the command-line tool. Only this layer reads argv, the environment and config files.
#include <fmt/format.h>
#include <sys/resource.h>
#include <CLI/CLI.hpp>

#include <array>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

#include "bench_accelerators_cmd.hpp"
#include "bench_storage_cmd.hpp"
#include "cli_error.hpp"
#include "diagnose_cmd.hpp"
#include "feedline/loader/codec.hpp"
#include "feedline/loader/image.hpp"
#include "feedline/loader/tfrecord.hpp"
#include "feedline/transports/file_engine.hpp"
#include "feedline/transports/http_client.hpp"
#include "gen_cmd.hpp"
#include "mpi_job.hpp"
#include "output.hpp"
#include "probe_cmd.hpp"
#include "report_cmd.hpp"
#include "run_cmd.hpp"
#include "signals.hpp"

namespace {

// CLI11 says "A subcommand is required" for `feedline frobnicate`: name what was typed instead.
// Returns the unknown command, or nothing.
std::optional<std::string> unknown_command(int argc, char** argv, const CLI::App& app) {
  const CLI::App* level = &app;
  std::string path;
  for (int i = 1; i < argc && level; ++i) {
    const std::string_view word = argv[i];
    if (word.empty() || word.front() == '-') return std::nullopt;
    const auto subs = level->get_subcommands([](const CLI::App*) { return true; });
    if (subs.empty()) return std::nullopt;  // a command's own arguments from here on
    const CLI::App* next = nullptr;
    for (const CLI::App* sub : subs) {
      if (sub->check_name(std::string(word))) next = sub;
    }
    path += path.empty() ? std::string(word) : " " + std::string(word);
    if (!next) return path;
    level = next;
  }
  return std::nullopt;
}

// The soft limit on open files up to the hard one, as Go's runtime and systemd's services do:
// the soft limit (often 1,024) is a guard for programs that use select(), and feedline does not.
// A host's accelerators each keep their objects open and a read in flight each (64 accelerators
// on 400 files would need 25,600 descriptors); the loader keeps within whatever this leaves
// (stage_work.hpp's HandleCache), and names the limit when it is still too low.
void raise_open_file_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= r.rlim_max) return;
  r.rlim_cur = r.rlim_max;
  (void)::setrlimit(RLIMIT_NOFILE, &r);  // refused (a hard limit of "unlimited"): keep the soft
}

}  // namespace

int main(int argc, char** argv) {
  using namespace feedline::tools;
  out::init_standard_streams();
  raise_open_file_limit();
  // libcurl's process-wide set-up, before any thread starts (the signal thread is the first).
  auto http_library = feedline::transports::HttpLibrary::init();
  if (!http_library) {
    out::error(http_library.error().what());
    return kExitRuntime;
  }
  install_stop_signals();
  CLI::App app{"feedline: dataset storage -> pipeline -> GPU, and where it stalls"};
  // The version line names the optional parts compiled in, for scripts that need to know.
  app.set_version_flag(
      "--version",
      fmt::format("feedline 0.1.0 (io_uring: {}, zstd: {}, isal: {}, jpeg: {}, mpi: {})",
                  feedline::transports::uring_compiled_in() ? "yes" : "no",
                  feedline::loader::zstd_available() ? "yes" : "no",
                  feedline::loader::tfrecord_available() ? "yes" : "no",
                  feedline::loader::jpeg_available() ? "yes" : "no",
                  mpi_compiled_in() ? "yes" : "no"));
  app.require_subcommand(1);
  int exit_code = kExitOk;
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  add_bench_storage(*bench, exit_code);
  add_bench_accelerators(*bench, exit_code);
  add_gen(app, exit_code);
  add_run(app, exit_code);
  add_diagnose(app, exit_code);
  add_probe(app, exit_code);
  add_report(app, exit_code);
  if (auto cmd = unknown_command(argc, argv, app)) {
    out::error(fmt::format(
        "unknown command '{}' (commands: bench storage, bench accelerators, gen, run, diagnose, "
        "probe, report; see "
        "feedline --help)",
        *cmd));
    return out::finish(kExitUsage);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return out::finish(app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    return out::finish(app.exit(e));
  } catch (const CLI::CallForVersion& e) {
    return out::finish(app.exit(e));
  } catch (const CLI::ParseError& e) {
    out::error(fmt::format("{} (see feedline --help)", e.what()));
    return out::finish(kExitUsage);
  } catch (const CommandError& e) {
    out::error(e.what());
    return out::finish(e.code());
  } catch (const std::bad_alloc&) {
    out::error("out of memory (a size or count too large for this machine?)");
    return out::finish(kExitRuntime);
  } catch (const std::exception& e) {
    out::error(fmt::format("internal error: {}", e.what()));
    return out::finish(kExitRuntime);
  }
  return out::finish(exit_code);
}
