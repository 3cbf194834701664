// The io_uring engine (liburing).
//
// Protocol, in the manner of fio's io_uring engine and liburing's examples:
//  1. Set-up probes what the kernel offers and steps down on EINVAL: SUBMIT_ALL, then
//     SINGLE_ISSUER|DEFER_TASKRUN (when the caller promises one thread) or COOP_TASKRUN, optional
//     SQPOLL. IORING_OP_READ must exist (kernel 5.6+), else the engine is unsupported and the
//     caller falls back to POSIX.
//  2. submit() writes one SQE per read (READ_FIXED when dst lies in a registered buffer, the
//     fixed-file flag when the read names a registered file) and enters the kernel once per batch.
//  3. reap() drains ready CQEs without a system call, and enters the kernel (submit-and-wait with a
//     timeout) only when fewer than min_complete are ready. A CQE of -EAGAIN re-queues the read; a
//     positive short count resubmits the remainder; 0 is end of file. Re-queued SQEs go out in the
//     same system call as the next wait.
//  4. user_data is the FileRead*; 0 marks our own cancel SQEs, LIBURING_UDATA_TIMEOUT liburing's
//     timeout SQEs on kernels without EXT_ARG. Both are skipped.
//  5. A read that names a file to open (FileRead::open_name) goes out as an OPENAT into a direct
//     descriptor (a slot of the ring's file table, no process descriptor) linked to a READ of
//     that slot, in one submission; its user_data is the FileRead* with the low bit set. The slot
//     is not closed: the next open into it replaces the file (and the ring's exit closes the
//     last ones), so a small file's open, read and close cost no system call of their own. On
//     100,000 warm 4 KiB files, one thread, depth 32, medians of 8: 5.0 us of CPU per file with
//     openat(2) + READ + close(2), 4.1 with the linked OPENAT (an extra CLOSE op: 4.5). The read
//     is handed back once both completions are in, whatever their order.
//  6. The read of a file opened in the ring carries a link timeout (kTypeCheckAfter): the name
//     may no longer be a regular file (replaced by a FIFO since the listing: its read waits for
//     a writer for ever, and the kernel opened it without blocking). When the timeout fires and
//     cancels the read, an fstatat() of the name says what it is: a regular file's read goes out
//     again (without a timeout: a slow disk costs one restart), anything else fails with ENXIO
//     (the queue above says what the name is now). The read is handed back once every
//     completion of it (open, read, timeout) is in.
#include "feedline/transports/file_engine.hpp"

#ifdef FEEDLINE_HAVE_URING

#include <fmt/format.h>
#include <liburing.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "feedline/core/clock.hpp"

namespace feedline::transports {
namespace {

constexpr unsigned kFileSlots = 1024;     // register_file()'s; the direct opens' slots follow
constexpr std::uint64_t kOpenTag = 1;     // user_data's low bits: the completion of an open,
constexpr std::uint64_t kTimeoutTag = 2;  // of a read's link timeout
constexpr std::uint64_t kTagMask = 3;

class UringEngine final : public FileEngine {
 public:
  UringEngine() = default;
  ~UringEngine() override {
    if (initialised_) io_uring_queue_exit(&ring_);
  }

  Result<void> init(const EngineOptions& options) {
    // Three entries per read: an open in the queue and its read's timeout take an SQE each.
    entries_ = std::bit_ceil(std::clamp(options.depth * 3, 4u, 8192u));
    const unsigned entries = entries_;
    unsigned kernel_features = 0;
    struct Attempt {
      unsigned flags;
      const char* features;
    };
    std::vector<Attempt> attempts;
    if (options.sqpoll) {
      attempts.push_back({IORING_SETUP_SQPOLL | IORING_SETUP_SUBMIT_ALL, "sqpoll"});
      attempts.push_back({IORING_SETUP_SQPOLL, "sqpoll"});
    } else if (options.single_thread) {
      attempts.push_back(
          {IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
           "single-issuer,defer-taskrun"});
    }
    if (!options.sqpoll) {
      attempts.push_back(
          {IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
           "coop-taskrun"});
      attempts.push_back({0, ""});
    }
    int rc = -EINVAL;
    for (const Attempt& a : attempts) {
      io_uring_params params{};
      params.flags = a.flags;
      if (a.flags & IORING_SETUP_SQPOLL) params.sq_thread_idle = 2000;
      rc = io_uring_queue_init_params(entries, &ring_, &params);
      if (rc == 0) {
        initialised_ = true;
        flags_ = a.flags;
        kernel_features = params.features;
        if (*a.features) features_.emplace_back(a.features);
        if (options.sqpoll && !(a.flags & IORING_SETUP_SQPOLL)) {
          notes_.emplace_back("sqpoll refused by the kernel; using interrupt-driven submission");
        }
        break;
      }
      if (rc != -EINVAL && rc != -EPERM) break;
    }
    if (!initialised_) {
      return fail(Error::from_errno(-rc, "io_uring_queue_init")
                      .with_hint(rc == -ENOSYS || rc == -EPERM
                                     ? "the kernel has io_uring disabled (kernel.io_uring_disabled "
                                       "or a seccomp filter); use {engine=posix}"
                                     : "use {engine=posix}"));
    }
    io_uring_probe* probe = io_uring_get_probe_ring(&ring_);
    const bool has_read = probe && io_uring_opcode_supported(probe, IORING_OP_READ);
    has_read_fixed_ = probe && io_uring_opcode_supported(probe, IORING_OP_READ_FIXED);
    const bool has_openat = probe && io_uring_opcode_supported(probe, IORING_OP_OPENAT);
    if (probe) io_uring_free_probe(probe);
    // Direct descriptors came in Linux 5.15; CQE_SKIP (5.17) stands for "new enough" since no
    // probe names them. Not under SQPOLL, whose kernel thread takes SQEs as they are written.
    if (has_openat && (kernel_features & IORING_FEAT_CQE_SKIP) && !(flags_ & IORING_SETUP_SQPOLL)) {
      if (auto t = file_table(); t) {
        free_open_slots_.reserve(entries);
        for (unsigned i = entries; i-- > 0;) free_open_slots_.push_back(kFileSlots + i);
        open_slots_ = entries;
        features_.emplace_back("open-in-ring");
      }
    }
    if (!has_read) {
      return fail(Errc::kUnsupported,
                  "this kernel's io_uring lacks IORING_OP_READ (needs Linux 5.6 or newer)");
    }
    return {};
  }

  Result<void> register_buffers(std::span<const MutableBytes> regions) override {
    if (!has_read_fixed_) {
      return fail(Errc::kUnsupported, "io_uring READ_FIXED is not supported by this kernel");
    }
    if (!regions_.empty()) return fail(Errc::kInvalidArgument, "buffers are already registered");
    std::vector<iovec> iov;
    iov.reserve(regions.size());
    for (const MutableBytes& r : regions) iov.push_back({r.data(), r.size()});
    const int rc = io_uring_register_buffers(&ring_, iov.data(), static_cast<unsigned>(iov.size()));
    if (rc < 0) {
      std::size_t total = 0;
      for (const auto& r : regions) total += r.size();
      auto e =
          Error::from_errno(-rc, fmt::format("registering {} bytes of io_uring buffers", total));
      if (rc == -ENOMEM) {
        e.with_hint("RLIMIT_MEMLOCK is too small; raise it with 'ulimit -l' or run as root");
      }
      notes_.push_back(fmt::format("registered buffers refused, using plain reads: {}", e.what()));
      return fail(std::move(e));
    }
    regions_.assign(regions.begin(), regions.end());
    features_.emplace_back("registered-buffers");
    return {};
  }

  Result<int> register_file(int fd) override {
    FEEDLINE_TRY(file_table());
    if (files_used_ == 0) features_.emplace_back("registered-files");
    if (files_used_ >= kFileSlots) {
      return fail(Errc::kResourceExhausted,
                  fmt::format("io_uring file table is full ({} files)", kFileSlots));
    }
    const int rc = io_uring_register_files_update(&ring_, files_used_, &fd, 1);
    if (rc < 0) return fail(Error::from_errno(-rc, "registering a file with io_uring"));
    return static_cast<int>(files_used_++);
  }

  void submit(std::span<FileRead* const> reads) noexcept override {
    for (FileRead* r : reads) {
      r->done = 0;
      r->error = 0;
      r->issued_ns = 0;
      r->resubmits = 0;
      r->open_failed = false;
      r->open_slot = -1;
      r->open_pending = 0;
      r->read_reaped = false;
      r->timeouts_pending = 0;
      r->timed_out = false;
      r->type_checked = false;
      r->parked = false;
      queue_sqe(r);
    }
    in_flight_ += reads.size();
    flush();
  }

  std::size_t reap(std::span<FileRead*> out, std::size_t min_complete,
                   std::chrono::nanoseconds timeout) noexcept override {
    const std::size_t want = std::min(min_complete, out.size());
    std::size_t got = drain(out);
    if (got == 0 && want == 0 && in_flight_ > 0 && (flags_ & IORING_SETUP_DEFER_TASKRUN)) {
      io_uring_get_events(&ring_);  // deferred task work runs only when we enter the kernel
      got = drain(out);
    }
    const std::uint64_t deadline = now_ns() + static_cast<std::uint64_t>(timeout.count());
    while (got < want && in_flight_ > got) {
      const std::uint64_t now = now_ns();
      if (now >= deadline) break;
      const std::uint64_t left = deadline - now;
      __kernel_timespec ts{static_cast<long long>(left / 1'000'000'000),
                           static_cast<long long>(left % 1'000'000'000)};
      io_uring_cqe* cqe = nullptr;
      const int rc = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
      unsubmitted_ = 0;
      if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) break;
      got += drain(out.subspan(got));
      if (rc == -ETIME) break;
    }
    if (unsubmitted_ > 0) flush();
    in_flight_ -= got;
    return got;
  }

  void cancel_all() noexcept override {
    io_uring_sqe* sqe = get_sqe();
    if (!sqe) return;
    io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
    io_uring_sqe_set_data64(sqe, 0);
    ++unsubmitted_;
    flush();
  }

  std::size_t in_flight() const noexcept override { return in_flight_; }
  bool opens_files() const noexcept override { return open_slots_ > 0; }

  EngineInfo info() const override { return {"uring", features_, notes_}; }

 private:
  io_uring_sqe* get_sqe() noexcept {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) {  // submission queue full: push what is there to the kernel and try again
      flush();
      sqe = io_uring_get_sqe(&ring_);
      // Under SQPOLL the kernel thread consumes entries asynchronously: wait for a free one.
      while (!sqe && (flags_ & IORING_SETUP_SQPOLL) && io_uring_sqring_wait(&ring_) >= 0) {
        sqe = io_uring_get_sqe(&ring_);
      }
    }
    return sqe;
  }

  // The ring's file table, registered on first use: register_file()'s slots, then the slots
  // direct opens land in.
  Result<void> file_table() {
    if (files_table_) return {};
    const int rc = io_uring_register_files_sparse(&ring_, kFileSlots + entries_);
    if (rc < 0) {
      notes_.push_back(fmt::format("registered files refused: {}", std::strerror(-rc)));
      return fail(Error::from_errno(-rc, "registering an io_uring file table"));
    }
    files_table_ = true;
    return {};
  }

  int buffer_index(const std::byte* p, std::size_t len) const noexcept {
    for (std::size_t i = 0; i < regions_.size(); ++i) {
      const auto& r = regions_[i];
      if (p >= r.data() && p + len <= r.data() + r.size()) return static_cast<int>(i);
    }
    return -1;
  }

  // Writes the SQE for the unread remainder of r (after the open, on r's first issue, where r
  // names a file to open).
  void queue_sqe(FileRead* r) noexcept {
    const bool open_first = r->open_name != nullptr && r->open_slot < 0;
    const bool timed = r->open_name != nullptr && !r->type_checked;
    const unsigned need = 1u + (open_first ? 1u : 0u) + (timed ? 1u : 0u);
    if (need > 1) {
      // The open, its read and the read's timeout go to the kernel in one submission: a link cut
      // by a flush between them would let the read run before its file is there.
      if (io_uring_sq_space_left(&ring_) < need) flush();
      if ((open_first && free_open_slots_.empty()) || io_uring_sq_space_left(&ring_) < need) {
        r->error = EBUSY;  // more reads in flight than the ring was made for
        ready_.push_back(r);
        return;
      }
    }
    io_uring_sqe* sqe = get_sqe();
    if (!sqe) {  // cannot happen with a healthy ring; fail the read rather than lose it
      r->error = EBUSY;
      ready_.push_back(r);
      return;
    }
    if (open_first) {
      const unsigned slot = free_open_slots_.back();
      free_open_slots_.pop_back();
      // A direct descriptor is no process descriptor: the kernel refuses O_CLOEXEC for it.
      io_uring_prep_openat_direct(sqe, r->fd, r->open_name, r->open_flags & ~O_CLOEXEC, 0, slot);
      sqe->flags |= IOSQE_IO_LINK;
      io_uring_sqe_set_data64(sqe, reinterpret_cast<std::uintptr_t>(r) | kOpenTag);
      ++unsubmitted_;
      r->open_slot = static_cast<std::int32_t>(slot);
      r->open_pending = 1;
      sqe = get_sqe();  // there is room: checked above
    }
    std::byte* dst = r->dst + r->done;
    const unsigned len = r->length - r->done;
    const std::uint64_t off = r->offset + r->done;
    const bool fixed = r->open_slot >= 0 || r->fixed_file >= 0;
    const int fd = r->open_slot >= 0 ? r->open_slot : r->fixed_file >= 0 ? r->fixed_file : r->fd;
    const int buf = buffer_index(dst, len);
    if (buf >= 0) {
      io_uring_prep_read_fixed(sqe, fd, dst, len, off, buf);
    } else {
      io_uring_prep_read(sqe, fd, dst, len, off);
    }
    if (fixed) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data(sqe, r);
    ++unsubmitted_;
    if (timed) {
      sqe->flags |= IOSQE_IO_LINK;
      sqe = get_sqe();  // there is room: checked above
      io_uring_prep_link_timeout(sqe, &kTypeCheckAfter, 0);
      io_uring_sqe_set_data64(sqe, reinterpret_cast<std::uintptr_t>(r) | kTimeoutTag);
      ++unsubmitted_;
      ++r->timeouts_pending;
    }
    batch_.push_back(r);
  }

  // Whether every completion of r is in (its open's, its read's, its timeouts'), r's read done.
  static bool settled(const FileRead* r) noexcept {
    return r->read_reaped && !r->open_pending && r->timeouts_pending == 0 && !r->parked;
  }

  // A read of a file opened in the ring that ended cancelled, now that its timeout's word is in:
  // the timeout cancelled it (the name is looked at: a regular file is read again, anything else
  // fails), or something else did (cancel_all(): it ends as it ended). True when r is done.
  bool unpark(FileRead* r) noexcept {
    r->parked = false;
    if (r->open_failed) return true;  // the read was cut off by its failed open: the open's errno
    if (r->timed_out) {
      r->timed_out = false;
      struct stat st {};
      if (::fstatat(r->fd, r->open_name, &st, 0) == 0 && !S_ISREG(st.st_mode) &&
          !S_ISBLK(st.st_mode)) {
        r->error = ENXIO;  // the queue says what the name is now
        return true;
      }
      r->type_checked = true;
      ++r->resubmits;
      queue_sqe(r);
      return false;
    }
    if (r->parked_res == -EINTR) {
      ++r->resubmits;
      queue_sqe(r);
      return false;
    }
    r->error = -r->parked_res;
    return true;
  }

  void flush() noexcept {
    if (unsubmitted_ == 0) return;
    int rc;
    do {
      rc = io_uring_submit(&ring_);
    } while (rc == -EINTR || rc == -EAGAIN);
    unsubmitted_ = 0;
    const std::uint64_t t = now_ns();
    for (FileRead* r : batch_) {
      if (r->issued_ns == 0) r->issued_ns = t;
    }
    batch_.clear();
  }

  // Moves finished reads into out, handling EAGAIN and short reads. No system call.
  std::size_t drain(std::span<FileRead*> out) noexcept {
    std::size_t got = 0;
    while (got < out.size() && !ready_.empty()) {
      out[got++] = ready_.back();
      ready_.pop_back();
    }
    unsigned seen = 0;
    io_uring_cqe* cqe = nullptr;
    unsigned head = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      if (got == out.size()) break;
      ++seen;
      const std::uint64_t ud = io_uring_cqe_get_data64(cqe);
      if (ud == 0 || ud == LIBURING_UDATA_TIMEOUT) continue;
      const int res = cqe->res;
      if ((ud & kTagMask) == kTimeoutTag) {
        auto* r = reinterpret_cast<FileRead*>(static_cast<std::uintptr_t>(ud & ~kTagMask));
        --r->timeouts_pending;
        if (res == -ETIME) r->timed_out = true;  // fired: it cancelled the read (if still there)
        if (r->parked && r->timeouts_pending == 0) {
          if (!unpark(r)) continue;  // read again
          r->read_reaped = true;
        }
        if (settled(r)) out[got++] = hand_back(r);
        continue;
      }
      if (ud & kOpenTag) {
        auto* r = reinterpret_cast<FileRead*>(static_cast<std::uintptr_t>(ud & ~kTagMask));
        r->open_pending = 0;
        if (res < 0) {  // its read completes cancelled; the open's errno is the read's error
          r->open_failed = true;
          r->error = -res;
        }
        if (settled(r)) out[got++] = hand_back(r);
        continue;
      }
      auto* r = reinterpret_cast<FileRead*>(static_cast<std::uintptr_t>(ud));
      if (r->open_failed) {  // the open's completion came first: this is the cancelled read
        r->read_reaped = true;
        if (settled(r)) out[got++] = hand_back(r);
        continue;
      }
      if ((res == -ECANCELED || res == -EINTR) && (r->timeouts_pending > 0 || r->timed_out)) {
        // Cancelled, by its timeout or by cancel_all(): the timeout's completion says which.
        r->parked = true;
        r->parked_res = res;
        if (r->timeouts_pending > 0) continue;
        if (!unpark(r)) continue;
        r->read_reaped = true;
        if (settled(r)) out[got++] = hand_back(r);
        continue;
      }
      r->timed_out = false;  // it fired too late to cancel anything: the read finished
      if (res == -EAGAIN || res == -EINTR) {
        ++r->resubmits;
        queue_sqe(r);
        continue;
      }
      if (res < 0) {
        // A continuation refused with EINVAL after progress is O_DIRECT at end of file: the
        // remainder starts mid-block. The read is complete (short), not failed.
        if (!(res == -EINVAL && r->done > 0)) r->error = -res;
      } else if (res > 0) {
        r->done += static_cast<std::uint32_t>(res);
        if (r->done < r->length) {  // short read: ask for the rest; 0 next time means EOF
          ++r->resubmits;
          queue_sqe(r);
          continue;
        }
      }
      r->read_reaped = true;
      if (settled(r)) out[got++] = hand_back(r);  // else with its open's or timeout's completion
    }
    if (seen) io_uring_cq_advance(&ring_, seen);
    return got;
  }

  // A finished read, its direct descriptor's slot free again (the file in it stays open until
  // the next open into the slot replaces it).
  FileRead* hand_back(FileRead* r) noexcept {
    if (r->open_slot >= 0) free_open_slots_.push_back(static_cast<unsigned>(r->open_slot));
    return r;
  }

  // How long the read of a file opened in the ring may wait before the name is looked at (6.).
  static inline __kernel_timespec kTypeCheckAfter{2, 0};

  io_uring ring_{};
  bool initialised_ = false;
  unsigned flags_ = 0;
  unsigned entries_ = 0;  // the ring's SQEs, and the direct-descriptor slots for opens
  bool has_read_fixed_ = false;
  bool files_table_ = false;
  unsigned files_used_ = 0;
  unsigned open_slots_ = 0;                // > 0 where reads may name a file to open
  std::vector<unsigned> free_open_slots_;  // direct-descriptor slots not in use
  unsigned unsubmitted_ = 0;
  std::size_t in_flight_ = 0;
  std::vector<MutableBytes> regions_;
  std::vector<FileRead*> batch_;  // SQEs written since the last submit, to stamp issue times
  std::vector<FileRead*> ready_;  // failed before reaching the kernel
  std::vector<std::string> features_;
  std::vector<std::string> notes_;
};

}  // namespace

bool uring_compiled_in() noexcept { return true; }

Result<std::unique_ptr<FileEngine>> make_uring_engine(const EngineOptions& options) {
  auto engine = std::make_unique<UringEngine>();
  FEEDLINE_TRY(engine->init(options));
  return engine;
}

}  // namespace feedline::transports

#else  // !FEEDLINE_HAVE_URING

namespace feedline::transports {

bool uring_compiled_in() noexcept { return false; }

Result<std::unique_ptr<FileEngine>> make_uring_engine(const EngineOptions&) {
  return fail(Error(Errc::kUnsupported, "this feedline was built without io_uring (liburing)")
                  .with_hint("use {engine=posix}, or rebuild with -DFEEDLINE_WITH_URING=ON"));
}

}  // namespace feedline::transports

#endif
