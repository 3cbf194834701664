// feedline::Loader — the data-loading pipeline a training job embeds.
//
//   Sampler -> storage (async reads) -> decode (threads: tar members, zstd) -> collate (batches
//   in a pool of 4 KiB-aligned, mlock'd buffers) -> the caller's next()
//
// Usage:
//   auto loader = Loader::open(backend, dataset, config);   // starts prefetching at once
//   while (auto batch = (*loader)->next()) {                // Result<std::optional<Batch>>
//     if (!*batch) break;                                    // end of the last epoch
//     use((*batch)->data(), (*batch)->samples());            // valid until the Batch dies
//   }
//   PipelineReport report = (*loader)->report();             // stalls, verdict, throughput
//
// Bounded: config.memory_budget caps the bytes held by reads in flight, decoded samples and
// batch buffers together (a sample larger than the budget is an error). Deterministic: the order
// of samples follows the seed; every sample of every epoch is delivered exactly once (on this
// rank). Thread-safety: next(), stop() and report() may be called from one consumer thread; stop()
// may also be called from any thread (or a signal-watching thread) to end the run early.
//
// Lifetimes: the Backend and Dataset must outlive the Loader; a Batch must not outlive its Loader
// (it returns its buffer to the Loader's pool when destroyed).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/bytes.hpp"
#include "feedline/core/error.hpp"
#include "feedline/core/histogram.hpp"
#include "feedline/loader/accounting.hpp"
#include "feedline/loader/dataset.hpp"
#include "feedline/loader/sampler.hpp"
#include "feedline/storage/backend.hpp"

namespace feedline::transports::cuda {
class CudaRuntime;
}
namespace feedline::transports::cufile {
class CufileRuntime;
}

namespace feedline::loader {

enum class OnError { kFail, kSkip };

// The direct path ("GPUDirect-style"): samples that need no decode are read straight into their
// final place, with no intermediate copy. With a GPU and cuFile that is device memory; without,
// it is the sample's slot in the pinned batch buffer (host-direct). kAuto takes it where the
// dataset allows and says why not otherwise; kOn makes "not possible" an error; kOff always reads
// into a sample buffer that collate copies into the batch (the bounce path).
enum class GpuDirect { kAuto, kOn, kOff };
std::string_view gpu_direct_name(GpuDirect g) noexcept;
Result<GpuDirect> parse_gpu_direct(std::string_view text);

// Where batches end: host memory only (device < 0), or copied to GPU `device` after collate with
// cudaMemcpyAsync on `streams` streams, overlapped with IO and decode.
struct DeviceConfig {
  int device = -1;
  unsigned streams = 4;
  bool calibrate = true;  // measure the pinned H2D peak at start-up (tens of ms)
  // The CUDA runtime and cuFile to use; null: loaded (dlopen) when needed. Tests pass fakes.
  std::shared_ptr<const transports::cuda::CudaRuntime> cuda;
  std::shared_ptr<const transports::cufile::CufileRuntime> cufile;
};

// Limits Loader::open() enforces (kInvalidArgument beyond them).
inline constexpr unsigned kMaxIoDepth = 65536;
inline constexpr unsigned kMaxDecodeThreads = 256;
inline constexpr unsigned kMaxPrefetchBatches = 1024;
inline constexpr unsigned kMaxBatchSize = 1u << 24;

struct LoaderConfig {
  SamplerConfig sampler;                  // num_samples is filled from the dataset
  unsigned io_depth = 64;                 // reads in flight at most
  std::uint64_t io_max_bytes = 256 << 20; // bytes of reads in flight at most
  unsigned decode_threads = 2;
  // Added to the decode threads' nice value (Linux, per thread; 0..19, 0 leaves it). Decode is
  // CPU-bound; storage, collate and the consumer do short hand-offs that must not wait out a
  // decode time slice on a busy core (2 cores, alternating runs: +5 gave ~5-15% more samples/s
  // on tar+zstd shards and on files, and lost in 3 of 17 pairs).
  int decode_nice = 5;
  unsigned prefetch_batches = 2;          // finished batches queued ahead of the consumer
  std::uint64_t memory_budget = 1ull << 30;
  std::chrono::nanoseconds decode_cost{0};   // extra CPU work per sample (planting a bottleneck)
  std::chrono::nanoseconds collate_cost{0};  // extra CPU work per batch
  OnError on_error = OnError::kFail;
  // The largest sample the pipeline accepts, decoded (0: what the memory budget can hold). A
  // zstd frame's declared size is not trusted: a sample that declares or decodes to more is a
  // data error naming it (skipped with on_error = kSkip), and nothing is allocated for it.
  std::uint64_t max_sample_bytes = 0;
  // Once requested (Ctrl-C), the run stops as stop() does: every wait of the pipeline, the
  // planted decode/collate costs included, ends within about a second.
  std::stop_token stop;
  bool accounting = true;                 // stall accounting (off only to measure its cost)
  bool lock_memory = true;                // mlock batch buffers where allowed
  GpuDirect gpu_direct = GpuDirect::kOff;
  DeviceConfig device;
};

// The data path a run takes, decided from the dataset, the backend and the config before it
// starts (plan_data_path). `path` is one of "host-direct" (reads land in the batch slot),
// "decode-in-place" (decode writes into the batch slot), "bounce" (a sample buffer, then
// collate's copy; with a device, then the H2D copy),
// "gpu-direct" or "cufile-compat" (cuFile into device memory).
struct DataPathPlan {
  std::string path;
  bool direct = false;        // reads land in their final batch slot
  bool device_reads = false;  // ... and that slot is in GPU memory (cuFile): no host copy at all
  // Samples that need decoding, whose decoded sizes the index gives: decode threads write each
  // sample straight into its slot in the batch (path "decode-in-place"), so collate copies nothing.
  bool decode_in_place = false;
  std::string reason;         // why this path (and why not the direct one)
};
// `backend` is the dataset's storage (whether it can read into GPU memory). kInvalidArgument (with
// the reason) when gpu_direct is kOn and the direct path is impossible, kUnsupported when a
// device is asked for and there is no usable GPU.
Result<DataPathPlan> plan_data_path(const Dataset& dataset, const LoaderConfig& config,
                                    const storage::Backend& backend);

struct BatchMember {
  std::string_view name;
  std::uint64_t offset = 0;  // in Batch::data()
  std::uint64_t size = 0;
};

struct BatchSample {
  std::string_view key;
  std::uint32_t sample = 0;  // index into Dataset::samples
  std::uint64_t offset = 0;  // in Batch::data(): the sample's members, packed in order
  std::uint64_t size = 0;
  std::uint32_t first_member = 0;
  std::uint32_t member_count = 0;
};

class BatchBuffer;  // a pool slot (internal)
class Pipeline;     // the running pipeline (internal)

class Batch {
 public:
  Batch(Batch&&) noexcept;
  Batch& operator=(Batch&&) noexcept;
  ~Batch();

  std::uint32_t epoch() const noexcept { return epoch_; }
  std::uint64_t index() const noexcept { return index_; }   // batch number in the whole run
  // The batch's bytes in host memory; empty when they were read straight into GPU memory
  // (--gpu-direct with cuFile: see device_data()).
  ConstBytes data() const noexcept;
  // Bytes from the batch's start to the end of its last sample (data().size() for a host batch).
  std::uint64_t extent() const noexcept;
  std::span<const BatchSample> samples() const noexcept { return samples_; }
  std::span<const BatchMember> members() const noexcept { return members_; }
  std::span<const BatchMember> members_of(const BatchSample& s) const noexcept {
    return std::span<const BatchMember>(members_).subspan(s.first_member, s.member_count);
  }
  // Sum (mod 2^64) of XXH3-64 of every member's decoded bytes: adds up to the run's digest.
  std::uint64_t digest() const noexcept { return digest_; }
  std::uint64_t bytes() const noexcept { return bytes_; }
  // With a device sink: the batch's bytes in GPU memory (extent() bytes, same offsets as the
  // samples and members say), valid until the Batch dies. Null without one.
  const void* device_data() const noexcept;

 private:
  friend class Pipeline;
  Batch() = default;
  Pipeline* owner_ = nullptr;
  BatchBuffer* buffer_ = nullptr;
  std::uint32_t epoch_ = 0;
  std::uint64_t index_ = 0;
  std::vector<BatchSample> samples_;
  std::vector<BatchMember> members_;
  std::uint64_t digest_ = 0;
  std::uint64_t bytes_ = 0;
  bool on_device_ = false;
  bool device_only_ = false;  // read into GPU memory: the host buffer holds nothing
  // The device thread's wait for this batch's copy (ns, steady clock), for the consumer to tell
  // how much of its own wait the copy caused.
  std::uint64_t copy_wait_from_ns_ = 0;
  std::uint64_t copy_done_ns_ = 0;
};

struct Verdict {
  std::string stage;       // "storage", "decode", "collate", "device", "consumer" or "none"
  std::string evidence;    // the numbers behind the call
  std::string suggestion;  // the next knob to turn
};

// Bytes delivered by one data path, and the bytes the pipeline copied to deliver them (collate's
// copy into the batch, O_DIRECT bounce copies, the H2D copy of a device sink).
struct DataPathReport {
  std::string path;                // "host-direct", "bounce", "gpu-direct", "cufile-compat"
  std::uint64_t bytes = 0;         // delivered
  std::uint64_t copied_bytes = 0;
  double copy_amplification = 0;   // copied / delivered (0 on the direct path)
  std::string detail;              // what the copies were
};

// The device sink's numbers (enabled only with a device).
struct DeviceReport {
  bool enabled = false;
  int device = -1;
  std::string name;
  unsigned streams = 0;
  std::string host_memory;          // "pinned (cudaHostRegister)" or why pageable
  std::uint64_t copies = 0;
  std::uint64_t h2d_bytes = 0;
  double h2d_seconds = 0;           // summed GPU-side copy time (events)
  double h2d_bytes_per_second = 0;  // h2d_bytes / h2d_seconds
  double peak_bytes_per_second = 0; // pinned cudaMemcpy peak measured at start-up (0: not measured)
  double copy_wait_seconds = 0;     // the device stage waiting for copies to finish
  double consumer_wait_on_copy_seconds = 0;  // the consumer starved while a copy was the holdup
};

struct PipelineReport {
  std::uint64_t samples = 0;        // delivered to the consumer
  std::uint64_t bytes = 0;          // decoded bytes delivered
  std::uint64_t batches = 0;
  std::uint32_t epochs = 0;         // epochs completed
  double wall_seconds = 0;
  double samples_per_second = 0;
  double bytes_per_second = 0;
  std::uint64_t storage_bytes = 0;  // bytes read from storage
  double samples_per_object = 0;    // the dataset's samples per storage object (tar shards: many)
  // Consumer side.
  double consumer_wait_seconds = 0;   // all steps
  // Of the steady state: the first step's wait (the pipeline filling) is left out of both the
  // waiting and the wall time, as MLPerf Storage leaves the first step out of AU.
  double consumer_wait_fraction = 0;
  double first_batch_seconds = 0;     // from open() to the first batch in hand
  Histogram consumer_wait_ns;         // per step
  double compute_seconds = 0;         // emulated accelerator time (0 without one)
  double au = 0;                      // compute / wall, first step excluded (MLPerf Storage)
  // Steps AU was measured over (batches after the first that the consumer computed on). 0: AU
  // is not measured (a run of one batch): `au` is then meaningless, not a failure.
  std::uint64_t au_steps = 0;
  std::string input_bound;            // "no" (< 5% waiting), "moderate" (5-20%), "high"
  std::vector<StageStats> stages;
  std::vector<QueueReport> queues;
  storage::QueueStats io;             // the storage stage's reads: latency, depth, at-cap time
  // Time (of wall) the storage stage could not issue more reads because downstream had not
  // caught up (the window ahead of collate) or because the memory budget was full.
  double storage_window_limited_fraction = 0;
  double storage_budget_limited_fraction = 0;
  std::uint64_t window_samples = 0;  // how far storage may read ahead of collate, in samples
  std::size_t batch_buffers = 0;     // batch buffers in the pool (the window, in batches)
  unsigned io_depth = 0;
  std::uint64_t memory_budget = 0;
  std::uint64_t peak_memory = 0;      // most bytes held at once by the pipeline's buffers
  std::uint64_t budget_overshoot = 0; // bytes allocated beyond the budget (zstd size estimates)
  std::uint64_t skipped = 0;          // samples skipped with on_error = skip
  std::vector<std::string> skipped_examples;
  Verdict bottleneck;
  std::uint64_t digest = 0;
  // False when samples went from storage to GPU memory without passing through host memory
  // (gpu-direct, cufile-compat): nothing on the host could hash them, so `digest` is 0.
  bool digest_computed = true;
  bool interrupted = false;
  std::optional<Error> error;         // what stopped the run, if anything did
  // Which data path(s) ran, for how many bytes, at what copy amplification; why that path.
  std::vector<DataPathReport> data_paths;
  std::string data_path_reason;
  std::vector<std::string> data_path_notes;  // registered buffers, O_DIRECT, fallbacks
  DeviceReport device;
};

class Pipeline;

class Loader {
 public:
  static Result<std::unique_ptr<Loader>> open(storage::Backend& backend, const Dataset& dataset,
                                              LoaderConfig config);
  ~Loader();

  // The next batch in order; std::nullopt after the last one (or after stop()). An error ends the
  // run (with on_error = kFail) and names the object and offset.
  Result<std::optional<Batch>> next();
  // Records that the caller computed on the last batch for this long (for AU); the emulated
  // accelerator calls it, a real training loop may.
  void record_compute(std::chrono::nanoseconds spent);
  // Ends the run early: workers stop, in-flight reads drain, next() returns nullopt.
  void stop();
  // The run's report. Call it after next() returned nullopt (or after stop()); called earlier, it
  // stops the run first.
  PipelineReport report();

 private:
  explicit Loader(std::unique_ptr<Pipeline> p);
  std::unique_ptr<Pipeline> pipeline_;
};

// The emulated accelerator of MLPerf Storage: pulls batches and holds each for a compute time
// drawn from a distribution, then reports AU. compute == 0 means "no consumer": pull as fast as
// possible.
struct ComputeModel {
  std::chrono::nanoseconds mean{0};
  std::chrono::nanoseconds stdev{0};  // normal distribution, clamped at 0
  std::uint64_t seed = 1;
};
Result<ComputeModel> parse_compute_time(std::string_view text);  // "50ms", "normal:50ms:5ms"

// Runs the whole pipeline with an emulated accelerator until the end or until stop is requested
// (then within about a second, mid-step included: an emulated step is a wait, not a sleep).
// progress (may be null) counts delivered samples for a live display.
PipelineReport run_emulated(Loader& loader, const ComputeModel& compute, std::stop_token stop,
                            std::atomic<std::uint64_t>* progress);

}  // namespace feedline::loader
