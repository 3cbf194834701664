// The storage benchmark behind `feedline bench storage`: fio's job model on a feedline backend.
//
// numjobs threads each own an IoQueue (one io_uring ring per job, created in the job's thread) and
// keep iodepth reads of bs bytes in flight over the first `size` bytes of one object, sequentially
// or at uniformly random bs-aligned offsets. Each job starts at offset 0, as fio's jobs do when
// they share a file. Without time_based a job reads `size` bytes once (capped by runtime); with it
// the job wraps around until runtime ends. The first I/O error stops the run.
//
// The same runner measures "storage alone" for pipeline diagnosis, so it lives in the library.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "feedline/core/clock.hpp"
#include "feedline/core/error.hpp"
#include "feedline/storage/backend.hpp"

namespace feedline::loader {

enum class AccessPattern { kSequential, kRandom };

struct StorageBenchConfig {
  AccessPattern pattern = AccessPattern::kSequential;
  std::uint64_t block_size = 1 << 20;
  unsigned iodepth = 32;
  unsigned numjobs = 1;
  // Reads re-issued per submission (fio's iodepth_batch_submit). 1 issues each read as soon as
  // its slot frees, which keeps the device queue fullest; larger values save system calls.
  unsigned iodepth_batch = 1;
  std::uint64_t size = 0;  // bytes of the object to cover; 0 = the whole object
  std::chrono::nanoseconds runtime{0};  // 0 = no limit
  bool time_based = false;              // loop until runtime (requires runtime > 0)
  bool register_buffers = true;
  bool register_files = false;
  std::uint64_t seed = 0x5eed;
};

// Live counters, readable from another thread while the benchmark runs (progress display).
struct BenchProgress {
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<std::uint64_t> ios{0};
};

struct StorageBenchResult {
  storage::QueueStats stats;  // merged over jobs
  storage::QueueInfo info;    // engine and features of the first job's queue
  double seconds = 0;         // first submission to last completion
  CpuTimes cpu;               // process CPU during the run
  bool interrupted = false;   // stopped early by the stop flag
  std::optional<Error> error; // the first I/O error, when one stopped the run
};

// Checks the configuration against the object: kInvalidArgument with a message a user can act on.
Result<void> validate(const StorageBenchConfig& config, const storage::ObjectHandle& object,
                      const storage::BackendCaps& caps);

// Runs the benchmark. stop (may be null) ends it early: no new reads are issued, those in flight
// are completed, and the partial result is returned with interrupted = true. progress (may be
// null) is updated as reads complete.
Result<StorageBenchResult> run_storage_bench(storage::Backend& backend,
                                             const storage::ObjectHandle& object,
                                             const StorageBenchConfig& config,
                                             const std::atomic<bool>* stop,
                                             BenchProgress* progress);

// Writes size bytes of seeded pseudo-random (incompressible) data to key, as fio lays out a file.
// stop (may be null) abandons the object (nothing is left behind) and returns kCancelled.
Result<void> create_random_object(storage::Backend& backend, std::string_view key,
                                  std::uint64_t size, std::uint64_t seed,
                                  const std::atomic<bool>* stop = nullptr);

}  // namespace feedline::loader
