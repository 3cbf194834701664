// The storage interface: one asynchronous primitive, read a byte range of an object into a buffer
// the caller owns.
//
// A Backend names objects (stat, list, open, create) and makes IoQueues. An IoQueue is where reads
// happen: the caller submits ReadOps and calls poll(), which runs each op's completion in the
// calling thread (or hands the completed ops back in a vector). DESIGN.md sketches submit() on the
// Backend; we put it on a per-thread queue so that each reader thread owns its own io_uring ring
// (as fio's jobs do) and no completion crosses threads. The public IoQueue::submit()/poll() are
// non-virtual: they stamp times and count, then call the backend's do_submit()/do_poll(). Every
// backend so gets the same latency split (fio's slat = queued -> issued, clat = issued ->
// completed, lat = queued -> completed), the same counters and the same in-flight depth accounting,
// with no code of its own. submit() also checks each op once for every backend (an object, a
// destination that holds the read, the backend's request limit): an op that fails, or that the
// backend refuses before it reaches its transport (complete_at_next_poll()), completes with its
// error at the next poll(). What a backend needs besides (a slot per op, a hand-over from its
// transport's threads) is in queue_parts.hpp; decorators derive from the forwarding bases in
// forwarding.hpp.
//
// Lifetimes: an ObjectHandle must outlive every ReadOp that names it; a ReadOp and its dst must
// stay untouched from submit() until its completion has run; an IoQueue must outlive its ops
// (destroying a queue with ops in flight cancels and drains them first); a Backend must outlive
// its queues and handles.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/bytes.hpp"
#include "feedline/core/error.hpp"
#include "feedline/core/histogram.hpp"
#include "feedline/storage/counters.hpp"

namespace feedline::storage {

// ObjectInfo::size (and ObjectHandle::size()) of an object whose size was not asked for: a brace
// list over a web server without a listing (Backend::stat_many_if_listed), where a HEAD per object
// would cost a round trip each. Such an object is read whole, by the queues that can
// (IoQueue::unknown_sizes(): unknown_size_reads.hpp).
inline constexpr std::uint64_t kUnknownSize = ~std::uint64_t{0};

// Why a listing left an entry out of its objects (ObjectInfo::left_out): such entries are listed
// anyway, so that the dataset layer can say what it left out and why, rather than skip it
// without a word. Opening one for reads is refused.
enum class LeftOut : std::uint8_t {
  kNo,                  // an object
  kSpecialFile,         // a FIFO, socket or device in a local directory
  kLinkToDirectory,     // a symbolic link to a directory: not followed (as find and tar do not)
  kDanglingLink,        // a symbolic link that names nothing
  kUnreadableDirectory  // a directory the listing may not read (permissions)
};

struct ObjectInfo {
  std::string key;
  std::uint64_t size = 0;           // kUnknownSize: not known (see above)
  LeftOut left_out = LeftOut::kNo;  // kNo unless the entry is not an object (then size is 0)
  // A key a server's listing gave that is not under the prefix listed: one that does not start
  // with it, or whose "." or ".." segments would make a request for another object ("prefix/../
  // ../etc/passwd"). Never read; listed so that the dataset layer can say it left it out.
  bool outside = false;
};

// An opened object (a file descriptor, a memory blob, an HTTP URL, an NFS path). Backend-specific.
class ObjectHandle {
 public:
  virtual ~ObjectHandle() = default;
  const std::string& key() const noexcept { return key_; }
  std::uint64_t size() const noexcept { return size_; }
  // How errors name the object: what a user could paste back ("nfs://server/export/key",
  // "s3://bucket/key"); the key by default.
  virtual std::string display_name() const { return key_; }

 protected:
  ObjectHandle(std::string key, std::uint64_t size) : key_(std::move(key)), size_(size) {}

 private:
  std::string key_;
  std::uint64_t size_;
};

struct ReadOp;

// Called once per op, in the thread that called IoQueue::poll(). May submit new ops.
class ReadCompletion {
 public:
  virtual void on_read_complete(ReadOp& op) noexcept = 0;

 protected:
  ~ReadCompletion() = default;
};

struct OpTimes {
  std::uint64_t queued_ns = 0;     // IoQueue::submit() was called
  std::uint64_t issued_ns = 0;     // the transport accepted it (kernel, worker, socket)
  std::uint64_t completed_ns = 0;  // the completion was seen by poll()
};

struct ReadOp {
  const ObjectHandle* object = nullptr;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  MutableBytes dst;  // at least `length` bytes
  // Run when the op completes; may be null when the op is polled with the collecting
  // IoQueue::poll(..., completed), which hands it back instead.
  ReadCompletion* done = nullptr;
  void* user = nullptr;  // for the caller
  // (An object of unknown size, kUnknownSize, is read whole, `length` a guess, by the queues that
  // can: unknown_size_reads.hpp.)
  // Filled in by the queue:
  OpTimes times;
  // Bytes read: equal to length, or fewer when the object ends first (a short read, not an
  // error; the object's end is its size when it was opened: one that shrank since is a kIo
  // error). On failure the error names the object and offset.
  Result<std::uint64_t> result = std::uint64_t{0};
};

// Counters and latency histograms of one queue. Merge queues' stats for a report.
struct QueueStats {
  std::uint64_t ops = 0;
  std::uint64_t bytes = 0;
  std::uint64_t errors = 0;
  std::uint64_t cancelled = 0;      // completed with kCancelled (IoQueue::cancel()), not errors
  std::uint64_t short_reads = 0;    // the object ended first (at its size when opened)
  std::uint64_t retries = 0;        // EAGAIN re-queues and short-read continuations
  std::uint64_t bounced_ops = 0;    // ops that went through an aligned bounce buffer
  std::uint64_t bounced_bytes = 0;  // bytes copied out of bounce buffers
  Histogram slat;                   // queued -> issued, ns
  Histogram clat;                   // issued -> completed, ns
  Histogram lat;                    // queued -> completed, ns
  // In-flight depth integrated over time (depth x ns) and the span it covers; mean depth is
  // depth_ns / span_ns. at_cap_ns is the time the depth was at the queue's configured depth.
  double depth_ns = 0;
  std::uint64_t span_ns = 0;
  std::uint64_t at_cap_ns = 0;
  // Backend-specific measurements by name, merged by name and printed by every report:
  // counters ("http_status_503", "reconnects", "copied_bytes", "http_connections_opened") and
  // histograms in ns ("ttfb_ns", "transfer_ns", "rtt_ns"). Each name is defined in counters.hpp
  // and reached through its definition (count(), counter(), histogram() below).
  std::map<std::string, std::uint64_t, std::less<>> counters;
  std::map<std::string, Histogram, std::less<>> histograms;

  // The counter `c` defines (an exact name): its value, 0 where absent.
  std::uint64_t counter(const CounterDef& c) const noexcept;
  // The counter `c` defines, made (at 0) where absent, for its producer to add to.
  std::uint64_t& count(const CounterDef& c);
  // A family's member ("http_status_" and "206"), made where absent.
  std::uint64_t& count(const CounterDef& family, std::string_view member);
  // The histogram `h` defines, made (empty) where absent; find_histogram(): null where absent.
  Histogram& histogram(const CounterDef& h);
  const Histogram* find_histogram(const CounterDef& h) const noexcept;
  // Makes each exact name of defs present (counters at 0, histograms empty) where absent: a
  // queue's own names from its start (counters.hpp).
  void start(std::initializer_list<const CounterDef*> defs);

  void merge(const QueueStats& other);
  // What a decorator's inner queue measured that the decorator does not (retries, bounce copies,
  // counters, histograms); ops, bytes, errors, latencies and depth stay the decorator's own.
  void merge_measurements(const QueueStats& inner);
  double mean_depth() const noexcept {
    return span_ns ? depth_ns / static_cast<double>(span_ns) : 0;
  }
};

enum class QueueMemory : std::uint8_t { kHost, kDevice };
// How the caller uses an HTTP/S3 queue (http_config.hpp). Only those backends read it.
struct HttpQueueOptions;
// What a queue needs to read into GPU memory (for local files, the cuFile runtime). Opaque here:
// device_reads.hpp makes one, and only a backend with BackendCaps::device_reads looks inside.
class DeviceReads;
class UnknownSizeReads;  // unknown_size_reads.hpp

struct QueueOptions {
  unsigned depth = 32;         // ops in flight at most; more are accepted but wait
  bool single_thread = false;  // only the creating thread will use the queue
  // Reads submitted together that lie close together in one object may share one request
  // (HTTP: one GET scattered into each read's buffer). The pipeline wants that; a storage
  // benchmark measures the request pattern as given (fio merges nothing), so it is off there.
  bool coalesce = false;
  // Where ReadOp::dst points. kDevice: GPU memory (cudaMalloc'd; never touched by the host), read
  // through what device_reads carries; only a backend with BackendCaps::device_reads makes such a
  // queue, the others refuse with kUnsupported.
  QueueMemory memory = QueueMemory::kHost;
  std::shared_ptr<const DeviceReads> device_reads = nullptr;  // kDevice only; see device_reads.hpp
  // What the HTTP/S3 backends alone tune to (their event loops, a host's shared connections):
  // http_config.hpp. Read by make_queue() only; null: their defaults. Other backends ignore it.
  const HttpQueueOptions* http = nullptr;
};

struct QueueInfo {
  std::string engine;                 // "uring", "posix", "mem"
  std::vector<std::string> features;  // what is in use ("registered-buffers", ...)
  std::vector<std::string> notes;     // fallbacks and why
};

class IoQueue {
 public:
  virtual ~IoQueue() = default;
  IoQueue(const IoQueue&) = delete;
  IoQueue& operator=(const IoQueue&) = delete;

  // Starts the reads. Ops that cannot even start (bad range, closed queue) complete with an error
  // at the next poll(); submit() never blocks on I/O and never drops an op.
  void submit(std::span<ReadOp* const> ops);
  void submit(ReadOp& op) {
    ReadOp* p = &op;
    submit(std::span<ReadOp* const>(&p, 1));
  }
  // Waits until at least min_complete ops completed (or timeout), running their completions.
  // Returns how many completed.
  std::size_t poll(std::size_t min_complete, std::chrono::nanoseconds timeout);
  // The same, and appends each op that completed in this call to `completed`, in completion order
  // (its ReadCompletion, if it has one, runs too). Ops submitted with done == nullptr are meant
  // for this form: a loop that collects needs no ReadCompletion of its own.
  std::size_t poll(std::size_t min_complete, std::chrono::nanoseconds timeout,
                   std::vector<ReadOp*>& completed);
  // Cancels what can be cancelled; every op still completes (with kCancelled or normally).
  virtual void cancel() = 0;
  std::size_t in_flight() const noexcept { return in_flight_; }

  // Optional accelerations; both fail harmlessly where unsupported (the queue still works).
  virtual Result<void> register_buffers(std::span<const MutableBytes> regions);
  virtual Result<void> register_object(const ObjectHandle& object);

  virtual QueueInfo info() const = 0;
  // This queue's counters. A decorator's queue adds what its inner queue measured of its own
  // (retries, bounce copies, the backend-specific counters and histograms) to its own view of the
  // ops, so a throttled run reports the same request counts as an unthrottled one.
  const QueueStats& stats() const;
  unsigned depth() const noexcept { return depth_; }
  // The most bytes one ReadOp may read (BackendCaps::max_request of the backend).
  std::uint64_t max_request() const noexcept { return max_request_; }
  // Reads of objects of unknown size (unknown_size_reads.hpp), where the queue takes them: null
  // where it does not (the default).
  virtual UnknownSizeReads* unknown_sizes() noexcept { return nullptr; }
  // Takes handles of Backend::open_deferred(): the queue opens each object with its read.
  virtual bool opens_objects() const noexcept { return false; }

 protected:
  static constexpr std::uint64_t kDefaultMaxRequest = 1ull << 30;
  explicit IoQueue(unsigned depth, std::uint64_t max_request = kDefaultMaxRequest)
      : depth_(depth), max_request_(max_request) {}
  // Gets only ops that passed submit()'s checks (ReadOp::object set, dst holds length bytes,
  // length <= max_request()).
  virtual void do_submit(std::span<ReadOp* const> ops) = 0;
  // Must call complete() for each finished op (at most as many as it likes) and return the count.
  virtual std::size_t do_poll(std::size_t min_complete, std::chrono::nanoseconds timeout) = 0;
  // Records the op's times and outcome and runs its completion.
  void complete(ReadOp& op, std::uint32_t retries = 0) noexcept;
  // For an op do_submit() will not pass on (an object of another backend, a read past the end):
  // it completes with `result` at the start of the next poll(), as submit()'s own refusals do.
  void complete_at_next_poll(ReadOp& op, Result<std::uint64_t> result) noexcept;
  // For backend-specific counters (bounce copies).
  QueueStats& mutable_stats() noexcept { return stats_; }
  // A decorator's queue: the queue it passes reads to, whose own measurements stats() adds.
  virtual const IoQueue* forwards_to() const noexcept { return nullptr; }

 private:
  void account_depth(std::uint64_t now) noexcept;
  std::size_t poll_collecting(std::size_t min_complete, std::chrono::nanoseconds timeout,
                              std::vector<ReadOp*>* completed);

  unsigned depth_;
  std::uint64_t max_request_;
  std::size_t in_flight_ = 0;
  std::uint64_t depth_since_ns_ = 0;
  QueueStats stats_;
  std::vector<ReadOp*> early_;  // refused before the transport: completed by the next poll()
  std::vector<ReadOp*>* collect_ = nullptr;  // the vector of the poll() in progress, if any
  mutable QueueStats merged_;                // stats() of a decorator's queue
};

struct BackendCaps {
  std::uint64_t alignment = 1;             // offsets, lengths and buffers aligned to this go direct
  std::uint64_t max_request = 1ull << 30;  // one ReadOp reads at most this many bytes
  bool writable = true;
  // Reads cross a network (HTTP, NFS): milliseconds each with a long tail, so the pipeline keeps
  // a deeper read-ahead window for them than for local storage.
  bool networked = false;
  // Each request costs the host tens of microseconds of CPU whatever its size (HTTP: the event
  // loop, header parsing, signing), so a run of small objects may spread its requests over
  // several queues on several cores. False where the backend's connection count was fixed
  // (--connections): every queue opens that many, so more queues would mean more connections.
  bool cpu_per_request = false;
  // make_queue() with QueueOptions::memory = kDevice works: reads land in GPU memory (through
  // cuFile, for local files).
  bool device_reads = false;
};

// Streams a new object; it appears (atomically where the backend can) on commit().
class ObjectWriter {
 public:
  virtual ~ObjectWriter() = default;
  virtual Result<void> append(ConstBytes data) = 0;
  virtual Result<void> commit() = 0;  // abandoning a writer without commit leaves no object
};

// Room for new objects, where a backend can tell (SpaceInfo: Backend::free_space()).
struct SpaceInfo {
  std::uint64_t free_bytes = 0;  // what an unprivileged writer may still use
  std::uint64_t block_size = 1;  // the allocation unit: an object takes whole blocks
  std::uint64_t free_objects = ~std::uint64_t{0};  // inodes left (unlimited where not counted)
};

class Backend {
 public:
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  virtual std::string_view scheme() const noexcept = 0;
  virtual Result<ObjectInfo> stat(std::string_view key) = 0;
  // Sizes of many named objects, in the order given (a brace-expanded dataset needs no listing).
  // The default asks one by one; network backends ask concurrently.
  virtual Result<std::vector<ObjectInfo>> stat_many(std::span<const std::string> keys);
  // The same where sizes come without a request per object (a listing); the objects a listing
  // does not size come back with size kUnknownSize, unasked, to be read whole by queues whose
  // unknown_sizes() is not null (HTTP: no HEAD per object before its GET). The default, and every
  // backend whose queues do not read unknown sizes (decorators too), is stat_many().
  virtual Result<std::vector<ObjectInfo>> stat_many_if_listed(std::span<const std::string> keys) {
    return stat_many(keys);
  }
  // Objects whose key starts with prefix, in key order, each key once. A directory prefix lists
  // recursively. Network backends also return the keys their server gave outside the prefix,
  // marked ObjectInfo::outside; a listing larger than they hold in memory is an error.
  virtual Result<std::vector<ObjectInfo>> list(std::string_view prefix) = 0;
  virtual Result<std::unique_ptr<ObjectHandle>> open(std::string_view key) = 0;
  // Opens an object whose size is already known (from a listing or stat_many). Network backends
  // skip the round trip open() would make; the default calls open(info.key).
  virtual Result<std::unique_ptr<ObjectHandle>> open_known(const ObjectInfo& info) {
    return open(info.key);
  }
  // A handle whose open is left to the queue, for reads through a queue whose opens_objects() is
  // true and nothing else; an object that cannot be opened fails its read. Small local files: the
  // open goes into io_uring with the read (no system call of its own). The default, and every
  // backend whose queues do not open objects, is open_known().
  virtual Result<std::unique_ptr<ObjectHandle>> open_deferred(const ObjectInfo& info) {
    return open_known(info);
  }
  virtual Result<std::unique_ptr<ObjectWriter>> create(std::string_view key) = 0;
  // The room left for objects written under key (a local filesystem's statvfs() of the nearest
  // directory there is on the way to key), or nothing where the backend cannot tell (object
  // stores, NFS, memory: the default).
  virtual std::optional<SpaceInfo> free_space(std::string_view key) {
    (void)key;
    return std::nullopt;
  }
  // A queue for one thread. options.memory = kDevice where caps().device_reads is false:
  // kUnsupported.
  virtual Result<std::unique_ptr<IoQueue>> make_queue(const QueueOptions& options) = 0;
  virtual BackendCaps caps() const = 0;

  // Writes a whole object (create + append + commit).
  Result<void> write(std::string_view key, ConstBytes data);

  // How messages name a key: what a user could paste back ("nfs://server/export/key"). The
  // default is the key for file://, else "scheme://key".
  virtual std::string display_name(std::string_view key) const;
  // An error about one of this backend's objects, named as display_name() shows it: callers that
  // know objects by key ("/d/0.tar", "prefix/0.tar") name them so, and the user sees the URL
  // ("http://host/d/0.tar"). An object already shown as a URL (with "://") stays as it is.
  void show_object(Error& e) const;

 protected:
  Backend() = default;
  // For make_queue() of a backend whose reads land in host memory only: kUnsupported (naming the
  // scheme) for a kDevice queue.
  Result<void> host_memory_only(const QueueOptions& options) const;
};

}  // namespace feedline::storage
