#include "bench_accelerators_cmd.hpp"

#include <fmt/format.h>

#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>

#include "cli_checks.hpp"
#include "cli_error.hpp"
#include "config_file.hpp"
#include "feedline/core/units.hpp"
#include "feedline/loader/accelerators.hpp"
#include "json_file.hpp"
#include "output.hpp"
#include "run_options.hpp"
#include "signals.hpp"

namespace feedline::tools {
namespace {

struct Options {
  RunOptions run;
  std::string config_path;
  std::string accelerator_type;  // --accelerator-type: the workload file's settings for it
  std::string trial_time = "10s";
  unsigned max_accelerators = 64;
};

struct Trial {
  unsigned accelerators = 0;
  loader::HostReport host;
  bool passed = false;
  // The N accelerators could not be set up on this host (their share of the memory budget
  // cannot hold their batches): a failed trial, the reason in place of a limiting stage.
  std::optional<Error> unfit;
};

std::string limit_of(const Trial& t) {
  if (t.unfit) return "memory";
  const auto& h = t.host;
  return h.verdict.stage ? std::string(loader::stage_name(*h.verdict.stage)) : "none";
}

nlohmann::json trial_json(const Trial& t) {
  using nlohmann::json;
  const auto& h = t.host;
  return {{"accelerators", t.accelerators},
          {"au_min", h.au_measured ? json(h.au_min) : json(nullptr)},
          {"au_mean", h.au_measured ? json(h.au_mean) : json(nullptr)},
          {"au_max", h.au_measured ? json(h.au_max) : json(nullptr)},
          {"samples_per_second", h.samples_per_second},
          {"bytes_per_second", h.bytes_per_second},
          {"seconds", h.wall_seconds},
          {"samples", h.samples},
          {"passed", t.passed},
          {"limit", limit_of(t)},
          {"evidence", t.unfit ? t.unfit->what() : h.verdict.evidence}};
}

// The workload's name for the summary: the --config file's stem (unet3d.toml: unet3d), and the
// accelerator type its settings were taken for ("resnet50 (a100)").
std::string workload_name(const Options& o) {
  if (o.config_path.empty()) return "emulated";
  const std::string stem = std::filesystem::path(o.config_path).stem().string();
  return o.accelerator_type.empty() ? stem : fmt::format("{} ({})", stem, o.accelerator_type);
}

bool is_local(const std::string& url) {
  return url.find("://") == std::string::npos || url.starts_with("file://");
}

// Runs one trial of n accelerators for trial_ns (or until the dataset's 2^20 epochs end, or
// Ctrl-C: then *stopped).
Trial run_trial(RunDataset& rd, const RunSetup& st, unsigned n, std::chrono::nanoseconds trial_ns,
                double au_target, bool* stopped) {
  std::stop_source trial;
  std::stop_callback relay(stop_token(), [&trial] { trial.request_stop(); });
  std::jthread timer([&trial, trial_ns](std::stop_token done) {
    std::mutex mu;
    std::condition_variable_any cv;
    std::unique_lock lock(mu);
    cv.wait_for(lock, done, trial_ns, [] { return false; });
    trial.request_stop();
  });
  loader::LoaderConfig c = st.ctx.config;
  c.sampler.epochs = static_cast<std::uint32_t>(kMaxEpochs);  // the trial's time bounds it
  Trial t;
  t.accelerators = n;
  auto host = loader::run_accelerators(*rd.backend, rd.dataset, c, n, st.compute, trial.get_token(),
                                       nullptr);
  // One accelerator that cannot open is the run's own configuration error; more that cannot
  // share the budget are a limit of this host, which the search stays under.
  if (!host && n > 1 && host.error().code() == Errc::kInvalidArgument &&
      host.error().message().find("memory budget") != std::string::npos) {
    t.unfit = host.error();
    return t;
  }
  t.host = value_or_exit(std::move(host));
  *stopped = stop_token().stop_requested();
  t.passed = !t.host.error && t.host.au_measured && t.host.au_min >= au_target;
  return t;
}

int run(const Options& o) {
  const RunOptions& ro = o.run;
  RunSetup st = make_run_setup(ro, stop_token());
  JsonFile json;
  if (ro.json_path) json = value_or_usage(JsonFile::prepare(*ro.json_path, "--json"));
  if (st.compute.mean.count() <= 0) {
    throw UsageError(
        "bench accelerators needs an accelerator's step: give --compute-time (or a workload "
        "file, --config configs/workloads/unet3d.toml)");
  }
  auto trial = parse_duration(o.trial_time);
  if (!trial || trial->count() <= 0) {
    throw UsageError(
        fmt::format("--trial-time: {}", trial ? "must be positive" : trial.error().message()));
  }
  const double target = st.ctx.au_target > 0 ? st.ctx.au_target : 0.90;
  const std::string workload = workload_name(o);
  RunDataset rd = open_run_dataset(ro, st);
  out::print(
      "feedline bench accelerators: {} ({} samples), {} accelerators at AU >= {:.0f}%, {} "
      "per trial, at most {}\n",
      st.ctx.url, rd.dataset.samples.size(), workload, target * 100, o.trial_time,
      o.max_accelerators);
  if (auto n = potential_caching_note(st.ctx); !n.empty()) out::print("  note: {}\n", n);
  loader::AcceleratorSearch search(o.max_accelerators);
  std::vector<Trial> trials;
  bool stopped = false;
  std::optional<Error> failure;
  while (auto n = search.next()) {
    Trial t = run_trial(rd, st, *n, *trial, target, &stopped);
    if (stopped) break;  // Ctrl-C: a partial trial says nothing
    const auto& h = t.host;
    if (t.unfit)
      out::print("  trial {:>4} accelerator(s): do not fit: {}\n", *n, t.unfit->message());
    if (!t.unfit)
      out::print(
          "  trial {:>4} accelerator(s): AU min {} mean {}, {:.0f} samples/s, {}: {} "
          "(limit: {})\n",
          *n, h.au_measured ? fmt::format("{:.1f}%", h.au_min * 100) : "-",
          h.au_measured ? fmt::format("{:.1f}%", h.au_mean * 100) : "-", h.samples_per_second,
          format_rate(h.bytes_per_second), t.passed ? "pass" : "FAIL", limit_of(t));
    if (h.error) {
      failure = *h.error;
      trials.push_back(std::move(t));
      break;
    }
    search.record(*n, t.passed);
    trials.push_back(std::move(t));
  }
  const Trial* best = nullptr;
  const Trial* next = nullptr;
  for (const auto& t : trials) {
    if (t.accelerators == search.answer() && t.passed) best = &t;
    if (search.first_failure() && t.accelerators == *search.first_failure()) next = &t;
  }
  const std::string what = is_local(ro.url) ? "this disk" : "this storage";
  std::string summary;
  if (failure || stopped) {
    summary =
        fmt::format("the search did not finish ({})", stopped ? "interrupted" : "a trial failed");
  } else if (best == nullptr) {
    summary = fmt::format("{} cannot feed one {} accelerator at AU >= {:.0f}% from this host{}",
                          what, workload, target * 100,
                          next ? fmt::format(": one reached {:.1f}% AU, limited by {}",
                                             next->host.au_min * 100, limit_of(*next))
                               : "");
  } else {
    summary = fmt::format(
        "{} feeds {}{} {} accelerator(s) at AU >= {:.0f}% ({}, {:.0f} samples/s) from this host",
        what, search.capped() ? "at least " : "", best->accelerators, workload, target * 100,
        format_rate(best->host.bytes_per_second), best->host.samples_per_second);
    if (next && next->unfit) {
      summary += fmt::format(
          "; {} do not fit this host's --memory-budget ({} each: raise it to try more)",
          next->accelerators,
          format_bytes(static_cast<double>(
              loader::split_host(st.ctx.config, next->accelerators).memory_budget_each)));
    } else if (next) {
      summary += fmt::format("; the next trial, {}, reached {:.1f}% AU, limited by {}",
                             next->accelerators, next->host.au_min * 100, limit_of(*next));
    } else if (search.capped()) {
      summary += fmt::format(" (the search stops at --max-accelerators {})", o.max_accelerators);
    }
  }
  out::print("{}\n", summary);
  nlohmann::json doc = {{"url", st.ctx.url},
                        {"workload", workload},
                        {"au_target", target},
                        {"trial_seconds", std::chrono::duration<double>(*trial).count()},
                        {"max_accelerators", o.max_accelerators},
                        {"accelerators", search.answer()},
                        {"capped", search.capped()},
                        {"summary", summary},
                        {"interrupted", stopped},
                        {"error", failure ? nlohmann::json(failure->what()) : nullptr}};
  doc["trials"] = nlohmann::json::array();
  for (const auto& t : trials) doc["trials"].push_back(trial_json(t));
  int code = failure ? kExitRuntime : stopped ? exit_code_for_stop() : kExitOk;
  if (code != kExitOk) doc["exit_code"] = code;
  if (auto w = json.commit(doc); !w) {
    out::error(w.error().what());
    if (code == kExitOk) code = kExitRuntime;
  }
  if (failure) out::error(failure->what());
  return code;
}

}  // namespace

void add_bench_accelerators(CLI::App& bench, int& exit_code) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = bench.add_subcommand(
      "accelerators",
      "Find the most emulated accelerators of a workload this storage feeds at the AU target "
      "from this host (run --accelerators N trials: doubling, then bisection)");
  add_config_options(*cmd, o->config_path, o->accelerator_type);
  cmd->add_option("url", o->run.url, "Dataset root, as for run")->required();
  add_run_options(*cmd, o->run);
  cmd->add_option("--trial-time", o->trial_time,
                  "How long each trial runs (epochs repeat as needed): long enough to be steady")
      ->capture_default_str();
  cmd->add_option("--max-accelerators", o->max_accelerators, "The largest N the search tries")
      ->capture_default_str()
      ->check(whole_number(1, loader::kMaxAccelerators));
  cmd->callback([o, cmd, &exit_code] {
    apply_config_options(*cmd, o->config_path);
    if (cmd->get_option("--accelerators")->count() > 0) {
      throw UsageError(
          "--accelerators is what bench accelerators finds: bound the search with "
          "--max-accelerators");
    }
    if (o->run.stages_alone) throw UsageError("--stages-alone is a run flag, not a bench one");
    exit_code = run(*o);
  });
}

}  // namespace feedline::tools
