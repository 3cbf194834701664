#include "feedline/loader/storage_bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <random>
#include <thread>

#include "feedline/storage/http_config.hpp"

namespace feedline::loader {
namespace {

using storage::IoQueue;
using storage::ReadOp;

// Lemire's multiply-shift: a uniform value in [0, n) from 64 random bits.
std::uint64_t bounded(std::uint64_t r, std::uint64_t n) {
  __extension__ using U128 = unsigned __int128;
  return static_cast<std::uint64_t>((static_cast<U128>(r) * n) >> 64);
}

class Job final {
 public:
  // How long the reads in flight at the --runtime deadline may take to finish.
  static constexpr std::chrono::nanoseconds kDeadlineGrace = std::chrono::seconds(1);

  Job(const StorageBenchConfig& config, const storage::ObjectHandle& object, unsigned index,
      BenchProgress* progress)
      : config_(config),
        object_(object),
        progress_(progress),
        index_(index),
        rng_(config.seed + index * 0x9e3779b97f4a7c15ull) {
    const std::uint64_t size = config.size ? config.size : object.size();
    blocks_ = size / config.block_size;
    total_ios_ = blocks_;  // one pass
  }

  // Runs in the job's own thread: the queue (an io_uring ring) is created here.
  void run(storage::Backend& backend) {
    if (config_.trace) {
      lane_ = &config_.trace->lane(fmt::format("fl-bench-{}", index_));
      in_flight_name_ = lane_->intern(fmt::format("reads in flight (job {})", index_));
    }
    storage::HttpQueueOptions http;
    http.caller_mostly_polls = true;  // the job's thread only submits and polls
    storage::QueueOptions qo;
    qo.depth = config_.iodepth;
    qo.single_thread = true;
    qo.http = &http;
    auto queue = backend.make_queue(qo);
    if (!queue) {
      error_ = queue.error();
      return;
    }
    queue_ = std::move(*queue);
    auto arena = AlignedBuffer::allocate(std::size_t{config_.iodepth} * config_.block_size);
    if (!arena) {
      error_ = arena.error();
      return;
    }
    arena_ = std::move(*arena);
    prefault_arena();
    if (config_.register_buffers) {
      const MutableBytes region = arena_.span();
      (void)queue_->register_buffers(std::span<const MutableBytes>(&region, 1));  // noted in info()
    }
    if (config_.register_files) (void)queue_->register_object(object_);
    ops_.resize(config_.iodepth);
    std::vector<ReadOp*> batch;
    batch.reserve(config_.iodepth);
    for (unsigned i = 0; i < config_.iodepth; ++i) {
      ReadOp& op = ops_[i];
      op.object = &object_;
      op.length = config_.block_size;
      op.dst = arena_.span().subspan(std::size_t{i} * config_.block_size, config_.block_size);
    }
    start_ns_ = now_ns();
    deadline_ns_ = config_.runtime.count() > 0
                       ? start_ns_ + static_cast<std::uint64_t>(config_.runtime.count())
                       : ~std::uint64_t{0};
    for (unsigned i = 0; i < config_.iodepth && more(); ++i) {
      prepare(ops_[i]);
      batch.push_back(&ops_[i]);
    }
    queue_->submit(batch);
    std::vector<ReadOp*> done;
    done.reserve(config_.iodepth);
    while (queue_->in_flight() > 0) {
      resubmit_.clear();
      done.clear();
      queue_->poll(1, std::chrono::milliseconds(100), done);
      for (ReadOp* op : done) finished(*op);
      if (lane_) trace_in_flight();
      // Interrupted (also after the deadline): what is in flight is not waited for (a server may
      // trickle a byte a second). At the deadline the reads in flight may finish, as fio's do,
      // for at most kDeadlineGrace; then they are cancelled (a slow server, a retry waiting out
      // a Retry-After) and the run ends near its --runtime.
      const std::uint64_t now = now_ns();
      if (!interrupted_ && config_.stop.stop_requested()) {
        stopping_ = interrupted_ = true;
        resubmit_.clear();
        queue_->cancel();
      } else if (!stopping_ && now >= deadline_ns_) {
        stopping_ = true;
        resubmit_.clear();
      } else if (stopping_ && !interrupted_ && !cut_ && deadline_ns_ != ~std::uint64_t{0} &&
                 now >= deadline_ns_ + kDeadlineGrace.count()) {
        cut_ = true;
        queue_->cancel();
      }
      if (!resubmit_.empty()) queue_->submit(resubmit_);
    }
    end_ns_ = last_completion_ns_ ? last_completion_ns_ : now_ns();
    stats_ = queue_->stats();
    info_ = queue_->info();
    queue_.reset();
  }

  const storage::QueueStats& stats() const { return stats_; }
  const storage::QueueInfo& info() const { return info_; }
  const std::optional<Error>& error() const { return error_; }
  std::uint64_t start_ns() const { return start_ns_; }
  std::uint64_t end_ns() const { return end_ns_; }
  bool interrupted() const { return interrupted_; }

 private:
  // A read came back: count it, and reuse its op for the next block (submitted in batches of
  // iodepth_batch).
  void finished(ReadOp& op) {
    if (lane_) {
      lane_->async_span("io", "read", op.times.issued_ns ? op.times.issued_ns : op.times.queued_ns,
                        op.times.completed_ns, static_cast<double>(op.length), true);
      if (!op.result) lane_->instant("io", "read failed", now_ns(), op.result.error().what());
    }
    if (!op.result) {
      // Reads cancelled because we were interrupted, or cut at the deadline, are not errors of
      // the storage.
      if ((interrupted_ || cut_) && op.result.error().code() == Errc::kCancelled) return;
      last_completion_ns_ = op.times.completed_ns;
      if (!error_) error_ = op.result.error();
      stopping_ = true;
      return;
    }
    last_completion_ns_ = op.times.completed_ns;
    if (progress_) {
      progress_->bytes.fetch_add(*op.result, std::memory_order_relaxed);
      progress_->ios.fetch_add(1, std::memory_order_relaxed);
    }
    if (!stopping_ && more()) {
      prepare(op);
      resubmit_.push_back(&op);
      if (resubmit_.size() >= config_.iodepth_batch) {
        queue_->submit(resubmit_);
        resubmit_.clear();
      }
    }
  }

  bool more() const { return config_.time_based || issued_ < total_ios_; }

  // The job's reads in flight, a counter of the trace, at most once a millisecond.
  void trace_in_flight() {
    const std::uint64_t t = now_ns();
    if (t < next_counter_ns_) return;
    next_counter_ns_ = t + 1'000'000;
    lane_->counter(in_flight_name_, t, static_cast<double>(queue_->in_flight()), true);
  }

  void prepare(ReadOp& op) {
    std::uint64_t block;
    if (config_.pattern == AccessPattern::kSequential) {
      block = issued_ % blocks_;
    } else {
      block = bounded(rng_(), blocks_);
    }
    ++issued_;
    op.offset = block * config_.block_size;
  }

  const StorageBenchConfig& config_;
  const storage::ObjectHandle& object_;
  BenchProgress* progress_;
  unsigned index_;
  TraceLane* lane_ = nullptr;  // the trace's track of this job (null: no trace)
  const char* in_flight_name_ = nullptr;
  std::uint64_t next_counter_ns_ = 0;
  std::mt19937_64 rng_;
  std::uint64_t blocks_ = 0;
  std::uint64_t total_ios_ = 0;
  std::uint64_t issued_ = 0;
  std::uint64_t start_ns_ = 0;
  std::uint64_t end_ns_ = 0;
  std::uint64_t deadline_ns_ = 0;
  std::uint64_t last_completion_ns_ = 0;
  bool stopping_ = false;
  bool interrupted_ = false;
  bool cut_ = false;  // the reads in flight past the deadline's grace were cancelled
  std::unique_ptr<IoQueue> queue_;
  // Touches the buffers the run will use before the clock starts: first-touch page faults are
  // the kernel's, not the storage's (128 MiB of 4 KiB pages, one fault each, cost a 1 GB/s HTTP
  // read ~10% of its time). Only what the run can use: a job covers `size` bytes (or the object)
  // unless it loops on time.
  void prefault_arena() {
    std::uint64_t used = arena_.size();
    if (!config_.time_based) {
      const std::uint64_t cover = config_.size ? config_.size : object_.size();
      used = std::min<std::uint64_t>(used, cover);
    }
    arena_.prefault(static_cast<std::size_t>(used));
  }

  AlignedBuffer arena_;
  std::vector<ReadOp> ops_;
  std::vector<ReadOp*> resubmit_;
  storage::QueueStats stats_;
  storage::QueueInfo info_;
  std::optional<Error> error_;
};

}  // namespace

Result<void> validate(const StorageBenchConfig& c, const storage::ObjectHandle& object,
                      const storage::BackendCaps& caps) {
  auto bad = [&](std::string msg, std::string hint) {
    return fail(Error(Errc::kInvalidArgument, std::move(msg))
                    .with_object(object.display_name())
                    .with_hint(std::move(hint)));
  };
  if (c.block_size == 0)
    return bad("block size is 0", "give --bs a positive size such as 4k or 1M");
  if (c.block_size > caps.max_request) {
    return bad(fmt::format("block size {} exceeds the backend's {}-byte request limit",
                           c.block_size, caps.max_request),
               "use a smaller --bs");
  }
  if (caps.alignment > 1 && c.block_size % caps.alignment != 0) {
    return bad(fmt::format("block size {} is not a multiple of {} bytes, which direct I/O needs",
                           c.block_size, caps.alignment),
               "use a --bs that is a multiple of 4k, or drop {direct}");
  }
  if (c.iodepth == 0 || c.iodepth > 65536)
    return bad("iodepth must be between 1 and 65536", "fix --iodepth");
  if (c.numjobs == 0 || c.numjobs > 1024)
    return bad("numjobs must be between 1 and 1024", "fix --numjobs");
  if (c.time_based && c.runtime.count() <= 0)
    return bad("time-based runs need a runtime", "add --runtime, e.g. 10s");
  if (object.size() == 0) {
    return bad("the object is empty (0 bytes): nothing to read",
               "write data into it, or lay out a test file with --create SIZE");
  }
  const std::uint64_t size = c.size ? c.size : object.size();
  if (size > object.size()) {
    return bad(fmt::format("--size {} exceeds the object's {} bytes", size, object.size()),
               "use a smaller --size, or --create a larger file");
  }
  if (size < c.block_size) {
    return bad(fmt::format("{} bytes is smaller than one block of {} bytes", size, c.block_size),
               "use a smaller --bs, or a larger file (--create SIZE)");
  }
  if (std::uint64_t{c.iodepth} * c.block_size > (std::uint64_t{16} << 30)) {
    return bad("iodepth x bs exceeds 16 GiB of buffers", "lower --iodepth or --bs");
  }
  return {};
}

Result<StorageBenchResult> run_storage_bench(storage::Backend& backend,
                                             const storage::ObjectHandle& object,
                                             const StorageBenchConfig& config,
                                             BenchProgress* progress) {
  FEEDLINE_TRY(validate(config, object, backend.caps()));
  std::vector<std::unique_ptr<Job>> jobs;
  for (unsigned i = 0; i < config.numjobs; ++i) {
    jobs.push_back(std::make_unique<Job>(config, object, i, progress));
  }
  const CpuTimes cpu0 = process_cpu_times();
  {
    std::vector<std::jthread> threads;
    for (auto& job : jobs) threads.emplace_back([&backend, j = job.get()] { j->run(backend); });
  }
  const CpuTimes cpu1 = process_cpu_times();

  StorageBenchResult result;
  result.cpu = {cpu1.user_s - cpu0.user_s, cpu1.system_s - cpu0.system_s};
  std::uint64_t start = ~std::uint64_t{0};
  std::uint64_t end = 0;
  for (auto& job : jobs) {
    if (job->error() && !result.error) result.error = job->error();
    if (job->start_ns() == 0) continue;  // failed during set-up
    result.stats.merge(job->stats());
    start = std::min(start, job->start_ns());
    end = std::max(end, job->end_ns());
    result.interrupted = result.interrupted || job->interrupted();
  }
  if (end == 0) {
    // No job got as far as its first read: a set-up failure (engine unavailable, no memory).
    return fail(result.error ? *result.error : Error(Errc::kInternal, "no benchmark job started"));
  }
  result.info = jobs.front()->info();
  result.seconds = static_cast<double>(end - start) / 1e9;
  return result;
}

Result<void> create_random_object(storage::Backend& backend, std::string_view key,
                                  std::uint64_t size, std::uint64_t seed, std::stop_token stop) {
  FEEDLINE_ASSIGN_OR_RETURN(auto writer, backend.create(key));
  constexpr std::size_t kChunk = 4 << 20;
  FEEDLINE_ASSIGN_OR_RETURN(AlignedBuffer chunk, AlignedBuffer::allocate(kChunk));
  std::mt19937_64 rng(seed);
  auto* words = reinterpret_cast<std::uint64_t*>(chunk.data());
  for (std::uint64_t done = 0; done < size;) {
    if (stop.stop_requested()) {
      return fail(
          Error(Errc::kCancelled, "interrupted while laying out the file; nothing was left behind")
              .with_object(std::string(key)));
    }
    for (std::size_t i = 0; i < kChunk / 8; ++i) words[i] = rng();
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, size - done));
    FEEDLINE_TRY(writer->append(ConstBytes(chunk.data(), n)));
    done += n;
  }
  return writer->commit();
}

}  // namespace feedline::loader
