// feedline::Loader — the data-loading pipeline a training job embeds.
//
//   Sampler -> storage (async reads) -> decode (threads: members, zstd, JPEG) -> collate (batches
//   in a pool of 4 KiB-aligned, mlock'd buffers) -> [device: H2D copies] -> the caller's next()
//
// Usage:
//   auto loader = Loader::open(backend, dataset, config);   // Result<unique_ptr<Loader>>: starts
//   prefetching if (!loader) return loader.error(); for (;;) {
//     auto batch = (*loader)->next();      // [[nodiscard]] Result<Batch>: the value needs the
//     check if (!batch) return batch.error();    // names the object and offset if (batch->end())
//     break;             // after the last epoch (or stop()) use(batch->data(), batch->samples());
//   }
//   PipelineReport report = (*loader)->report();   // stalls, verdict, throughput (report.hpp)
//
// Bounded: config.memory_budget caps the bytes held by reads in flight, decoded samples and
// batch buffers together (a sample larger than its share of the budget is an error; a budget
// that holds two batches and the reads in flight runs, with prefetch and the read-ahead window
// shrunk to fit: report.memory.fitted says so). Deterministic: the order of samples follows the
// seed; every sample of every epoch is delivered exactly once (on this rank). Thread-safety:
// next(), record_compute() and report() are called from one consumer thread; stop() may also be
// called from any thread (or a signal-watching thread) to end the run early.
//
// Lifetimes: the Backend and Dataset must outlive the Loader. A Batch may outlive its Loader:
// it keeps its buffer's pool alive and hands the buffer back (or frees it) when destroyed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <stop_token>
#include <string_view>
#include <vector>

#include "feedline/core/bytes.hpp"
#include "feedline/core/error.hpp"
#include "feedline/loader/data_path.hpp"
#include "feedline/loader/dataset.hpp"
#include "feedline/loader/decoder.hpp"
#include "feedline/loader/diagnostics.hpp"
#include "feedline/loader/live.hpp"
#include "feedline/loader/report.hpp"
#include "feedline/loader/sampler.hpp"
#include "feedline/loader/trace.hpp"
#include "feedline/loader/transform.hpp"
#include "feedline/storage/backend.hpp"

namespace feedline::transports::cuda {
class CudaRuntime;
}
namespace feedline::transports::cufile {
class CufileRuntime;
}

namespace feedline::loader {

enum class OnError : std::uint8_t { kFail, kSkip };

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
inline constexpr unsigned kMaxStorageThreads = 64;
inline constexpr unsigned kMaxPrefetchBatches = 1024;
inline constexpr unsigned kMaxBatchSize = 1u << 24;

struct LoaderConfig {
  // num_samples and shard_starts describe the dataset: open() fills them in; a value set here
  // that disagrees with the dataset is an error, not silently replaced.
  SamplerConfig sampler;
  unsigned io_depth = 64;                  // reads in flight at most
  std::uint64_t io_max_bytes = 256 << 20;  // bytes of reads in flight at most
  // Storage threads, each with an I/O queue of its own and its share of io_depth (0: chosen at
  // start: one for direct I/O and for network shards, whose reads cost the host little; where
  // every sample costs CPU, local page-cache reads (open, copy) and HTTP objects of one sample
  // each (a request each), one per core, at most 4).
  // The run's report says how many ran (IoReport::storage_threads).
  unsigned storage_threads = 0;
  unsigned decode_threads = 2;
  // The cores this loader's own work may spread over: where storage_threads is 0, at most one
  // storage thread per core (0: the usable cores). Several loaders on one host (accelerators.hpp)
  // share the host's.
  unsigned cores = 0;
  // Loaders reading through this one backend at once (accelerators.hpp sets N): their storage
  // queues then share the backend's connections (storage::HttpQueueOptions::shared_by), one pool
  // for the host as one process's would be, sized for all of them. 0 or 1: connections of its own.
  unsigned loaders_sharing_backend = 0;
  // Added to the decode threads' nice value (Linux, per thread; 0..19, 0 leaves it). Decode is
  // CPU-bound; storage, collate and the consumer do short hand-offs that must not wait out a
  // decode time slice on a busy core (2 cores, alternating runs: +5 gave ~5-15% more samples/s
  // on tar+zstd shards and on files, and lost in 3 of 17 pairs).
  int decode_nice = 5;
  unsigned prefetch_batches = 2;  // finished batches queued ahead of the consumer
  // Batches the caller keeps alive at once while it asks for the next one (1: it drops each
  // before next(); a Python loop holds the last one, and views of it, until next() returned). The
  // pool holds prefetch_batches + 1 (collate's) + caller_batches buffers, so that batches the
  // caller holds do not eat the prefetch.
  unsigned caller_batches = 1;
  std::uint64_t memory_budget = 1ull << 30;
  // The largest sample the pipeline accepts, decoded (0: what the memory budget can hold). A
  // zstd frame's declared size is not trusted: a sample that declares or decodes to more is a
  // data error naming it (skipped with on_error = kSkip), and nothing is allocated for it.
  std::uint64_t max_sample_bytes = 0;
  OnError on_error = OnError::kFail;
  GpuDirect gpu_direct = GpuDirect::kAuto;
  DeviceConfig device;
  bool lock_memory = true;  // mlock batch buffers where allowed
  // Once requested (Ctrl-C), the run stops as stop() does: every wait of the pipeline, the
  // planted decode/collate costs included, ends within about a second.
  std::stop_token stop;
  Diagnostics diagnostics;  // planted costs, accounting off (diagnostics.hpp)
  // Records a trace of the run here (trace.hpp): each thread's spans, counters, instants. Null:
  // none (nothing is recorded, nothing costs). Loaders may share one (accelerators: a viewer
  // process each); diagnose() records its baseline run only.
  std::shared_ptr<TraceLog> trace;
  // Readers of the run's figures as it goes (live.hpp: a metrics endpoint, an HTML report's
  // timeline): the loader attaches itself to each once it runs, labelled {"accelerator", "i"}
  // when it is one of a host's accelerators, and detaches when it is destroyed. diagnose()
  // attaches its baseline run only.
  std::vector<std::shared_ptr<LiveWatch>> watchers;
  // What the decode threads make of each member, by its extensions (decoder.hpp): null is
  // default_decoders() (zstd); image_decoders() (image.hpp) adds JPEG; an embedding program
  // adds its own.
  std::shared_ptr<const DecoderRegistry> decoders;
  // Run on each sample on the decode threads (transform.hpp); null: none. Samples then take the
  // decode threads' path even where nothing else needs decoding, and must reach host memory.
  std::shared_ptr<SampleTransform> transform;
};

struct BatchMember {
  std::string_view name;
  std::uint64_t offset = 0;  // in Batch::data()
  std::uint64_t size = 0;
  ImageShape shape;  // a decoded image's (HWC uint8); all 0 for other members
};

struct BatchSample {
  std::string_view key;
  std::uint32_t sample = 0;  // index into Dataset::samples
  std::uint64_t offset = 0;  // in Batch::data(): the sample's members, packed in order
  std::uint64_t size = 0;
  std::uint32_t first_member = 0;
  std::uint32_t member_count = 0;
};

namespace detail {
class BatchPool;
class BatchBuffer;
struct BatchAccess;
}  // namespace detail

// One batch: its samples packed in one buffer of the pipeline's pool (host memory, and with a
// device its twin in GPU memory). Move-only; destroying it hands the buffer back to the pool.
// The Batch that next() returns after the last one has end() true and nothing in it.
class Batch {
 public:
  Batch() = default;  // end(): an empty batch
  Batch(Batch&&) noexcept;
  Batch& operator=(Batch&&) noexcept;
  ~Batch();

  // True for the batch after the last one (the run is over): no samples, no data.
  bool end() const noexcept { return !buffer_; }
  std::uint32_t epoch() const noexcept { return epoch_; }
  std::uint64_t index() const noexcept { return index_; }  // batch number in the whole run
  // The batch's bytes in host memory; empty when they were read straight into GPU memory
  // (cuFile: see device_data()).
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
  // With a transform: what it returned for each sample, in the order of samples(). Empty
  // without one.
  std::span<const TransformResult> results() const noexcept { return results_; }
  // With a device: the batch's bytes in GPU memory (extent() bytes, same offsets as the samples
  // and members say), valid until the Batch dies. Null without one.
  const void* device_data() const noexcept;

 private:
  friend struct detail::BatchAccess;
  void release() noexcept;

  std::shared_ptr<detail::BatchPool> pool_;  // keeps the buffer's memory alive
  detail::BatchBuffer* buffer_ = nullptr;
  std::uint32_t epoch_ = 0;
  std::uint64_t index_ = 0;
  std::vector<BatchSample> samples_;
  std::vector<BatchMember> members_;
  std::vector<TransformResult> results_;
  std::uint64_t digest_ = 0;
  std::uint64_t bytes_ = 0;
  bool on_device_ = false;
  bool device_only_ = false;  // read into GPU memory: the host buffer holds nothing
  bool with_caller_ = false;  // next() handed it out (BatchPool counts the caller's buffers)
  // The device stage's wait for this batch's copy (ns, steady clock), for the consumer to tell
  // how much of its own wait the copy caused.
  std::uint64_t copy_wait_from_ns_ = 0;
  std::uint64_t copy_done_ns_ = 0;
};

class Pipeline;

class Loader {
 public:
  static Result<std::unique_ptr<Loader>> open(storage::Backend& backend, const Dataset& dataset,
                                              LoaderConfig config);
  ~Loader();

  // The next batch in order; after the last one (or after stop()) a Batch with end() true. A
  // sample's error (with on_error = kFail) comes in order: every batch before the one holding
  // that sample is returned first, then the error (that batch is not), naming the object and
  // offset; every later call returns it again. Other failures (a GPU copy, memory) end the run
  // at once.
  Result<Batch> next();
  // next(), waiting at most `timeout`: nullopt when no batch came in that time. Call it again to
  // go on waiting (the report counts the calls' waits for one batch as one wait). For a caller
  // that must wake up now and then while it waits, such as Python for its signal handlers.
  std::optional<Result<Batch>> next_for(std::chrono::nanoseconds timeout);
  // Records that the caller computed on the last batch for this long (for AU); the emulated
  // accelerator calls it, a real training loop may.
  void record_compute(std::chrono::nanoseconds spent);
  // Ends the run early: workers stop, in-flight reads drain, next() returns the end. No further
  // transform call starts (one under way runs to its end: the destructor waits for it).
  void stop();
  // The run's report. Call it at the end (or after stop()); called earlier, it stops the run.
  PipelineReport report();
  // The report so far, the run going on (a training job logging it every N steps): the
  // consumer's figures, each stage's busy / starved / blocked and CPU time, the queues, memory,
  // what was delivered and skipped, the transform. The IO queues' statistics, the data path's
  // copies and the verdict come with report() (PipelineReport::snapshot is true). Once the run
  // is over (next() returned the end), the same as report(); after stop() until then, still a
  // snapshot: it never waits for the pipeline's threads (report() waits for a transform call
  // under way to return).
  PipelineReport snapshot();
  // What the run has done so far, from any thread, at any time while the Loader lives (a
  // metrics endpoint's scrape, a sampler of the run's course): counters and depths read as they
  // are, never waiting on the pipeline (live.hpp).
  LiveFigures live() const;
  // Where the job stands after the batches next() has handed out so far (not those prefetched),
  // empty ones (every sample skipped) included: the resume point of a run that goes on from
  // there, on any rank and with any world size (SamplerConfig::resume). A checkpoint saves it
  // with the model's state (state.hpp: loader_state(), format_loader_state()), and a Loader
  // opened with it delivers exactly the rest. From any thread, at any time while the Loader
  // lives; taken between two next() calls, it matches the batches the caller has.
  ResumePoint resume_point() const;
  // The batches of one whole epoch on this rank (what a PyTorch DataLoader's len() says): its
  // share of the samples by the equal-batches rule (SamplerConfig), in batches of batch_size, the
  // last one short unless drop_last. The same for every epoch (a resumed epoch delivers its rest).
  std::uint64_t batches_per_epoch() const noexcept;
  // The samples of one whole epoch on this rank (the equal-batches rule applied).
  std::uint64_t samples_per_epoch() const noexcept;

 private:
  explicit Loader(std::unique_ptr<Pipeline> p);
  std::unique_ptr<Pipeline> pipeline_;
  // Where this loader is attached (LoaderConfig::watchers); detached first when it goes.
  std::vector<std::pair<std::shared_ptr<LiveWatch>, std::uint64_t>> watching_;
};

}  // namespace feedline::loader
