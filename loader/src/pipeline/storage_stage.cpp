// The storage stage: keeps up to io_depth reads in flight, of samples admitted in sampler order,
// and hands each sample on as its read lands. It may run on several threads, each with an
// IoQueue of its own and its share of io_depth: small local files cost CPU per sample (open,
// the page-cache copy, close: ~16 us for 64 KiB here), which one thread cannot spread over the
// cores. The parts, each in its own file:
//   storage_path.{hpp,cpp}     the data path as a strategy: what admission reserves, the slot
//                              layout, where reads land, the queue's options and buffers
//   admission.{hpp,cpp}        which sample is read next, shared by the threads (a mutex held
//                              only to pick the next sample and its slot, never over an open or
//                              a read), so samples still enter in sampler order
//   read_issuer.{hpp,cpp}      a thread's read slots, filled and submitted to its queue
//   read_completion.{hpp,cpp}  a poll's completed reads into samples (and inline digests)
//   poll_observer.{hpp,cpp}    one call per poll feeds the live figures, the trace, the report
// This file composes them: each thread's loop (admit and submit, poll, finish, observe, hand
// on), and the threads' figures merged as each ends.
#include <fmt/format.h>

#include "admission.hpp"
#include "poll_observer.hpp"
#include "read_completion.hpp"
#include "read_issuer.hpp"
#include "stages.hpp"
#include "storage_path.hpp"

namespace feedline::loader::detail {
namespace {

// One storage thread: its queue, and the parts that read through it.
class StorageThread {
 public:
  StorageThread(RunState& run, StoragePath& path, Admission& admission, Worker& w,
                storage::IoQueue& queue, unsigned depth, unsigned threads)
      : run_(run),
        path_(path),
        admission_(admission),
        w_(w),
        queue_(queue),
        // Every storage thread of every loader on this backend keeps its own handles.
        handles_(run.backend, run.dataset,
                 std::max(1u, run.config.loaders_sharing_backend) * threads, depth),
        slots_(depth, admission),
        issuer_(run, path, admission, slots_, queue, handles_, threads),
        completion_(run, path, slots_, handles_),
        observer_(run, w, admission) {
    handles_.use_queue(queue);
    path_.register_buffers(queue, w.index() == 0, threads);
  }

  void note_start(unsigned depth, unsigned threads);
  // Reads until the admission has nothing more, or the run stops; then drains the queue.
  void run();

  StorageStage::ThreadFigures figures() const noexcept {
    const PollObserver::Totals& t = observer_.totals();
    return {t.bytes_read, t.digested, t.poll_ns, window_ns_, budget_ns_};
  }

 private:
  // One poll, its completions finished, observed and handed on: false when the run is over.
  bool poll();
  void drain();

  RunState& run_;
  StoragePath& path_;
  Admission& admission_;
  Worker& w_;
  storage::IoQueue& queue_;
  HandleCache handles_;
  ReadSlots slots_;
  ReadIssuer issuer_;
  CompletionHandler completion_;
  PollObserver observer_;
  std::vector<InFlightSample> finished_;
  std::uint64_t window_ns_ = 0;  // admission stopped by collate's window
  std::uint64_t budget_ns_ = 0;  // ... by the memory budget
};

void StorageThread::note_start(unsigned depth, unsigned threads) {
  if (w_.index() != 0) return;
  if (path_.digests_inline()) {
    run_.note_path(
        "nothing to decode: the storage threads take each sample's digest as its read lands and "
        "hand it straight to collate");
  }
  if (handles_.opens_in_queue()) {
    run_.note_path(
        "each file opens in the io_uring ring with its read (an OPENAT into a direct descriptor, "
        "linked to the READ): no open or close system call per file");
  }
  if (threads > 1) {
    run_.note_path(
        fmt::format("{} storage threads, each with its own I/O queue of depth {}", threads, depth));
  }
}

void StorageThread::run() {
  LimitTimer limits(window_ns_, budget_ns_);
  bool ended = false;  // the admission has nothing more for anyone
  while (!run_.stopping()) {
    const std::uint64_t freed = run_.budget.freed();  // before admitting: see the wait below
    const ReadIssuer::Round round = issuer_.issue(w_);
    ended = ended || round.ended;
    limits.set(admission_.held_back(round.why));
    issuer_.flush();
    if (round.stop) break;
    if (queue_.in_flight() == 0) {
      if (ended) break;  // everything read
      // Nothing in flight and nothing admissible: waiting on memory, on collate's window, or on
      // the other threads' reads in flight (io_max_bytes).
      w_.blocked([&] {
        run_.budget.wait_release(freed, std::chrono::milliseconds(round.limited ? 2 : 1));
      });
      continue;
    }
    if (!poll()) break;
  }
  drain();
  limits.set(AdmissionLimit::kNone);
  path_.end_thread(queue_, w_.index() == 0);
  observer_.on_end(queue_, now_ns());
}

bool StorageThread::poll() {
  slots_.completed().clear();
  PollView view;
  view.started_ns = now_ns();
  w_.working([&] { return queue_.poll(1, std::chrono::milliseconds(20)); });
  view.polled_ns = now_ns();
  view.tally = completion_.finish(finished_);
  view.completed = slots_.completed();
  observer_.on_poll(queue_, view);
  return completion_.hand_on(w_, finished_);
}

// Reads still in flight when the run stops are cancelled and waited for (they write into
// buffers this thread owns); their samples go nowhere.
void StorageThread::drain() {
  if (queue_.in_flight() > 0) {
    queue_.cancel();
    while (queue_.in_flight() > 0) queue_.poll(1, std::chrono::milliseconds(100));
  }
  slots_.forget_in_flight();
}

}  // namespace

StorageStage::StorageStage(RunState& run, Sampler& sampler, unsigned threads)
    : run_(run),
      threads_(std::max(threads, 1u)),
      path_(StoragePath::make(run)),
      admission_(std::make_unique<Admission>(run, sampler, *path_)) {}

StorageStage::~StorageStage() = default;

void StorageStage::run(Worker& w) {
  const LoaderConfig& config = run_.config;
  // io_depth split between the threads (the first ones take the remainder).
  const unsigned depth =
      std::max(1u, config.io_depth / threads_ + (w.index() < config.io_depth % threads_ ? 1 : 0));
  storage::QueueOptions qo;
  qo.depth = depth;
  qo.single_thread = true;
  storage::HttpQueueOptions http;
  path_->set_up_queue(qo, http);
  if (config.loaders_sharing_backend > 1)
    http.shared_by = config.loaders_sharing_backend * threads_;
  qo.http = &http;
  qo.coalesce = true;  // nearby reads (tar members in storage order) may share a request
  auto queue = run_.backend.make_queue(qo);
  if (!queue) {
    run_.fail(std::move(queue).error());
    end_thread(nullptr, {});
    return;
  }
  StorageThread thread(run_, *path_, *admission_, w, **queue, depth, threads_);
  thread.note_start(depth, threads_);
  thread.run();
  end_thread(queue->get(), thread.figures());
}

// A thread's figures into the stage's; the last thread out closes the reads queue behind it.
void StorageStage::end_thread(const storage::IoQueue* queue, const ThreadFigures& f) {
  {
    std::lock_guard lock(merge_mu_);
    if (queue) merge_queue(*queue);
    storage_bytes += f.bytes_read;
    decoded_inline += f.digested;
    poll_wait_ns += f.poll_ns;
    window_limited_ns += f.window_ns / threads_;
    budget_limited_ns += f.budget_ns / threads_;
  }
  if (++exited_ == threads_) {
    path_->end_stage();
    run_.reads.close();
  }
}

// The queues ran side by side: their depths add up over the longest span, and the time at the
// cap is the mean of each queue's (all of io_depth in flight, roughly).
void StorageStage::merge_queue(const storage::IoQueue& queue) {
  const storage::QueueStats q = queue.stats();
  const double depth_ns = io_stats.depth_ns;
  const std::uint64_t span = io_stats.span_ns;
  const double mean = io_stats.mean_depth() + q.mean_depth();
  io_stats.merge(q);
  io_stats.span_ns = std::max(span, q.span_ns);
  io_stats.depth_ns =
      io_stats.span_ns ? mean * static_cast<double>(io_stats.span_ns) : depth_ns + q.depth_ns;
  io_stats.at_cap_ns = (io_stats.at_cap_ns - q.at_cap_ns) + q.at_cap_ns / threads_;
  if (engine.empty()) engine = queue.info().engine;
}

}  // namespace feedline::loader::detail
