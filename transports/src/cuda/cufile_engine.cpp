// The cuFile engine (cufile.hpp): reads into GPU memory through cuFile's batch API on the
// caller's thread, or cuFileRead on the shared worker pool; the per-file handle registration GDS
// needs is kept on the submitting thread either way.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <mutex>

#include "../detail/pool_engine.hpp"
#include "feedline/core/clock.hpp"
#include "feedline/core/unique_fd.hpp"
#include "feedline/transports/cufile.hpp"

namespace feedline::transports::cufile {
namespace {

constexpr unsigned kMaxThreads = 64;
constexpr unsigned kPerBatch = 16;  // reads per batch handle: small, so a slow read holds few back

class CufileEngine final : public FileEngine {
 public:
  CufileEngine(std::shared_ptr<const CufileRuntime> rt, unsigned depth)
      : rt_(std::move(rt)), depth_(std::max(1u, depth)), entries_(std::max(64u, depth + 16)) {
    // The batch API with the nvidia-fs driver (cuFile refuses batches in compatibility mode).
    if (rt_->batch_api() && !rt_->compat_mode()) {
      batches_.resize((depth_ + kPerBatch - 1) / kPerBatch + 2);
    } else {
      start_pool();
    }
  }

  ~CufileEngine() override {
    pool_.reset();  // joins the workers (the owner drained every read first)
    const CufileApi& a = rt_->api();
    for (Batch& b : batches_) {
      if (b.handle) a.BatchIODestroy(b.handle);
    }
    for (Entry& e : entries_) drop(e);
    for (const MutableBytes& r : regions_) a.BufDeregister(r.data());
  }

  // Device regions (batch buffers in GPU memory). All or nothing.
  Result<void> register_buffers(std::span<const MutableBytes> regions) override {
    const CufileApi& a = rt_->api();
    std::vector<MutableBytes> done;
    for (const MutableBytes& r : regions) {
      const CUfileError e = a.BufRegister(r.data(), r.size(), 0);
      if (e.err != kSuccess) {
        for (const MutableBytes& d : done) a.BufDeregister(d.data());
        return fail(rt_->error(e, "cuFileBufRegister"));
      }
      done.push_back(r);
    }
    regions_.insert(regions_.end(), done.begin(), done.end());
    return {};
  }

  Result<int> register_file(int) override {
    return fail(Errc::kUnsupported,
                "the cuFile engine registers each file itself as its reads come");
  }

  void submit(std::span<FileRead* const> reads) noexcept override {
    batch_.clear();
    for (FileRead* r : reads) {
      r->done = 0;
      r->error = 0;
      r->engine_error = 0;
      r->resubmits = 0;
      r->issued_ns = 0;
      r->engine_data = nullptr;
      Entry* e = entry_for(*r);
      if (!e) {
        finished_.push_back(r);  // r->error says why
        continue;
      }
      ++e->in_flight;
      e->last_use = ++uses_;
      r->engine_data = e;
      batch_.push_back(r);
    }
    if (pool_) {
      pool_->submit(batch_);
    } else {
      waiting_.insert(waiting_.end(), batch_.begin(), batch_.end());
      pump();
    }
  }

  std::size_t reap(std::span<FileRead*> out, std::size_t min_complete,
                   std::chrono::nanoseconds timeout) noexcept override {
    if (!pool_) collect(min_complete, timeout);
    std::size_t n = 0;
    while (!finished_.empty() && n < out.size()) {
      out[n++] = finished_.front();
      finished_.pop_front();
    }
    if (pool_ && n < out.size()) {
      const std::size_t want = min_complete > n ? min_complete - n : 0;
      n += pool_->reap(out.subspan(n), want, n > 0 ? std::chrono::nanoseconds(0) : timeout);
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (auto* e = static_cast<Entry*>(out[i]->engine_data)) --e->in_flight;
      out[i]->engine_data = nullptr;
    }
    return n;
  }

  // Reads not yet handed to cuFile are cancelled; those in cuFile's hands complete (local reads,
  // milliseconds), since a cancelled batch may report nothing more for them.
  void cancel_all() noexcept override {
    if (pool_) pool_->cancel_all();
    for (FileRead* r : waiting_) {
      r->error = ECANCELED;
      finished_.push_back(r);
    }
    waiting_.clear();
  }

  std::size_t in_flight() const noexcept override {
    std::size_t n = finished_.size() + waiting_.size() + (pool_ ? pool_->in_flight() : 0);
    for (const Batch& b : batches_) n += b.reads.size();
    return n;
  }

  EngineInfo info() const override {
    EngineInfo i = pool_ ? pool_->info() : EngineInfo{"cufile", {"batch-api"}, {}};
    if (pool_ && rt_->batch_api() && rt_->compat_mode()) {
      i.notes.push_back(
          "cuFile's batch API is not used in compatibility mode: cuFileRead on threads");
    }
    if (!batch_fallback_.empty()) i.notes.push_back(batch_fallback_);
    if (!regions_.empty())
      i.features.push_back(fmt::format("registered-buffers={}", regions_.size()));
    i.features.push_back(fmt::format("handles-registered={}", handles_registered_));
    if (plain_fds_) {
      i.notes.push_back(
          fmt::format("{} file(s) could not be opened with O_DIRECT: cuFile served them in "
                      "compatibility mode",
                      plain_fds_));
    }
    std::lock_guard lock(mu_);
    if (!first_error_.empty()) i.notes.push_back(first_error_);
    return i;
  }

 private:
  // One registered file: our own O_DIRECT descriptor and its cuFile handle. Entries never move
  // (entries_ is sized once), so a worker may hold one while the submitting thread looks up others;
  // an entry is reused only when no read of it is in flight.
  struct Entry {
    UniqueFd fd;
    dev_t dev = 0;
    ino_t ino = 0;
    Handle handle = nullptr;
    unsigned in_flight = 0;
    std::uint64_t last_use = 0;
  };

  void drop(Entry& e) noexcept {
    if (e.handle) rt_->api().HandleDeregister(e.handle);
    e = Entry{};  // closes the descriptor, after its handle is gone
  }

  // The registered entry for r's file (by device and inode: a descriptor number may be closed and
  // reused for another file), registering it on first use; null with r.error set on failure.
  Entry* entry_for(FileRead& r) noexcept {
    struct stat st {};
    if (::fstat(r.fd, &st) != 0) {
      r.error = errno;
      return nullptr;
    }
    Entry* victim = nullptr;
    for (Entry& e : entries_) {
      if (e.handle && e.dev == st.st_dev && e.ino == st.st_ino) return &e;
      if (e.in_flight == 0 &&
          (!victim || (victim->handle && (!e.handle || e.last_use < victim->last_use)))) {
        victim = &e;
      }
    }
    if (!victim) {  // cannot happen: more entries than reads in flight
      r.error = EBUSY;
      return nullptr;
    }
    drop(*victim);
    const std::string path = fmt::format("/proc/self/fd/{}", r.fd);
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));
    if (!fd && errno == EINVAL) {
      fd.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
      if (fd) ++plain_fds_;
    }
    if (!fd) {
      r.error = errno;
      return nullptr;
    }
    CUfileDescr d;
    d.type = kHandleTypeOpaqueFd;
    d.handle.fd = fd.get();
    Handle h = nullptr;
    const CUfileError e = rt_->api().HandleRegister(&h, &d);
    if (e.err != kSuccess) {
      r.error = EIO;
      r.engine_error = e.err;
      note_error(rt_->error(e, "cuFileHandleRegister").message());
      return nullptr;
    }
    ++handles_registered_;
    victim->fd = std::move(fd);
    victim->dev = st.st_dev;
    victim->ino = st.st_ino;
    victim->handle = h;
    return victim;
  }

  // A dst inside a registered region is passed as (region base, offset), as cuFile expects for
  // registered buffers; any other as (dst, 0).
  std::pair<std::byte*, std::uint64_t> locate(std::byte* dst) const noexcept {
    for (const MutableBytes& reg : regions_) {
      if (dst >= reg.data() && dst < reg.data() + reg.size()) {
        return {reg.data(), static_cast<std::uint64_t>(dst - reg.data())};
      }
    }
    return {dst, 0};
  }

  void start_pool() {
    pool_ = transports::detail::make_pool_engine(rt_->compat_mode() ? "cufile-compat" : "cufile",
                                                 std::min(depth_, kMaxThreads),
                                                 [this](FileRead& r) { read(r); }, {});
  }

  // ---- the batch API (caller's thread) ----

  struct Batch {
    BatchHandle handle = nullptr;
    std::vector<FileRead*> reads;  // submitted and not yet reported back
  };

  // Hands waiting reads to free batch handles (set up on first use), kPerBatch at a time.
  void pump() noexcept {
    const CufileApi& a = rt_->api();
    for (Batch& b : batches_) {
      if (waiting_.empty()) return;
      if (!b.reads.empty()) continue;
      if (!b.handle) {
        const CUfileError e = a.BatchIOSetUp(&b.handle, kPerBatch);
        if (e.err != kSuccess) {
          b.handle = nullptr;
          if (!any_batch_set_up_) {  // the batch API does not work here: threads from now on
            batch_fallback_ =
                rt_->error(e, "cuFileBatchIOSetUp").message() + ": cuFileRead on threads instead";
            batches_.clear();
            start_pool();
            std::vector<FileRead*> moved(waiting_.begin(), waiting_.end());
            waiting_.clear();
            pool_->submit(moved);
            return;
          }
          continue;
        }
        any_batch_set_up_ = true;
      }
      params_.clear();
      while (!waiting_.empty() && params_.size() < kPerBatch) {
        FileRead* r = waiting_.front();
        waiting_.pop_front();
        const auto [base, off] = locate(r->dst + r->done);
        CUfileIOParams p;
        p.batch.devPtr_base = base;
        p.batch.devPtr_offset = static_cast<off_t>(off);
        p.batch.file_offset = static_cast<off_t>(r->offset + r->done);
        p.batch.size = r->length - r->done;
        p.fh = static_cast<const Entry*>(r->engine_data)->handle;
        p.cookie = r;
        params_.push_back(p);
        b.reads.push_back(r);
      }
      const std::uint64_t now = now_ns();
      const CUfileError e =
          a.BatchIOSubmit(b.handle, static_cast<unsigned>(params_.size()), params_.data(), 0);
      for (FileRead* r : b.reads) {
        if (r->issued_ns == 0) r->issued_ns = now;
        if (e.err != kSuccess) {
          r->error = EIO;
          r->engine_error = e.err;
          finished_.push_back(r);
        }
      }
      if (e.err != kSuccess) {
        note_error(rt_->error(e, "cuFileBatchIOSubmit").message());
        b.reads.clear();
      }
    }
  }

  // Takes what cuFile finished: first without waiting from every busy batch, then, until
  // min_complete reads are finished or the timeout passes, waiting on the oldest busy batch in
  // slices of at most a millisecond (so completions on other batches are not held up).
  void collect(std::size_t min_complete, std::chrono::nanoseconds timeout) noexcept {
    const std::uint64_t deadline =
        now_ns() + static_cast<std::uint64_t>(std::max<std::int64_t>(0, timeout.count()));
    for (;;) {
      for (Batch& b : batches_) {
        if (!b.reads.empty()) poll_batch(b, 0, 0);
      }
      pump();  // handles freed above take waiting reads (remainders of short reads among them)
      const std::uint64_t now = now_ns();
      if (finished_.size() >= min_complete || now >= deadline) return;
      Batch* oldest = nullptr;
      for (Batch& b : batches_) {
        if (!b.reads.empty() &&
            (!oldest || b.reads.front()->issued_ns < oldest->reads.front()->issued_ns))
          oldest = &b;
      }
      if (!oldest) return;  // nothing in flight to wait for
      poll_batch(*oldest, 1, std::min<std::uint64_t>(deadline - now, 1'000'000));
    }
  }

  void poll_batch(Batch& b, unsigned min_nr, std::uint64_t wait_ns) noexcept {
    events_.resize(kPerBatch);
    unsigned n = static_cast<unsigned>(std::min<std::size_t>(events_.size(), b.reads.size()));
    timespec ts{static_cast<time_t>(wait_ns / 1'000'000'000),
                static_cast<long>(wait_ns % 1'000'000'000)};
    const CUfileError e = rt_->api().BatchIOGetStatus(b.handle, min_nr, &n, events_.data(), &ts);
    if (e.err != kSuccess) {
      // cuFile lost track of this batch: every read still in it fails.
      note_error(rt_->error(e, "cuFileBatchIOGetStatus").message());
      for (FileRead* r : b.reads) {
        r->error = EIO;
        r->engine_error = e.err;
        finished_.push_back(r);
      }
      b.reads.clear();
      return;
    }
    for (unsigned i = 0; i < n && i < events_.size(); ++i) {
      auto* r = static_cast<FileRead*>(events_[i].cookie);
      auto it = std::find(b.reads.begin(), b.reads.end(), r);
      if (it == b.reads.end()) continue;  // not one of ours (cannot happen)
      b.reads.erase(it);
      finish_event(*r, events_[i]);
    }
  }

  void finish_event(FileRead& r, const CUfileIOEvents& ev) noexcept {
    const auto ret = static_cast<ssize_t>(ev.ret);
    if (ev.status == kStatusComplete && ret >= 0) {
      r.done += static_cast<std::uint32_t>(
          std::min<std::uint64_t>(static_cast<std::uint64_t>(ret), r.length - r.done));
      if (ret > 0 && r.done < r.length) {  // short: the rest goes in again
        ++r.resubmits;
        waiting_.push_front(&r);
        return;
      }
    } else if (ev.status == kStatusCanceled) {
      r.error = ECANCELED;
    } else {
      r.error = EIO;
      r.engine_error = ret < 0 ? static_cast<int>(-ret) : 0;
      note_error(fmt::format("cuFile batch read: status {:#x}, result {}", ev.status, ret));
    }
    finished_.push_back(&r);
  }

  // ---- cuFileRead on the pool's worker threads ----

  // cuFileRead until r is whole or the file ends.
  void read(FileRead& r) noexcept {
    const auto* e = static_cast<const Entry*>(r.engine_data);
    const auto [base, base_off] = locate(r.dst);
    while (r.done < r.length) {
      errno = 0;
      const ssize_t n =
          rt_->api().Read(e->handle, base, r.length - r.done, static_cast<off_t>(r.offset + r.done),
                          static_cast<off_t>(base_off + r.done));
      if (n == -1) {
        if (errno == EINTR || errno == EAGAIN) {
          ++r.resubmits;
          continue;
        }
        r.error = errno ? errno : EIO;
        return;
      }
      if (n < 0) {  // a cuFile error: -CUfileOpError
        r.error = EIO;
        r.engine_error = static_cast<int>(-n);
        note_error(fmt::format("cuFileRead: cuFile error {}", -n));
        return;
      }
      if (n == 0) return;  // end of file: a short read
      r.done += static_cast<std::uint32_t>(n);
      if (r.done < r.length) ++r.resubmits;
    }
  }

  void note_error(std::string text) {
    std::lock_guard lock(mu_);
    if (first_error_.empty()) first_error_ = "first failure: " + std::move(text);
  }

  std::shared_ptr<const CufileRuntime> rt_;
  unsigned depth_;
  std::vector<Entry> entries_;
  std::vector<MutableBytes> regions_;
  std::vector<FileRead*> batch_;
  std::deque<FileRead*> finished_;  // done (or failed before reaching cuFile), not yet reaped
  // The batch API (empty when the pool is used).
  std::vector<Batch> batches_;
  std::deque<FileRead*> waiting_;  // registered, waiting for a free batch handle
  std::vector<CUfileIOParams> params_;
  std::vector<CUfileIOEvents> events_;
  bool any_batch_set_up_ = false;
  std::string batch_fallback_;
  std::uint64_t uses_ = 0;
  std::uint64_t handles_registered_ = 0;
  std::uint64_t plain_fds_ = 0;
  mutable std::mutex mu_;
  std::string first_error_;
  std::unique_ptr<FileEngine> pool_;  // last: its workers stop before the state above goes
};

}  // namespace

Result<std::unique_ptr<FileEngine>> make_cufile_engine(std::shared_ptr<const CufileRuntime> runtime,
                                                       const EngineOptions& options) {
  if (!runtime || !runtime->available()) {
    return fail(Errc::kUnsupported, fmt::format("cuFile is not available: {}",
                                                runtime ? runtime->reason() : "not loaded"));
  }
  return std::unique_ptr<FileEngine>(new CufileEngine(std::move(runtime), options.depth));
}

}  // namespace feedline::transports::cufile
