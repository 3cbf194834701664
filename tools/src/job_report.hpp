// The report of an MPI job (`mpirun -np R feedline run ...`): rank 0 turns every rank's own
// document into the job's, text and JSON. Pure functions of the documents (no MPI), so the rules
// are tested on planted documents.
//
// The job's document has the top-level keys of a single run's (samples, bytes, batches,
// wall_seconds, samples_per_second, bytes_per_second, au, delivered.digest, bottleneck, stages,
// queues, io, ...) for the whole job, and adds:
//  - ranks: each rank's own document (a host document: its accelerators in per_accelerator),
//    with "rank" and "host"; a rank that failed before its run has a short one with "error";
//  - accelerators (over every rank), accelerators_per_rank, hosts, au_min / au_mean / au_max
//    over every accelerator of every rank, and au_min_at {rank, accelerator};
//  - stragglers: the slowest rank against the median, each rank's rate taken over its own time
//    (the waits at epoch barriers, where a fast rank waits for the slow one, left out), with its
//    own verdict, and what held it back: its own storage link, or decode CPU, or ...;
//  - mlperf: the job's result in MLPerf Storage's words (run_report.hpp).
// Rates are over the job's wall, the longest rank's (the ranks start together). The digest is
// summed over the ranks, mod 2^64: over whole epochs it is the dataset's.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace feedline::tools {

// Below this fraction of the median rank's rate, the slowest rank is called a straggler.
inline constexpr double kStragglerRatio = 0.9;

struct JobSetup {
  unsigned hosts = 1;     // distinct hosts among the ranks
  double au_target = 0;   // 0: none
  bool emulated = false;  // the run had an emulated accelerator (a compute time)
};

// ranks: each rank's document, in rank order, each with "rank" and "host".
nlohmann::json job_document(std::vector<nlohmann::json> ranks, const JobSetup& setup);
// The text report of job_document()'s document.
std::string job_text(const nlohmann::json& job);

// What every rank of a job must run with alike, in the words of its flags, in order: ("--epochs",
// "3"), ("--seed", "0"), ..., ("the dataset", "2000 samples, listing 0123456789abcdef"). A rank
// of another epoch count would wait at a barrier nobody else reaches; another seed, batch size,
// format or dataset shards another order, delivering some samples twice and others never.
using Agreement = std::vector<std::pair<std::string, std::string>>;
nlohmann::json agreement_json(const Agreement& a);
// The first of rank 0's items (ranks: each rank's agreement_json, in rank order) that another
// rank has otherwise, named with every rank that differs and its value, as one error message;
// nullopt when every rank agrees. who(r) names rank r ("rank 1 of 2 (host h2)").
std::optional<std::string> first_disagreement(const std::vector<nlohmann::json>& ranks,
                                              const std::function<std::string(unsigned)>& who);

// What held a rank back, in words, from the stage its verdict names: "its own storage link",
// "decode CPU", ...
std::string held_back_by(const std::string& stage);

}  // namespace feedline::tools
