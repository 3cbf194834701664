// The tar index format (tar_index.hpp): version 2 round trips with its checksum, every edit,
// truncation or appended text is refused, version 1 still parses (marked as unproven), and the
// probes that compare an index with its shard catch a member that is not where the index says.
#include <catch2/catch.hpp>

#include <string>

#include "feedline/loader/tar.hpp"
#include "feedline/loader/tar_index.hpp"
#include "feedline/storage/registry.hpp"
#include "formats_support.hpp"
#include "test_support.hpp"

using namespace feedline;
using namespace feedline::loader;

namespace {

TarIndex sample_index() {
  TarIndex index;
  index.shard_bytes = 30720;
  index.entries = {{"dir/000002.bin.zst", 0, 1024, 10000, 65536},
                   {"dir/000002.cls", 11264, 11776, 2, 2},
                   {"name with spaces.txt", 12288, 12800, 3, 3}};
  return index;
}

Error parse_error(std::string_view text) {
  auto r = parse_tar_index(text, "x.tar.idx");
  REQUIRE_FALSE(r);
  CHECK(r.error().object() == "x.tar.idx");
  return r.error();
}

// A shard from our writer, with a long name (a pax header before its ustar header), and its index
// as gen writes it.
struct Shard {
  std::vector<std::byte> bytes;
  TarIndex index;
};
Shard make_shard() {
  storage::Registry r;
  storage::register_builtin_backends(r);
  auto mem = r.open("mem://idx/", {}).value();
  auto w = mem.backend->create("s.tar").value();
  tar::Writer tw(*w, "s.tar");
  Shard s;
  std::vector<std::string> names{"000000.bin", "000000.cls", "", "000002.bin"};
  names[2].assign(150, 'n');  // over 100 bytes: a pax header before the ustar one
  names[2] += ".bin";
  const std::size_t sizes[] = {1000, 1, 700, 0};
  for (std::size_t i = 0; i < names.size(); ++i) {
    auto p = tw.add(names[i], testing::pattern_bytes(sizes[i], sizes[i] + 1));
    REQUIRE(p);
    s.index.entries.push_back({names[i], p->header_offset, p->data_offset, p->size, p->size});
  }
  REQUIRE(tw.finish());
  REQUIRE(w->commit());
  s.bytes = testing::read_object(*mem.backend, "s.tar");
  s.index.shard_bytes = s.bytes.size();
  return s;
}

ConstBytes from(const std::vector<std::byte>& b, std::uint64_t offset) {
  return ConstBytes(b).subspan(static_cast<std::size_t>(offset));
}

}  // namespace

TEST_CASE("tar index: version 2 round trips, checksum last", "[tar-index][formats]") {
  const TarIndex index = sample_index();
  const std::string text = format_tar_index(index).value();
  CHECK(text.starts_with("feedline-tar-index 2\nshard-bytes 30720 members 3\n"));
  const std::size_t last = text.rfind("checksum ");
  REQUIRE(last != std::string::npos);
  CHECK(text.size() - last == 9 + 16 + 1);  // "checksum " + 16 hex digits + '\n'
  auto r = parse_tar_index(text, "x.tar.idx");
  REQUIRE(r);
  CHECK(r->version == 2);
  CHECK(r->shard_bytes == 30720);
  REQUIRE(r->entries.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(r->entries[i].name == index.entries[i].name);
    CHECK(r->entries[i].header_offset == index.entries[i].header_offset);
    CHECK(r->entries[i].data_offset == index.entries[i].data_offset);
    CHECK(r->entries[i].size == index.entries[i].size);
    CHECK(r->entries[i].decoded_size == index.entries[i].decoded_size);
  }
  CHECK(format_tar_index(*r).value() == text);
  // An empty index is valid too.
  TarIndex empty;
  empty.shard_bytes = 1024;
  CHECK(parse_tar_index(format_tar_index(empty).value(), "e.idx")->entries.empty());
}

TEST_CASE("tar index: any edit, truncation or addition is refused", "[tar-index][formats]") {
  const std::string text = format_tar_index(sample_index()).value();
  SECTION("an edited stored size") {
    std::string t = text;
    t.replace(t.find(" 10000 "), 7, " 10001 ");
    const Error e = parse_error(t);
    CHECK(e.code() == Errc::kCorrupt);
    CHECK(e.message().find("checksum mismatch") != std::string::npos);
  }
  SECTION("an edited name") {
    std::string t = text;
    t.replace(t.find("000002.cls"), 10, "000003.cls");
    CHECK(parse_error(t).message().find("checksum mismatch") != std::string::npos);
  }
  SECTION("an edited shard size") {
    std::string t = text;
    t.replace(t.find("30720"), 5, "30721");
    CHECK(parse_error(t).message().find("checksum mismatch") != std::string::npos);
  }
  SECTION("an edited checksum") {
    std::string t = text;
    char& c = t[t.size() - 2];
    c = c == '0' ? '1' : '0';
    CHECK(parse_error(t).message().find("checksum mismatch") != std::string::npos);
  }
  SECTION("truncated anywhere") {
    for (std::size_t n = 0; n < text.size(); ++n) {
      INFO("cut at " << n);
      const Error e = parse_error(text.substr(0, n));
      CHECK(e.code() == Errc::kCorrupt);
    }
  }
  SECTION("the checksum line missing") {
    const std::string t = text.substr(0, text.rfind("checksum "));
    CHECK(parse_error(t).message().find("no checksum line") != std::string::npos);
  }
  SECTION("text after the checksum") {
    CHECK(parse_error(text + "x\n").message().find("unexpected text after the last line") !=
          std::string::npos);
  }
  SECTION("a checksum in capitals or too short") {
    std::string t = text.substr(0, text.rfind("checksum "));
    CHECK(parse_error(t + "checksum ABCDEF0123456789\n").message().find("16 hex digits") !=
          std::string::npos);
    CHECK(parse_error(t + "checksum 0123\n").message().find("16 hex digits") != std::string::npos);
  }
}

TEST_CASE("tar index: version 1 parses, marked as version 1; other versions are refused",
          "[tar-index][formats]") {
  const std::string v1 =
      "feedline-tar-index 1\nshard-bytes 4608 members 2\n0 512 5 5 000001.bin\n1024 1536 1 1 "
      "000001.cls\n";
  auto r = parse_tar_index(v1, "old.idx");
  REQUIRE(r);
  CHECK(r->version == 1);
  CHECK(r->entries.size() == 2);
  // Re-rendered, it is version 2.
  auto again = parse_tar_index(format_tar_index(*r).value(), "new.idx");
  REQUIRE(again);
  CHECK(again->version == 2);
  // A version 1 file has no checksum line: one is text after the last member.
  CHECK(parse_error(v1 + "checksum 0123456789abcdef\n").code() == Errc::kCorrupt);
  auto v3 = parse_tar_index("feedline-tar-index 3\n", "x.tar.idx");
  REQUIRE_FALSE(v3);
  CHECK(v3.error().code() == Errc::kUnsupported);
  CHECK(v3.error().message().find("version 3") != std::string::npos);
}

TEST_CASE("tar index: probes are the first, the last and evenly between", "[tar-index][formats]") {
  CHECK(tar_index_probes(0).empty());
  CHECK(tar_index_probes(1) == std::vector<std::size_t>{0});
  CHECK(tar_index_probes(kTarIndexProbes).size() == kTarIndexProbes);
  for (std::size_t n : {std::size_t{9}, std::size_t{20}, std::size_t{1001}, std::size_t{1} << 40,
                        ~std::size_t{0}}) {
    INFO(n);
    const auto p = tar_index_probes(n);
    REQUIRE(p.size() == kTarIndexProbes);
    CHECK(p.front() == 0);
    CHECK(p.back() == n - 1);
    for (std::size_t i = 1; i < p.size(); ++i) CHECK(p[i] > p[i - 1]);
  }
  // Evenly: 1001 members, 7 gaps of 142 or 143.
  const auto p = tar_index_probes(1001);
  for (std::size_t i = 1; i < p.size(); ++i)
    CHECK((p[i] - p[i - 1] == 142 || p[i] - p[i - 1] == 143));
}

TEST_CASE("tar index: a probe agrees with the member the index names, and only with it",
          "[tar-index][formats]") {
  const Shard s = make_shard();
  const std::uint64_t size = s.bytes.size();
  // Every member as written agrees, the long name's pax header included.
  REQUIRE(s.index.entries[2].data_offset - s.index.entries[2].header_offset > 512);
  for (const TarIndexEntry& e : s.index.entries) {
    INFO(e.name);
    CHECK(check_tar_index_probe(e, size, from(s.bytes, e.header_offset), "s.tar"));
    // The region may end right at the data.
    CHECK(check_tar_index_probe(
        e, size, from(s.bytes, e.header_offset).first(e.data_offset - e.header_offset), "s.tar"));
  }
  auto differs = [&](TarIndexEntry e, std::string_view needle, ConstBytes region = {}) {
    if (region.empty()) region = from(s.bytes, e.header_offset);
    auto r = check_tar_index_probe(e, size, region, "s.tar");
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kCorrupt);
    CHECK(r.error().object() == "s.tar");
    CHECK(r.error().message().find("stale index") != std::string::npos);
    CHECK(r.error().message().find(needle) != std::string::npos);
  };
  TarIndexEntry e = s.index.entries[0];
  e.name = "000009.bin";
  differs(e, "names it '000000.bin'");
  e = s.index.entries[1];
  e.size = 2;
  differs(e, "gives 1 bytes, the index 2");
  e = s.index.entries[2];
  e.data_offset -= 512;  // as if the pax header were not there
  differs(e, "its data starts at offset");
  // An index pointing into member data, or at the end-of-archive marker.
  e = s.index.entries[0];
  e.header_offset = 512;
  e.data_offset = 1024;
  differs(e, "no member header there");
  e = s.index.entries[3];
  e.header_offset = e.data_offset;
  e.data_offset += 512;
  differs(e, "headers end there");
  // Nothing read (the shard ended first).
  CHECK_FALSE(check_tar_index_probe(s.index.entries[0], size, ConstBytes{}, "s.tar"));
  // A header region no tar header can fill is refused without looking.
  e = s.index.entries[0];
  e.data_offset = e.header_offset + kMaxTarHeaderRegion + 512;
  differs(e, "larger than any tar header");
}

TEST_CASE("tar index: each member read through the index is checked against its own header",
          "[tar-index][formats]") {
  const Shard s = make_shard();
  // region: the shard's bytes from `from` up to the member's data.
  auto region = [&](std::uint64_t from, const TarIndexEntry& e) {
    return ConstBytes(s.bytes).subspan(static_cast<std::size_t>(from),
                                       static_cast<std::size_t>(e.data_offset - from));
  };
  std::uint64_t prev_end = 0;
  for (const TarIndexEntry& e : s.index.entries) {
    INFO(e.name);
    // From its own header (a sample's first member), and from the previous member's padded end.
    CHECK(check_tar_member_header(region(e.header_offset, e), e.header_offset, e.name, e.size,
                                  "s.tar"));
    CHECK(check_tar_member_header(region(prev_end, e), prev_end, e.name, e.size, "s.tar"));
    prev_end = align_up(e.data_offset + e.size, 512);
  }
  // A member whose header comes after another member (a hidden one, a directory) in the region.
  const TarIndexEntry& last = s.index.entries[3];
  CHECK(check_tar_member_header(region(0, last), 0, last.name, last.size, "s.tar"));

  auto differs = [&](std::uint64_t from, const TarIndexEntry& e, std::string_view name,
                     std::uint64_t size, std::string_view needle) {
    auto r = check_tar_member_header(region(from, e), from, name, size, "s.tar");
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kCorrupt);
    CHECK(r.error().object() == "s.tar");
    CHECK(r.error().offset().has_value());
    CHECK(r.error().message().find("index does not belong") != std::string::npos);
    CHECK(r.error().message().find(std::string(name)) != std::string::npos);
    CHECK(r.error().message().find(needle) != std::string::npos);
  };
  const TarIndexEntry& e0 = s.index.entries[0];
  differs(e0.header_offset, e0, "000009.bin", e0.size, "names it '000000.bin'");
  differs(e0.header_offset, e0, e0.name, 999, "gives 1000 bytes, the index 999");
  const TarIndexEntry& e2 = s.index.entries[2];  // its pax header names it in full
  differs(e2.header_offset, e2, e2.name.substr(0, 100), e2.size, "names it");
  // An entry whose data offset is another member's: that member's header is the one checked.
  TarIndexEntry moved = e0;
  moved.data_offset = s.index.entries[1].data_offset;
  differs(e0.header_offset, moved, e0.name, e0.size, "names it '000000.cls'");
  // No header at all where the index puts one (member data).
  TarIndexEntry inside = e0;
  inside.data_offset = e0.data_offset + 512;
  auto r = check_tar_member_header(region(e0.data_offset, inside), e0.data_offset, e0.name, e0.size,
                                   "s.tar");
  CHECK_FALSE(r);
}
