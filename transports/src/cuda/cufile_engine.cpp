// The cuFile engine (cufile.hpp): cuFileRead into GPU memory on the shared worker pool, with the
// per-file handle registration GDS needs kept on the submitting thread.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>

#include "../detail/pool_engine.hpp"
#include "feedline/transports/cufile.hpp"

namespace feedline::transports::cufile {
namespace {

constexpr unsigned kMaxThreads = 64;

class CufileEngine final : public FileEngine {
 public:
  CufileEngine(std::shared_ptr<const CufileRuntime> rt, unsigned depth)
      : rt_(std::move(rt)), entries_(std::max(64u, depth + 16)) {
    pool_ = transports::detail::make_pool_engine(rt_->compat_mode() ? "cufile-compat" : "cufile",
                                                 std::min(std::max(1u, depth), kMaxThreads),
                                                 [this](FileRead& r) { read(r); }, {});
  }

  ~CufileEngine() override {
    pool_.reset();  // joins the workers (the owner drained every read first)
    const CufileApi& a = rt_->api();
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
    return fail(Errc::kUnsupported, "the cuFile engine registers each file itself as its reads come");
  }

  void submit(std::span<FileRead* const> reads) noexcept override {
    batch_.clear();
    for (FileRead* r : reads) {
      r->done = 0;
      r->error = 0;
      r->engine_error = 0;
      r->resubmits = 0;
      Entry* e = entry_for(*r);
      if (!e) {
        failed_.push_back(r);  // r->error says why
        continue;
      }
      ++e->in_flight;
      e->last_use = ++uses_;
      r->engine_data = e;
      batch_.push_back(r);
    }
    pool_->submit(batch_);
  }

  std::size_t reap(std::span<FileRead*> out, std::size_t min_complete,
                   std::chrono::nanoseconds timeout) noexcept override {
    std::size_t n = 0;
    while (!failed_.empty() && n < out.size()) {
      out[n++] = failed_.back();
      failed_.pop_back();
    }
    if (n < out.size()) {
      const std::size_t want = min_complete > n ? min_complete - n : 0;
      const std::size_t got = pool_->reap(out.subspan(n), want, n > 0 ? std::chrono::nanoseconds(0) : timeout);
      for (std::size_t i = n; i < n + got; ++i) {
        if (auto* e = static_cast<Entry*>(out[i]->engine_data)) --e->in_flight;
        out[i]->engine_data = nullptr;
      }
      n += got;
    }
    return n;
  }

  void cancel_all() noexcept override { pool_->cancel_all(); }
  std::size_t in_flight() const noexcept override { return pool_->in_flight() + failed_.size(); }

  EngineInfo info() const override {
    EngineInfo i = pool_->info();
    if (!regions_.empty()) i.features.push_back(fmt::format("registered-buffers={}", regions_.size()));
    i.features.push_back(fmt::format("handles-registered={}", handles_registered_));
    if (plain_fds_) {
      i.notes.push_back(fmt::format("{} file(s) could not be opened with O_DIRECT: cuFile served them in "
                                    "compatibility mode", plain_fds_));
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
    int fd = -1;
    dev_t dev = 0;
    ino_t ino = 0;
    Handle handle = nullptr;
    unsigned in_flight = 0;
    std::uint64_t last_use = 0;
  };

  void drop(Entry& e) noexcept {
    if (e.handle) rt_->api().HandleDeregister(e.handle);
    if (e.fd >= 0) ::close(e.fd);
    e = Entry{};
  }

  // The registered entry for r's file (by device and inode: a descriptor number may be closed and
  // reused for another file), registering it on first use; null with r.error set on failure.
  Entry* entry_for(FileRead& r) noexcept {
    struct stat st{};
    if (::fstat(r.fd, &st) != 0) {
      r.error = errno;
      return nullptr;
    }
    Entry* victim = nullptr;
    for (Entry& e : entries_) {
      if (e.handle && e.dev == st.st_dev && e.ino == st.st_ino) return &e;
      if (e.in_flight == 0 && (!victim || (victim->handle && (!e.handle || e.last_use < victim->last_use)))) {
        victim = &e;
      }
    }
    if (!victim) {  // cannot happen: more entries than reads in flight
      r.error = EBUSY;
      return nullptr;
    }
    drop(*victim);
    const std::string path = fmt::format("/proc/self/fd/{}", r.fd);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd < 0 && errno == EINVAL) {
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) ++plain_fds_;
    }
    if (fd < 0) {
      r.error = errno;
      return nullptr;
    }
    CUfileDescr d;
    d.type = kHandleTypeOpaqueFd;
    d.handle.fd = fd;
    Handle h = nullptr;
    const CUfileError e = rt_->api().HandleRegister(&h, &d);
    if (e.err != kSuccess) {
      ::close(fd);
      r.error = EIO;
      r.engine_error = e.err;
      note_error(rt_->error(e, "cuFileHandleRegister").message());
      return nullptr;
    }
    ++handles_registered_;
    victim->fd = fd;
    victim->dev = st.st_dev;
    victim->ino = st.st_ino;
    victim->handle = h;
    return victim;
  }

  // On a worker thread: cuFileRead until r is whole or the file ends. A dst inside a registered
  // region is passed as (region base, offset), as cuFile expects for registered buffers.
  void read(FileRead& r) noexcept {
    const auto* e = static_cast<const Entry*>(r.engine_data);
    std::byte* base = r.dst;
    std::uint64_t base_off = 0;
    for (const MutableBytes& reg : regions_) {
      if (r.dst >= reg.data() && r.dst < reg.data() + reg.size()) {
        base = reg.data();
        base_off = static_cast<std::uint64_t>(r.dst - reg.data());
        break;
      }
    }
    while (r.done < r.length) {
      errno = 0;
      const ssize_t n = rt_->api().Read(e->handle, base, r.length - r.done, static_cast<off_t>(r.offset + r.done),
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
  std::vector<Entry> entries_;
  std::vector<MutableBytes> regions_;
  std::vector<FileRead*> batch_;
  std::vector<FileRead*> failed_;
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
    return fail(Errc::kUnsupported,
                fmt::format("cuFile is not available: {}", runtime ? runtime->reason() : "not loaded"));
  }
  return std::unique_ptr<FileEngine>(new CufileEngine(std::move(runtime), options.depth));
}

}  // namespace feedline::transports::cufile
