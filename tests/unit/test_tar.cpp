// The tar reader against archives made by GNU tar and Python's tarfile (created here, at test
// time), the writer against what GNU tar and tarfile extract, and bad input against clear errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "feedline/loader/tar.hpp"
#include "feedline/storage/registry.hpp"
#include "formats_support.hpp"
#include "test_support.hpp"

using namespace feedline;
using namespace feedline::loader;
namespace fs = std::filesystem;

namespace {

int run(const std::string& cmd, std::string* out = nullptr) {
  return testing::run_command(cmd, out);
}

// GNU tar and Python are test dependencies (CI installs them): fail, do not skip, without them.
void require_tools() {
  std::string out;
  if (run("tar --version", &out) != 0 || out.find("GNU tar") == std::string::npos) {
    FAIL("GNU tar is required by the tar tests (apt-get install tar); `tar --version` said: "
         << out);
  }
  if (run("/usr/bin/python3 -c 'import tarfile'", &out) != 0) {
    FAIL("/usr/bin/python3 with tarfile is required by the tar tests (apt-get install python3): "
         << out);
  }
}

std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

// What tarfile sees: one line per member, "TYPE OFFSET OFFSET_DATA SIZE NAME".
const char* kPyList = R"(
import sys, tarfile
with tarfile.open(sys.argv[1]) as tf:
    for m in tf:
        t = 'S' if m.type == tarfile.GNUTYPE_SPARSE or m.sparse is not None else m.type.replace(b'\0', b'0').decode()
        print(f"{t}\t{m.offset}\t{m.offset_data}\t{m.size}\t{m.name}")
)";

struct PyEntry {
  char type;
  std::uint64_t offset, offset_data, size;
  std::string name;
};

std::vector<PyEntry> python_list(const fs::path& archive, const fs::path& scratch) {
  const fs::path script = scratch / "list.py";
  std::ofstream(script) << kPyList;
  std::string out;
  REQUIRE(run("/usr/bin/python3 " + q(script) + " " + q(archive), &out) == 0);
  std::vector<PyEntry> v;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    PyEntry e{};
    std::istringstream f(line);
    std::string t;
    std::getline(f, t, '\t');
    e.type = t.empty() ? '0' : t[0];
    f >> e.offset >> e.offset_data >> e.size;
    f.get();
    std::getline(f, e.name);
    v.push_back(e);
  }
  return v;
}

std::vector<std::string> gnu_list(const fs::path& archive) {
  std::string out;
  REQUIRE(run("tar -tf " + q(archive), &out) == 0);
  std::vector<std::string> names;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) names.push_back(line);
  return names;
}

char type_char(tar::EntryType t) {
  switch (t) {
    case tar::EntryType::kRegular:
      return '0';
    case tar::EntryType::kHardLink:
      return '1';
    case tar::EntryType::kSymlink:
      return '2';
    case tar::EntryType::kCharDevice:
      return '3';
    case tar::EntryType::kBlockDevice:
      return '4';
    case tar::EntryType::kDirectory:
      return '5';
    case tar::EntryType::kFifo:
      return '6';
    case tar::EntryType::kSparse:
      return 'S';
    case tar::EntryType::kOther:
      return '?';
  }
  return '?';
}

// Builds the source tree the archivers pack: regular files of awkward sizes, an empty file, a
// subdirectory, a symlink, a hard link, a fifo, a long path (> 100 bytes, components short
// enough for ustar's prefix) and, when `long_component`, one name component over 100 bytes.
fs::path make_tree(const fs::path& scratch, bool long_component) {
  const fs::path src = scratch / (long_component ? "src-long" : "src");
  fs::remove_all(src);
  fs::create_directories(src / "sub");
  testing::write_file(src / "a.bin", testing::pattern_bytes(1000, 1));
  testing::write_file(src / "a.cls", {std::byte{'7'}});
  testing::write_file(src / "empty.bin", {});
  testing::write_file(src / "sub" / "b.bin", testing::pattern_bytes(513, 2));
  const fs::path deep = src / std::string(60, 'd') / std::string(50, 'e');
  fs::create_directories(deep);
  testing::write_file(deep / "deep.bin", testing::pattern_bytes(512, 3));
  if (long_component) {
    testing::write_file(src / (std::string(150, 'n') + ".bin"), testing::pattern_bytes(4097, 4));
  }
  fs::create_symlink("a.bin", src / "link");
  fs::create_hard_link(src / "a.bin", src / "hard.bin");
  REQUIRE(run("mkfifo " + q(src / "fifo")) == 0);
  return src;
}

// Parses `archive` with our reader and checks every entry against tarfile's view and GNU tar's
// listing, and every regular member's bytes against the source file.
void check_against_oracles(const fs::path& archive, const fs::path& src, const fs::path& scratch) {
  const auto bytes = testing::read_file(archive);
  auto entries = tar::list_entries(bytes, archive.string());
  REQUIRE(entries);
  const auto py = python_list(archive, scratch);
  const auto gnu = gnu_list(archive);
  REQUIRE(entries->size() == py.size());
  REQUIRE(entries->size() == gnu.size());
  std::size_t regular = 0;
  for (std::size_t i = 0; i < py.size(); ++i) {
    const tar::Entry& e = (*entries)[i];
    INFO("member " << i << ": " << e.name);
    CHECK(e.name == gnu[i]);  // GNU tar prints names as stored (directories with their '/')
    std::string name = e.name;
    while (name.size() > 1 && name.ends_with('/')) name.pop_back();  // tarfile strips it
    CHECK(name == py[i].name);
    CHECK(type_char(e.type) == py[i].type);
    CHECK(e.header_offset == py[i].offset);
    CHECK(e.data_offset == py[i].offset_data);
    CHECK(e.size == py[i].size);
    if (e.type == tar::EntryType::kSymlink) CHECK(e.link_name == "a.bin");
    if (e.type == tar::EntryType::kHardLink) CHECK(e.link_name.ends_with("a.bin"));
    if (e.regular()) {
      ++regular;
      const auto want = testing::read_file(src / e.name);
      REQUIRE(e.size == want.size());
      CHECK(std::equal(want.begin(), want.end(),
                       bytes.begin() + static_cast<std::ptrdiff_t>(e.data_offset)));
    }
  }
  CHECK(regular >= 4);
}

// ---- crafting headers by hand, for what the archivers will not produce ----------------------

using Block = std::array<unsigned char, 512>;

void set_octal(Block& h, std::size_t off, std::size_t len, std::uint64_t v) {
  std::snprintf(reinterpret_cast<char*>(h.data() + off), len, "%0*llo", static_cast<int>(len - 1),
                static_cast<unsigned long long>(v));
}

void set_checksum(Block& h, bool signed_sum = false) {
  std::memset(h.data() + 148, ' ', 8);
  long sum = 0;
  for (unsigned char c : h) sum += signed_sum ? static_cast<signed char>(c) : c;
  // A header's sum fits six octal digits (at most 512 x 255); the mask tells the compiler so.
  std::snprintf(reinterpret_cast<char*>(h.data() + 148), 7, "%06lo",
                static_cast<unsigned long>(sum) & 0777777ul);
  h[154] = 0;
  h[155] = ' ';
}

Block header(std::string_view name, std::uint64_t size, char type) {
  Block h{};
  std::memcpy(h.data(), name.data(), std::min<std::size_t>(name.size(), 100));
  set_octal(h, 100, 8, 0644);
  set_octal(h, 108, 8, 0);
  set_octal(h, 116, 8, 0);
  set_octal(h, 124, 12, size);
  set_octal(h, 136, 12, 0);
  h[156] = static_cast<unsigned char>(type);
  std::memcpy(h.data() + 257,
              "ustar\0"
              "00",
              8);
  set_checksum(h);
  return h;
}

struct Archive {
  std::vector<std::byte> bytes;
  void block(const Block& b) {
    const auto* p = reinterpret_cast<const std::byte*>(b.data());
    bytes.insert(bytes.end(), p, p + 512);
  }
  void data(std::string_view s) {
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    bytes.insert(bytes.end(), p, p + s.size());
    bytes.resize(align_up(bytes.size(), 512), std::byte{0});
  }
  void member(std::string_view name, std::string_view content, char type = '0') {
    block(header(name, content.size(), type));
    data(content);
  }
  void end() { bytes.resize(bytes.size() + 1024, std::byte{0}); }
};

std::string pax_record(std::string_view key, std::string_view value) {
  const std::size_t body = key.size() + value.size() + 3;
  std::size_t len = body + 1;
  while (body + std::to_string(len).size() != len) len = body + std::to_string(len).size();
  return std::to_string(len) + " " + std::string(key) + "=" + std::string(value) + "\n";
}

// A two-member archive from our writer: a.bin (1000 bytes) at 0/512, b.cls (1 byte) at
// 1536/2048, end marker at 2560..3584.
std::vector<std::byte> small_archive() {
  auto r = storage::Registry{};
  storage::register_builtin_backends(r);
  auto mem = r.open("mem://tar/", {}).value();
  auto w = mem.backend->create("x.tar").value();
  tar::Writer tw(*w, "x.tar");
  REQUIRE(tw.add("a.bin", testing::pattern_bytes(1000, 7)));
  const std::byte one[] = {std::byte{'3'}};
  REQUIRE(tw.add("b.cls", one));
  REQUIRE(tw.finish());
  REQUIRE(tw.offset() == 3584);
  REQUIRE(w->commit());
  auto h = mem.backend->open("x.tar").value();
  auto queue = mem.backend->make_queue({}).value();
  std::vector<std::byte> out(h->size());
  struct Done final : storage::ReadCompletion {
    bool done = false;
    void on_read_complete(storage::ReadOp&) noexcept override { done = true; }
  } done;
  storage::ReadOp op;
  op.object = h.get();
  op.length = out.size();
  op.dst = out;
  op.done = &done;
  queue->submit(op);
  while (!done.done) queue->poll(1, std::chrono::milliseconds(10));
  REQUIRE(op.result);
  return out;
}

Result<std::vector<tar::Entry>> parse(const std::vector<std::byte>& bytes) {
  return tar::list_entries(bytes, "test.tar");
}

std::string what_of(const Result<std::vector<tar::Entry>>& r) {
  REQUIRE_FALSE(r);
  return r.error().what();
}

}  // namespace

TEST_CASE("tar reader: archives made by GNU tar", "[tar][formats]") {
  require_tools();
  const fs::path scratch = testing::scratch_dir("tar-gnu");
  for (const char* format : {"gnu", "oldgnu", "ustar", "pax", "v7"}) {
    DYNAMIC_SECTION("--format=" << format) {
      // ustar and v7 cannot hold a name component over 100 bytes; v7 not even a 100-byte path.
      const bool long_ok = std::string(format) == "gnu" || std::string(format) == "oldgnu" ||
                           std::string(format) == "pax";
      const fs::path src = make_tree(scratch, long_ok);
      const fs::path archive = scratch / (std::string(format) + ".tar");
      std::string out;
      const std::string excludes =
          std::string(format) == "v7" ? " --exclude='./ddd*' --exclude=./fifo" : "";
      const int rc = run("tar --format=" + std::string(format) + " --sort=name" + excludes +
                             " -cf " + q(archive) + " -C " + q(src) + " .",
                         &out);
      INFO(out);
      REQUIRE(rc == 0);
      check_against_oracles(archive, src, scratch);
    }
  }
}

TEST_CASE("tar reader: archives made by Python's tarfile", "[tar][formats]") {
  require_tools();
  const fs::path scratch = testing::scratch_dir("tar-python");
  const char* script = R"(
import sys, tarfile
fmt = {'gnu': tarfile.GNU_FORMAT, 'pax': tarfile.PAX_FORMAT, 'ustar': tarfile.USTAR_FORMAT}[sys.argv[2]]
kw = {'pax_headers': {'comment': 'a global header'}} if sys.argv[2] == 'pax' else {}
with tarfile.open(sys.argv[1], 'w', format=fmt, **kw) as tf:
    tf.add(sys.argv[3], arcname='.')
)";
  std::ofstream(scratch / "make.py") << script;
  for (const char* format : {"gnu", "pax", "ustar"}) {
    DYNAMIC_SECTION("tarfile " << format) {
      const bool long_ok = std::string(format) != "ustar";
      const fs::path src = make_tree(scratch, long_ok);
      const fs::path archive = scratch / (std::string("py-") + format + ".tar");
      std::string out;
      const int rc = run("/usr/bin/python3 " + q(scratch / "make.py") + " " + q(archive) + " " +
                             format + " " + q(src),
                         &out);
      INFO(out);
      REQUIRE(rc == 0);
      check_against_oracles(archive, src, scratch);
    }
  }
}

TEST_CASE("tar reader: GNU sparse members are reported as sparse and skipped correctly",
          "[tar][formats]") {
  require_tools();
  const fs::path scratch = testing::scratch_dir("tar-sparse");
  const fs::path src = scratch / "src";
  fs::remove_all(src);
  fs::create_directories(src);
  REQUIRE(run("truncate -s 4M " + q(src / "a-sparse") + " && printf hello | dd of=" +
              q(src / "a-sparse") + " bs=1 seek=1048576 conv=notrunc status=none") == 0);
  testing::write_file(src / "b.bin", testing::pattern_bytes(700, 5));
  for (const char* format : {"gnu", "pax"}) {
    DYNAMIC_SECTION(format) {
      const fs::path archive = scratch / (std::string(format) + ".tar");
      REQUIRE(run("tar --format=" + std::string(format) + " -S --sort=name -cf " + q(archive) +
                  " -C " + q(src) + " a-sparse b.bin") == 0);
      const auto bytes = testing::read_file(archive);
      auto entries = parse(bytes);
      REQUIRE(entries);
      REQUIRE(entries->size() == 2);
      CHECK((*entries)[0].type == tar::EntryType::kSparse);
      const auto py = python_list(archive, scratch);
      REQUIRE(py.size() == 2);
      CHECK((*entries)[1].name == "b.bin");
      CHECK((*entries)[1].data_offset == py[1].offset_data);
      CHECK((*entries)[1].size == 700);
    }
  }
}

TEST_CASE("tar writer: GNU tar and tarfile extract what it writes, byte for byte",
          "[tar][formats]") {
  require_tools();
  const fs::path scratch = testing::scratch_dir("tar-writer");
  struct M {
    std::string name;
    std::vector<std::byte> data;
  };
  std::vector<M> members = {
      {"a.bin", testing::pattern_bytes(1000, 1)},
      {"empty", {}},
      {"one", testing::pattern_bytes(1, 2)},
      {"block", testing::pattern_bytes(512, 3)},
      {"block1", testing::pattern_bytes(513, 4)},
      {"big.bin", testing::pattern_bytes(70000, 5)},  // larger than the staging buffer
      {std::string(96, 'x') + ".bin", testing::pattern_bytes(10, 6)},  // exactly 100 bytes
      {std::string(97, 'y') + ".bin", testing::pattern_bytes(11, 7)},  // 101: a pax path
      {std::string(80, 'p') + "/" + std::string(80, 'q') + "/" + std::string(80, 'r') + ".bin",
       testing::pattern_bytes(12, 8)},
      {"donn\xc3\xa9"
       "es/\xc3\xa9t\xc3\xa9.bin",
       testing::pattern_bytes(13, 9)},
  };
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto r = registry.open(scratch.string(), {}).value();
  const fs::path archive = scratch / "ours.tar";
  std::vector<tar::Placement> placements;
  {
    auto w = r.backend->create(archive.string()).value();
    tar::Writer tw(*w, archive.string());
    for (const M& m : members) {
      auto p = tw.add(m.name, m.data);
      REQUIRE(p);
      placements.push_back(*p);
    }
    REQUIRE(tw.finish());
    REQUIRE(w->commit());
    CHECK(fs::file_size(archive) == tw.offset());
  }

  SECTION("GNU tar lists and extracts it") {
    const auto names = gnu_list(archive);
    REQUIRE(names.size() == members.size());
    for (std::size_t i = 0; i < members.size(); ++i) CHECK(names[i] == members[i].name);
    const fs::path out = scratch / "gnu-out";
    fs::remove_all(out);
    fs::create_directories(out);
    std::string msg;
    REQUIRE(run("tar -xf " + q(archive) + " -C " + q(out), &msg) == 0);
    INFO(msg);
    for (const M& m : members) {
      INFO(m.name);
      CHECK(testing::read_file(out / m.name) == m.data);
    }
  }
  SECTION("tarfile lists and extracts it") {
    const auto py = python_list(archive, scratch);
    REQUIRE(py.size() == members.size());
    for (std::size_t i = 0; i < members.size(); ++i) {
      CHECK(py[i].name == members[i].name);
      CHECK(py[i].offset == placements[i].header_offset);
      CHECK(py[i].offset_data == placements[i].data_offset);
      CHECK(py[i].size == members[i].data.size());
    }
    const fs::path out = scratch / "py-out";
    fs::remove_all(out);
    fs::create_directories(out);
    std::string msg;
    REQUIRE(run("/usr/bin/python3 -c 'import sys, tarfile; "
                "tarfile.open(sys.argv[1]).extractall(sys.argv[2])' " +
                    q(archive) + " " + q(out),
                &msg) == 0);
    INFO(msg);
    for (const M& m : members) {
      INFO(m.name);
      CHECK(testing::read_file(out / m.name) == m.data);
    }
  }
  SECTION("our reader finds every member where the writer put it") {
    auto entries = parse(testing::read_file(archive));
    REQUIRE(entries);
    REQUIRE(entries->size() == members.size());
    for (std::size_t i = 0; i < members.size(); ++i) {
      CHECK((*entries)[i].name == members[i].name);
      CHECK((*entries)[i].header_offset == placements[i].header_offset);
      CHECK((*entries)[i].data_offset == placements[i].data_offset);
      CHECK((*entries)[i].size == members[i].data.size());
    }
  }
  SECTION("the same members give the same bytes") {
    auto w = r.backend->create((scratch / "again.tar").string()).value();
    tar::Writer tw(*w, "again.tar");
    for (const M& m : members) REQUIRE(tw.add(m.name, m.data));
    REQUIRE(tw.finish());
    REQUIRE(w->commit());
    CHECK(testing::read_file(scratch / "again.tar") == testing::read_file(archive));
  }
  SECTION("add() refuses bad names and use after finish()") {
    auto w = r.backend->create((scratch / "bad.tar").string()).value();
    tar::Writer tw(*w, "bad.tar");
    CHECK(tw.add("", {}).error().code() == Errc::kInvalidArgument);
    CHECK(tw.add(std::string_view("a\0b", 3), {}).error().code() == Errc::kInvalidArgument);
    REQUIRE(tw.finish());
    CHECK_FALSE(tw.add("late", {}));
  }
}

TEST_CASE("tar reader: how archives end", "[tar][formats]") {
  const auto full = small_archive();
  auto cut = [&](std::size_t n) { return std::vector<std::byte>(full.begin(), full.begin() + n); };
  auto end_of = [](const std::vector<std::byte>& bytes, std::size_t want_entries) {
    tar::Reader reader("t.tar", bytes.size(), tar::memory_reader(bytes));
    tar::Entry e;
    std::size_t n = 0;
    while (true) {
      auto r = reader.next(e);
      REQUIRE(r);
      if (!*r) break;
      ++n;
    }
    CHECK(n == want_entries);
    return reader.end();
  };
  CHECK(end_of(full, 2) == tar::End::kTwoZeroBlocks);
  CHECK(end_of(cut(3072), 2) == tar::End::kZeroBlockThenEof);
  CHECK(end_of(cut(2560), 2) == tar::End::kEofNoMarker);
  CHECK(end_of(cut(1536), 1) == tar::End::kEofNoMarker);
  CHECK(end_of({}, 0) == tar::End::kEofNoMarker);
  auto lone = cut(3072);  // a zero block, then another member's header
  lone.insert(lone.end(), full.begin() + 1536, full.begin() + 2560);
  CHECK(end_of(lone, 2) == tar::End::kLoneZeroBlock);
}

TEST_CASE("tar reader: bad input gives errors that name the object and the offset",
          "[tar][formats]") {
  const auto full = small_archive();
  auto cut = [&](std::size_t n) { return std::vector<std::byte>(full.begin(), full.begin() + n); };

  SECTION("cut mid-header") {
    auto r = parse(cut(1536 + 100));
    const std::string w = what_of(r);
    CHECK(r.error().code() == Errc::kCorrupt);
    CHECK(r.error().object() == "test.tar");
    CHECK(r.error().offset() == 1536u);
    CHECK(w.find("truncated tar: header at offset 1536 needs 512 bytes, object ends at 1636") !=
          std::string::npos);
  }
  SECTION("cut mid-member") {
    auto r = parse(cut(1000));
    const std::string w = what_of(r);
    CHECK(r.error().code() == Errc::kCorrupt);
    CHECK(w.find("truncated tar: member 'a.bin' at offset 0 has 1000 bytes of data from offset "
                 "512, object ends at 1000") != std::string::npos);
  }
  SECTION("not a tar file") {
    std::string text(4096, 'x');
    std::memcpy(text.data(), "hello, I am a text file", 23);
    const auto* p = reinterpret_cast<const std::byte*>(text.data());
    auto r = parse(std::vector<std::byte>(p, p + text.size()));
    const std::string w = what_of(r);
    CHECK(r.error().code() == Errc::kCorrupt);
    CHECK(w.find("test.tar") != std::string::npos);
    CHECK(w.find("not a tar archive: bad header checksum at offset 0") != std::string::npos);
  }
  SECTION("a damaged header further in") {
    auto bytes = full;
    bytes[1536 + 3] = std::byte{'Z'};  // in the second header's name
    auto r = parse(bytes);
    CHECK(what_of(r).find("bad header checksum at offset 1536") != std::string::npos);
    CHECK(r.error().offset() == 1536u);
  }
  SECTION("a size field that is not a number") {
    Archive a;
    Block h = header("x.bin", 0, '0');
    std::memcpy(h.data() + 124, "12x45678901", 11);
    set_checksum(h);
    a.block(h);
    a.end();
    CHECK(what_of(parse(a.bytes)).find("bad size field in the header at offset 0") !=
          std::string::npos);
  }
  SECTION("an extended header with no member after it") {
    Archive a;
    a.member("ok.bin", "data");
    const std::string rec = pax_record("path", "y.bin");
    a.block(header("././@PaxHeader", rec.size(), 'x'));
    a.data(rec);
    CHECK(what_of(parse(a.bytes))
              .find("extended header at offset 1024 is not followed by a member") !=
          std::string::npos);
    a.end();
    CHECK(what_of(parse(a.bytes)).find("followed by a zero block") != std::string::npos);
  }
  SECTION("a malformed pax record") {
    Archive a;
    a.block(header("././@PaxHeader", 12, 'x'));
    a.data("99 path=abc\n");
    a.member("x.bin", "data");
    a.end();
    CHECK(what_of(parse(a.bytes)).find("bad pax record") != std::string::npos);
  }
  SECTION("a GNU long name larger than the cap") {
    Archive a;
    a.block(header("././@LongLink", tar::kMaxExtendedHeader + 1, 'L'));
    a.bytes.resize(a.bytes.size() + tar::kMaxExtendedHeader + 1024, std::byte{'n'});
    CHECK(what_of(parse(a.bytes)).find("GNU long name at offset 0") != std::string::npos);
  }
  SECTION("errors are sticky") {
    const auto bytes = cut(1000);
    tar::Reader reader("t.tar", bytes.size(), tar::memory_reader(bytes));
    tar::Entry e;
    auto first = reader.next(e);
    REQUIRE_FALSE(first);
    auto second = reader.next(e);
    REQUIRE_FALSE(second);
    CHECK(second.error().what() == first.error().what());
  }
}

TEST_CASE("tar reader: pax overrides, base-256 sizes and signed checksums", "[tar][formats]") {
  SECTION("pax path and size override the ustar fields; a global header applies to later entries") {
    Archive a;
    std::string rec = pax_record("comment", "ignored") + pax_record("path", "global/name.bin");
    a.block(header("././@PaxHeader", rec.size(), 'g'));
    a.data(rec);
    a.member("first.bin", "12345");  // takes the global path
    rec = pax_record("path", "a/very/long/name.bin") + pax_record("size", "3") +
          pax_record("mtime", "1.5");
    a.block(header("././@PaxHeader", rec.size(), 'x'));
    a.data(rec);
    a.block(header("short", 999, '0'));  // the size field is overridden by the record
    a.data("abc");
    a.member("last.bin", "zz");  // the 'x' header applied to one entry only; 'g' still holds
    a.end();
    auto entries = parse(a.bytes);
    REQUIRE(entries);
    REQUIRE(entries->size() == 3);
    CHECK((*entries)[0].name == "global/name.bin");
    CHECK((*entries)[0].header_offset == 1024);
    CHECK((*entries)[1].name == "a/very/long/name.bin");
    CHECK((*entries)[1].size == 3);
    CHECK((*entries)[1].header_offset == 2048);
    CHECK((*entries)[1].data_offset == 3584);
    CHECK((*entries)[2].name == "global/name.bin");
    CHECK((*entries)[2].size == 2);
  }
  SECTION("GNU long name and long link name") {
    Archive a;
    const std::string longname(300, 'L'), longlink(200, 'K');
    a.block(header("././@LongLink", longname.size() + 1, 'L'));
    a.data(longname + std::string(1, '\0'));
    a.block(header("././@LongLink", longlink.size(), 'K'));
    a.data(longlink);
    a.block(header("trunc", 0, '2'));
    a.end();
    auto entries = parse(a.bytes);
    REQUIRE(entries);
    REQUIRE(entries->size() == 1);
    CHECK((*entries)[0].name == longname);
    CHECK((*entries)[0].link_name == longlink);
    CHECK((*entries)[0].type == tar::EntryType::kSymlink);
    CHECK((*entries)[0].header_offset == 0);
  }
  SECTION("a base-256 size field, which GNU tar reads too") {
    require_tools();
    Archive a;
    Block h = header("b256.bin", 0, '0');
    std::memset(h.data() + 124, 0, 12);
    h[124] = 0x80;
    h[134] = 0x04;  // 0x0400 = 1024 bytes
    h[135] = 0x00;
    set_checksum(h);
    a.block(h);
    a.bytes.resize(a.bytes.size() + 1024, std::byte{'b'});
    a.end();
    auto entries = parse(a.bytes);
    REQUIRE(entries);
    REQUIRE(entries->size() == 1);
    CHECK((*entries)[0].size == 1024);
    const fs::path scratch = testing::scratch_dir("tar-b256");
    testing::write_file(scratch / "b256.tar", a.bytes);
    std::string out;
    REQUIRE(run("tar -tvf " + q(scratch / "b256.tar"), &out) == 0);
    CHECK(out.find(" 1024 ") != std::string::npos);
  }
  SECTION("a negative base-256 size is corrupt") {
    Archive a;
    Block h = header("neg.bin", 0, '0');
    std::memset(h.data() + 124, 0xff, 12);
    set_checksum(h);
    a.block(h);
    a.end();
    CHECK(what_of(parse(a.bytes)).find("bad size field") != std::string::npos);
  }
  SECTION("checksums summed as signed bytes (old tars) are accepted") {
    Archive a;
    Block h = header("caf\xc3\xa9.bin", 4, '0');
    set_checksum(h, /*signed_sum=*/true);
    a.block(h);
    a.data("data");
    a.end();
    auto entries = parse(a.bytes);
    REQUIRE(entries);
    CHECK((*entries)[0].name == "caf\xc3\xa9.bin");
  }
  SECTION("ustar prefix is joined; an old-style name ending in '/' is a directory") {
    Archive a;
    Block h = header("name.bin", 2, '0');
    std::memcpy(h.data() + 345, "the/prefix", 10);
    set_checksum(h);
    a.block(h);
    a.data("hi");
    a.block(header("olddir/", 0, '\0'));
    a.end();
    auto entries = parse(a.bytes);
    REQUIRE(entries);
    REQUIRE(entries->size() == 2);
    CHECK((*entries)[0].name == "the/prefix/name.bin");
    CHECK((*entries)[1].type == tar::EntryType::kDirectory);
  }
}
