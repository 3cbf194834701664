// One process of an MPI job: `mpirun -np R feedline run ...` (Open MPI; MLPerf Storage launches
// its ranks the same way). The only place that includes <mpi.h> (mpi_job.cpp); a build without
// MPI (FEEDLINE_WITH_MPI=OFF) has the same class, and join() refuses a job with "built without
// MPI".
//
// What a job needs of MPI, and nothing more:
//  - who this process is: its rank, the world's size, its host (and every rank's host);
//  - epoch barriers (barrier(): a loader::EpochSync through rank 0, point to point), which end
//    within about a second on a stop or when another rank announces a failure, so nothing waits
//    for a rank that will not come;
//  - failures: announce_failure() tells every other rank at once; a watcher thread hears it and
//    calls the on_failure callback (the run then stops, and its report still reaches rank 0);
//  - collectives for the reports (gather to rank 0, allgather, broadcast), which every rank calls
//    in the same order once its run is over.
// A rank that dies (killed, crashed) is Open MPI's to handle: mpirun ends every other rank and
// names the one that died, its host and the signal.
//
// Threads: MPI runs at MPI_THREAD_SERIALIZED, and every call goes through one mutex, so the
// consumer thread's barriers, the watcher and the main thread's collectives may all use one
// MpiJob. The barriers' messages travel on a communicator of their own (a duplicate of the
// world), apart from the collectives; a barrier left early (a stop) leaves messages that the next
// series of barriers recognises as old and drops.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "feedline/core/error.hpp"
#include "feedline/loader/emulate.hpp"

namespace feedline::tools {

// True when this build has MPI.
bool mpi_compiled_in() noexcept;

// The MPI launcher's variables this process was started with, if any ("OMPI_COMM_WORLD_SIZE=3"),
// empty when none: a process of its own. A launcher is recognised by its contact variables
// (PMIx's PMIX_RANK and PMIX_NAMESPACE, Open MPI's OMPI_MCA_orte_hnp_uri, PMI's PMI_RANK with
// PMI_FD or PMI_PORT): a rank and world size set by hand shard a process, they start no job.
std::string mpi_launch_hint();

class MpiJob final : public loader::EpochSync {
 public:
  // Joins the job this process was started in (MPI_Init_thread), or returns null when no MPI
  // launcher started it. In a build without MPI, a process an MPI launcher started is refused
  // (UsageError: "built without MPI") unless the user sharded it by hand (ranks_given: --rank
  // and --world-size), which runs it on its own. CommandError when MPI cannot start.
  static std::unique_ptr<MpiJob> join(bool ranks_given);
  ~MpiJob() override;  // stops the watcher, cancels what is pending, MPI_Finalize
  MpiJob(const MpiJob&) = delete;
  MpiJob& operator=(const MpiJob&) = delete;

  unsigned rank() const noexcept { return rank_; }
  unsigned size() const noexcept { return size_; }
  const std::string& host() const noexcept { return hosts_[rank_]; }
  const std::vector<std::string>& hosts() const noexcept { return hosts_; }  // by rank
  unsigned distinct_hosts() const noexcept { return distinct_hosts_; }
  // "rank 1 of 3 (host vm)", for messages.
  std::string who() const;
  std::string who(unsigned rank) const;

  // Starts a new series of epoch barriers (a run, a trial); every rank calls it at the same
  // point, so that messages of a series left early are never taken for this one's.
  void begin_series() noexcept { ++series_; }
  // loader::EpochSync: waits until every rank arrived at `epoch` of this series. kCancelled on a
  // stop; kAborted naming the rank once another rank announced a failure.
  Result<void> arrive(std::uint32_t epoch, std::stop_token stop) override;

  // Tells every other rank that this one failed (what: the error, with this rank's name in it).
  void announce_failure(const std::string& what);
  // The first failure another rank announced, if one did.
  std::optional<std::string> peer_failure() const;
  // Calls on_failure (from the watcher's thread, once) when another rank announces a failure;
  // stops watching when on_failure is empty. One callback at a time.
  void watch(std::function<void()> on_failure);

  // Collectives: every rank calls them, in the same order. gather: rank 0 gets every rank's
  // text (by rank), the others an empty vector.
  std::vector<std::string> gather(const std::string& mine);
  std::vector<std::string> allgather(const std::string& mine);
  // Rank 0's text, on every rank.
  std::string broadcast(const std::string& from_root);

 private:
  MpiJob() = default;
  void watch_loop(std::stop_token stop);
  // Under mu_: takes an announced failure if one arrived (MPI_Test on the posted receive).
  void poll_failure_locked();

  struct State;  // MPI handles (mpi_job.cpp)
  std::unique_ptr<State> mpi_;
  unsigned rank_ = 0;
  unsigned size_ = 1;
  std::vector<std::string> hosts_;
  unsigned distinct_hosts_ = 1;
  std::uint32_t series_ = 0;
  mutable std::mutex mu_;                    // every MPI call
  std::optional<std::string> peer_failure_;  // under mu_
  std::atomic<bool> failed_{false};          // peer_failure_ is set
  std::function<void()> on_failure_;         // under mu_
  std::jthread watcher_;
};

}  // namespace feedline::tools
