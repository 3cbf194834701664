// The file engines, directly: each setup of the same reads (fio-style: one test case per ring
// setup). A setup the kernel or build refuses is reported as skipped (testing::skip_test), not
// failed and not passed; a setup that registers buffers or files must say it uses them.
#include <fcntl.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
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

// One test case per setup and engine, so that CTest shows a refused setup alone as skipped.
const bool kRegistered = [] {
  for (const Setup& s : kSetups) {
    testing::register_test(std::string("engines read whole ranges, short at EOF: ") + s.name,
                           "[transports]", [&s] { reads_under(s); });
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
