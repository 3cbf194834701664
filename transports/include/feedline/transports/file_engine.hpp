// File engines: how bytes move from a local file descriptor into memory.
//
// Two engines share one interface: io_uring (liburing; registered buffers and files, optional
// SQPOLL, batched submission) and a POSIX pread thread pool (the fallback, and the only engine of a
// build without liburing). An engine is a queue owned by one thread: submit() and reap() are called
// from the same thread (or externally serialised). Completions are handed back by reap(), never by
// a callback on another thread, so a benchmark loop pays no cross-thread wake-up per I/O.
//
// Every FileRead either completes whole, completes short at end of file, or fails with an errno.
// Engines hide the rest: -EAGAIN is re-queued, short reads are resubmitted for the remainder (and
// a remainder that O_DIRECT refuses with EINVAL, because it starts mid-block at end of file,
// ends the read short).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "feedline/core/bytes.hpp"
#include "feedline/core/error.hpp"

namespace feedline::transports {

// One read. The caller owns it (and dst) until reap() hands it back.
struct FileRead {
  int fd = -1;                  // an open file descriptor
  int fixed_file = -1;          // index from register_file(), or -1
  std::uint64_t offset = 0;     // byte offset in the file
  std::uint32_t length = 0;     // bytes wanted
  std::byte* dst = nullptr;     // length bytes; 4 KiB-aligned for O_DIRECT
  void* user = nullptr;         // opaque to the engine
  void* engine_data = nullptr;  // the engine's own (the cuFile engine: the registered handle)
  // Open in the queue (engines whose opens_files() is true): the engine opens open_name relative
  // to the directory descriptor `fd` (or AT_FDCWD) with open_flags, reads, and closes it; io_uring
  // links an OPENAT into a direct descriptor to the read, so the open, read and close of a small
  // file cost no system call of their own. open_name must stay valid until reap() hands r back.
  const char* open_name = nullptr;
  int open_flags = 0;

  // Filled by the engine.
  std::uint32_t done = 0;       // bytes read (< length only at end of file or on error)
  int error = 0;                // positive errno when the read failed, 0 on success
  int engine_error = 0;         // the engine's own code behind `error`, 0 if none (cuFile: its
                                // CUfileOpError, 5000 and up)
  std::uint64_t issued_ns = 0;  // when the kernel (or a worker) accepted it: fio's slat end
  std::uint32_t resubmits = 0;  // short-read continuations and EAGAIN retries
  bool open_failed = false;     // open_name: the open failed (error is its errno)
  // The engine's bookkeeping of an open in the queue.
  std::int32_t open_slot = -1;    // io_uring: the direct descriptor it was opened into
  std::uint8_t open_pending = 0;  // io_uring: the open's completion is still to come
  bool read_reaped = false;       // io_uring: the read's completion came first
  // io_uring, a file it opened: the read's link timeout (the file might no longer be a regular
  // file: a FIFO's read waits for a writer for ever).
  std::uint8_t timeouts_pending = 0;  // link timeouts whose completion is still to come
  bool timed_out = false;             // the last one fired: the read was cancelled by it
  bool type_checked = false;          // the file was found regular after a timeout: no more
  bool parked = false;                // the read ended cancelled; waits for its timeout's word
  int parked_res = 0;                 // and what it ended with
};

enum class EngineKind { kAuto, kUring, kPosix };
std::string_view engine_name(EngineKind kind) noexcept;
Result<EngineKind> parse_engine(std::string_view text);

struct EngineOptions {
  unsigned depth = 32;         // reads in flight at most (the queue depth)
  bool sqpoll = false;         // io_uring: kernel thread polls the submission queue
  bool single_thread = false;  // io_uring: the creating thread is the only user (enables
                               // SINGLE_ISSUER|DEFER_TASKRUN where the kernel has them)
  unsigned posix_threads = 0;  // pread pool size; 0 means one thread per depth slot (max 256)
};

// What an engine ended up using, after probing and fallbacks, for the report.
struct EngineInfo {
  std::string name;                   // "uring" or "posix"
  std::vector<std::string> features;  // e.g. "registered-buffers", "sqpoll", "defer-taskrun"
  std::vector<std::string> notes;     // fallbacks and why, e.g. "registered buffers refused: ..."
};

class FileEngine {
 public:
  virtual ~FileEngine() = default;
  FileEngine(const FileEngine&) = delete;
  FileEngine& operator=(const FileEngine&) = delete;

  // Registers memory regions for zero-setup reads (io_uring READ_FIXED). Reads whose dst lies in
  // a registered region use it automatically. Fails (and changes nothing) when the kernel or
  // RLIMIT_MEMLOCK refuses; the engine still works with unregistered buffers. The regions must
  // outlive the engine.
  virtual Result<void> register_buffers(std::span<const MutableBytes> regions) = 0;
  // Registers a file descriptor; returns the index to put in FileRead::fixed_file.
  virtual Result<int> register_file(int fd) = 0;

  // Takes reads that name a file to open (FileRead::open_name) instead of a descriptor.
  virtual bool opens_files() const noexcept { return false; }
  // Issues the reads (one system call per batch where the engine can). Never blocks on I/O.
  virtual void submit(std::span<FileRead* const> reads) noexcept = 0;
  // Waits until at least min_complete reads finished or timeout passed, then moves up to
  // out.size() finished reads into out. Returns how many were moved.
  virtual std::size_t reap(std::span<FileRead*> out, std::size_t min_complete,
                           std::chrono::nanoseconds timeout) noexcept = 0;
  // Asks the kernel (or pool) to cancel what it can; cancelled reads complete with ECANCELED via
  // reap(). Reads already running may still complete normally.
  virtual void cancel_all() noexcept = 0;
  virtual std::size_t in_flight() const noexcept = 0;
  virtual EngineInfo info() const = 0;

 protected:
  FileEngine() = default;
};

// kUnsupported when the build has no liburing or the kernel refuses io_uring (the error says why).
Result<std::unique_ptr<FileEngine>> make_uring_engine(const EngineOptions& options);
Result<std::unique_ptr<FileEngine>> make_posix_engine(const EngineOptions& options);
// kAuto tries io_uring and falls back to POSIX, recording why in info().notes.
Result<std::unique_ptr<FileEngine>> make_file_engine(EngineKind kind, const EngineOptions& options);

// True when this build includes the io_uring engine.
bool uring_compiled_in() noexcept;

}  // namespace feedline::transports
