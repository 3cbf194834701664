// What `feedline diagnose` prints and writes: the controlled runs, the measurements and ground
// truth, the model's prediction for the run's settings, the what-if table (predicted, and after
// --verify achieved and the error), the tuning, the verdict and the conclusion; and the same as
// the --json document (docs/CLI.md has its keys).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "feedline/loader/capacity.hpp"
#include "feedline/loader/diagnose.hpp"
#include "feedline/loader/tune.hpp"
#include "what_if.hpp"

namespace feedline::tools {

// One what-if's outcome.
struct Outcome {
  WhatIf what;
  loader::Prediction predicted;
  std::string not_realisable;  // why not (empty: it can run here)
  std::optional<double> achieved;
  std::optional<std::string> failed;  // its verification run failed
};

struct DiagnoseReport {
  std::string url;
  std::string format;
  double duration_seconds = 0;
  const loader::Diagnosis& diagnosis;
  const loader::CapacityModel& model;
  const std::vector<Outcome>& outcomes;
  const std::optional<loader::TuneResult>& tuned;
  const std::vector<std::string>& notes;
  bool verify = false;   // the what-ifs were run
  bool stopped = false;  // Ctrl-C during the verifications
};

std::string diagnose_text(const DiagnoseReport& r);
nlohmann::json diagnose_json(const DiagnoseReport& r);

// The tuning (loader/tune.hpp) as diagnose --tune and run --autotune print it, and as JSON.
std::string tune_text(const loader::TuneResult& t);
nlohmann::json tune_json(const loader::TuneResult& t);

}  // namespace feedline::tools
