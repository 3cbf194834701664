// A job's report from its ranks' own documents: what rank 0 of `mpirun -np R feedline run ...`
// prints, and what rank 0's report() in Python returns under torch.distributed. Pure functions
// of the documents (no MPI, no process group), so the rules are tested on planted documents.
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
//  - mlperf: the job's result in MLPerf Storage's words (report_json.hpp).
// Rates are over the job's wall, the longest rank's (the ranks start together). The digest is
// summed over the ranks, mod 2^64: over whole epochs it is the dataset's.
//
//   std::vector<std::string> ranks = ...;  // each rank's report_json(), "rank" and "host" added
//   Result<std::string> job = loader::job_report_json(ranks, {.hosts = 2});
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/error.hpp"

namespace feedline::loader {

// Below this fraction of the median rank's rate, the slowest rank is called a straggler.
inline constexpr double kStragglerRatio = 0.9;

struct JobSetup {
  unsigned hosts = 1;     // distinct hosts among the ranks
  double au_target = 0;   // 0: none
  bool emulated = false;  // the run had an emulated accelerator (a compute time)
};

// ranks: each rank's document as JSON text, in rank order, each with "rank" and "host".
// kInvalidArgument naming the rank whose text is not a JSON object.
Result<std::string> job_report_json(const std::vector<std::string>& ranks, const JobSetup& setup,
                                    int indent = -1);

// Several runs' tables as one (a host's accelerators, a job's ranks): {"stages", "queues",
// "io"}, the stages' and queues' counts summed and their fractions averaged (the stages'
// weighted by their threads), the reads' counts summed. "{}" for no documents. The documents
// are the caller's own (report_json()'s, alike in their tables).
std::string merged_tables_json(const std::vector<std::string>& docs);

// What held a rank back, in words, from the stage its verdict names: "its own storage link",
// "decode CPU", ...
std::string held_back_by(std::string_view stage);

}  // namespace feedline::loader
