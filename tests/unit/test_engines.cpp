// The file engines, directly: each setup of the same reads (fio-style: one test case per ring
// setup). A setup the kernel or build refuses is reported as skipped (testing::skip_test), not
// failed and not passed; a setup that registers buffers or files must say it uses them.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>

#include "feedline/transports/file_engine.hpp"
#include "test_support.hpp"

using namespace feedline;
using namespace feedline::transports;

namespace {

struct Setup {
  const char* name;
  EngineKind kind;
  bool sqpoll;
  bool single_thread;
  bool fixed_buffers;
  bool fixed_files;
};

const Setup kSetups[] = {
    {"posix", EngineKind::kPosix, false, false, false, false},
    {"uring", EngineKind::kUring, false, false, false, false},
    {"uring single-issuer", EngineKind::kUring, false, true, false, false},
    {"uring sqpoll", EngineKind::kUring, true, false, false, false},
    {"uring fixed buffers", EngineKind::kUring, false, true, true, false},
    {"uring fixed files+buffers", EngineKind::kUring, false, false, true, true},
};

bool has_feature(const EngineInfo& info, std::string_view feature) {
  return std::find(info.features.begin(), info.features.end(), feature) != info.features.end();
}

// Whole ranges, short at EOF, buffered and O_DIRECT, under one ring setup.
void reads_under(const Setup& s) {
  const auto dir = testing::scratch_dir("engines");
  const std::size_t size = (1 << 20) + 1000;
  const auto content = testing::pattern_bytes(size, 7);
  const auto path = dir / "data.bin";
  testing::write_file(path, content);

  for (bool direct : {false, true}) {
    DYNAMIC_SECTION(s.name << (direct ? " direct" : " buffered")) {
      EngineOptions eo;
      eo.depth = 16;
      eo.sqpoll = s.sqpoll;
      eo.single_thread = s.single_thread;
      auto engine = make_file_engine(s.kind, eo);
      if (!engine && engine.error().code() == Errc::kUnsupported) {
        testing::skip_test(engine.error().what());
        continue;
      }
      REQUIRE(engine);
      const int fd = ::open(path.c_str(), O_RDONLY | (direct ? O_DIRECT : 0));
      REQUIRE(fd >= 0);
      auto arena = AlignedBuffer::allocate(2 << 20).value();
      std::memset(arena.data(), 0xAA, arena.size());
      if (s.fixed_buffers) {
        CHECK_FALSE(
            has_feature((*engine)->info(), "registered-buffers"));  // not before registering
        const MutableBytes region = arena.span();
        auto r = (*engine)->register_buffers(std::span<const MutableBytes>(&region, 1));
        if (r) {
          // Every read below lies in the region: the engine issues them as READ_FIXED.
          CHECK(has_feature((*engine)->info(), "registered-buffers"));
        } else {
          // A kernel without READ_FIXED, or RLIMIT_MEMLOCK (not root): the reads still run, plain.
          CHECK_FALSE(has_feature((*engine)->info(), "registered-buffers"));
          testing::skip_test("registered buffers refused: " + r.error().what());
        }
      }
      int fixed = -1;
      if (s.fixed_files) {
        auto r = (*engine)->register_file(fd);
        if (r) {
          fixed = *r;
          CHECK(fixed >= 0);
          CHECK(has_feature((*engine)->info(), "registered-files"));
        } else {
          CHECK_FALSE(has_feature((*engine)->info(), "registered-files"));
          testing::skip_test("registered files refused: " + r.error().what());
        }
      }
      // 16 reads of 64 KiB covering the first 1 MiB, plus one crossing EOF.
      std::vector<FileRead> reads(17);
      std::vector<FileRead*> ptrs;
      for (std::size_t i = 0; i < reads.size(); ++i) {
        FileRead& r = reads[i];
        r.fd = fd;
        r.fixed_file = fixed;
        r.offset = i * 65536;
        r.length = 65536;
        r.dst = arena.data() + i * 65536;
        ptrs.push_back(&r);
      }
      (*engine)->submit(ptrs);
      std::vector<FileRead*> out(32);
      std::size_t got = 0;
      for (int tries = 0; got < reads.size() && tries < 100; ++tries) {
        got += (*engine)->reap(std::span<FileRead*>(out).subspan(got), 1, std::chrono::seconds(1));
      }
      REQUIRE(got == reads.size());
      CHECK((*engine)->in_flight() == 0);
      for (std::size_t i = 0; i < reads.size(); ++i) {
        INFO("read " << i);
        CHECK(reads[i].error == 0);
        const std::size_t expect = std::min<std::size_t>(65536, size - reads[i].offset);
        // O_DIRECT may return the whole final block; the engine reports the true file bytes.
        REQUIRE(reads[i].done == expect);
        CHECK(std::memcmp(arena.data() + i * 65536, content.data() + reads[i].offset, expect) == 0);
      }
      CHECK_FALSE((*engine)->info().name.empty());
      ::close(fd);
    }
  }
  std::filesystem::remove_all(dir);
}

void bad_descriptor(EngineKind kind) {
  auto engine = make_file_engine(kind, {});
  if (!engine) return testing::skip_test(engine.error().what());
  auto buf = AlignedBuffer::allocate(4096).value();
  FileRead r;
  r.fd = 987654;  // not open
  r.length = 4096;
  r.dst = buf.data();
  FileRead* p = &r;
  (*engine)->submit(std::span<FileRead* const>(&p, 1));
  FileRead* out[1];
  REQUIRE((*engine)->reap(out, 1, std::chrono::seconds(5)) == 1);
  CHECK(out[0] == &r);
  CHECK(r.error == EBADF);
}

std::size_t open_descriptors() {
  return static_cast<std::size_t>(std::distance(
      std::filesystem::directory_iterator("/proc/self/fd"), std::filesystem::directory_iterator()));
}

// Reads that name their file: io_uring opens each in the ring (a direct descriptor, linked to the
// read) and the bytes are the file's, through more files than the ring has slots, with a read
// longer than its file (short at EOF: the continuation reads the same slot), O_DIRECT too; a
// missing file fails with the open's errno, a directory with the read's (O_DIRECT: the open's);
// no process descriptor is left open.
void opens_in_ring(bool single_thread) {
  const auto dir = testing::scratch_dir("engines-open");
  constexpr std::size_t kFiles = 300;
  std::vector<std::vector<std::byte>> contents;
  for (std::size_t i = 0; i < kFiles; ++i) {
    contents.push_back(testing::pattern_bytes(i % 7 == 0 ? 70000 + i : 4096 - i % 5, i));
    testing::write_file(dir / fmt::format("{:04}.bin", i), contents.back());
  }
  std::filesystem::create_directory(dir / "a-directory");
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(dfd >= 0);
  for (bool direct : {false, true}) {
    DYNAMIC_SECTION((direct ? "O_DIRECT" : "buffered")) {
      EngineOptions eo;
      eo.depth = 8;
      eo.single_thread = single_thread;
      auto engine = make_uring_engine(eo);
      if (!engine) return testing::skip_test(engine.error().what());
      if (!(*engine)->opens_files()) {
        CHECK_FALSE(has_feature((*engine)->info(), "open-in-ring"));
        return testing::skip_test("this kernel's io_uring cannot open into direct descriptors");
      }
      CHECK(has_feature((*engine)->info(), "open-in-ring"));
      const std::size_t fds_before = open_descriptors();
      std::vector<std::string> names;
      for (std::size_t i = 0; i < kFiles; ++i) names.push_back(fmt::format("{:04}.bin", i));
      names.push_back("missing.bin");
      names.push_back("a-directory");
      const std::size_t stride = 128 << 10;  // every read asks for more than its file holds
      auto arena = AlignedBuffer::allocate(names.size() * stride).value();
      std::vector<FileRead> reads(names.size());
      std::vector<FileRead*> finished;
      std::size_t next = 0;
      std::vector<FileRead*> out(16);
      for (int tries = 0; finished.size() < reads.size() && tries < 2000; ++tries) {
        std::vector<FileRead*> batch;  // at most depth in flight, as FileQueue keeps it
        while (next < reads.size() && (*engine)->in_flight() + batch.size() < eo.depth) {
          FileRead& r = reads[next];
          r.fd = dfd;
          r.open_name = names[next].c_str();
          r.open_flags = O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0);
          r.length = static_cast<std::uint32_t>(stride);
          r.dst = arena.data() + next * stride;
          batch.push_back(&r);
          ++next;
        }
        if (!batch.empty()) (*engine)->submit(batch);
        const std::size_t got = (*engine)->reap(out, 1, std::chrono::seconds(1));
        finished.insert(finished.end(), out.begin(), out.begin() + static_cast<long>(got));
      }
      REQUIRE(finished.size() == reads.size());
      CHECK((*engine)->in_flight() == 0);
      for (std::size_t i = 0; i < kFiles; ++i) {
        INFO("file " << names[i]);
        CHECK(reads[i].error == 0);
        CHECK_FALSE(reads[i].open_failed);
        REQUIRE(reads[i].done == contents[i].size());
        CHECK(std::memcmp(arena.data() + i * stride, contents[i].data(), contents[i].size()) == 0);
      }
      CHECK(reads[kFiles].open_failed);
      CHECK(reads[kFiles].error == ENOENT);
      // A directory opens (not with O_DIRECT: EINVAL); reading it fails.
      CHECK(reads[kFiles + 1].open_failed == direct);
      CHECK(reads[kFiles + 1].error == (direct ? EINVAL : EISDIR));
      CHECK(open_descriptors() == fds_before);
    }
  }
  ::close(dfd);
  std::filesystem::remove_all(dir);
}

// One test case per setup and engine, so that CTest shows a refused setup alone as skipped.
const bool kRegistered = [] {
  for (const Setup& s : kSetups) {
    testing::register_test(std::string("engines read whole ranges, short at EOF: ") + s.name,
                           "[transports]", [&s] { reads_under(s); });
  }
  for (bool single_thread : {false, true}) {
    testing::register_test(std::string("io_uring opens files in the ring with their reads: ") +
                               (single_thread ? "uring single-issuer" : "uring"),
                           "[transports]", [single_thread] { opens_in_ring(single_thread); });
  }
  for (EngineKind kind : {EngineKind::kPosix, EngineKind::kUring}) {
    testing::register_test(
        std::string("a read of a bad descriptor fails with its errno, not a hang: ") +
            std::string(engine_name(kind)),
        "[transports]", [kind] { bad_descriptor(kind); });
  }
  return true;
}();

}  // namespace

TEST_CASE("auto picks io_uring where it works and says why when it falls back", "[transports]") {
  auto engine = make_file_engine(EngineKind::kAuto, {});
  REQUIRE(engine);
  const EngineInfo info = (*engine)->info();
  if (uring_compiled_in() && make_uring_engine({})) {
    CHECK(info.name == "uring");
  } else {
    CHECK(info.name == "posix");
    REQUIRE_FALSE(info.notes.empty());
    CHECK(info.notes.front().find("io_uring") != std::string::npos);
  }
}

TEST_CASE("engine names parse", "[transports]") {
  CHECK(parse_engine("uring").value() == EngineKind::kUring);
  CHECK(parse_engine("io_uring").value() == EngineKind::kUring);
  CHECK(parse_engine("posix").value() == EngineKind::kPosix);
  CHECK(parse_engine("auto").value() == EngineKind::kAuto);
  CHECK_FALSE(parse_engine("libaio"));
}
