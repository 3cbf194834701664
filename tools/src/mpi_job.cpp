// MpiJob (mpi_job.hpp): Open MPI's C API behind one class. Without MPI (FEEDLINE_WITH_MPI off)
// join() refuses a process that an MPI launcher started, and returns null otherwise.
#include "mpi_job.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <list>
#include <set>

#include "cli_error.hpp"

#ifdef FEEDLINE_HAVE_MPI
#include <mpi.h>
#endif

namespace feedline::tools {
namespace {

using namespace std::chrono_literals;

// Variables an MPI launcher sets in each process it starts, shown in messages: Open MPI's
// mpirun, then PMIx (srun --mpi=pmix, prterun) and PMI (MPICH's hydra, srun --mpi=pmi2).
constexpr const char* kLaunchVariables[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"};

bool has(const char* name) { return std::getenv(name) != nullptr; }

// Started by a launcher that can host a job: its contact is in the environment (a rank and size
// set by hand, OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2, only shard a process on its own).
bool launched() {
  return (has("PMIX_RANK") && has("PMIX_NAMESPACE")) || has("OMPI_MCA_orte_hnp_uri") ||
         (has("PMI_RANK") && (has("PMI_FD") || has("PMI_PORT")));
}

// How often a wait checks its messages, a stop and the other ranks' failures: epoch barriers are
// rare, so a millisecond's latency costs nothing, and polling keeps every wait interruptible.
constexpr auto kPollInterval = 1ms;
constexpr auto kWatchInterval = 20ms;
// An announced failure's text is cut to this many bytes (the receive is posted in advance).
constexpr int kMaxFailureBytes = 4096;
// How long announce_failure() waits for its messages to leave before it gives up on a rank.
constexpr auto kAnnounceTimeout = 2s;

}  // namespace

bool mpi_compiled_in() noexcept {
#ifdef FEEDLINE_HAVE_MPI
  return true;
#else
  return false;
#endif
}

std::string mpi_launch_hint() {
  if (!launched()) return {};
  for (const char* v : kLaunchVariables) {
    if (const char* value = std::getenv(v)) return fmt::format("{}={}", v, value);
  }
  return "its contact variables";
}

std::string MpiJob::who() const { return who(rank_); }

std::string MpiJob::who(unsigned rank) const {
  return fmt::format("rank {} of {} (host {})", rank, size_,
                     rank < hosts_.size() ? hosts_[rank] : std::string("?"));
}

std::optional<std::string> MpiJob::peer_failure() const {
  std::lock_guard lock(mu_);
  return peer_failure_;
}

#ifndef FEEDLINE_HAVE_MPI

struct MpiJob::State {};

std::unique_ptr<MpiJob> MpiJob::join(bool ranks_given) {
  const std::string hint = mpi_launch_hint();
  if (hint.empty() || ranks_given) return nullptr;
  throw UsageError(fmt::format(
      "built without MPI: this process was started by an MPI launcher ({}), but this feedline "
      "cannot join its job (start the ranks together, aggregate their reports); rebuild with "
      "-DFEEDLINE_WITH_MPI=ON (Debian: libopenmpi-dev), or run each rank on its own with --rank "
      "and --world-size",
      hint));
}
MpiJob::~MpiJob() = default;
Result<void> MpiJob::arrive(std::uint32_t, std::stop_token) { return {}; }
void MpiJob::announce_failure(const std::string&) {}
void MpiJob::watch(std::function<void()>) {}
void MpiJob::watch_loop(std::stop_token) {}
void MpiJob::poll_failure_locked() {}
std::vector<std::string> MpiJob::gather(const std::string& mine) { return {mine}; }
std::vector<std::string> MpiJob::allgather(const std::string& mine) { return {mine}; }
std::string MpiJob::broadcast(const std::string& from_root) { return from_root; }

#else

namespace {

enum Tag : int { kTagArrive = 1, kTagGo = 2, kTagFailure = 3 };

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  return std::string(text, static_cast<std::size_t>(len));
}

[[noreturn]] void throw_mpi(int code, std::string_view what) {
  throw CommandError(Error(Errc::kIo, fmt::format("MPI: {}: {}", what, mpi_error_text(code))));
}

void check(int code, std::string_view what) {
  if (code != MPI_SUCCESS) throw_mpi(code, what);
}

// A barrier's key: the series (a run, a trial) and the epoch in it, so that messages of a series
// left early are never taken for a later one's.
std::uint64_t key_of(std::uint32_t series, std::uint32_t epoch) {
  return (std::uint64_t{series} << 32) | epoch;
}

// Cancels a pending receive and waits until it is gone (MPI requires both).
void cancel_receive(MPI_Request& request) {
  if (request == MPI_REQUEST_NULL) return;
  MPI_Cancel(&request);
  MPI_Wait(&request, MPI_STATUS_IGNORE);
}

}  // namespace

struct MpiJob::State {
  MPI_Comm sync = MPI_COMM_NULL;  // barriers and failures; collectives use MPI_COMM_WORLD
  MPI_Request failure_recv = MPI_REQUEST_NULL;
  std::vector<char> failure_buf = std::vector<char>(kMaxFailureBytes);
  // Messages sent and not yet known to be gone, with their bytes (which must live until then).
  struct Send {
    MPI_Request request = MPI_REQUEST_NULL;
    std::uint64_t key = 0;
  };
  std::list<Send> sends;
  std::string failure_text;  // what announce_failure() sent

  // Sends key to `to` (tag) without waiting; false when MPI refused.
  bool send(std::uint64_t key, int to, int tag) {
    Send& s = sends.emplace_back();
    s.key = key;
    if (MPI_Isend(&s.key, 1, MPI_UINT64_T, to, tag, sync, &s.request) == MPI_SUCCESS) return true;
    sends.pop_back();
    return false;
  }
  // Forgets the sends that have left (they are eager: gone at once, as a rule).
  void reap() {
    std::erase_if(sends, [](Send& s) {
      int done = 0;
      MPI_Test(&s.request, &done, MPI_STATUS_IGNORE);
      return done != 0;
    });
  }
};

std::unique_ptr<MpiJob> MpiJob::join(bool /*ranks_given: refused by the commands*/) {
  if (mpi_launch_hint().empty()) return nullptr;
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  std::unique_ptr<MpiJob> job(new MpiJob());
  job->mpi_ = std::make_unique<State>();
  if (provided < MPI_THREAD_SERIALIZED) {
    throw CommandError(
        Error(Errc::kUnsupported,
              fmt::format("MPI: this MPI library gives thread level {} where feedline needs "
                          "MPI_THREAD_SERIALIZED (its barriers run on the accelerators' threads)",
                          provided)));
  }
  // Errors come back as codes (and become CommandErrors naming the call), never an abort that
  // would leave no report.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
  job->rank_ = static_cast<unsigned>(rank);
  job->size_ = static_cast<unsigned>(size);
  check(MPI_Comm_dup(MPI_COMM_WORLD, &job->mpi_->sync), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(job->mpi_->sync, MPI_ERRORS_RETURN);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  check(MPI_Get_processor_name(name, &len), "MPI_Get_processor_name");
  job->hosts_ = job->allgather(std::string(name, static_cast<std::size_t>(len)));
  job->distinct_hosts_ =
      static_cast<unsigned>(std::set<std::string>(job->hosts_.begin(), job->hosts_.end()).size());
  check(MPI_Irecv(job->mpi_->failure_buf.data(), kMaxFailureBytes, MPI_CHAR, MPI_ANY_SOURCE,
                  kTagFailure, job->mpi_->sync, &job->mpi_->failure_recv),
        "MPI_Irecv");
  return job;
}

MpiJob::~MpiJob() {
  watcher_ = {};  // joins the watcher
  if (!mpi_) return;
  // Left by an exception that only this rank may have met: MPI_Finalize would wait for ranks
  // that wait in a collective for this one. Exiting without it makes mpirun end the job, and the
  // error is printed on the way out.
  if (std::uncaught_exceptions() > 0) return;
  {
    std::lock_guard lock(mu_);
    cancel_receive(mpi_->failure_recv);
    // A send nobody received (a barrier left early) completes on its own or dies with MPI:
    // waiting for it could wait for ever.
    mpi_->reap();
    for (State::Send& s : mpi_->sends) MPI_Request_free(&s.request);
    if (mpi_->sync != MPI_COMM_NULL) MPI_Comm_free(&mpi_->sync);
  }
  MPI_Finalize();
}

void MpiJob::poll_failure_locked() {
  if (peer_failure_ || mpi_->failure_recv == MPI_REQUEST_NULL) return;
  int done = 0;
  MPI_Status status;
  if (MPI_Test(&mpi_->failure_recv, &done, &status) != MPI_SUCCESS || !done) return;
  int count = 0;
  MPI_Get_count(&status, MPI_CHAR, &count);
  std::string text(mpi_->failure_buf.data(),
                   static_cast<std::size_t>(std::clamp(count, 0, kMaxFailureBytes)));
  if (text.empty()) text = fmt::format("{} failed", who(static_cast<unsigned>(status.MPI_SOURCE)));
  peer_failure_ = std::move(text);
  failed_.store(true, std::memory_order_release);
}

Result<void> MpiJob::arrive(std::uint32_t epoch, std::stop_token stop) {
  if (size_ == 1) return {};
  const std::uint64_t key = key_of(series_, epoch);
  State& m = *mpi_;
  // Posts a receive of one key (from `source`, with `tag`) into *slot.
  auto post = [&m](std::uint64_t* slot, int source, int tag, MPI_Request* req) {
    return MPI_Irecv(slot, 1, MPI_UINT64_T, source, tag, m.sync, req);
  };
  std::uint64_t got = 0;
  MPI_Request recv = MPI_REQUEST_NULL;
  unsigned arrived = 0;  // rank 0: the other ranks that arrived at this key
  std::unique_lock lock(mu_);
  m.reap();
  if (rank_ != 0 && !m.send(key, 0, kTagArrive)) {
    return fail(Errc::kIo, fmt::format("MPI: {} could not reach rank 0 at epoch {}", who(), epoch));
  }
  const int source = rank_ == 0 ? MPI_ANY_SOURCE : 0;
  const int tag = rank_ == 0 ? kTagArrive : kTagGo;
  for (;;) {
    if (recv == MPI_REQUEST_NULL && post(&got, source, tag, &recv) != MPI_SUCCESS) {
      return fail(Errc::kIo, fmt::format("MPI: {}: a receive failed at epoch {}", who(), epoch));
    }
    int done = 0;
    MPI_Test(&recv, &done, MPI_STATUS_IGNORE);
    if (done) {
      recv = MPI_REQUEST_NULL;
      if (got == key) {
        if (rank_ != 0) break;              // rank 0 said go
        if (++arrived + 1 == size_) break;  // every rank is here
      }
      continue;  // a key of a series left early: dropped
    }
    poll_failure_locked();
    if (peer_failure_) {
      cancel_receive(recv);
      return fail(Errc::kCancelled, fmt::format("another rank failed: {}", *peer_failure_));
    }
    if (stop.stop_requested()) {
      cancel_receive(recv);
      return fail(Errc::kCancelled, "stopped at an epoch barrier");
    }
    lock.unlock();
    std::this_thread::sleep_for(kPollInterval);
    lock.lock();
  }
  if (rank_ == 0) {
    for (unsigned r = 1; r < size_; ++r) {
      if (!m.send(key, static_cast<int>(r), kTagGo)) {
        return fail(Errc::kIo,
                    fmt::format("MPI: rank 0 could not reach {} at epoch {}", who(r), epoch));
      }
    }
  }
  return {};
}

void MpiJob::announce_failure(const std::string& what) {
  if (size_ == 1) return;
  std::vector<MPI_Request> sends;
  std::unique_lock lock(mu_);
  if (!mpi_->failure_text.empty()) return;  // once
  const std::string& text = mpi_->failure_text = what.substr(0, kMaxFailureBytes);
  for (unsigned r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    MPI_Request req = MPI_REQUEST_NULL;
    if (MPI_Isend(text.data(), static_cast<int>(text.size()), MPI_CHAR, static_cast<int>(r),
                  kTagFailure, mpi_->sync, &req) == MPI_SUCCESS) {
      sends.push_back(req);
    }
  }
  // Short messages leave at once; a rank that takes none in a bounded time is left to MPI.
  const auto deadline = std::chrono::steady_clock::now() + kAnnounceTimeout;
  for (;;) {
    int done = 0;
    MPI_Testall(static_cast<int>(sends.size()), sends.data(), &done, MPI_STATUSES_IGNORE);
    if (done) return;
    if (std::chrono::steady_clock::now() > deadline) break;
    lock.unlock();
    std::this_thread::sleep_for(kPollInterval);
    lock.lock();
  }
  for (MPI_Request& r : sends) {
    if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  }
}

void MpiJob::watch(std::function<void()> on_failure) {
  watcher_ = {};
  std::lock_guard lock(mu_);
  on_failure_ = std::move(on_failure);
  if (on_failure_ && size_ > 1) {
    watcher_ = std::jthread([this](std::stop_token stop) { watch_loop(stop); });
  }
}

void MpiJob::watch_loop(std::stop_token stop) {
  while (!stop.stop_requested()) {
    std::function<void()> call;
    {
      std::lock_guard lock(mu_);
      poll_failure_locked();
      if (peer_failure_ && on_failure_) call = std::exchange(on_failure_, nullptr);
    }
    if (call) {
      call();
      return;
    }
    std::this_thread::sleep_for(kWatchInterval);
  }
}

std::vector<std::string> MpiJob::gather(const std::string& mine) {
  std::lock_guard lock(mu_);
  const int len = static_cast<int>(mine.size());
  std::vector<int> lens(rank_ == 0 ? size_ : 0), displs(lens.size());
  check(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather");
  std::string all;
  if (rank_ == 0) {
    std::size_t total = 0;
    for (std::size_t i = 0; i < lens.size(); ++i) {
      displs[i] = static_cast<int>(total);
      total += static_cast<std::size_t>(lens[i]);
    }
    all.resize(total);
  }
  check(MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0,
                    MPI_COMM_WORLD),
        "MPI_Gatherv");
  std::vector<std::string> out;
  for (std::size_t i = 0; i < lens.size(); ++i) {
    out.push_back(
        all.substr(static_cast<std::size_t>(displs[i]), static_cast<std::size_t>(lens[i])));
  }
  return out;
}

std::vector<std::string> MpiJob::allgather(const std::string& mine) {
  std::lock_guard lock(mu_);
  const int len = static_cast<int>(mine.size());
  std::vector<int> lens(size_), displs(size_);
  check(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  std::size_t total = 0;
  for (std::size_t i = 0; i < lens.size(); ++i) {
    displs[i] = static_cast<int>(total);
    total += static_cast<std::size_t>(lens[i]);
  }
  std::string all(total, '\0');
  check(MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR,
                       MPI_COMM_WORLD),
        "MPI_Allgatherv");
  std::vector<std::string> out;
  for (std::size_t i = 0; i < lens.size(); ++i) {
    out.push_back(
        all.substr(static_cast<std::size_t>(displs[i]), static_cast<std::size_t>(lens[i])));
  }
  return out;
}

std::string MpiJob::broadcast(const std::string& from_root) {
  std::lock_guard lock(mu_);
  int len = static_cast<int>(from_root.size());
  check(MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
  std::string out = rank_ == 0 ? from_root : std::string(static_cast<std::size_t>(len), '\0');
  check(MPI_Bcast(out.data(), len, MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return out;
}

#endif  // FEEDLINE_HAVE_MPI

}  // namespace feedline::tools
