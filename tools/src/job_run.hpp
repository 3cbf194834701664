// `mpirun -np R feedline run URL ...`: one rank of an MPI job (mpi_job.hpp). Every rank reads its
// own shard (the world is ranks x --accelerators) with its accelerators, the ranks start each
// epoch together, and rank 0 gathers every rank's document and writes the job's report
// (job_report.hpp) to stdout and --json; the other ranks print only their own errors. A rank
// that fails tells the others, which stop within about a second; its error, naming the rank and
// its host, is the job's, and every rank exits with the job's code.
#pragma once

#include "mpi_job.hpp"
#include "run_options.hpp"

namespace feedline::tools {

int run_in_job(const RunOptions& o, MpiJob& job);

}  // namespace feedline::tools
