#include "bench_accelerators_cmd.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <stop_token>

#include "cli_checks.hpp"
#include "cli_error.hpp"
#include "config_file.hpp"
#include "feedline/core/time_limit.hpp"
#include "feedline/core/units.hpp"
#include "feedline/loader/accelerators.hpp"
#include "job_report.hpp"
#include "job_run.hpp"
#include "json_file.hpp"
#include "json_render.hpp"
#include "mpi_job.hpp"
#include "output.hpp"
#include "run_options.hpp"
#include "signals.hpp"

namespace feedline::tools {
namespace {

struct AcceleratorsOptions {
  RunOptions run;
  std::string config_path;
  std::string accelerator_type;  // --accelerator-type: the workload file's settings for it
  std::string trial_time = "10s";
  unsigned max_accelerators = 64;
};

struct Trial {
  unsigned accelerators = 0;  // per rank (the job has ranks x this many)
  loader::HostReport host;    // this rank's
  // The N accelerators could not be set up on this host (their share of the memory budget
  // cannot hold their batches): a failed trial, the reason in place of a limiting stage.
  std::optional<Error> unfit;
  std::optional<Error> error;  // this rank's trial failed
};

// A trial's outcome for the whole job (one host: that host's): every rank computes the same from
// the same figures, so every rank's search takes the same next step.
struct TrialOutcome {
  unsigned accelerators = 0;  // over every rank
  unsigned per_rank = 0;
  std::uint64_t samples = 0;
  double wall = 0;
  double samples_per_second = 0;
  double bytes_per_second = 0;
  bool au_measured = true;  // on every rank
  double au_min = 0, au_mean = 0, au_max = 0;
  unsigned au_min_rank = 0;
  bool passed = false;
  bool stopped = false;  // Ctrl-C on some rank
  std::optional<std::string> error;
  std::optional<std::string> unfit;
  std::string limit = "none";  // the stage of the rank whose accelerator had the lowest AU
  unsigned limit_rank = 0;     // that rank
  std::string evidence;
  // "storage", or in a job "storage on rank 1 of 2 (host h2)".
  std::string limit_text;
};

// What limited a trial: MLPerf Storage asks every accelerator to meet the target, so it is
// what held back the accelerator with the lowest AU (its own verdict), not what most of them
// name; the host's verdict where AU was not measured.
const loader::Verdict& limiting_verdict(const Trial& t) {
  const auto& h = t.host;
  if (h.au_measured && h.au_min_accelerator < h.accelerators.size()) {
    const loader::Verdict& worst = h.accelerators[h.au_min_accelerator].verdict;
    if (worst.stage) return worst;
  }
  return h.verdict;
}

// In a job the accelerators meet at every epoch: one whose input kept up (its verdict: the
// consumer) but that waited there for the others lost its AU to the barriers. The share of its
// time it waited there, when that is what held it back (0 otherwise).
double barrier_share(const Trial& t) {
  const auto& h = t.host;
  const loader::Verdict& v = limiting_verdict(t);
  if (!h.au_measured || h.au_min_accelerator >= h.accelerators.size() || !v.stage ||
      *v.stage != loader::StageId::kConsumer) {
    return 0;
  }
  const auto& c = h.accelerators[h.au_min_accelerator].consumer;
  const double share = c.wall_seconds > 0 ? c.sync_seconds / c.wall_seconds : 0;
  return share > 0.05 ? share : 0;
}

std::string limit_of(const Trial& t) {
  if (t.unfit) return "memory";
  if (barrier_share(t) > 0) return "epoch-barriers";
  const loader::Verdict& v = limiting_verdict(t);
  return v.stage ? std::string(loader::stage_name(*v.stage)) : "none";
}

std::string evidence_of(const Trial& t) {
  if (t.unfit) return t.unfit->what();
  const auto& h = t.host;
  if (const double share = barrier_share(t); share > 0) {
    const auto& c = h.accelerators[h.au_min_accelerator].consumer;
    return fmt::format(
        "the accelerator with the lowest AU, {} ({:.1f}%), kept up with its input but waited "
        "{:.0f}% of its time ({:.2f} s) at epoch barriers for the job's slowest accelerator ({} "
        "epoch(s) in the trial: a dataset of few steps per epoch makes the job meet often)",
        h.au_min_accelerator, h.au_min * 100, share * 100, c.sync_seconds, c.epochs);
  }
  if (&limiting_verdict(t) == &h.verdict) return h.verdict.evidence;
  return fmt::format("the accelerator with the lowest AU, {} ({:.1f}%): {}", h.au_min_accelerator,
                     h.au_min * 100, limiting_verdict(t).evidence);
}

nlohmann::json trial_summary(const Trial& t, bool stopped) {
  using nlohmann::json;
  const auto& h = t.host;
  return {{"samples", h.samples},
          {"bytes", h.bytes},
          {"wall", h.wall_seconds},
          {"au_measured", h.au_measured},
          {"au_min", h.au_min},
          {"au_sum", h.au_mean * static_cast<double>(h.split.accelerators)},
          {"au_max", h.au_max},
          {"accelerators", t.accelerators},
          {"stopped", stopped},
          {"error", t.error ? json(t.error->what()) : json(nullptr)},
          {"unfit", t.unfit ? json(t.unfit->message()) : json(nullptr)},
          {"limit", limit_of(t)},
          {"evidence", evidence_of(t)},
          // The rate over this rank's own time, its waits at the job's epoch barriers left out.
          {"own_rate", h.wall_seconds > h.sync_seconds
                           ? static_cast<double>(h.samples) / (h.wall_seconds - h.sync_seconds)
                           : 0.0}};
}

// Every rank's summaries (one for a host alone) into the job's outcome of the trial.
TrialOutcome combine(const std::vector<std::string>& ranks, unsigned per_rank, double au_target,
                     MpiJob* job) {
  TrialOutcome o;
  o.per_rank = per_rank;
  double au_sum = 0;
  unsigned au_count = 0;
  std::uint64_t bytes = 0;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const nlohmann::json t = nlohmann::json::parse(ranks[r]);
    const std::string who = job ? job->who(static_cast<unsigned>(r)) + ": " : "";
    o.accelerators += per_rank;
    o.samples += t["samples"].get<std::uint64_t>();
    bytes += t["bytes"].get<std::uint64_t>();
    o.wall = std::max(o.wall, t["wall"].get<double>());
    o.stopped = o.stopped || t["stopped"].get<bool>();
    if (t["error"].is_string() && !o.error) o.error = who + t["error"].get<std::string>();
    if (t["unfit"].is_string() && !o.unfit) o.unfit = who + t["unfit"].get<std::string>();
    o.au_measured = o.au_measured && t["au_measured"].get<bool>();
    if (t["au_measured"].get<bool>()) {
      const double lo = t["au_min"].get<double>();
      if (au_count == 0 || lo < o.au_min) {
        o.au_min = lo;
        o.au_min_rank = static_cast<unsigned>(r);
        o.limit = t["limit"].get<std::string>();
        o.limit_rank = static_cast<unsigned>(r);
        o.evidence = who + t["evidence"].get<std::string>();
      }
      o.au_max =
          au_count == 0 ? t["au_max"].get<double>() : std::max(o.au_max, t["au_max"].get<double>());
      au_sum += t["au_sum"].get<double>();
      au_count += per_rank;
    } else if (o.evidence.empty()) {
      o.limit = t["limit"].get<std::string>();
      o.limit_rank = static_cast<unsigned>(r);
      o.evidence = who + t["evidence"].get<std::string>();
    }
  }
  // In a job the ranks meet at every epoch, so a fast rank's accelerators idle there for the
  // slowest and show the lowest AU: what limits the trial is what holds the slowest back, the
  // rank with the lowest rate over its own time.
  if (ranks.size() > 1) {
    double slowest = -1;
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      const nlohmann::json t = nlohmann::json::parse(ranks[r]);
      const double rate = t["own_rate"].get<double>();
      if (slowest < 0 || rate < slowest) {
        slowest = rate;
        o.limit = t["limit"].get<std::string>();
        o.limit_rank = static_cast<unsigned>(r);
        o.evidence = (job ? job->who(static_cast<unsigned>(r)) + ": " : "") +
                     t["evidence"].get<std::string>();
      }
    }
  }
  o.limit_text = job && ranks.size() > 1 && !o.unfit
                     ? fmt::format("{} on {}", o.limit, job->who(o.limit_rank))
                     : o.limit;
  if (o.unfit) {
    o.limit = "memory";
    o.evidence = *o.unfit;
  }
  o.au_mean = au_count ? au_sum / au_count : 0;
  if (o.wall > 0) {
    o.samples_per_second = static_cast<double>(o.samples) / o.wall;
    o.bytes_per_second = static_cast<double>(bytes) / o.wall;
  }
  o.passed =
      !o.error && !o.unfit && !o.stopped && o.au_measured && au_count > 0 && o.au_min >= au_target;
  return o;
}

nlohmann::json trial_json(const TrialOutcome& t, bool job) {
  using nlohmann::json;
  json j = {{"accelerators", t.accelerators},
            {"au_min", t.au_measured ? json(t.au_min) : json(nullptr)},
            {"au_mean", t.au_measured ? json(t.au_mean) : json(nullptr)},
            {"au_max", t.au_measured ? json(t.au_max) : json(nullptr)},
            {"samples_per_second", t.samples_per_second},
            {"bytes_per_second", t.bytes_per_second},
            {"seconds", t.wall},
            {"samples", t.samples},
            {"passed", t.passed},
            {"limit", t.limit},
            {"evidence", t.evidence}};
  if (job) {
    j["accelerators_per_rank"] = t.per_rank;
    j["au_min_rank"] = t.au_min_rank;
    j["limit_rank"] = t.limit_rank;
  }
  return j;
}

// The workload's name for the summary: the --config file's stem (unet3d.toml: unet3d), and the
// accelerator type its settings were taken for ("resnet50 (a100)").
std::string workload_name(const AcceleratorsOptions& o) {
  if (o.config_path.empty()) return "emulated";
  const std::string stem = std::filesystem::path(o.config_path).stem().string();
  return o.accelerator_type.empty() ? stem : fmt::format("{} ({})", stem, o.accelerator_type);
}

bool reads_local_disk(const std::string& url) {
  return url.find("://") == std::string::npos || url.starts_with("file://");
}

// Runs one trial of n accelerators on this host for trial_ns (or until the dataset's 2^20 epochs
// end, or Ctrl-C: then *stopped). In a job the ranks start each epoch together.
Trial run_trial(RunDataset& rd, const RunSetup& st, unsigned n, std::chrono::nanoseconds trial_ns,
                std::stop_token stop, MpiJob* job, bool* stopped) {
  loader::LoaderConfig c = st.ctx.config;
  c.sampler.epochs = static_cast<std::uint32_t>(kMaxEpochs);  // the trial's time bounds it
  // Full steps only, as MLPerf Storage counts them (accelerators.hpp: kMinFullStepsPerEpoch).
  c.sampler.drop_last = true;
  Trial t;
  t.accelerators = n;
  if (job) job->begin_series();
  // The trial's time starts once its accelerators are open (their buffers allocated and
  // registered: seconds, for many accelerators of large batches).
  auto host = loader::run_accelerators(*rd.backend, rd.dataset, c, n, st.compute, stop, nullptr,
                                       job, trial_ns);
  *stopped = stop_token().stop_requested();
  // One accelerator that cannot open is the run's own configuration error; more that cannot
  // share the budget are a limit of this host, which the search stays under.
  if (!host && n > 1 && host.error().code() == Errc::kInvalidArgument &&
      host.error().message().find("memory budget") != std::string::npos) {
    t.unfit = host.error();
    return t;
  }
  if (!host) {
    t.error = host.error();
    return t;
  }
  t.host = std::move(*host);
  if (t.host.error && !*stopped) t.error = t.host.error;
  return t;
}

int run(const AcceleratorsOptions& o, MpiJob* job) {
  const RunOptions& ro = o.run;
  // In a job: one stop for this rank, Ctrl-C or another rank's failure.
  std::stop_source stop;
  std::stop_callback relay(stop_token(), [&stop] { stop.request_stop(); });
  if (job) job->watch([&stop] { stop.request_stop(); });
  const bool root = !job || job->rank() == 0;
  // The ranks the dataset is shared over: MPI's, or --world-size's (one rank's share alone).
  std::uint64_t ranks = job ? job->size() : 1;
  if (job && (ro.rank || ro.world_size)) {
    throw UsageError(fmt::format(
        "--rank and --world-size: under mpirun each rank's shard comes from MPI ({} of {}); "
        "leave them out",
        job->rank(), job->size()));
  }
  // Set-up: in a job, a rank that cannot go on ends the search on every rank (the others must
  // not wait for it in the trials' collectives), and rank 0 says why.
  RunSetup st;
  JsonFile json;
  std::optional<std::chrono::nanoseconds> trial;
  std::optional<RunDataset> rd;
  std::optional<std::string> setup_error;
  int setup_code = kExitOk;
  unsigned most = 0;  // per rank: the most accelerators whose trial can measure on this dataset
  auto write_failure = [&](const std::string& error, int code, bool interrupted) {
    const nlohmann::json doc = {{"url", st.ctx.url.empty() ? ro.url : st.ctx.url},
                                {"error", error},
                                {"exit_code", code},
                                {"interrupted", interrupted}};
    if (auto w = json.commit(doc); !w) out::error(w.error().what());
  };
  try {
    st = make_run_setup(ro, stop.get_token());
    if (job) {
      st.ctx.config.sampler.rank = job->rank();
      st.ctx.config.sampler.world_size = job->size();
    }
    ranks = std::max<std::uint64_t>(1, st.ctx.config.sampler.world_size);
    if (ro.json_path && root) {
      value_or_usage(check_output_paths({{"--json", &ro.json_path}}, ro.url));
      json = value_or_usage(JsonFile::prepare(*ro.json_path, "--json"));
    }
    if (st.compute.mean.count() <= 0) {
      throw UsageError(
          "bench accelerators needs an accelerator's step: give --compute-time (or a workload "
          "file, --config configs/workloads/unet3d.toml)");
    }
    auto t = parse_duration(o.trial_time);
    if (!t || t->count() <= 0) {
      throw UsageError(
          fmt::format("--trial-time: {}", t ? "must be positive" : t.error().message()));
    }
    trial = *t;
    rd = open_run_dataset(ro, st);
    most = loader::most_accelerators_measurable(rd->dataset.samples.size(),
                                                st.ctx.config.sampler.batch_size, ranks);
    if (most == 0) {
      const std::uint64_t each = loader::full_steps_per_epoch(
          rd->dataset.samples.size(), st.ctx.config.sampler.batch_size, ranks, 1);
      throw UsageError(fmt::format(
          "bench accelerators: {} samples give one accelerator{} {} full batch(es) of {} an "
          "epoch, and a trial needs {} to measure (short batches do not count, as in MLPerf "
          "Storage): the dataset needs at least {} samples to try 1 accelerator{} (or a smaller "
          "--batch-size)",
          rd->dataset.samples.size(), ranks > 1 ? fmt::format(" on each of {} ranks", ranks) : "",
          each, st.ctx.config.sampler.batch_size, loader::kMinFullStepsPerEpoch,
          loader::samples_needed(1, st.ctx.config.sampler.batch_size, ranks),
          ranks > 1 ? " per rank" : ""));
    }
  } catch (const CommandError& e) {
    if (!job) {
      // A search that did not get to its first trial still leaves a document saying why.
      write_failure(e.error().what(), e.code(), e.error().code() == Errc::kCancelled);
      throw;
    }
    setup_error = fmt::format("{}: {}", job->who(), e.error().what());
    setup_code = e.code();
  }
  if (job) {
    // Before the first trial: a rank that could not set up ends the search on every rank, and
    // what must agree (the dataset, the batch size, the search's own settings) is compared with
    // rank 0's. Every rank learns the same, and takes the same step.
    Agreement agreement;
    if (!setup_error) {
      agreement = sharding_agreement(st, 1, rd->dataset);
      std::erase_if(agreement, [](const auto& item) { return item.first == "--accelerators"; });
      agreement.insert(agreement.end(), {{"--max-accelerators", std::to_string(o.max_accelerators)},
                                         {"--trial-time", o.trial_time},
                                         {"--au-target", fmt::format("{}", st.ctx.au_target)}});
    }
    const auto all = job->allgather(
        setup_error ? dump_json(nlohmann::json{{"error", *setup_error}, {"code", setup_code}})
                    : dump_json(nlohmann::json{{"agree", agreement_json(agreement)}}));
    std::vector<nlohmann::json> agree;
    std::optional<nlohmann::json> failed;  // the first rank's that failed
    for (const std::string& r : all) {
      auto e = nlohmann::json::parse(r);
      if (e.contains("agree")) {
        agree.push_back(std::move(e["agree"]));
      } else if (!failed) {
        failed = std::move(e);
      }
    }
    if (failed) {
      if (root) out::error((*failed)["error"].get<std::string>());
      setup_code = (*failed)["code"].get<int>();
      if (root) write_failure((*failed)["error"].get<std::string>(), setup_code, false);
    } else if (auto why = first_disagreement(agree, [&job](unsigned r) { return job->who(r); })) {
      if (root) {
        out::error(*why);
        write_failure(*why, kExitUsage, false);
      }
      setup_code = kExitUsage;
    }
    if (setup_code != kExitOk) {
      job->watch(nullptr);
      return std::stoi(job->broadcast(std::to_string(setup_code)));
    }
  }
  const double target = st.ctx.au_target > 0 ? st.ctx.au_target : 0.90;
  const std::string workload = workload_name(o);
  const std::string where =
      job ? fmt::format("{} rank(s) on {} host(s)", ranks, job->distinct_hosts()) : "this host";
  if (root) {
    out::print(
        "feedline bench accelerators: {} ({} samples), {} accelerators at AU >= {:.0f}%, {} "
        "per trial, at most {}{}\n",
        st.ctx.url, rd->dataset.samples.size(), workload, target * 100, o.trial_time,
        std::min(o.max_accelerators, most), job ? fmt::format(" per rank, from {}", where) : "");
    if (most < o.max_accelerators) {
      out::print(
          "  note: the dataset lets a trial measure at most {} accelerator(s){} ({} full "
          "batches of {} an epoch each, short batches left out as MLPerf Storage does), not "
          "--max-accelerators {}\n",
          most, job ? " per rank" : "", loader::kMinFullStepsPerEpoch,
          st.ctx.config.sampler.batch_size, o.max_accelerators);
    }
    if (auto n = potential_caching_note(st.ctx); !n.empty()) out::print("  note: {}\n", n);
  }
  // The search goes no further than the dataset lets a trial measure: there it stops, and says
  // how many samples the next N would need.
  const bool dataset_bound = most < o.max_accelerators;
  loader::AcceleratorSearch search(std::min(o.max_accelerators, most));
  std::vector<TrialOutcome> trials;
  bool stopped = false;
  std::optional<std::string> failure;
  while (auto n = search.next()) {
    bool mine_stopped = false;
    Trial t = run_trial(*rd, st, *n, *trial, stop.get_token(), job, &mine_stopped);
    if (job && t.error) job->announce_failure(fmt::format("{}: {}", job->who(), t.error->what()));
    const std::string summary = dump_json(trial_summary(t, mine_stopped));
    TrialOutcome out =
        combine(job ? job->allgather(summary) : std::vector<std::string>{summary}, *n, target, job);
    if (out.stopped) {
      stopped = true;  // Ctrl-C: a partial trial says nothing
      break;
    }
    if (root) {
      if (out.unfit) {
        out::print("  trial {:>4} accelerator(s): do not fit: {}\n", out.accelerators, *out.unfit);
      } else {
        out::print(
            "  trial {:>4} accelerator(s){}: AU min {} mean {}, {:.0f} samples/s, {}: {} "
            "(limit: {})\n",
            out.accelerators, job ? fmt::format(" ({} per rank)", *n) : "",
            out.au_measured ? fmt::format("{:.1f}%", out.au_min * 100) : "-",
            out.au_measured ? fmt::format("{:.1f}%", out.au_mean * 100) : "-",
            out.samples_per_second, format_rate(out.bytes_per_second), out.passed ? "pass" : "FAIL",
            out.limit);
      }
    }
    if (!out.error && !out.unfit && !out.au_measured && search.answer() == 0) {
      // No conclusion either way: AU leaves each accelerator's first step out, and some had no
      // second one in the trial (unet3d's first batch is 1 GB). Once a smaller N passed, a trial
      // this slow fails on its own terms.
      out.error = fmt::format(
          "trial of {} accelerator(s): AU not measured: in {} an accelerator finished fewer than "
          "two steps (AU leaves the first one out); raise --trial-time (several steps of {} each, "
          "after the first batch)",
          out.accelerators, o.trial_time, st.ctx.compute_time);
    }
    if (out.error) {
      failure = out.error;
      trials.push_back(std::move(out));
      break;
    }
    search.record(*n, out.passed);
    trials.push_back(std::move(out));
  }
  if (job) job->watch(nullptr);
  const TrialOutcome* best = nullptr;
  const TrialOutcome* next = nullptr;
  for (const auto& t : trials) {
    if (t.per_rank == search.answer() && t.passed) best = &t;
    if (search.first_failure() && t.per_rank == *search.first_failure()) next = &t;
  }
  const std::string what = reads_local_disk(ro.url) && !job ? "this disk" : "this storage";
  const std::uint64_t dataset_needs =
      loader::samples_needed(most + 1, st.ctx.config.sampler.batch_size, ranks);
  const std::string from =
      job ? fmt::format("from {} ({} per rank)", where, search.answer()) : "from this host";
  std::string summary;
  if (failure || stopped) {
    summary =
        fmt::format("the search did not finish ({})", stopped ? "interrupted" : "a trial failed");
  } else if (best == nullptr) {
    summary = fmt::format("{} cannot feed one {} accelerator{} at AU >= {:.0f}% {}{}", what,
                          workload, job ? " per rank" : "", target * 100,
                          job ? fmt::format("from {}", where) : "from this host",
                          next ? fmt::format(": the trial reached {:.1f}% AU, limited by {}",
                                             next->au_min * 100, next->limit_text)
                               : "");
  } else {
    summary = fmt::format(
        "{} feeds {}{} {} accelerator(s) at AU >= {:.0f}% ({}, {:.0f} samples/s) {}", what,
        search.capped() ? "at least " : "", best->accelerators, workload, target * 100,
        format_rate(best->bytes_per_second), best->samples_per_second, from);
    if (next && next->unfit) {
      summary +=
          fmt::format("; {} do not fit {} --memory-budget ({} each: raise it to try more)",
                      next->accelerators, job ? "a rank's" : "this host's",
                      format_bytes(static_cast<double>(
                          loader::split_host(st.ctx.config, next->per_rank).memory_budget_each)));
    } else if (next) {
      summary += fmt::format("; the next trial, {}, reached {:.1f}% AU, limited by {}",
                             next->accelerators, next->au_min * 100, next->limit_text);
    } else if (search.capped() && dataset_bound) {
      summary += fmt::format(
          "; the dataset needs at least {} samples to try {} accelerators ({} full batches of "
          "{} an epoch each; it has {})",
          dataset_needs, (most + 1) * (job ? ranks : 1), loader::kMinFullStepsPerEpoch,
          st.ctx.config.sampler.batch_size, rd->dataset.samples.size());
    } else if (search.capped()) {
      summary += fmt::format(" (the search stops at --max-accelerators {}{})", o.max_accelerators,
                             job ? " per rank" : "");
    }
  }
  int code = failure ? kExitRuntime : stopped ? exit_code_for_stop() : kExitOk;
  if (root) {
    out::print("{}\n", summary);
    nlohmann::json doc = {
        {"url", st.ctx.url},
        {"workload", workload},
        {"au_target", target},
        {"trial_seconds", std::chrono::duration<double>(*trial).count()},
        {"max_accelerators", o.max_accelerators},
        {"accelerators", best ? best->accelerators : 0u},
        {"capped", search.capped()},
        // The search stopped where the dataset is too small for a trial to
        // measure: what the next N would need.
        {"dataset_too_small", search.capped() && dataset_bound
                                  ? nlohmann::json{{"accelerators", (most + 1) * ranks},
                                                   {"samples_needed", dataset_needs},
                                                   {"samples", rd->dataset.samples.size()}}
                                  : nlohmann::json(nullptr)},
        {"summary", summary},
        {"interrupted", stopped},
        {"error", failure ? nlohmann::json(*failure) : nullptr}};
    if (job) {
      doc["accelerators_per_rank"] = search.answer();
      doc["ranks"] = ranks;
      doc["hosts"] = job->distinct_hosts();
    }
    doc["trials"] = nlohmann::json::array();
    for (const auto& t : trials) doc["trials"].push_back(trial_json(t, job != nullptr));
    if (code != kExitOk) doc["exit_code"] = code;
    if (auto w = json.commit(doc); !w) {
      out::error(w.error().what());
      if (code == kExitOk) code = kExitRuntime;
    }
    if (failure) out::error(*failure);
  }
  return job ? std::stoi(job->broadcast(std::to_string(code))) : code;
}

}  // namespace

void add_bench_accelerators(CLI::App& bench, int& exit_code) {
  auto o = std::make_shared<AcceleratorsOptions>();
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
    // Under mpirun the search runs over every rank (mpi_job.hpp).
    auto job = MpiJob::join(o->run.rank || o->run.world_size);
    exit_code = run(*o, job.get());
  });
}

}  // namespace feedline::tools
