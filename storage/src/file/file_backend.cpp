// The local-file backend.
//
// O_DIRECT needs the file offset, the length and the buffer aligned to the device's logical block
// size; we use 4 KiB, which satisfies every common device. A read that is not aligned is still
// served: when only its length is unaligned and dst has room, the rounded-up length is read in
// place and the result clipped; otherwise the queue reads the aligned cover of the range into a
// bounce buffer and copies the wanted bytes out (counted in QueueStats::bounced_*).
#include "file_backend.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "feedline/core/clock.hpp"
#include "feedline/core/redact.hpp"
#include "feedline/core/unique_fd.hpp"
#include "feedline/storage/device_reads.hpp"
#include "feedline/storage/queue_parts.hpp"
#include "feedline/transports/cufile.hpp"
#include "file_listing.hpp"

namespace feedline::storage::detail {
namespace {

namespace fs = std::filesystem;
constexpr std::uint64_t kDirectAlign = 4096;
constexpr std::uint64_t kMaxRequest = 1ull << 30;

class FileHandle final : public ObjectHandle {
 public:
  FileHandle(std::string key, std::uint64_t size, UniqueFd fd, bool direct)
      : ObjectHandle(std::move(key), size), fd_(std::move(fd)), direct_(direct) {}
  // Not open yet (Backend::open_deferred): the queue opens key()'s part from name_at on,
  // relative to the directory descriptor dir_fd (AT_FDCWD: the whole key).
  FileHandle(std::string key, std::uint64_t size, int dir_fd, std::size_t name_at, bool direct)
      : ObjectHandle(std::move(key), size), dir_fd_(dir_fd), name_at_(name_at), direct_(direct) {}
  int fd() const noexcept { return fd_.get(); }
  bool direct() const noexcept { return direct_; }
  bool deferred() const noexcept { return !fd_ && name_at_ != kOpen; }
  int dir_fd() const noexcept { return dir_fd_; }
  const char* open_name() const noexcept { return key().c_str() + name_at_; }

 private:
  static constexpr std::size_t kOpen = static_cast<std::size_t>(-1);
  UniqueFd fd_;
  int dir_fd_ = AT_FDCWD;
  std::size_t name_at_ = kOpen;
  bool direct_;
};

// The error of a failed open for read of path (errno err), with what to do about it.
Error open_error(int err, const std::string& path, bool direct) {
  Error e = Error::from_errno(err, "opening for read").with_object(path);
  if (err == EINVAL && direct) {
    e.with_hint("this filesystem does not support O_DIRECT; use {!direct}");
  } else if (err == EACCES || err == EPERM) {
    e.with_hint("check the file's permissions");
  } else if (err == ENOENT || err == ENOTDIR) {
    e.with_hint("check the path");
  }
  return e;
}

// What a file type is, in words.
const char* type_name(mode_t mode) {
  return S_ISFIFO(mode)   ? "a named pipe (FIFO)"
         : S_ISSOCK(mode) ? "a socket"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISDIR(mode)  ? "a directory"
         : S_ISLNK(mode)  ? "a symbolic link"
                          : "not a regular file";
}

// A FIFO, socket or character device named where a file is expected (a dataset root, a brace
// list's name, bench storage's target): the user's mistake, found before any work.
Error not_regular(const std::string& path, mode_t mode) {
  return Error(Errc::kInvalidArgument,
               fmt::format("not a regular file or block device: {}", type_name(mode)))
      .with_object(path)
      .with_hint(
          "name a regular file (pipes, sockets and character devices have no size and cannot be "
          "read as data)");
}

// A file the listing (or the dataset's open) saw as a regular file that is something else now
// (replaced mid-run by a FIFO, a socket, a device or a directory): a data error of that object,
// never a read that blocks.
Error no_longer_regular(const std::string& path, mode_t mode) {
  return Error(Errc::kIo,
               fmt::format("not a regular file any more: now {} (replaced since the dataset was "
                           "listed?)",
                           type_name(mode)))
      .with_object(path)
      .with_hint("put the file back, or leave it out of the dataset");
}

// Opens path for reads without blocking on what is not a regular file: O_NONBLOCK keeps the
// open of a FIFO from waiting for a writer (forever, deaf to SIGINT), fstat() then refuses
// whatever is not a regular file or block device, and the flag is cleared again (io_uring
// would otherwise return EAGAIN for reads of uncached pages on some filesystems instead of
// waiting for them). `dfd` and `name` as openat's. Fills st.
Result<UniqueFd> open_regular(int dfd, const char* name, int flags, const std::string& path,
                              bool direct, struct stat& st);

Error read_error(int err, const ReadOp& op, int engine_error = 0) {
  Error e = err == ECANCELED ? Error(Errc::kCancelled, "read cancelled")
            : engine_error != 0
                ? Error(Errc::kIo, fmt::format("read: cuFile error {}", engine_error))
                : Error::from_errno(err, "read");
  return std::move(e).with_object(op.object ? op.object->key() : "?").with_offset(op.offset);
}

Result<UniqueFd> open_regular(int dfd, const char* name, int flags, const std::string& path,
                              bool direct, struct stat& st) {
  UniqueFd fd(::openat(dfd, name, flags | O_NONBLOCK));
  if (!fd) {
    const int err = errno;
    // A socket cannot be opened (ENXIO), a directory not with O_DIRECT on some filesystems:
    // say what is there rather than the errno's words.
    if ((err == ENXIO || err == EINVAL || err == EISDIR) && ::fstatat(dfd, name, &st, 0) == 0 &&
        !S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
      return fail(no_longer_regular(path, st.st_mode));
    }
    return fail(open_error(err, path, direct));
  }
  if (::fstat(fd.get(), &st) != 0) return fail(Error::from_errno(errno, "fstat").with_object(path));
  if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
    return fail(no_longer_regular(path, st.st_mode));
  if (::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK & ~O_CLOEXEC) != 0) {
    return fail(Error::from_errno(errno, "fcntl(F_SETFL)").with_object(path));
  }
  return fd;
}

class FileQueue final : public IoQueue {
 public:
  // `device`: destinations are GPU memory (the cuFile engine), which handles alignment itself;
  // the host never bounces or touches them.
  FileQueue(unsigned depth, bool direct, std::unique_ptr<transports::FileEngine> engine,
            bool device = false)
      : IoQueue(depth, kMaxRequest),
        engine_(std::move(engine)),
        reaped_(std::max(depth, 16u)),
        direct_(direct),
        device_(device) {}

  ~FileQueue() override {
    // The kernel may still be writing into callers' buffers: cancel, then wait for every read to
    // come back. Completions are not run (their owners may be gone).
    engine_->cancel_all();
    while (engine_->in_flight() > 0) {
      engine_->reap(reaped_, 1, std::chrono::seconds(1));
    }
  }

  void cancel() override { engine_->cancel_all(); }

  // Registered buffers pay off for O_DIRECT only: for page-cache reads the kernel copies into a
  // registered (bvec) buffer about 20% slower than into a plain user buffer (measured with
  // bench/compare-fio.sh: 10.6 vs 12.6 GB/s), so buffered queues decline them.
  Result<void> register_buffers(std::span<const MutableBytes> regions) override {
    if (!direct_ && !device_) {
      return fail(Errc::kUnsupported, "registered buffers are used for direct I/O only");
    }
    return engine_->register_buffers(regions);
  }

  Result<void> register_object(const ObjectHandle& object) override {
    const auto* h = dynamic_cast<const FileHandle*>(&object);
    if (!h) return fail(Errc::kInvalidArgument, "not a file:// object");
    if (h->deferred()) {
      return fail(Error(Errc::kInvalidArgument, "the file is not open yet")
                      .with_object(h->key())
                      .with_hint("register a handle of open_known(), not open_deferred()"));
    }
    FEEDLINE_ASSIGN_OR_RETURN(int index, engine_->register_file(h->fd()));
    fixed_.push_back({h, index});
    return {};
  }

  // io_uring opens each deferred file in the ring, linked to its read (uring_engine.cpp).
  bool opens_objects() const noexcept override { return engine_->opens_files() && !device_; }

  QueueInfo info() const override {
    auto i = engine_->info();
    return {std::move(i.name), std::move(i.features), std::move(i.notes)};
  }

 protected:
  void do_submit(std::span<ReadOp* const> ops) override {
    batch_.clear();
    for (ReadOp* op : ops) {
      if (Slot* s = prepare(*op)) batch_.push_back(&s->read);
    }
    engine_->submit(batch_);
  }

  std::size_t do_poll(std::size_t min_complete, std::chrono::nanoseconds timeout) override {
    std::size_t n = 0;
    const std::uint64_t deadline = now_ns() + static_cast<std::uint64_t>(timeout.count());
    do {
      const std::size_t want = min_complete > n ? min_complete - n : 0;
      const std::uint64_t now = now_ns();
      const auto left = std::chrono::nanoseconds(deadline > now ? deadline - now : 0);
      const std::size_t got = engine_->reap(reaped_, std::min(want, reaped_.size()), left);
      for (std::size_t i = 0; i < got; ++i) finish(*static_cast<Slot*>(reaped_[i]->user));
      n += got;
      if (got == 0) break;
    } while (n < min_complete);
    return n;
  }

 private:
  struct Slot {
    transports::FileRead read;
    ReadOp* op = nullptr;
    AlignedBuffer bounce;    // empty unless the read goes through a bounce buffer
    std::uint64_t skip = 0;  // bytes of the bounce buffer before op->offset
  };

  // The engine's read for op, or null when op completes without one (at the next poll()).
  // submit() checked the destination and the request limit.
  Slot* prepare(ReadOp& op) {
    const auto* h = dynamic_cast<const FileHandle*>(op.object);
    if (!h) {
      complete_at_next_poll(op, fail(Error(Errc::kInvalidArgument, "the op names no file:// object")
                                         .with_object(op.object->display_name())
                                         .with_offset(op.offset)));
      return nullptr;
    }
    Slot* s = slots_.acquire();
    s->op = &op;
    s->skip = 0;
    s->bounce = AlignedBuffer();
    transports::FileRead& r = s->read;
    r = transports::FileRead{};
    r.user = s;
    r.fd = h->fd();
    if (h->deferred()) {
      if (!opens_objects()) {  // Backend::open_deferred() handles are for queues that open
        slots_.release(s);
        complete_at_next_poll(op, fail(Error(Errc::kInvalidArgument,
                                             "a file not open yet, on a queue that cannot open it")
                                           .with_object(op.object->display_name())
                                           .with_offset(op.offset)
                                           .with_hint("read a handle of open_known() here: "
                                                      "open_deferred() is for queues whose "
                                                      "opens_objects() is true")));
        return nullptr;
      }
      r.fd = h->dir_fd();
      r.open_name = h->open_name();
      r.open_flags = O_RDONLY | O_CLOEXEC | (h->direct() ? O_DIRECT : 0);
    }
    for (const auto& [handle, index] : fixed_) {
      if (handle == h) r.fixed_file = index;
    }
    std::uint64_t off = op.offset;
    std::uint64_t len = op.length;
    std::byte* dst = op.dst.data();
    if (h->direct() && !device_) {
      const bool aligned_start = off % kDirectAlign == 0 && is_aligned(dst, kDirectAlign);
      const std::uint64_t rounded = align_up(len, kDirectAlign);
      if (aligned_start && rounded <= op.dst.size()) {
        len = rounded;  // read in place; the result is clipped to op.length
      } else if (!aligned_start || len % kDirectAlign != 0) {
        const std::uint64_t lo = align_down(off, kDirectAlign);
        const std::uint64_t hi = align_up(off + len, kDirectAlign);
        auto buf = AlignedBuffer::allocate(hi - lo, kDirectAlign);
        if (!buf) {
          slots_.release(s);
          complete_at_next_poll(op, fail(std::move(buf)
                                             .error()
                                             .with_object(op.object->display_name())
                                             .with_offset(op.offset)));
          return nullptr;
        }
        s->bounce = std::move(*buf);
        s->skip = off - lo;
        off = lo;
        len = hi - lo;
        dst = s->bounce.data();
      }
    }
    r.offset = off;
    r.length = static_cast<std::uint32_t>(len);
    r.dst = dst;
    return s;
  }

  void finish(Slot& s) noexcept {
    ReadOp& op = *s.op;
    const transports::FileRead& r = s.read;
    if (r.open_failed && r.error != ECANCELED) {  // cancel() stops an open too: "cancelled"
      op.result = fail(open_error(r.error, op.object->key(), direct_));
      explain_not_regular(op);
    } else if (r.error != 0) {
      op.result = fail(read_error(r.error, op, r.engine_error));
      if (r.error != ECANCELED) explain_not_regular(op);
    } else {
      std::uint64_t got = r.done;
      if (!s.bounce.empty()) {
        got = got > s.skip ? std::min<std::uint64_t>(got - s.skip, op.length) : 0;
        std::memcpy(op.dst.data(), s.bounce.data() + s.skip, got);
        mutable_stats().bounced_ops += 1;
        mutable_stats().bounced_bytes += got;
        s.bounce = AlignedBuffer();
      } else {
        got = std::min<std::uint64_t>(got, op.length);
      }
      op.result = got;
      // Short of the object's end: a file swapped for something else since it was listed reads
      // as nothing (a FIFO without a writer), or fails; say what it is now.
      if (op.offset + got < op.object->size() && got < op.length) explain_not_regular(op);
    }
    op.times.issued_ns = r.issued_ns;
    const std::uint32_t retries = r.resubmits;
    slots_.release(&s);
    complete(op, retries);
  }

  // Where op's file is no longer a regular file (or block device), its result becomes the error
  // that says so. Only on failures and short reads: an fstat() of the open file, or for a file
  // the ring opened (by name, with its read), an fstatat() of that name.
  static void explain_not_regular(ReadOp& op) noexcept {
    const auto* h = dynamic_cast<const FileHandle*>(op.object);
    if (!h) return;
    struct stat st {};
    const int rc =
        h->deferred() ? ::fstatat(h->dir_fd(), h->open_name(), &st, 0) : ::fstat(h->fd(), &st);
    if (rc != 0 || S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) return;
    op.result = fail(no_longer_regular(h->key(), st.st_mode).with_offset(op.offset));
  }

  std::unique_ptr<transports::FileEngine> engine_;
  std::vector<transports::FileRead*> reaped_;
  std::vector<transports::FileRead*> batch_;
  SlotPool<Slot> slots_;
  std::vector<std::pair<const FileHandle*, int>> fixed_;
  bool direct_;
  bool device_;
};

class FileWriter final : public ObjectWriter {
 public:
  FileWriter(std::string path, std::string tmp, UniqueFd fd)
      : path_(std::move(path)), tmp_(std::move(tmp)), fd_(std::move(fd)) {}
  ~FileWriter() override {
    if (fd_) {  // abandoned: no object
      fd_.reset();
      ::unlink(tmp_.c_str());
    }
  }
  Result<void> append(ConstBytes data) override {
    const std::byte* p = data.data();
    std::size_t left = data.size();
    while (left > 0) {
      const ssize_t n = ::write(fd_.get(), p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        return fail(Error::from_errno(errno, "write").with_object(path_).with_offset(written_));
      }
      p += n;
      left -= static_cast<std::size_t>(n);
      written_ += static_cast<std::uint64_t>(n);
    }
    return {};
  }
  Result<void> commit() override {
    if (const int err = fd_.close(); err != 0) {
      ::unlink(tmp_.c_str());
      return fail(Error::from_errno(err, "close").with_object(path_));
    }
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp_.c_str());
      return fail(Error::from_errno(err, "rename into place").with_object(path_));
    }
    return {};
  }

 private:
  std::string path_;
  std::string tmp_;
  UniqueFd fd_;  // open until commit() or abandonment
  std::uint64_t written_ = 0;
};

// Descriptors of the directories a dataset's files are in, so that opening a file by its path
// walks one component (openat from its directory) instead of all of them: on 20,000 files of
// 64 KiB seven components deep, the walk (__d_lookup_rcu, strncpy_from_user) was ~8% of the
// storage threads' CPU. Opened on first use, kept until the backend goes; each thread remembers
// the last directory it asked for, so the lock is taken only when a thread's directory changes.
class DirFds {
 public:
  // `dir`'s descriptor, or -1 where it cannot be opened (the caller opens by the whole path).
  int get(std::string_view dir) {
    thread_local Last last;
    if (last.owner == id_ && last.dir == dir) return last.fd;
    int fd = -1;
    {
      std::lock_guard lock(mu_);
      auto it = fds_.find(dir);
      if (it != fds_.end()) {
        fd = it->second.get();
      } else if (fds_.size() < kMaxDirs) {
        UniqueFd d(::open(std::string(dir).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        fd = d.get();  // -1 is kept too: not asked again
        fds_.emplace(std::string(dir), std::move(d));
      }
    }
    last.owner = id_;
    last.dir.assign(dir);
    last.fd = fd;
    return fd;
  }

 private:
  struct Last {
    std::uint64_t owner = 0;  // the DirFds (id_) the entry came from: ids are never reused
    std::string dir;
    int fd = -1;
  };
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  static constexpr std::size_t kMaxDirs = 4096;  // past that, files open by their whole path
  static std::uint64_t next_id() {
    static std::atomic<std::uint64_t> ids{0};
    return ++ids;
  }

  const std::uint64_t id_ = next_id();
  std::mutex mu_;
  std::unordered_map<std::string, UniqueFd, Hash, std::equal_to<>> fds_;
};

// Where `path` opens from: its directory's descriptor (DirFds) and the name after the last
// slash, or AT_FDCWD and the whole path where there is no slash or no descriptor.
struct InDir {
  int dir_fd = AT_FDCWD;
  std::size_t name_at = 0;  // the name's offset in path
};
InDir in_dir(DirFds& dirs, const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return {};
  const int dfd =
      dirs.get(slash == 0 ? std::string_view("/") : std::string_view(path).substr(0, slash));
  return dfd >= 0 ? InDir{dfd, slash + 1} : InDir{};
}

class FileBackend final : public Backend {
 public:
  explicit FileBackend(FileConfig config) : config_(config) {}

  std::string_view scheme() const noexcept override { return "file"; }

  // Regular files and block devices only: a FIFO would block the open() that reads it forever
  // and a character device (/dev/zero) has no size, so both are refused here, where every
  // named object (a dataset root, a brace list) is looked at first.
  Result<ObjectInfo> stat(std::string_view key) override {
    const std::string path(key);
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      return fail(Error::from_errno(errno, "stat").with_object(path).with_hint("check the path"));
    }
    if (S_ISDIR(st.st_mode)) {
      return fail(
          Error(Errc::kIsDirectory, "expected a file, found a directory").with_object(path));
    }
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) return fail(not_regular(path, st.st_mode));
    if (S_ISBLK(st.st_mode)) {
      FEEDLINE_ASSIGN_OR_RETURN(auto h, open(path));
      return ObjectInfo{path, h->size()};
    }
    return ObjectInfo{path, static_cast<std::uint64_t>(st.st_size)};
  }

  Result<std::vector<ObjectInfo>> list(std::string_view prefix) override {
    std::vector<ObjectInfo> out;
    const std::string p(prefix);
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      FEEDLINE_TRY(list_tree(p, "", out));
    } else {
      // A prefix: the files of its directory whose paths start with it (not the directories'
      // contents).
      const auto slash = p.rfind('/');
      const std::string dir = slash == std::string::npos ? "." : p.substr(0, slash + 1);
      const std::string stem = slash == std::string::npos ? p : p.substr(slash + 1);
      FEEDLINE_TRY(list_tree(dir, stem, out));
      if (slash == std::string::npos) {
        for (ObjectInfo& o : out) o.key.erase(0, 2);  // "./name" -> "name", as it was asked
      }
    }
    auto by_key = [](const auto& a, const auto& b) { return a.key < b.key; };
    if (!std::is_sorted(out.begin(), out.end(), by_key)) std::sort(out.begin(), out.end(), by_key);
    return out;
  }

  // A named object (bench storage's target): stat() first, so that a directory or a FIFO named
  // by the user is a usage error; then open_regular(), which cannot block should the file be
  // swapped for a FIFO in between.
  Result<std::unique_ptr<ObjectHandle>> open(std::string_view key) override {
    const std::string path(key);
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      const int err = errno;
      Error e = Error::from_errno(err, "opening for read").with_object(path);
      if (err == EACCES || err == EPERM) e.with_hint("check the file's permissions");
      if (err == ENOENT || err == ENOTDIR) e.with_hint("check the path");
      return fail(std::move(e));
    }
    if (S_ISDIR(st.st_mode)) {
      return fail(Error(Errc::kIsDirectory, "expected a file, found a directory")
                      .with_object(path)
                      .with_hint("name a file inside it"));
    }
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) return fail(not_regular(path, st.st_mode));
    return open_checked(AT_FDCWD, path.c_str(), path, std::nullopt);
  }

  // The listing already said what the object is and how big: no stat() by path, one open()
  // relative to the file's directory (DirFds), and an fstat() of what it opened, which is how
  // a file replaced since the listing (by a FIFO, socket, device or directory: open_regular())
  // is a data error of that file and never an open that blocks.
  Result<std::unique_ptr<ObjectHandle>> open_known(const ObjectInfo& info) override {
    const InDir d = in_dir(dirs_, info.key);
    return open_checked(d.dir_fd, info.key.c_str() + d.name_at, info.key, info.size);
  }

  // Nothing opened here: a queue whose opens_objects() is true opens the file with its read
  // (io_uring: an OPENAT linked to the READ). Relative to its directory's descriptor (DirFds).
  Result<std::unique_ptr<ObjectHandle>> open_deferred(const ObjectInfo& info) override {
    const InDir d = in_dir(dirs_, info.key);
    return std::make_unique<FileHandle>(info.key, info.size, d.dir_fd, d.name_at, config_.direct);
  }

  Result<std::unique_ptr<ObjectWriter>> create(std::string_view key) override {
    const fs::path path{std::string(key)};
    std::error_code ec;
    if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
    if (ec) {
      return fail(Error::from_errno(ec.value(), "creating the parent directory")
                      .with_object(path.string()));
    }
    std::string tmp = path.string() + ".feedline-tmp-XXXXXX";
    UniqueFd fd(::mkostemp(tmp.data(), O_CLOEXEC));
    if (!fd) return fail(Error::from_errno(errno, "creating").with_object(path.string()));
    ::fchmod(fd.get(), 0644);
    return std::make_unique<FileWriter>(path.string(), std::move(tmp), std::move(fd));
  }

  std::optional<SpaceInfo> free_space(std::string_view key) override {
    // The nearest directory on the way to key that exists: gen creates the rest.
    fs::path p{std::string(key)};
    if (p.empty()) p = ".";
    struct statvfs vfs {};
    for (;;) {
      if (::statvfs(p.c_str(), &vfs) == 0) break;
      if (errno != ENOENT && errno != ENOTDIR) return std::nullopt;
      if (!p.has_parent_path() || p.parent_path() == p) {
        if (::statvfs(".", &vfs) != 0) return std::nullopt;
        break;
      }
      p = p.parent_path();
    }
    SpaceInfo info;
    const std::uint64_t unit = vfs.f_frsize ? vfs.f_frsize : vfs.f_bsize;
    info.free_bytes = static_cast<std::uint64_t>(vfs.f_bavail) * unit;
    info.block_size = std::max<std::uint64_t>(vfs.f_bsize, 1);
    // Filesystems that do not count inodes (btrfs, some network ones) report 0 of 0.
    if (vfs.f_files > 0) info.free_objects = static_cast<std::uint64_t>(vfs.f_favail);
    return info;
  }

  // A kDevice queue reads through cuFile (GPUDirect Storage, or its compatibility mode) with the
  // runtime options.device_reads carries.
  Result<std::unique_ptr<IoQueue>> make_queue(const QueueOptions& options) override {
    transports::EngineOptions eo;
    eo.depth = options.depth;
    if (options.memory == QueueMemory::kDevice) {
      auto cufile = options.device_reads ? options.device_reads->cufile() : nullptr;
      if (!cufile) {
        return fail(
            Error(Errc::kInvalidArgument,
                  "a queue reading into GPU memory needs the cuFile runtime")
                .with_hint(
                    "set QueueOptions::device_reads = make_device_reads(CufileRuntime::load())"));
      }
      FEEDLINE_ASSIGN_OR_RETURN(auto engine,
                                transports::cufile::make_cufile_engine(std::move(cufile), eo));
      return std::make_unique<FileQueue>(options.depth, config_.direct, std::move(engine),
                                         /*device=*/true);
    }
    eo.sqpoll = config_.sqpoll;
    eo.single_thread = options.single_thread;
    eo.posix_threads = config_.posix_threads;
    FEEDLINE_ASSIGN_OR_RETURN(auto engine, transports::make_file_engine(config_.engine, eo));
    return std::make_unique<FileQueue>(options.depth, config_.direct, std::move(engine));
  }

  BackendCaps caps() const override {
    BackendCaps c{config_.direct ? kDirectAlign : 1, kMaxRequest, true};
    c.device_reads = true;
    return c;
  }

 private:
  // Opens `name` (relative to dfd) for reads as a handle of `path`, of the size fstat() gives
  // (a block device's from the device); `listed`: the size the listing saw, which the file must
  // not have outgrown (its samples would be read as the listing saw them: a file of the files
  // format cut short without a word). A file that shrank is opened: reads past its new end come
  // back short, and fail the samples there ("object ends after ...").
  Result<std::unique_ptr<ObjectHandle>> open_checked(int dfd, const char* name,
                                                     const std::string& path,
                                                     std::optional<std::uint64_t> listed) {
    int flags = O_RDONLY | O_CLOEXEC;
    if (config_.direct) flags |= O_DIRECT;
    struct stat st {};
    FEEDLINE_ASSIGN_OR_RETURN(UniqueFd fd,
                              open_regular(dfd, name, flags, path, config_.direct, st));
    std::uint64_t size = static_cast<std::uint64_t>(st.st_size);
    if (S_ISBLK(st.st_mode) && ::ioctl(fd.get(), BLKGETSIZE64, &size) != 0) {
      return fail(Error::from_errno(errno, "reading the block device size").with_object(path));
    }
    if (listed && *listed != kUnknownSize && size > *listed) {
      return fail(Error(Errc::kIo, fmt::format("grew since the dataset was listed: {} bytes "
                                               "then, {} now",
                                               *listed, size))
                      .with_object(path)
                      .with_hint("a dataset must not change while it is read; run again to "
                                 "read it as it is now"));
    }
    return std::make_unique<FileHandle>(path, size, std::move(fd), config_.direct);
  }

  FileConfig config_;
  DirFds dirs_;
};

}  // namespace

Result<Resolved> open_file_url(const ParsedUrl& url, const BackendConfig& config) {
  std::string path = url.path;
  if (url.text.find("://") != std::string::npos) {
    if (!url.authority.empty() && url.authority != "localhost") {
      return fail(Error(Errc::kInvalidArgument, "file:// URLs name a local path")
                      .with_object(redact_url(url.text))
                      .with_hint("write file:///abs/path (three slashes) or a plain path"));
    }
    if (path.empty())
      return fail(
          Error(Errc::kInvalidArgument, "no path in URL").with_object(redact_url(url.text)));
  }
  return Resolved{std::make_unique<FileBackend>(config.file), std::move(path)};
}

}  // namespace feedline::storage::detail
