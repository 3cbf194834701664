// The local backend's listing: what a directory tree of a dataset lists as (keys, sizes, order),
// what it leaves out (links to directories, dangling links, unreadable directories) and what it
// flags (FIFOs), a prefix that is not a directory, and a directory large enough that its stats
// are spread over threads; listed files opened (open_known) and read back from several threads.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "feedline/storage/registry.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
using namespace feedline;

namespace {

std::unique_ptr<storage::Backend> file_backend() {
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto r = registry.open(testing::scratch_dir("listing").string(), storage::BackendConfig{});
  REQUIRE(r);
  return std::move(r->backend);
}

// Reads `h` (of `size` bytes) whole through a queue of depth 1 of b; the op's result.
Result<std::uint64_t> read_whole(storage::Backend& b, const storage::ObjectHandle& h,
                                 std::uint64_t size, std::vector<std::byte>& out) {
  storage::QueueOptions qo;
  qo.depth = 1;
  auto q = b.make_queue(qo);
  REQUIRE(q);
  out.assign(size, std::byte{0});
  storage::ReadOp op;
  op.object = &h;
  op.length = size;
  op.dst = MutableBytes(out.data(), out.size());
  std::vector<storage::ReadOp*> done;
  (*q)->submit(op);
  while ((*q)->in_flight() > 0) (*q)->poll(1, std::chrono::milliseconds(50), done);
  return op.result;
}

fs::path fresh(const std::string& name) {
  const fs::path dir = testing::scratch_dir("listing") / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("file listing: a tree's files, sorted, with their sizes, links followed to files only") {
  const fs::path root = fresh("tree");
  testing::write_file(root / "b.bin", testing::pattern_bytes(300, 1));
  testing::write_file(root / "a.bin", testing::pattern_bytes(5000, 2));
  fs::create_directories(root / "sub" / "deeper");
  testing::write_file(root / "sub" / "c.bin", testing::pattern_bytes(7, 3));
  testing::write_file(root / "sub" / "deeper" / "d.bin", {});
  fs::create_symlink("a.bin", root / "link-to-file");
  fs::create_symlink("sub", root / "link-to-dir");        // not walked: its files would list twice
  fs::create_symlink("missing", root / "dangling");       // names nothing
  REQUIRE(::mkfifo((root / "fifo").c_str(), 0600) == 0);  // listed as special, never opened

  auto b = file_backend();
  for (const std::string& given : {root.string(), root.string() + "/"}) {
    auto l = b->list(given);
    REQUIRE(l);
    REQUIRE(l->size() == 8);
    const std::string r = root.string() + "/";
    CHECK(l->at(0).key == r + "a.bin");
    CHECK(l->at(0).size == 5000);
    CHECK(l->at(0).left_out == storage::LeftOut::kNo);
    CHECK(l->at(1).key == r + "b.bin");
    CHECK(l->at(1).size == 300);
    // Left out, and listed as such so the dataset can say so: never skipped without a word.
    CHECK(l->at(2).key == r + "dangling");
    CHECK(l->at(2).left_out == storage::LeftOut::kDanglingLink);
    CHECK(l->at(3).key == r + "fifo");
    CHECK(l->at(3).left_out == storage::LeftOut::kSpecialFile);
    CHECK(l->at(3).size == 0);
    CHECK(l->at(4).key == r + "link-to-dir");
    CHECK(l->at(4).left_out == storage::LeftOut::kLinkToDirectory);
    CHECK(l->at(5).key == r + "link-to-file");
    CHECK(l->at(5).size == 5000);
    CHECK(l->at(5).left_out == storage::LeftOut::kNo);
    CHECK(l->at(6).key == r + "sub/c.bin");
    CHECK(l->at(6).size == 7);
    CHECK(l->at(7).key == r + "sub/deeper/d.bin");
    CHECK(l->at(7).size == 0);
  }
}

TEST_CASE("file listing: a prefix lists its directory's files that start with it, not subtrees") {
  const fs::path root = fresh("prefix");
  testing::write_file(root / "train-1.bin", testing::pattern_bytes(10, 1));
  testing::write_file(root / "train-2.bin", testing::pattern_bytes(20, 2));
  testing::write_file(root / "val-1.bin", testing::pattern_bytes(30, 3));
  fs::create_directories(root / "train-dir");
  testing::write_file(root / "train-dir" / "x.bin", testing::pattern_bytes(40, 4));
  auto l = file_backend()->list((root / "train-").string());
  REQUIRE(l);
  REQUIRE(l->size() == 2);
  CHECK(l->at(0).key == (root / "train-1.bin").string());
  CHECK(l->at(1).size == 20);
  auto none = file_backend()->list((root / "test-").string());
  REQUIRE(none);
  CHECK(none->empty());
}

TEST_CASE("file listing: a missing root is an error naming it") {
  const fs::path root = fresh("errors");
  auto missing = file_backend()->list((root / "nope" / "").string());
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code() == Errc::kNotFound);
  CHECK(missing.error().object().find("nope") != std::string::npos);
}

TEST_CASE("file listing: a subdirectory it may not read is listed as left out") {
  const fs::path root = fresh("locked");
  testing::write_file(root / "ok.bin", testing::pattern_bytes(5, 1));
  fs::create_directories(root / "locked");
  testing::write_file(root / "locked" / "hidden.bin", testing::pattern_bytes(5, 2));
  fs::permissions(root / "locked", fs::perms::none);
  if (::access((root / "locked").c_str(), R_OK) == 0) {
    fs::permissions(root / "locked", fs::perms::owner_all);
    return testing::skip_test(
        "a mode-000 directory is still readable here (root, or CAP_DAC_OVERRIDE)");
  }
  auto l = file_backend()->list(root.string());
  fs::permissions(root / "locked", fs::perms::owner_all);
  REQUIRE(l);
  REQUIRE(l->size() == 2);
  CHECK(l->at(0).key == (root / "locked").string() + "/");
  CHECK(l->at(0).left_out == storage::LeftOut::kUnreadableDirectory);
  CHECK(l->at(1).key == (root / "ok.bin").string());
  CHECK(l->at(1).left_out == storage::LeftOut::kNo);
}

TEST_CASE(
    "file listing: a directory of 10,000 files (stats over several threads) lists each once") {
  const fs::path root = fresh("many");
  constexpr int kFiles = 10'000;
  for (int i = 0; i < kFiles; ++i) {
    const std::string name = fmt::format("{:05}.bin", i);
    testing::write_file(root / name, testing::pattern_bytes(static_cast<std::size_t>(i % 97), 0));
  }
  auto l = file_backend()->list(root.string());
  REQUIRE(l);
  REQUIRE(l->size() == kFiles);
  for (int i = 0; i < kFiles; ++i) {
    INFO(i);
    REQUIRE(l->at(static_cast<std::size_t>(i)).key ==
            (root / fmt::format("{:05}.bin", i)).string());
    REQUIRE(l->at(static_cast<std::size_t>(i)).size == static_cast<std::uint64_t>(i % 97));
  }
  fs::remove_all(root);
}

TEST_CASE("file listing: every listed file opens and reads its own bytes, from several threads") {
  // Files open relative to their directory's descriptor: the same names in four directories, so
  // a file opened from the wrong one reads another's bytes; keys taken in turns from two threads
  // (whatever directory each opened from last), then with a directory gone since the listing.
  const fs::path root = fresh("open-known");
  const std::vector<fs::path> dirs{root, root / "a", root / "a" / "deep", root / "b"};
  std::map<std::string, std::vector<std::byte>> bytes;  // key -> what was written there
  for (std::size_t d = 0; d < dirs.size(); ++d) {
    fs::create_directories(dirs[d]);
    for (std::size_t i = 0; i < 10; ++i) {
      const fs::path p = dirs[d] / fmt::format("{:03}.bin", i);
      bytes[p.string()] = testing::pattern_bytes(100 + 7 * i + d, 10 * d + i);
      testing::write_file(p, bytes[p.string()]);
    }
  }
  auto b = file_backend();
  auto l = b->list(root.string());
  REQUIRE(l);
  REQUIRE(l->size() == bytes.size());
  auto read_all = [&](const storage::ObjectInfo& info) -> std::vector<std::byte> {
    auto h = b->open_known(info);
    REQUIRE(h);
    std::vector<std::byte> out;
    auto r = read_whole(*b, **h, info.size, out);
    REQUIRE(r);
    CHECK(*r == info.size);
    return out;
  };
  std::vector<std::vector<std::byte>> got(l->size());
  auto read_every = [&](std::size_t first) {
    for (std::size_t i = first; i < l->size(); i += 2) got[i] = read_all(l->at(i));
  };
  std::thread other([&] { read_every(1); });
  read_every(0);
  other.join();
  for (std::size_t i = 0; i < l->size(); ++i) {
    INFO(l->at(i).key);
    CHECK(got[i] == bytes.at(l->at(i).key));
  }
  // A directory removed since it was listed: its files fail to open, named; the others open.
  fs::remove_all(root / "b");
  for (const storage::ObjectInfo& info : *l) {
    auto h = b->open_known(info);
    if (info.key.starts_with((root / "b").string() + "/")) {
      REQUIRE_FALSE(h);
      CHECK(h.error().object() == info.key);
    } else {
      CHECK(h);
    }
  }
}

TEST_CASE("file listing: files left for the queue to open read their own bytes, or fail named") {
  // Backend::open_deferred(): a queue whose opens_objects() is true (io_uring: an OPENAT linked
  // to the READ in the ring) opens each file with its read, relative to its directory; more files
  // than the queue is deep, in several directories with the same names. A file gone since the
  // listing fails its read as open() would say it; a queue that cannot open refuses such a handle.
  const fs::path root = fresh("open-deferred");
  const std::vector<fs::path> dirs{root, root / "a", root / "b"};
  std::map<std::string, std::vector<std::byte>> bytes;
  for (std::size_t d = 0; d < dirs.size(); ++d) {
    fs::create_directories(dirs[d]);
    for (std::size_t i = 0; i < 20; ++i) {
      const fs::path p = dirs[d] / fmt::format("{:03}.bin", i);
      bytes[p.string()] = testing::pattern_bytes(3000 + 11 * i + d, 7 * d + i);
      testing::write_file(p, bytes[p.string()]);
    }
  }
  for (bool direct : {false, true}) {
    DYNAMIC_SECTION((direct ? "O_DIRECT" : "buffered")) {
      storage::Registry registry;
      storage::register_builtin_backends(registry);
      storage::BackendConfig config;
      config.file.direct = direct;
      auto b = std::move(registry.open(root.string(), config)->backend);
      auto l = b->list(root.string());
      REQUIRE(l);
      REQUIRE(l->size() == bytes.size());
      storage::QueueOptions qo;
      qo.depth = 4;
      auto q = b->make_queue(qo);
      REQUIRE(q);
      if (!(*q)->opens_objects()) {
        return testing::skip_test("this queue does not open files (" + (*q)->info().engine + ')');
      }
      // Reads every listed file through the queue, 4 in flight; the results by key.
      auto read_listed = [&]() {
        std::map<std::string, Result<std::vector<std::byte>>> got;
        struct Slot {
          std::unique_ptr<storage::ObjectHandle> h;
          AlignedBuffer buf;
          storage::ReadOp op;
        };
        std::vector<Slot> slots(l->size());
        std::vector<storage::ReadOp*> done;
        std::size_t next = 0;
        while (next < l->size() || (*q)->in_flight() > 0) {
          while (next < l->size() && (*q)->in_flight() < 4) {
            Slot& s = slots[next];
            const storage::ObjectInfo& info = l->at(next++);
            auto h = b->open_deferred(info);
            REQUIRE(h);  // nothing is opened yet: it cannot fail for a missing file
            s.h = std::move(*h);
            s.buf = AlignedBuffer::allocate(align_up(info.size, 4096)).value();
            s.op.object = s.h.get();
            s.op.length = info.size;
            s.op.dst = MutableBytes(s.buf.data(), s.buf.size());
            s.op.user = &s;
            (*q)->submit(s.op);
          }
          done.clear();
          (*q)->poll(1, std::chrono::milliseconds(50), done);
          for (storage::ReadOp* op : done) {
            auto* s = static_cast<Slot*>(op->user);
            if (op->result) {
              CHECK(*op->result == s->h->size());
              got.emplace(s->h->key(),
                          std::vector<std::byte>(s->buf.data(), s->buf.data() + *op->result));
            } else {
              got.emplace(s->h->key(), fail(op->result.error()));
            }
          }
        }
        return got;
      };
      auto got = read_listed();
      REQUIRE(got.size() == bytes.size());
      for (const auto& [key, want] : bytes) {
        INFO(key);
        REQUIRE(got.at(key));
        CHECK(*got.at(key) == want);
      }
      fs::remove_all(root / "b");
      got = read_listed();
      for (const auto& [key, want] : bytes) {
        INFO(key);
        if (key.starts_with((root / "b").string() + "/")) {
          REQUIRE_FALSE(got.at(key));
          const Error& e = got.at(key).error();
          CHECK(e.object() == key);
          CHECK_THAT(e.message(), Catch::Contains("opening for read"));
          CHECK_THAT(e.what(), Catch::Contains("check the path"));
        } else {
          REQUIRE(got.at(key));
          CHECK(*got.at(key) == want);
        }
      }
      // Restore b for the next section.
      fs::create_directories(root / "b");
      for (const auto& [key, want] : bytes) {
        if (key.starts_with((root / "b").string() + "/")) testing::write_file(key, want);
      }
    }
  }
  // The POSIX engine's queue opens nothing: such a handle fails its read, named, not a crash.
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  storage::BackendConfig config;
  config.file.engine = transports::EngineKind::kPosix;
  auto b = std::move(registry.open(root.string(), config)->backend);
  auto q = b->make_queue(storage::QueueOptions{});
  REQUIRE(q);
  CHECK_FALSE((*q)->opens_objects());
  const std::string key = (root / "a" / "001.bin").string();
  const storage::ObjectInfo info{key, bytes.at(key).size()};
  auto h = b->open_deferred(info);
  REQUIRE(h);
  std::vector<std::byte> out;
  auto r = read_whole(*b, **h, info.size, out);
  REQUIRE_FALSE(r);
  CHECK(r.error().object() == info.key);
}

TEST_CASE(
    "file listing: a file replaced since the listing by a FIFO, socket or directory fails "
    "at once, named; one that grew too") {
  // A FIFO opened for reads blocks until a writer comes (for ever, deaf to SIGINT): open_known()
  // must not block on one, nor read a socket or a directory as data, nor read the listed part of
  // a file that grew since as if nothing happened. The same through the io_uring ring's opens.
  const fs::path root = fresh("replaced");
  for (const char* name : {"fifo.bin", "sock.bin", "dir.bin", "grown.bin", "ok.bin"}) {
    testing::write_file(root / name, testing::pattern_bytes(5000, 1));
  }
  auto b = file_backend();
  auto l = b->list(root.string());
  REQUIRE(l);
  REQUIRE(l->size() == 5);
  fs::remove(root / "fifo.bin");
  REQUIRE(::mkfifo((root / "fifo.bin").c_str(), 0600) == 0);
  fs::remove(root / "sock.bin");
  {
    const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
    REQUIRE(s >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string path = (root / "sock.bin").string();
    REQUIRE(path.size() < sizeof(addr.sun_path));
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    REQUIRE(::bind(s, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
    ::close(s);  // the socket file stays
  }
  fs::remove(root / "dir.bin");
  fs::create_directories(root / "dir.bin");
  testing::write_file(root / "grown.bin", testing::pattern_bytes(6000, 1));
  const std::map<std::string, std::string> want{
      {"dir.bin", "now a directory"},
      {"fifo.bin", "now a named pipe (FIFO)"},
      {"sock.bin", "now a socket"},
      {"grown.bin", "grew since the dataset was listed: 5000 bytes then, 6000 now"}};
  const auto t0 = std::chrono::steady_clock::now();
  for (const storage::ObjectInfo& info : *l) {
    const std::string name = fs::path(info.key).filename().string();
    INFO(name);
    auto h = b->open_known(info);
    if (name == "ok.bin") {
      CHECK(h);
      continue;
    }
    REQUIRE_FALSE(h);
    CHECK(h.error().code() == Errc::kIo);  // a data error of the run, not a usage error
    CHECK(h.error().object() == info.key);
    CHECK(h.error().message().find(want.at(name)) != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));

  // Through the ring: the open goes with the read; a file that is not regular any more fails its
  // read (it does not read as empty, nor wait), named, saying what it is now.
  storage::QueueOptions qo;
  qo.depth = 4;
  auto q = b->make_queue(qo);
  REQUIRE(q);
  if (!(*q)->opens_objects()) {
    return testing::skip_test("this queue does not open files (" + (*q)->info().engine + ')');
  }
  for (const storage::ObjectInfo& info : *l) {
    const std::string name = fs::path(info.key).filename().string();
    if (name == "ok.bin" || name == "grown.bin") continue;
    INFO(name);
    auto h = b->open_deferred(info);
    REQUIRE(h);
    AlignedBuffer buf = AlignedBuffer::allocate(8192).value();
    storage::ReadOp op;
    op.object = h->get();
    op.length = info.size;
    op.dst = MutableBytes(buf.data(), buf.size());
    std::vector<storage::ReadOp*> done;
    (*q)->submit(op);
    const auto t1 = std::chrono::steady_clock::now();
    while ((*q)->in_flight() > 0 && std::chrono::steady_clock::now() - t1 < std::chrono::seconds(5))
      (*q)->poll(1, std::chrono::milliseconds(50), done);
    REQUIRE((*q)->in_flight() == 0);
    REQUIRE_FALSE(op.result);
    CHECK(op.result.error().object() == info.key);
    CHECK(op.result.error().message().find(want.at(name)) != std::string::npos);
  }
}
