// TFRecord, npz and npy datasets end to end in C++: feedline gen writes them, open_dataset()
// resolves them (from indexes, scans and headers; stale and damaged ones), and the pipeline
// checks TFRecord CRCs on every host data path, failing or skipping damaged records. Files
// written by numpy and by a Python TFRecord writer are checked in tests/cli/formats.sh.
#include <fmt/format.h>
#include <xxhash.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>

#include "feedline/loader/dataset.hpp"
#include "feedline/loader/gen.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/loader/manifest.hpp"
#include "feedline/loader/npy.hpp"
#include "feedline/loader/tfrecord.hpp"
#include "feedline/storage/registry.hpp"
#include "formats_support.hpp"
#include "test_support.hpp"

using namespace feedline;
using namespace feedline::loader;
namespace fs = std::filesystem;
using testing::join;
using testing::mentions;
using testing::Store;

namespace {

GenConfig gen_config(DatasetFormat f, std::uint64_t samples = 23) {
  GenConfig c;
  c.format = f;
  c.samples = samples;
  c.sample_size = SizeDistribution::parse("uniform:1:9000").value();
  c.samples_per_shard = 5;
  c.seed = 11;
  return c;
}

bool available(DatasetFormat f) {
  return f == DatasetFormat::kNpy || tfrecord_available();  // npz's CRC-32 is ISA-L's too
}

// Every member's bytes, read through the sample ranges the open resolved: the digest, and the
// TFRecord framing around each record checked by hand.
std::uint64_t digest_of_records(storage::Backend& backend, const Dataset& ds) {
  std::uint64_t sum = 0;
  std::map<std::uint32_t, std::vector<std::byte>> objects;
  for (const Sample& s : ds.samples) {
    auto& obj = objects[s.object];
    if (obj.empty()) obj = testing::read_object(backend, ds.objects[s.object].key);
    REQUIRE(s.offset + s.length <= obj.size());
    for (const Member& m : ds.members_of(s)) {
      REQUIRE(m.offset + m.size <= s.length);
      CHECK(m.decoded_size == m.size);
      CHECK_FALSE(m.name.ends_with(".zst"));
      if (m.check == MemberCheck::kTfRecordCrc) {
        CHECK(m.offset == kTfRecordHeaderBytes);
        CHECK(m.size + kTfRecordFramingBytes == s.length);
        std::uint64_t len = 0;
        std::memcpy(&len, obj.data() + s.offset, 8);
        CHECK(len == m.size);
      }
      sum += testing::xxh3(ConstBytes(obj).subspan(s.offset + m.offset, m.size));
    }
  }
  return sum;
}

// Flips one byte of an object in place (file stores).
void flip_byte(const fs::path& file, std::uint64_t offset) {
  std::FILE* f = std::fopen(file.c_str(), "r+b");
  REQUIRE(f);
  REQUIRE(std::fseek(f, static_cast<long>(offset), SEEK_SET) == 0);
  const int c = std::fgetc(f);
  REQUIRE(std::fseek(f, static_cast<long>(offset), SEEK_SET) == 0);
  std::fputc(c ^ 0x20, f);
  std::fclose(f);
}

struct RunResult {
  std::uint64_t samples = 0, skipped = 0, digest = 0;
  std::optional<Error> error;
  std::vector<std::string> skipped_examples;
  DataPath path = DataPath::kBounce;
  std::uint64_t bounced_bytes = 0;  // the I/O queue's copies out of its own aligned buffers
};

RunResult run_loader(storage::Backend& backend, const Dataset& ds, OnError on_error,
                     GpuDirect gpu_direct = GpuDirect::kAuto) {
  LoaderConfig c;
  c.sampler.batch_size = 4;
  c.sampler.epochs = 1;
  c.memory_budget = 64 << 20;
  c.io_depth = 8;
  c.decode_threads = 2;
  c.on_error = on_error;
  c.gpu_direct = gpu_direct;
  auto loader = Loader::open(backend, ds, c);
  REQUIRE(loader);
  RunResult out;
  for (;;) {
    auto b = (*loader)->next();
    if (!b) {
      out.error = b.error();
      break;
    }
    if (b->end()) break;
    out.samples += b->samples().size();
    out.digest += b->digest();
  }
  const PipelineReport r = (*loader)->report();
  out.skipped = r.delivered.skipped;
  out.skipped_examples = r.delivered.skipped_examples;
  out.path = r.data_path.path;
  out.bounced_bytes = r.io.stats.bounced_bytes;
  return out;
}

}  // namespace

TEST_CASE("formats: tfrecord, npz and npy names", "[dataset][formats]") {
  for (const DatasetFormat f :
       {DatasetFormat::kTfRecord, DatasetFormat::kNpz, DatasetFormat::kNpy}) {
    CHECK(parse_format(format_name(f)).value() == f);
  }
  CHECK(format_name(DatasetFormat::kTfRecord) == "tfrecord");
  auto bad = parse_format("parquet");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().hint(), Catch::Contains("tfrecord, npz or npy"));
}

TEST_CASE(
    "formats: generated tfrecord, npz and npy datasets open on every backend, with the "
    "digest gen recorded",
    "[dataset][formats]") {
  for (const DatasetFormat f :
       {DatasetFormat::kTfRecord, DatasetFormat::kNpz, DatasetFormat::kNpy}) {
    if (!available(f)) {
      testing::skip_test(fmt::format("{}: built without ISA-L", format_name(f)));
      continue;
    }
    for (const char* kind : {"mem", "file", "file-direct"}) {
      for (const bool label : {true, false}) {
        INFO(format_name(f) << " on " << kind << (label ? " with labels" : " without"));
        Store st = testing::make_store(kind, fmt::format("gen-{}-{}", format_name(f), label),
                                       "dataset-formats");
        GenConfig c = gen_config(f);
        c.with_label = label;
        const GenSummary sum = generate_dataset(*st.backend, st.root, c).value();
        for (const DatasetFormat asked : {f, DatasetFormat::kAuto}) {
          DatasetOptions o;
          o.format = asked;
          const Dataset ds = open_dataset(*st.backend, st.root, o).value();
          CHECK(ds.format == f);
          CHECK(ds.samples.size() == c.samples);
          CHECK(ds.members.size() == sum.members);
          CHECK(ds.manifest_digest == sum.digest);
          CHECK(digest_of_records(*st.backend, ds) == sum.digest);
          CHECK(ds.notes.empty());
          CHECK(ds.indexed == (f == DatasetFormat::kTfRecord));
        }
        const Dataset ds = open_dataset(*st.backend, st.root, {}).value();
        if (f == DatasetFormat::kTfRecord) {
          CHECK(ds.objects.size() == 5);  // 23 records, 5 per file
          CHECK(ds.samples[6].key == "shard-000001/000001");
          CHECK(ds.members[6].name == "shard-000001/000001.tfrecord");
          CHECK(ds.members[6].check == MemberCheck::kTfRecordCrc);
        } else if (f == DatasetFormat::kNpz) {
          CHECK(ds.samples[3].key == "000003");
          CHECK(ds.members_of(ds.samples[3])[0].name == "000003.x");
          if (label) CHECK(ds.members_of(ds.samples[3])[1].name == "000003.y");
          if (label) CHECK(ds.members_of(ds.samples[3])[1].size == 8);
        } else {
          CHECK(ds.samples[3].key == "000003");
          CHECK(ds.members[3].name == "000003.npy");
          CHECK(ds.members[3].offset == 0);  // the sample is just the array's bytes
        }
        // The pipeline delivers the same digest on its default data path and the bounce path.
        for (const GpuDirect g : {GpuDirect::kAuto, GpuDirect::kOff}) {
          const RunResult r = run_loader(*st.backend, ds, OnError::kFail, g);
          REQUIRE_FALSE(r.error);
          CHECK(r.samples == c.samples);
          CHECK(r.digest == sum.digest);
        }
      }
    }
  }
}

TEST_CASE("formats: the same config gives the same bytes", "[gen][formats]") {
  for (const DatasetFormat f :
       {DatasetFormat::kTfRecord, DatasetFormat::kNpz, DatasetFormat::kNpy}) {
    if (!available(f)) {
      testing::skip_test(fmt::format("{}: built without ISA-L", format_name(f)));
      continue;
    }
    INFO(format_name(f));
    Store a =
        testing::make_store("mem", fmt::format("det-a-{}", format_name(f)), "dataset-formats");
    Store b =
        testing::make_store("mem", fmt::format("det-b-{}", format_name(f)), "dataset-formats");
    REQUIRE(generate_dataset(*a.backend, a.root, gen_config(f)));
    REQUIRE(generate_dataset(*b.backend, b.root, gen_config(f)));
    const auto la = a.backend->list(a.root).value(), lb = b.backend->list(b.root).value();
    REQUIRE(la.size() == lb.size());
    for (std::size_t i = 0; i < la.size(); ++i) {
      CHECK(la[i].key.substr(a.root.size()) == lb[i].key.substr(b.root.size()));
      if (la[i].key.ends_with(".feedline-dataset")) continue;
      CHECK(testing::read_object(*a.backend, la[i].key) ==
            testing::read_object(*b.backend, lb[i].key));
    }
  }
}

TEST_CASE("formats: gen refuses what these formats cannot hold", "[gen][formats]") {
  for (const DatasetFormat f :
       {DatasetFormat::kTfRecord, DatasetFormat::kNpz, DatasetFormat::kNpy}) {
    GenConfig c = gen_config(f);
    c.compress = CompressionSpec::parse("zstd:3").value();
    auto r = validate(c);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message(), Catch::Contains("uncompressed"));
  }
  GenConfig c = gen_config(DatasetFormat::kTfRecord);
  c.samples_per_shard = 0;
  CHECK_FALSE(validate(c));
}

TEST_CASE("formats: TFRecord indexes that do not fit their file are noted and the file scanned",
          "[dataset][formats]") {
  if (!tfrecord_available()) return testing::skip_test("built without ISA-L");
  Store st = testing::make_store("file", "tf-index", "dataset-formats");
  GenConfig c = gen_config(DatasetFormat::kTfRecord);
  const GenSummary sum = generate_dataset(*st.backend, st.root, c).value();
  const std::string file = join(st.root, "shard-000001.tfrecord"), idx = file + ".idx";
  auto reopen = [&](bool use_index = true) {
    DatasetOptions o;
    o.use_index = use_index;
    auto ds = open_dataset(*st.backend, st.root, o);
    REQUIRE(ds);
    CHECK(ds->samples.size() == c.samples);
    CHECK(digest_of_records(*st.backend, *ds) == sum.digest);
    return std::move(*ds);
  };
  auto write = [&](std::string_view text) {
    REQUIRE(st.backend->write(idx, std::as_bytes(std::span(text.data(), text.size()))));
  };
  const auto original = testing::read_object(*st.backend, idx);
  const std::string text(reinterpret_cast<const char*>(original.data()), original.size());

  SECTION("missing") {
    fs::remove(st.dir / "shard-000001.tfrecord.idx");
    const Dataset ds = reopen();
    CHECK_FALSE(ds.indexed);
    CHECK(mentions(ds.notes, "1 of 5 TFRecord files have no index"));
  }
  SECTION("corrupt") {
    write("garbage\n");
    const Dataset ds = reopen();
    CHECK(mentions(ds.notes, "shard-000001.tfrecord.idx", "scanned the file instead"));
  }
  SECTION("stale: its records do not end where the file does") {
    write(text.substr(0, text.rfind('\n', text.size() - 2) + 1));  // its last record dropped
    const Dataset ds = reopen();
    CHECK(mentions(ds.notes, "shard-000001.tfrecord.idx", "stale index"));
  }
  SECTION("stale: lengths that add up but are not the file's records (probes catch them)") {
    // Two records' lengths traded: the index still covers the file exactly.
    auto entries =
        parse_tfrecord_index(text, fs::file_size(st.dir / "shard-000001.tfrecord"), idx).value();
    REQUIRE(entries[0].length != entries[1].length);
    std::swap(entries[0].length, entries[1].length);
    entries[1].offset = entries[0].length;
    write(format_tfrecord_index(entries));
    const Dataset ds = reopen();
    CHECK(mentions(ds.notes, "shard-000001.tfrecord.idx", "stale index"));
  }
  SECTION("ignored altogether with use_index = false") {
    write("garbage\n");
    const Dataset ds = reopen(false);
    CHECK(ds.notes.empty());
    CHECK_FALSE(ds.indexed);
  }
  SECTION("an index made by DALI's tfrecord2idx for this file is ours byte for byte") {
    // tfrecord2idx writes "offset length\n" per record, length the whole framed record.
    std::string dali;
    std::uint64_t at = 0;
    const auto bytes = testing::read_object(*st.backend, file);
    while (at < bytes.size()) {
      std::uint64_t n = 0;
      std::memcpy(&n, bytes.data() + at, 8);
      dali += fmt::format("{} {}\n", at, n + 16);
      at += n + 16;
    }
    CHECK(dali == text);
  }
}

TEST_CASE(
    "formats: damaged TFRecord headers fail the open naming file and offset, or are "
    "skipped with the records before them kept",
    "[dataset][formats]") {
  if (!tfrecord_available()) return testing::skip_test("built without ISA-L");
  Store st = testing::make_store("file", "tf-damage", "dataset-formats");
  GenConfig c = gen_config(DatasetFormat::kTfRecord);
  REQUIRE(generate_dataset(*st.backend, st.root, c));
  const fs::path file = st.dir / "shard-000002.tfrecord";
  fs::remove(st.dir / "shard-000002.tfrecord.idx");  // scanned
  const auto bytes = testing::read_object(*st.backend, file.string());
  std::uint64_t second = 0;
  std::memcpy(&second, bytes.data(), 8);
  second += kTfRecordFramingBytes;  // where record 1 starts
  flip_byte(file, second + 9);      // its length's CRC
  DatasetOptions o;
  auto failed = open_dataset(*st.backend, st.root, o);
  REQUIRE_FALSE(failed);
  CHECK(failed.error().code() == Errc::kCorrupt);
  CHECK_THAT(failed.error().object(), Catch::Contains("shard-000002.tfrecord"));
  CHECK(failed.error().offset() == second);
  o.skip_bad_objects = true;
  const Dataset ds = open_dataset(*st.backend, st.root, o).value();
  CHECK(ds.samples.size() == c.samples - 4);  // record 0 of the file kept, 1-4 lost
  REQUIRE(ds.skipped.size() == 1);
  CHECK_THAT(ds.skipped[0], Catch::Contains("shard-000002.tfrecord"));
  CHECK_FALSE(ds.manifest_digest);

  // Truncated inside a record: the same, naming the record that runs past the end.
  Store cut = testing::make_store("file", "tf-cut", "dataset-formats");
  REQUIRE(generate_dataset(*cut.backend, cut.root, c));
  fs::remove(cut.dir / "shard-000000.tfrecord.idx");
  fs::resize_file(cut.dir / "shard-000000.tfrecord",
                  fs::file_size(cut.dir / "shard-000000.tfrecord") - 3);
  auto truncated = open_dataset(*cut.backend, cut.root, {});
  REQUIRE_FALSE(truncated);
  CHECK_THAT(truncated.error().message(), Catch::Contains("truncated"));
  CHECK_THAT(truncated.error().object(), Catch::Contains("shard-000000.tfrecord"));
}

TEST_CASE("formats: the pipeline checks every TFRecord record's CRCs on every host data path",
          "[dataset][formats][pipeline]") {
  if (!tfrecord_available()) return testing::skip_test("built without ISA-L");
  Store st = testing::make_store("file", "tf-crc", "dataset-formats");
  GenConfig c = gen_config(DatasetFormat::kTfRecord, 60);
  c.samples_per_shard = 20;
  const GenSummary sum = generate_dataset(*st.backend, st.root, c).value();
  const Dataset clean = open_dataset(*st.backend, st.root, {}).value();
  // Record 4 of file 1: one byte of its data, then (another copy) its length's CRC. The index
  // still fits the file and the record is not among those probed (0, 2, 5, 8, ... of 20): only
  // the decode step sees the damage.
  const Sample& victim = clean.samples[24];
  REQUIRE(victim.key == "shard-000001/000004");
  const std::uint64_t digest_of_victim =
      testing::xxh3(ConstBytes(testing::read_object(*st.backend, clean.objects[victim.object].key))
                        .subspan(victim.offset + 12, victim.length - 16));
  for (const std::uint64_t where : {victim.offset + 12 + victim.length / 3, victim.offset + 9}) {
    INFO("damaged byte at " << where);
    const fs::path file = st.dir / "shard-000001.tfrecord";
    flip_byte(file, where);
    const Dataset ds = open_dataset(*st.backend, st.root, {}).value();
    REQUIRE(ds.samples.size() == c.samples);
    for (const GpuDirect g : {GpuDirect::kAuto, GpuDirect::kOff}) {
      INFO("gpu_direct " << gpu_direct_name(g));
      RunResult failed = run_loader(*st.backend, ds, OnError::kFail, g);
      REQUIRE(failed.error);
      CHECK(failed.error->code() == Errc::kCorrupt);
      CHECK_THAT(failed.error->object(), Catch::Contains("shard-000001.tfrecord"));
      CHECK(failed.error->offset() == victim.offset);
      CHECK_THAT(failed.error->message(), Catch::Contains("CRC32C"));
      const RunResult skipped = run_loader(*st.backend, ds, OnError::kSkip, g);
      REQUIRE_FALSE(skipped.error);
      CHECK(skipped.samples == c.samples - 1);
      CHECK(skipped.skipped == 1);
      CHECK(skipped.digest == sum.digest - digest_of_victim);
      REQUIRE_FALSE(skipped.skipped_examples.empty());
      CHECK_THAT(skipped.skipped_examples[0], Catch::Contains("shard-000001.tfrecord"));
    }
    flip_byte(file, where);  // repaired
  }
  const RunResult again = run_loader(*st.backend, clean, OnError::kFail);
  REQUIRE_FALSE(again.error);
  CHECK(again.digest == sum.digest);
  CHECK(again.path != DataPath::kHostDirect);  // the host checks each record's CRCs first
}

TEST_CASE("formats: damaged npz and npy files are data errors naming the file and the array",
          "[dataset][formats]") {
  if (!tfrecord_available()) return testing::skip_test("built without ISA-L (npz's CRC-32)");
  Store st = testing::make_store("file", "npz-damage", "dataset-formats");
  GenConfig c = gen_config(DatasetFormat::kNpz, 6);
  REQUIRE(generate_dataset(*st.backend, st.root, c));
  fs::remove(st.dir / ".feedline-dataset");  // the files as they are, unchecked
  const fs::path victim = st.dir / "000004.npz";
  SECTION("truncated: its end records are gone") {
    fs::resize_file(victim, fs::file_size(victim) - 30);
    auto r = open_dataset(*st.backend, st.root, {});
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().object(), Catch::Contains("000004.npz"));
    DatasetOptions skip;
    skip.skip_bad_objects = true;
    const Dataset ds = open_dataset(*st.backend, st.root, skip).value();
    CHECK(ds.samples.size() == 5);
    REQUIRE(ds.skipped.size() == 1);
    CHECK_THAT(ds.skipped[0], Catch::Contains("000004.npz"));
  }
  SECTION("an array's .npy header claims more bytes than its entry holds") {
    auto bytes = testing::read_object(*st.backend, victim.string());
    const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    const std::size_t shape = text.find("'shape': (");
    REQUIRE(shape != std::string::npos);
    flip_byte(victim, shape + 10);  // the first digit of x's length: a digit 2 more or less
    auto r = open_dataset(*st.backend, st.root, {});
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kCorrupt);
    CHECK_THAT(r.error().object(), Catch::Contains("000004.npz"));
    CHECK_THAT(r.error().message(), Catch::Contains("array 'x'"));
  }
  SECTION("npy: a file cut short") {
    Store npy = testing::make_store("file", "npy-damage", "dataset-formats");
    REQUIRE(generate_dataset(*npy.backend, npy.root, gen_config(DatasetFormat::kNpy, 4)));
    fs::resize_file(npy.dir / "000002.npy", fs::file_size(npy.dir / "000002.npy") - 1);
    fs::remove(npy.dir / ".feedline-dataset");
    auto r = open_dataset(*npy.backend, npy.root, {});
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().object(), Catch::Contains("000002.npy"));
    CHECK_THAT(r.error().message(), Catch::Contains("truncated"));
  }
}

TEST_CASE("formats: auto picks the format from the extensions, and says when several are there",
          "[dataset][formats]") {
  Store st = testing::make_store("mem", "auto-mixed", "dataset-formats");
  auto put = [&](const std::string& name, std::string_view text) {
    REQUIRE(
        st.backend->write(join(st.root, name), std::as_bytes(std::span(text.data(), text.size()))));
  };
  const std::uint64_t shape[] = {3};
  put("a.npy", format_npy_header("|u1", shape) + "abc");
  put("b.npy", format_npy_header("|u1", shape) + "def");
  Dataset ds = open_dataset(*st.backend, st.root, {}).value();
  CHECK(ds.format == DatasetFormat::kNpy);
  CHECK(ds.samples.size() == 2);
  CHECK(ds.samples[0].length == 3);
  if (!tfrecord_available()) return testing::skip_test("mixed with tfrecord: built without ISA-L");
  std::vector<std::byte> rec;
  REQUIRE(append_tfrecord(std::as_bytes(std::span("record", 6)), rec));
  REQUIRE(st.backend->write(join(st.root, "c.tfrecord"), rec));
  ds = open_dataset(*st.backend, st.root, {}).value();
  CHECK(ds.format == DatasetFormat::kTfRecord);  // tfrecord comes before npy
  CHECK(ds.samples.size() == 1);
  CHECK(mentions(ds.notes, "several formats (tfrecord, npy)"));
  DatasetOptions npy;
  npy.format = DatasetFormat::kNpy;
  CHECK(open_dataset(*st.backend, st.root, npy).value().samples.size() == 2);
}

TEST_CASE("formats: O_DIRECT reads of records and arrays at unaligned offsets are not bounced",
          "[dataset][formats]") {
  // TFRecord records and npz arrays start anywhere in their file. The pipeline reads the aligned
  // cover of each sample into its buffer, so the queue never copies out of a bounce buffer of
  // its own, and the members past the head are the right bytes.
  for (const DatasetFormat f : {DatasetFormat::kTfRecord, DatasetFormat::kNpz}) {
    if (!available(f)) {
      testing::skip_test(fmt::format("{}: built without ISA-L", format_name(f)));
      continue;
    }
    Store st = testing::make_store("file-direct", fmt::format("aligned-{}", format_name(f)),
                                   "dataset-formats");
    const GenSummary sum = generate_dataset(*st.backend, st.root, gen_config(f, 40)).value();
    const Dataset ds = open_dataset(*st.backend, st.root, {}).value();
    for (const GpuDirect g : {GpuDirect::kAuto, GpuDirect::kOff}) {
      INFO(format_name(f) << ", gpu_direct " << gpu_direct_name(g));
      const RunResult r = run_loader(*st.backend, ds, OnError::kFail, g);
      REQUIRE_FALSE(r.error);
      CHECK(r.samples == 40);
      CHECK(r.digest == sum.digest);
      CHECK(r.bounced_bytes == 0);
    }
  }
}
