// The parsers of MLPerf Storage's formats on their own: TFRecord framing and its tfrecord2idx
// index, the .npy header, the zip directory of npz archives, and the CRCs under them. Bytes come
// from known vectors and hand-built files here; files written by numpy and Python themselves are
// checked end to end in tests/cli/formats.sh.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "feedline/loader/npy.hpp"
#include "feedline/loader/tfrecord.hpp"
#include "feedline/loader/zip.hpp"
#include "formats/crc32c.hpp"
#include "test_support.hpp"

using namespace feedline;
using namespace feedline::loader;

namespace {

ConstBytes bytes_of(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

std::vector<std::byte> record_of(std::string_view data) {
  std::vector<std::byte> out;
  REQUIRE(append_tfrecord(bytes_of(data), out));
  return out;
}

std::uint32_t le32(const std::byte* p) {
  std::uint32_t v = 0;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

TEST_CASE("crc: ISA-L's CRC32C and CRC-32 are the standard ones", "[formats][crc]") {
  if (!detail::crc_available()) return testing::skip_test("built without ISA-L");
  // The check values of both CRCs: python3-crc32c's crc32c.crc32c(b"123456789") and zlib.crc32.
  CHECK(detail::crc32c(bytes_of("123456789")) == 0xE3069283u);
  CHECK(detail::crc32_ieee(bytes_of("123456789")) == 0xCBF43926u);
  CHECK(detail::crc32c({}) == 0);
  // Continued over pieces, the same.
  CHECK(detail::crc32c(bytes_of("56789"), detail::crc32c(bytes_of("1234"))) == 0xE3069283u);
  CHECK(detail::crc32_ieee(bytes_of("56789"), detail::crc32_ieee(bytes_of("1234"))) == 0xCBF43926u);
}

TEST_CASE("tfrecord: records framed as TensorFlow frames them", "[formats][tfrecord]") {
  if (!tfrecord_available()) return testing::skip_test("built without ISA-L");
  const auto rec = record_of("hello");
  REQUIRE(rec.size() == 5 + kTfRecordFramingBytes);
  std::uint64_t len = 0;
  std::memcpy(&len, rec.data(), 8);
  CHECK(len == 5);
  // The CRCs are TensorFlow's masked CRC32C (checked against python3-crc32c in formats.sh).
  CHECK(le32(rec.data() + 8) == tfrecord_mask(detail::crc32c(ConstBytes(rec.data(), 8))));
  CHECK(le32(rec.data() + 17) == tfrecord_mask(detail::crc32c(bytes_of("hello"))));
  CHECK(tfrecord_mask(0) == 0xa282ead8u);

  CHECK(parse_tfrecord_header(rec, 100, 100 + rec.size(), "f").value() == 5);
  CHECK(check_tfrecord(rec, 5, 100, "f"));
}

TEST_CASE("tfrecord: damaged records are data errors naming the file and the record's offset",
          "[formats][tfrecord]") {
  if (!tfrecord_available()) return testing::skip_test("built without ISA-L");
  const auto good = record_of("0123456789");
  const std::uint64_t at = 4096, file = at + good.size();
  auto expect = [&](const Result<void>& r, std::string_view words) {
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kCorrupt);
    CHECK(r.error().object() == "data/a.tfrecord");
    CHECK(r.error().offset() == at);
    CHECK_THAT(r.error().message(), Catch::Contains(std::string(words)));
  };
  SECTION("data CRC") {
    auto bad = good;
    bad[14] ^= std::byte{0x40};  // a data byte
    expect(check_tfrecord(bad, 10, at, "data/a.tfrecord"), "data CRC32C mismatch");
    bad = good;
    bad.back() ^= std::byte{1};  // the stored CRC itself
    expect(check_tfrecord(bad, 10, at, "data/a.tfrecord"), "data CRC32C mismatch");
  }
  SECTION("length CRC") {
    auto bad = good;
    bad[9] ^= std::byte{1};
    auto h = parse_tfrecord_header(bad, at, file, "data/a.tfrecord");
    REQUIRE_FALSE(h);
    CHECK(h.error().offset() == at);
    CHECK_THAT(h.error().message(), Catch::Contains("CRC32C of its length field"));
    expect(check_tfrecord(bad, 10, at, "data/a.tfrecord"), "CRC32C of its length field");
  }
  SECTION("a length field that disagrees with what the open found (a stale index)") {
    const auto longer = record_of("0123456789a");
    expect(check_tfrecord(ConstBytes(longer).first(good.size()), 10, at, "data/a.tfrecord"),
           "its length field says 11 bytes");
  }
  SECTION("truncated: the record runs past the file, or its header is cut short") {
    auto h = parse_tfrecord_header(good, at, file - 1, "data/a.tfrecord");
    REQUIRE_FALSE(h);
    CHECK(h.error().offset() == at);
    CHECK_THAT(h.error().message(), Catch::Contains("truncated"));
    auto cut = parse_tfrecord_header(ConstBytes(good).first(7), at, at + 7, "data/a.tfrecord");
    REQUIRE_FALSE(cut);
    CHECK_THAT(cut.error().message(), Catch::Contains("ends inside a TFRecord record header"));
  }
  SECTION("a length of 2^63 is refused before anything is allocated") {
    std::vector<std::byte> header(12);
    const std::uint64_t huge = std::uint64_t{1} << 63;
    std::memcpy(header.data(), &huge, 8);
    const std::uint32_t crc = tfrecord_mask(detail::crc32c(ConstBytes(header.data(), 8)));
    std::memcpy(header.data() + 8, &crc, 4);
    auto h = parse_tfrecord_header(header, at, at + 100, "data/a.tfrecord");
    REQUIRE_FALSE(h);
    CHECK_THAT(h.error().message(), Catch::Contains(std::to_string(huge)));
  }
}

TEST_CASE("tfrecord index: DALI's tfrecord2idx text, checked against its file",
          "[formats][tfrecord]") {
  const std::vector<TfRecordIndexEntry> entries{{0, 30}, {30, 16}, {46, 1000}};
  const std::string text = format_tfrecord_index(entries);
  CHECK(text == "0 30\n30 16\n46 1000\n");
  CHECK(parse_tfrecord_index(text, 1046, "x.idx").value() == entries);
  // A last line without its newline is read too; an empty index fits an empty file.
  CHECK(parse_tfrecord_index("0 30\n30 16\n46 1000", 1046, "x.idx").value() == entries);
  CHECK(parse_tfrecord_index("", 0, "x.idx").value().empty());

  auto refused = [](std::string_view t, std::uint64_t size, std::string_view why) {
    auto r = parse_tfrecord_index(t, size, "x.idx");
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kCorrupt);
    CHECK(r.error().object() == "x.idx");
    CHECK_THAT(r.error().message(), Catch::Contains(std::string(why)));
  };
  refused(text, 1047, "the file has 1047 bytes");             // stale: the file grew
  refused(text, 1045, "ends past the file");                  // stale: the file shrank
  refused("0 30\n31 16\n", 47, "starts at 31, expected 30");  // a gap
  refused("0 10\n", 10, "less than a record's 16 bytes");
  refused("0 30\nx 16\n", 46, "expected 'OFFSET LENGTH'");
  refused("0 18446744073709551615\n", 100, "ends past the file");
  refused("0  30\n", 30, "expected 'OFFSET LENGTH'");
  refused("", 16, "the file has 16 bytes");
}

TEST_CASE("tfrecord index: probes compare records' headers with the index", "[formats][tfrecord]") {
  if (!tfrecord_available()) return testing::skip_test("built without ISA-L");
  const auto rec = record_of("abcdef");
  CHECK(check_tfrecord_index_probe({0, rec.size()}, rec, rec.size(), "f.tfrecord"));
  auto stale = check_tfrecord_index_probe({0, rec.size() + 1}, rec, rec.size() + 1, "f.tfrecord");
  REQUIRE_FALSE(stale);
  CHECK_THAT(stale.error().message(), Catch::Contains("stale index"));
  const std::vector<std::byte> junk(12, std::byte{7});
  auto not_a_record = check_tfrecord_index_probe({0, 16}, junk, 16, "f.tfrecord");
  REQUIRE_FALSE(not_a_record);
  CHECK(not_a_record.error().object() == "f.tfrecord");
}

TEST_CASE("npy: numpy's headers, written and read back", "[formats][npy]") {
  const std::uint64_t shape[] = {3};
  const std::string h = format_npy_header("|u1", shape);
  // Byte for byte what numpy 1.24's np.save writes for np.arange(3, dtype=np.uint8).
  const std::string want = std::string("\x93NUMPY\x01\x00\x76\x00", 10) +
                           "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }" +
                           std::string(60, ' ') + "\n";
  CHECK(h == want);
  CHECK(h.size() % 64 == 0);
  auto p = parse_npy_header(bytes_of(h), "array 'x'").value();
  CHECK(p.descr == "|u1");
  CHECK(p.shape == std::vector<std::uint64_t>{3});
  CHECK(p.header_bytes == 128);
  CHECK(p.data_bytes == 3);
  auto scalar = parse_npy_header(bytes_of(format_npy_header("<i8", {})), "array 'y'").value();
  CHECK(scalar.shape.empty());
  CHECK(scalar.data_bytes == 8);
}

TEST_CASE("npy: the dtypes and layouts feedline delivers, and clear refusals of the others",
          "[formats][npy]") {
  auto header = [](std::string_view dict, int major = 1) {
    std::string out("\x93NUMPY", 6);
    out += static_cast<char>(major);
    out += '\0';
    const std::size_t n = dict.size();
    out += static_cast<char>(n & 0xFF);
    out += static_cast<char>(n >> 8);
    if (major > 1) out += std::string(2, '\0');
    out += dict;
    return out;
  };
  struct Ok {
    const char* dict;
    std::uint64_t bytes;
  };
  for (const Ok& ok : {Ok{"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24},
                       Ok{"{\"descr\": \">c16\", \"fortran_order\": False, \"shape\": (2,)}\n", 32},
                       Ok{"{'shape': (4,), 'descr': '<U3', 'fortran_order': False}", 48},
                       Ok{"{'descr': '|S5', 'fortran_order': False, 'shape': (), }   \n", 5},
                       Ok{"{'descr': '<M8[ns]', 'fortran_order': False, 'shape': (1,), }", 8},
                       Ok{"{'descr': '|b1', 'fortran_order': True, 'shape': (7,), }", 7},
                       Ok{"{'descr': '<f8', 'fortran_order': False, 'shape': (0, 5), }", 0}}) {
    INFO(ok.dict);
    for (const int major : {1, 2, 3}) {
      auto h = parse_npy_header(bytes_of(header(ok.dict, major)), "array 'a'");
      REQUIRE(h);
      CHECK(h->data_bytes == ok.bytes);
      CHECK(h->header_bytes == (major == 1 ? 10 : 12) + std::string_view(ok.dict).size());
    }
  }
  struct Bad {
    const char* dict;
    Errc code;
    const char* words;
  };
  for (const Bad& bad : {
           Bad{"{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", Errc::kUnsupported,
               "Python objects"},
           Bad{"{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (2,), }",
               Errc::kUnsupported, "structured dtype"},
           Bad{"{'descr': '<f8', 'fortran_order': True, 'shape': (2, 2), }", Errc::kUnsupported,
               "Fortran order"},
           Bad{"{'descr': '<f3', 'fortran_order': False, 'shape': (2,), }", Errc::kCorrupt,
               "no such item size"},
           Bad{"{'descr': '<f8', 'fortran_order': False}", Errc::kCorrupt, "lacks"},
           Bad{"{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': ()}",
               Errc::kCorrupt, "given twice"},
           Bad{"{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'extra': 1}",
               Errc::kCorrupt, "unexpected key"},
           Bad{"{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296)}",
               Errc::kCorrupt, "2^64"},
           Bad{"{'descr': '<f8', 'fortran_order': False, 'shape': (-1,)}", Errc::kCorrupt,
               "whole number"},
           Bad{"{'descr': '<f8', 'fortran_order': 0, 'shape': (1,)}", Errc::kCorrupt,
               "True or False"},
           Bad{"{'descr': '<f8', 'fortran_order': False, 'shape': (1,)} x", Errc::kCorrupt,
               "after the dict"},
       }) {
    INFO(bad.dict);
    auto h = parse_npy_header(bytes_of(header(bad.dict)), "array 'a'");
    REQUIRE_FALSE(h);
    CHECK(h.error().code() == bad.code);
    CHECK_THAT(h.error().message(), Catch::Contains("array 'a'"));
    CHECK_THAT(h.error().message(), Catch::Contains(bad.words));
  }
  // Not .npy at all, another version, a header longer than any reader should take.
  CHECK_FALSE(parse_npy_header(bytes_of("PK\x03\x04 not numpy"), "array 'a'"));
  CHECK(parse_npy_header(bytes_of(std::string("\x93NUMPY\x04\x00\x10\x00", 10) + "{}"), "a")
            .error()
            .code() == Errc::kUnsupported);
  auto huge = npy_header_size(bytes_of(std::string("\x93NUMPY\x02\x00\xff\xff\xff\x7f", 12)), "a");
  REQUIRE_FALSE(huge);
  CHECK_THAT(huge.error().message(), Catch::Contains("more than"));
}

namespace {

// A stored zip of (name, data) entries through feedline's writer.
std::string zip_of(const std::vector<std::pair<std::string, std::string>>& files) {
  std::string out;
  std::vector<ZipEntry> entries;
  for (const auto& [name, data] : files) {
    ZipEntry& e = entries.emplace_back();
    e.name = name;
    e.size = e.compressed_size = data.size();
    e.crc32 = detail::crc32_ieee(bytes_of(data));
    e.local_header_offset = out.size();
    out += zip_local_header(name, e.crc32, e.size);
    out += data;
  }
  out += zip_directory(entries, out.size());
  return out;
}

Result<std::vector<ZipEntry>> read_zip(std::string_view file) {
  const std::size_t tail = std::min<std::size_t>(file.size(), kZipTailBytes);
  FEEDLINE_ASSIGN_OR_RETURN(auto loc, find_zip_directory(bytes_of(file.substr(file.size() - tail)),
                                                         file.size(), "a.npz"));
  return parse_zip_directory(bytes_of(file.substr(loc.offset, loc.size)), loc, file.size(),
                             "a.npz");
}

}  // namespace

TEST_CASE("zip: the directory of stored archives, entries where their data lies",
          "[formats][zip]") {
  if (!detail::crc_available()) return testing::skip_test("built without ISA-L (zip's CRC-32)");
  const std::string file = zip_of({{"x.npy", "first array"}, {"y.npy", "second"}});
  auto entries = read_zip(file).value();
  REQUIRE(entries.size() == 2);
  for (const ZipEntry& e : entries) {
    const auto local =
        zip_local_header_size(bytes_of(file.substr(e.local_header_offset)), e, "a.npz");
    REQUIRE(local);
    CHECK(*local == 30 + e.name.size() + 20);  // numpy's ZIP64 extra field in the local header
    CHECK(e.method == kZipStored);
  }
  CHECK(file.substr(entries[0].local_header_offset + 55, 11) == "first array");
  CHECK(entries[0].limit == entries[1].local_header_offset);
}

TEST_CASE("zip: hostile directories are refused before anything is allocated", "[formats][zip]") {
  if (!detail::crc_available()) return testing::skip_test("built without ISA-L (zip's CRC-32)");
  const std::string good = zip_of({{"x.npy", "data"}});
  auto eocd_at = good.size() - kZipEocdBytes;
  auto patch = [](std::string f, std::size_t at, std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) f[at + i] = static_cast<char>((v >> (8 * i)) & 0xFF);
    return f;
  };
  auto patched = [&](std::size_t at, std::uint64_t v, int bytes) {
    return patch(good, at, v, bytes);
  };
  auto refused = [](const std::string& f, std::string_view words) {
    auto r = read_zip(f);
    REQUIRE_FALSE(r);
    CHECK(r.error().object() == "a.npz");
    CHECK_THAT(r.error().message(), Catch::Contains(std::string(words)));
  };
  refused("not a zip file at all, long enough to hold an end record", "no end of central");
  refused(patched(eocd_at + 8, 0xFFFE, 2), "several disks");
  // 65,534 entries (about the most a plain end record counts) in a 51-byte directory.
  refused(patch(patched(eocd_at + 8, 0xFFFE, 2), eocd_at + 10, 0xFFFE, 2), "cannot fit");
  refused(patched(eocd_at + 12, 0xFFFFFF, 4), "runs past");
  refused(patched(eocd_at + 16, 0xFFFFFFFF, 4), "ZIP64 record that is not there");
  // An entry whose data would run into the directory.
  const std::size_t cd = good.size() - kZipEocdBytes - (46 + 5);
  refused(patched(cd + 20, 1000, 4), "overlaps");
  // Encrypted.
  auto enc = read_zip(patched(cd + 8, 1, 2));
  REQUIRE_FALSE(enc);
  CHECK(enc.error().code() == Errc::kUnsupported);
  CHECK_THAT(enc.error().message(), Catch::Contains("encrypted"));
  // A local header that names another entry.
  auto entries = read_zip(good).value();
  std::string renamed = good;
  renamed[30] = 'z';
  auto local = zip_local_header_size(bytes_of(renamed), entries[0], "a.npz");
  REQUIRE_FALSE(local);
  CHECK_THAT(local.error().message(), Catch::Contains("names another entry"));
}

TEST_CASE("zip: ZIP64 end records and ZIP64 directory fields", "[formats][zip]") {
  if (!detail::crc_available()) return testing::skip_test("built without ISA-L (zip's CRC-32)");
  // More entries than a plain end record counts: the writer adds a ZIP64 end record and locator.
  std::vector<std::pair<std::string, std::string>> many;
  for (int i = 0; i < 70000; ++i) many.emplace_back(fmt::format("{}.npy", i), "");
  const std::string file = zip_of(many);
  auto entries = read_zip(file);
  REQUIRE(entries);
  CHECK(entries->size() == 70000);
  CHECK(entries->back().name == "69999.npy");
}
