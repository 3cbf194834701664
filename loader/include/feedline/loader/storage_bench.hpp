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
#include <memory>
#include <optional>
#include <stop_token>
#include <vector>

#include "feedline/core/clock.hpp"
#include "feedline/core/error.hpp"
#include "feedline/loader/trace.hpp"
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
  // 0 = no limit. At the deadline no new read starts; those in flight may finish within a second
  // (as fio's do), then are cancelled (a slow server, a retry waiting out a Retry-After): counted
  // in QueueStats::cancelled, not as errors.
  std::chrono::nanoseconds runtime{0};
  bool time_based = false;  // loop until runtime (requires runtime > 0)
  bool register_buffers = true;
  bool register_files = false;
  std::uint64_t seed = 0x5eed;
  // Once requested (Ctrl-C): no new reads, those in flight are cancelled (a read that trickles
  // in at 1 byte/s does not hold the run), and the partial result comes back with interrupted.
  std::stop_token stop;
  // Records each job's reads (submitted -> completed) and its reads in flight here, a track per
  // job, "fl-bench-N" (trace.hpp; null: none).
  std::shared_ptr<TraceLog> trace;
};

// Live counters, readable from another thread while the benchmark runs (progress display).
struct BenchProgress {
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<std::uint64_t> ios{0};
};

struct StorageBenchResult {
  storage::QueueStats stats;   // merged over jobs
  storage::QueueInfo info;     // engine and features of the first job's queue
  double seconds = 0;          // first submission to last completion
  CpuTimes cpu;                // process CPU during the run
  bool interrupted = false;    // stopped early by the stop flag
  std::optional<Error> error;  // the first I/O error, when one stopped the run
};

// Checks the configuration against the object: kInvalidArgument with a message a user can act on.
Result<void> validate(const StorageBenchConfig& config, const storage::ObjectHandle& object,
                      const storage::BackendCaps& caps);

// Runs the benchmark. config.stop ends it early: no new reads are issued, those in flight are
// cancelled, and the partial result is returned with interrupted = true. progress (may be null)
// is updated as reads complete. A read that comes back short of its block although the object
// had those bytes when the run started (the file was truncated under it) is an I/O error
// naming the object and offset, not a fast zero-byte read.
Result<StorageBenchResult> run_storage_bench(storage::Backend& backend,
                                             const storage::ObjectHandle& object,
                                             const StorageBenchConfig& config,
                                             BenchProgress* progress);

// Writes size bytes of seeded pseudo-random (incompressible) data to key, as fio lays out a file.
// A stop request abandons the object (nothing is left behind) and returns kCancelled.
Result<void> create_random_object(storage::Backend& backend, std::string_view key,
                                  std::uint64_t size, std::uint64_t seed,
                                  std::stop_token stop = {});

}  // namespace feedline::loader
