// `mpirun -np R feedline run URL ...`: one rank of an MPI job (mpi_job.hpp). Every rank reads its
// own shard (the world is ranks x --accelerators) with its accelerators; before the first read the
// ranks compare what must agree (job_ready: a rank of other epochs, seed, batch size, format or
// dataset is a usage error naming the option and the ranks), the ranks start each epoch
// together, and rank 0 gathers every rank's document and writes the job's report
// (job_report.hpp) to stdout and --json; the other ranks print only their own errors. A rank
// that fails tells the others, which stop within about a second; its error, naming the rank and
// its host, is the job's, and every rank exits with the job's code.
#pragma once

#include <optional>
#include <string>

#include "job_report.hpp"
#include "mpi_job.hpp"
#include "run_options.hpp"

namespace feedline::tools {

// What every rank of a job must have alike to shard one dataset (job_report.hpp's Agreement):
// batch size, format, seed, shuffle, shard shuffle, drop-last, accelerators per rank and the
// dataset itself (its sample count and listing fingerprint). Commands add their own (run:
// --epochs, --runs; bench accelerators: its search's).
Agreement sharding_agreement(const RunSetup& st, unsigned accelerators,
                             const loader::Dataset& dataset);

// Where every rank of a job meets before its first read (a collective: every rank calls it once):
// each brings its set-up failure (its error, naming it) or what must agree. Returns the first
// rank's failure, if any rank failed; otherwise sets *disagreement to the first item of rank 0's
// `mine` that another rank has otherwise (job_report.hpp's first_disagreement). Every rank gets
// the same answer, so every rank takes the same next step.
std::optional<std::string> job_ready(MpiJob& job, const std::optional<std::string>& failure,
                                     const Agreement& mine,
                                     std::optional<std::string>* disagreement);

int run_in_job(const RunOptions& o, MpiJob& job);

}  // namespace feedline::tools
