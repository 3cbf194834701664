// One rank of an MPI job running `feedline run` (job_run.hpp).
#include "job_run.hpp"

#include <fmt/format.h>

#include <chrono>
#include <optional>

#include "cli_error.hpp"
#include "feedline/loader/accelerators.hpp"
#include "feedline/loader/digest.hpp"
#include "feedline/loader/job_report.hpp"
#include "host_run.hpp"
#include "job_report.hpp"
#include "json_file.hpp"
#include "json_render.hpp"
#include "output.hpp"
#include "signals.hpp"

namespace feedline::tools {
namespace {

using nlohmann::json;

// What every rank learns of one run of a --runs series, to record it as the job's.
struct RunFigures {
  double samples = 0, bytes = 0, wall = 0, au_sum = 0;
  unsigned au_count = 0;
  bool ok = true;
};

RunFigures job_figures(MpiJob& job, const loader::HostReport& host) {
  json mine = {{"samples", host.samples},
               {"wall", host.wall_seconds},
               {"au_sum", host.au_mean * host.split.accelerators},
               {"au_count", host.au_measured ? host.split.accelerators : 0u},
               {"ok", !host.error && !host.interrupted}};
  RunFigures f;
  for (const std::string& t : job.allgather(dump_json(mine))) {
    const json r = json::parse(t);
    f.samples += r["samples"].get<double>();
    f.wall = std::max(f.wall, r["wall"].get<double>());
    f.au_sum += r["au_sum"].get<double>();
    f.au_count += r["au_count"].get<unsigned>();
    f.ok = f.ok && r["ok"].get<bool>();
  }
  return f;
}

}  // namespace

Agreement sharding_agreement(const RunSetup& st, unsigned accelerators,
                             const loader::Dataset& dataset) {
  const loader::SamplerConfig& c = st.ctx.config.sampler;
  auto flag = [](bool on) { return std::string(on ? "it" : "not"); };
  return {{"--batch-size", std::to_string(c.batch_size)},
          {"--format", st.ctx.format},
          {"--seed", std::to_string(c.seed)},
          {"--no-shuffle", flag(!c.shuffle)},
          {"--shard-shuffle", std::to_string(c.shard_shuffle)},
          {"--drop-last", flag(c.drop_last)},
          {"--accelerators", std::to_string(accelerators)},
          {"the dataset", fmt::format("{} samples, listing {:016x}", dataset.samples.size(),
                                      loader::listing_fingerprint(dataset))}};
}

std::optional<std::string> job_ready(MpiJob& job, const std::optional<std::string>& failure,
                                     const Agreement& mine, std::optional<std::string>* agreement) {
  const json ready = failure ? json{{"failed", *failure}} : json{{"agree", agreement_json(mine)}};
  std::optional<std::string> failed;
  std::vector<json> agree;
  for (const std::string& r : job.allgather(dump_json(ready))) {
    const json p = json::parse(r);
    if (p.contains("failed")) {
      if (!failed) failed = p["failed"].get<std::string>();
    } else {
      agree.push_back(p["agree"]);
    }
  }
  if (!failed) *agreement = first_disagreement(agree, [&job](unsigned r) { return job.who(r); });
  return failed;
}

int run_in_job(const RunOptions& o, MpiJob& job) {
  // One stop for this rank's run: Ctrl-C, or another rank's failure (the watcher hears it).
  std::stop_source run_stop;
  std::stop_callback relay(stop_token(), [&run_stop] { run_stop.request_stop(); });
  job.watch([&run_stop] { run_stop.request_stop(); });
  json mine;
  RunSetup st;
  std::optional<RunDataset> rd;
  JsonFile json_file;
  RunsRecord runs;
  runs.runs = o.runs;
  std::optional<std::string> failure;  // this rank's, before its run
  try {
    if (o.rank || o.world_size) {
      throw UsageError(fmt::format(
          "--rank and --world-size: under mpirun each rank's shard comes from MPI ({} of {}); "
          "leave them out",
          job.rank(), job.size()));
    }
    if (o.stages_alone) {
      throw UsageError("--stages-alone measures one process's stages: run it without mpirun");
    }
    if (o.autotune) {
      throw UsageError("--autotune tunes one process's pipeline: run it without mpirun");
    }
    if (!o.runtime.empty()) {
      // The ranks meet at each epoch: a job ends with its epochs, not on each rank's clock.
      throw UsageError(
          "--runtime bounds one process's run: under mpirun give the job --epochs (its ranks "
          "meet at every epoch)");
    }
    st = make_run_setup(o, run_stop.get_token());
    st.ctx.config.sampler.rank = job.rank();
    st.ctx.config.sampler.world_size = job.size();
    if (job.rank() == 0 && o.json_path) {
      value_or_usage(check_output_paths({{"--json", *o.json_path}}, o.url));
      json_file = value_or_usage(JsonFile::prepare(*o.json_path, "--json"));
    }
    rd = open_run_dataset(o, st);
    const std::string note =
        check_accelerator_share(st, o.accelerators, rd->dataset.samples.size());
    if (job.rank() == 0 && !note.empty()) out::note(note);
  } catch (const CommandError& e) {
    // This rank cannot go on: the others learn it below, before anyone reads; its error reaches
    // rank 0 with its document.
    mine = {{"error", e.error().what()},
            {"exit_code", e.code()},
            {"interrupted", e.error().code() == Errc::kCancelled}};
    failure = fmt::format("{}: {}", job.who(), e.error().what());
  }
  // Before the first read, every rank: a rank that could not set up stops them all, and what
  // must agree (the epochs, the seed, the dataset, ...) is compared with rank 0's.
  std::optional<std::string> disagreement;
  Agreement agreement;
  if (!failure) {
    agreement = sharding_agreement(st, o.accelerators, rd->dataset);
    agreement.insert(agreement.begin(), {{"--epochs", std::to_string(st.ctx.config.sampler.epochs)},
                                         {"--runs", std::to_string(o.runs)}});
  }
  if (auto other = job_ready(job, failure, agreement, &disagreement); other && !failure) {
    mine = {{"interrupted", true}, {"stopped_by", *other}};
  } else if (disagreement) {
    // Every rank knows it: rank 0 says it, once, and every rank ends with a usage error.
    job.watch(nullptr);
    if (job.rank() == 0) {
      out::error(*disagreement);
      const json doc = {{"url", st.ctx.url},
                        {"error", *disagreement},
                        {"exit_code", kExitUsage},
                        {"mpi", {{"ranks", job.size()}, {"hosts", job.distinct_hosts()}}}};
      if (auto w = json_file.commit(doc); !w) out::error(w.error().what());
    }
    return kExitUsage;
  } else if (!failure) {
    try {
      loader::HostReport host;
      const unsigned total_runs = o.runs > 1 ? o.runs + 1 : 1;  // --runs N: a warm-up first
      for (unsigned i = 0; i < total_runs; ++i) {
        job.begin_series();
        host = value_or_exit(loader::run_accelerators(*rd->backend, rd->dataset, st.ctx.config,
                                                      o.accelerators, st.compute,
                                                      run_stop.get_token(), nullptr, &job));
        if (host.error) {
          job.announce_failure(fmt::format("{}: {}", job.who(), host.error->what()));
        }
        if (total_runs == 1) break;
        // Every rank takes part in every run's figures, so that all leave the series together.
        const RunFigures f = job_figures(job, host);
        if (!f.ok) break;
        const double sps = f.wall > 0 ? f.samples / f.wall : 0;
        const std::string progress = record_run(runs, i, sps,
                                                f.au_count && !st.ctx.compute_time.empty()
                                                    ? std::optional<double>(f.au_sum / f.au_count)
                                                    : std::nullopt);
        if (job.rank() == 0) out::print("{}", progress);
      }
      mine = host_document(host, st, rd->dataset, nullptr);
    } catch (const CommandError& e) {
      // This rank cannot go on: the others hear of it and stop; its error reaches rank 0 below.
      mine = {{"error", e.error().what()},
              {"exit_code", e.code()},
              {"interrupted", e.error().code() == Errc::kCancelled}};
      if (e.error().code() != Errc::kCancelled) {
        job.announce_failure(fmt::format("{}: {}", job.who(), e.error().what()));
      }
    }
  }
  job.watch(nullptr);
  // Ended because another rank failed (its barrier or its watcher heard it, whichever first): a
  // stopped run, not a failure of its own.
  if (auto other = job.peer_failure();
      other && !(mine.contains("error") && mine["error"].is_string())) {
    mine["interrupted"] = true;
    mine["stopped_by"] = *other;
  }
  mine["rank"] = job.rank();
  mine["host"] = job.host();
  if (mine.contains("error") && mine["error"].is_string()) {
    out::error(fmt::format("{}: {}", job.who(), mine["error"].get<std::string>()));
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> docs = job.gather(dump_json(mine));
  int code = kExitOk;
  if (job.rank() == 0) {
    loader::JobSetup setup;
    setup.hosts = job.distinct_hosts();
    setup.au_target = st.ctx.au_target;
    setup.emulated = !st.ctx.compute_time.empty();
    json doc = json::parse(value_or_exit(loader::job_report_json(docs, setup)));
    if (rd) {
      std::optional<Error> mismatch;
      const DeliveredWhole whole{doc["delivered"]["digest"].is_number()
                                     ? doc["delivered"]["digest"].get<std::uint64_t>()
                                     : 0,
                                 doc["samples"].get<std::uint64_t>(),
                                 doc["skipped"]["samples"].get<std::uint64_t>(),
                                 doc["delivered"]["digest"].is_number(),
                                 doc["interrupted"].get<bool>() || doc["error"].is_string(),
                                 1};
      if (auto v = check_manifest_digest(whole, st.ctx.config, rd->dataset, &mismatch)) {
        doc["delivered"]["verified"] = *v;
        if (mismatch) doc["error"] = mismatch->what();
      }
    }
    doc["runs"] = runs_json(runs);
    doc["mpi"] = {{"ranks", job.size()},
                  {"hosts", job.distinct_hosts()},
                  {"gather_seconds",
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()}};
    out::write_stdout(job_text(doc) + runs_text(runs));
    if (doc["delivered"]["verified"] == true) {
      out::print(
          "  verified: the digest summed over the ranks is {} x the digest feedline gen "
          "recorded\n",
          st.ctx.config.sampler.epochs);
    }
    // The job's exit code: the first failing rank's, else a stop's.
    for (const json& r : doc["ranks"]) {
      if (r.contains("exit_code") && r["exit_code"].is_number() && code == kExitOk) {
        code = r["exit_code"].get<int>();
      }
    }
    if (doc["error"].is_string() && code == kExitOk) code = kExitRuntime;
    if (code == kExitOk && doc["interrupted"].get<bool>()) code = exit_code_for_stop();
    if (code != kExitOk) doc["exit_code"] = code;
    if (doc["error"].is_string()) out::error(doc["error"].get<std::string>());
    if (auto w = json_file.commit(doc); !w) {
      out::error(w.error().what());
      if (code == kExitOk) code = kExitRuntime;
    }
    if (st.ctx.au_target > 0 && doc["au_pass"].is_boolean()) {
      const bool ok = doc["au_pass"].get<bool>();
      out::print("  AU min {:.1f}% {} the {:.0f}% target: {}\n", doc["au_min"].get<double>() * 100,
                 ok ? ">=" : "<", st.ctx.au_target * 100,
                 ok ? "PASS (every accelerator of every rank meets it)"
                    : fmt::format("FAIL (rank {} accelerator {} does not)",
                                  doc["au_min_at"].value("rank", 0u),
                                  doc["au_min_at"].value("accelerator", 0u)));
    }
  }
  return std::stoi(job.broadcast(std::to_string(code)));
}

}  // namespace feedline::tools
