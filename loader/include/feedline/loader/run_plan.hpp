// A run's plan: what the settings (settings.hpp) and a dataset's URL make, checked once, for every
// front end. The command line's `run` (and diagnose, bench accelerators, ...), the Python module
// and a C++ embedder each fill a LoaderSettings in their own way (flags, keywords, a struct), and
// plan_run() turns it into what a run needs: the LoaderConfig, the backend's and the throttle's
// configuration, the dataset's options, the emulated compute; open_run() then opens the backend and
// the dataset the plan names.
//
// Messages name settings as {name} placeholders (settings.hpp: render_setting_names), so that a
// Python user reads "io_depth" and a shell user "--io-depth". Nothing here prints: what the user
// should know comes back as notes. Nothing here reads the process's environment: the front end
// passes it as an EnvLookup (the launcher's rank and world size, the AWS variables and files).
//
//   loader::LoaderSettings s;
//   s.batch_size = 64;
//   auto plan = loader::plan_run(s, url, env);               // env: std::getenv, as a lookup
//   if (!plan) ... render_setting_names(plan.error().message(), ...)
//   auto run = loader::open_run(*plan, url);                 // the backend and the dataset
//   auto l = loader::Loader::open(*run->backend, run->dataset, plan->ctx.config);
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/error.hpp"
#include "feedline/loader/dataset.hpp"
#include "feedline/loader/emulate.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/loader/settings.hpp"
#include "feedline/storage/aws_config.hpp"
#include "feedline/storage/backend.hpp"
#include "feedline/storage/decorators.hpp"
#include "feedline/storage/registry.hpp"

namespace feedline::loader {

// What a run is, besides its figures: the settings it runs with and the dataset's size, as the
// reports (text, JSON, HTML) tell them.
struct RunContext {
  std::string url;     // redacted: no password, no signature
  std::string format;  // the dataset's, once open
  LoaderConfig config;
  std::string compute_time;
  std::uint64_t dataset_samples = 0;
  std::uint64_t dataset_bytes = 0;          // of the samples whose size is known
  std::uint64_t dataset_unknown_sizes = 0;  // samples whose size is learned when read
  // The memory the dataset's listing holds for the run (Dataset::listing_bytes), outside the
  // memory budget.
  std::uint64_t listing_bytes = 0;
  double au_target = 0;       // 0 = none
  unsigned accelerators = 1;  // emulated on this host (accelerators.hpp)
  // MLPerf Storage's potential_caching: the reads go through this host's page cache (local
  // files, not direct) and its memory could hold the dataset: the run may measure memory.
  bool potential_caching = false;
  std::uint64_t host_memory_bytes = 0;
  std::string image;  // what JPEG members decode to ("224x224x3 RGB, center crop"); "": not decoded
};

// Everything a run needs, checked, before anything is opened.
struct RunPlan {
  RunContext ctx;
  ComputeModel compute;  // compute_time (the command line's emulated accelerator)
  storage::BackendConfig backend;
  DatasetOptions dataset;  // its format (kAuto unless one was named), index, on_error, stop
  std::optional<DatasetFormat> format;  // the format named (format != "auto")
  std::optional<storage::ThrottleConfig> throttle;
  // What the user should know (insecure TLS, unsigned requests), with {name} placeholders; never
  // a secret.
  std::vector<std::string> notes;
  // What the plan holds that must never be printed (the URL's password or signature, the S3
  // secret key and session token): a front end that scrubs its output registers them.
  std::vector<std::string> secrets;
};

// The launcher's rank and world size: the settings where given, else those of the launcher
// (torchrun's RANK/WORLD_SIZE, Open MPI's, SLURM's) read through env, always both from the same
// launcher. Errors (kInvalidArgument) name the setting ({rank}) or the variable.
struct Sharding {
  unsigned rank = 0, world = 1;
};
Result<Sharding> resolve_sharding(const LoaderSettings& s, const storage::EnvLookup& env);

// Fills config's http, s3 and nfs sections from the network settings; the AWS variables and
// files are read (through env) only for s3:// URLs. Errors are kInvalidArgument with {name}
// placeholders; notes gets what the user should know, secrets what must not be printed.
Result<void> apply_net_settings(const NetSettings& s, std::string_view url,
                                const storage::EnvLookup& env, storage::BackendConfig& config,
                                std::vector<std::string>& notes, std::vector<std::string>& secrets);

// Checks s as settings of a run of the dataset at url (bad values, settings that conflict, what
// this build or machine lacks: kInvalidArgument, messages with {name} placeholders) and makes its
// plan. stop ends the run's waits (the open's, the pipeline's).
Result<RunPlan> plan_run(const LoaderSettings& s, std::string_view url,
                         const storage::EnvLookup& env, std::stop_token stop = {});

// The backend and dataset a run reads.
struct OpenedRun {
  std::unique_ptr<storage::Backend> backend;
  Dataset dataset;
  // What the user should know about the dataset as it is used ({name} placeholders), besides
  // the dataset's own notes and the objects it skipped (dataset.notes, dataset.skipped).
  std::vector<std::string> notes;
};

// Opens the backend and the dataset at url (the one plan was made for) as the plan says, and
// fills plan.ctx's dataset figures (format, samples, bytes, potential caching). The error is the
// storage's or the dataset's (not found, permission denied, not a dataset, ...).
Result<OpenedRun> open_run(RunPlan& plan, std::string_view url);

}  // namespace feedline::loader
