// What a run reports: typed, grouped by what it describes, with enums where the values are a
// closed set (stages, queues, data paths, how input-bound a run was, the knobs the verdict
// turns). The library speaks in its own config names (LoaderConfig's fields); only tools/ (and
// the Python layer) turn a Knob into a flag name.
//
// Groups: consumer (what the training loop saw: throughput, waits, AU), io (the storage stage's
// reads), memory (the budget and what was held), data_path (which path delivered the bytes and
// what it copied), device (the device sink), stages and queues (stall accounting), delivered
// (the digest and what was skipped), verdict (the bottleneck and the next knob).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/error.hpp"
#include "feedline/core/histogram.hpp"
#include "feedline/loader/accounting.hpp"
#include "feedline/storage/backend.hpp"

namespace feedline::loader {

// The pipeline's stages, in the order data flows through them.
enum class StageId : std::uint8_t { kStorage, kDecode, kCollate, kDevice, kConsumer };
std::string_view stage_name(StageId s) noexcept;  // "storage", "decode", ...

// The pipeline's bounded queues (the batch pool is one: free batch buffers).
enum class QueueId : std::uint8_t { kReads, kDecoded, kBatches, kBatchPool, kDevice };
std::string_view queue_name(
    QueueId q) noexcept;  // "reads", "decoded", "batches", "batch-pool", "device"

// How the bytes of a run went from storage to the consumer (plan_data_path decides it).
enum class DataPath : std::uint8_t {
  kHostDirect,     // reads land in their slot of the host batch buffer; nothing is copied
  kDecodeInPlace,  // reads go to sample buffers; decode writes each sample into its batch slot
  kBounce,         // reads go to sample buffers; collate copies each sample into the batch
  kPinnedDirect,   // with a device: reads land in the pinned host slot, then the H2D copy
  kGpuDirect,      // cuFile reads into the batch's slot in GPU memory (nvidia-fs)
  kCufileCompat,   // the same through libcufile's compatibility mode (it copies via host memory)
};
// The name reports use: "host-direct", "decode-in-place", "bounce" (kBounce and kPinnedDirect:
// both bounce through host memory to the GPU), "gpu-direct", "cufile-compat".
std::string_view data_path_name(DataPath p) noexcept;
// Reads land straight in their batch slot (host or device memory).
bool reads_into_slot(DataPath p) noexcept;
// Reads land in GPU memory: no host bytes, no H2D copy, no digest.
bool reads_into_device(DataPath p) noexcept;

// tf.data's thresholds on the consumer's wait: under 5% no, 5-20% moderate, more high.
enum class InputBound : std::uint8_t { kNo, kModerate, kHigh };
std::string_view input_bound_name(InputBound b) noexcept;  // "no", "moderate", "high"

// One stage's workers, merged. Fractions are of threads x wall time and add up to 1.
struct StageReport {
  StageId stage = StageId::kStorage;
  unsigned threads = 0;
  double busy_fraction = 0;
  double starved_fraction = 0;  // waiting for input
  double blocked_fraction = 0;  // waiting for room downstream, or for memory
  double cpu_seconds = 0;
  double busy_seconds = 0;  // summed over threads
  std::uint64_t items = 0;
  std::uint64_t bytes = 0;
  // Items whose work for this stage another stage's threads did, counted there and not in
  // items: decode's, when there was nothing to decode but the digest and the storage threads
  // took it as each read landed (their CPU time includes it).
  std::uint64_t items_inline = 0;
};

// What a queue measured of itself (accounting.hpp), and which queue it was.
struct QueueReport : QueueOccupancy {
  QueueId queue = QueueId::kReads;
};

// What the consumer (the training loop, or the emulated accelerator) saw.
struct ConsumerReport {
  std::uint64_t samples = 0;  // delivered
  std::uint64_t bytes = 0;    // decoded bytes delivered
  std::uint64_t batches = 0;
  std::uint32_t epochs = 0;  // completed
  double wall_seconds = 0;
  double samples_per_second = 0;
  double bytes_per_second = 0;
  double first_batch_seconds = 0;  // from open() to the first batch in hand
  double wait_seconds = 0;         // waiting for batches, all steps
  // Of the steady state: the first step's wait (the pipeline filling) is left out of both the
  // waiting and the wall time, as MLPerf Storage leaves the first step out of AU.
  double wait_fraction = 0;
  Histogram wait_ns;  // per step
  InputBound input_bound = InputBound::kNo;
  double compute_seconds = 0;  // what record_compute() was told (0 without an accelerator)
  double au = 0;               // compute / wall, first step excluded (MLPerf Storage)
  // Steps AU was measured over (batches after the first). 0: AU is not measured (a run of one
  // step); `au` is then meaningless, not a failure.
  std::uint64_t au_steps = 0;
  // Waiting at epoch barriers for the other ranks of a job (run_emulated's EpochSync): inside
  // wall_seconds, neither compute nor input wait. A rank that waits long there was not the one
  // holding the job back.
  double sync_seconds = 0;
  // Samples of each epoch no rank got: the equal-batches rule (Sampler::left_out_per_epoch()).
  std::uint64_t left_out_per_epoch = 0;
};

// The storage stage's reads.
struct IoReport {
  std::string engine;  // the I/O queue's engine ("uring", "posix", "http", "nfs", "mem", ...)
  storage::QueueStats stats;        // latency, depth, at-cap time, backend counters
  std::uint64_t storage_bytes = 0;  // bytes read from storage
  unsigned io_depth = 0;
  unsigned storage_threads = 1;  // threads of the storage stage (each its own queue)
  // Seconds (summed over the storage threads) spent in the queue's poll() waiting for reads to
  // complete. The rest of their busy time was the host's own work: page-cache reads are copied
  // at submission, so storage that is CPU-bound on per-sample work hardly waits here.
  double poll_wait_seconds = 0;
  // Time (of wall) the storage stage could not issue more reads because downstream had not
  // caught up (the window ahead of collate) or because the memory budget was full.
  double window_limited_fraction = 0;
  double budget_limited_fraction = 0;
  std::uint64_t window_samples = 0;  // how far storage may read ahead of collate, in samples
  std::size_t batch_buffers = 0;     // batch buffers in the pool (the window, in batches)
  double samples_per_object = 0;     // the dataset's samples per storage object (shards: many)
};

struct MemoryReport {
  std::uint64_t budget = 0;
  std::uint64_t peak = 0;       // most bytes held at once by the pipeline's buffers
  std::uint64_t overshoot = 0;  // bytes allocated beyond the budget (zstd size estimates)
  // This process's peak resident set when the run ended (VmHWM; 0 where /proc does not say): the
  // budget checked from outside. Taken once, so that a report written twice says the same.
  std::uint64_t peak_rss = 0;
  // Where the budget made the pipeline smaller than asked (fewer prefetched batches, a shorter
  // read-ahead window), one line each; empty when everything asked for fit.
  std::vector<std::string> fitted;
};

// Bytes delivered by the run's data path, and what the pipeline copied to deliver them
// (collate's copy into the batch, O_DIRECT bounce copies, the H2D copy of a device sink).
// One chain of decoders the run's members went through (decoder.hpp), e.g. "zstd+jpeg".
struct DecoderUse {
  std::string name;
  std::string output;         // the last decoder's describe(): "224x224x3 RGB, center crop"
  std::uint64_t members = 0;  // members of the dataset that take it
};

struct DataPathReport {
  DataPath path = DataPath::kBounce;
  std::vector<DecoderUse> decoders;
  std::uint64_t bytes = 0;  // delivered
  std::uint64_t copied_bytes = 0;
  double copy_amplification = 0;   // copied / delivered (0 on the direct path)
  std::string detail;              // what the copies were
  std::string reason;              // why this path (and why not the direct one)
  std::vector<std::string> notes;  // registered buffers, O_DIRECT, fallbacks
};

// The device sink's numbers (enabled only with a device).
struct DeviceReport {
  bool enabled = false;
  int device = -1;
  std::string name;
  unsigned streams = 0;
  bool pinned = false;      // host batches were page-locked (cudaHostRegister)
  std::string host_memory;  // "pinned (cudaHostRegister, N buffers)" or why pageable
  std::uint64_t copies = 0;
  std::uint64_t h2d_bytes = 0;
  double h2d_seconds = 0;           // summed GPU-side copy time (events)
  double h2d_bytes_per_second = 0;  // h2d_bytes / h2d_seconds
  double peak_bytes_per_second =
      0;                         // pinned cudaMemcpy peak measured at start-up (0: not measured)
  double copy_wait_seconds = 0;  // the device stage waiting for copies to finish
  double consumer_wait_on_copy_seconds = 0;  // the consumer starved while a copy was the holdup
};

struct DeliveredReport {
  // Sum (mod 2^64) of XXH3-64 over every delivered member's decoded bytes (loader::member_hash).
  std::uint64_t digest = 0;
  // False when samples went from storage to GPU memory without passing through host memory
  // (gpu-direct, cufile-compat): nothing on the host could hash them, so `digest` is 0.
  bool digest_computed = true;
  std::uint64_t skipped = 0;  // samples skipped with on_error = kSkip
  std::vector<std::string> skipped_examples;
};

// The settings the verdict can suggest turning, by LoaderConfig's names (each front end spells
// them its own way: the CLI's kDecodeThreads is --decode-threads).
enum class Knob : std::uint8_t {
  kIoDepth,          // io_depth
  kDecodeThreads,    // decode_threads
  kPrefetchBatches,  // prefetch_batches
  kMemoryBudget,     // memory_budget
  kBatchSize,        // sampler.batch_size
  kShardShuffle,     // sampler.shard_shuffle
  kCudaStreams,      // device.streams
  kConnections,      // the storage's connections (BackendConfig)
  kPartSize,         // the HTTP part size (BackendConfig)
  kStorageThreads,   // storage_threads
};
std::string_view knob_name(
    Knob k) noexcept;  // the setting (settings.hpp): "io_depth", "prefetch", ...
// The knob knob_name() names (a document read back), or nullopt.
std::optional<Knob> knob_from_name(std::string_view name) noexcept;

// One knob to turn, from what it was to what to try, in the field's unit: a count, or bytes for
// memory_budget and part_size.
struct KnobChange {
  Knob knob = Knob::kIoDepth;
  std::uint64_t from = 0;
  std::uint64_t to = 0;
};
// A knob's value as a person reads it: "64"; a size as "1 GiB".
std::string knob_value_text(Knob k, std::uint64_t value);
// A change in the library's own words, LoaderConfig's field and its values: "io_depth=64 -> 128".
std::string knob_change_text(const KnobChange& k);
// How a front end spells a change (the CLI: "--io-depth 64 -> 128", its flag).
using KnobText = std::function<std::string(const KnobChange&)>;

// The bottleneck: the first stage, walking from the consumer back to storage, that is mostly
// busy while the consumer waits; the numbers behind the call; what to change.
struct Verdict {
  std::optional<StageId> stage;  // nullopt: no batch was delivered, nothing to judge
  std::string evidence;          // the numbers behind the call
  std::vector<KnobChange> next;  // the knobs to turn, most promising first (may be empty)
  std::string advice;            // why, and what else helps; names no flag (knobs are in `next`)
};
// The verdict's advice after its knobs, each spelt by `spell`: "io_depth=64 -> 128: reads sat at
// the in-flight cap..." (several joined by ", or "; the advice alone when there is no knob).
std::string suggestion_text(const Verdict& v, const KnobText& spell = knob_change_text);

// The user's transform (transform.hpp), where there was one.
struct TransformReport {
  bool enabled = false;
  std::uint64_t samples = 0;  // transformed
  std::uint64_t errors = 0;   // calls that failed
  // Wall time in the transform, summed over decode threads; of it, on the CPU; and waiting for
  // the lock it runs under before it could start (Python's GIL, TransformCall::lock_wait).
  double seconds = 0;
  double cpu_seconds = 0;
  double lock_wait_seconds = 0;
  // Time in the transform off the CPU, the entry's lock wait included: for a Python function,
  // the GIL's (entry, and each time another thread took it mid-call), unless the function
  // sleeps or does IO, or no core was free.
  double off_cpu_seconds = 0;
  // The transform's share of the decode threads' busy time (the rest is feedline's own decode),
  // and the share of the transform's own time spent off the CPU.
  double decode_share = 0;
  double off_cpu_share = 0;
};

struct PipelineReport {
  ConsumerReport consumer;
  IoReport io;
  MemoryReport memory;
  DataPathReport data_path;
  DeviceReport device;
  TransformReport transform;
  std::vector<StageReport> stages;
  std::vector<QueueReport> queues;
  DeliveredReport delivered;
  Verdict verdict;
  bool interrupted = false;    // stop() ended the run early: a partial report
  bool snapshot = false;       // taken mid-run (Loader::snapshot()): no IO stats, no verdict yet
  std::optional<Error> error;  // what ended the run, if anything did

  const StageReport* stage(StageId id) const noexcept;
  const QueueReport* queue(QueueId id) const noexcept;
};

}  // namespace feedline::loader
