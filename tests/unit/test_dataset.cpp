// open_dataset(): files and tar datasets over the mem:// and file backends, with and without
// compression and indexes; archives made by GNU tar; and the errors a user sees for bad input.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "feedline/loader/codec.hpp"
#include "feedline/loader/dataset.hpp"
#include "feedline/loader/decoder.hpp"
#include "feedline/loader/gen.hpp"
#include "feedline/loader/manifest.hpp"
#include "feedline/loader/tar_index.hpp"
#include "feedline/loader/tfrecord.hpp"
#include "feedline/storage/decorators.hpp"
#include "feedline/storage/registry.hpp"
#include "formats_support.hpp"
#include "test_support.hpp"

using namespace feedline;
using namespace feedline::loader;
namespace fs = std::filesystem;
using testing::join;
using testing::make_store;
using testing::mentions;
using testing::Store;

namespace {

// Reads every sample's byte range and returns the digest of its decoded members: proves the
// ranges and member offsets are right, whatever path (index or scan) found them.
std::uint64_t digest_through_samples(storage::Backend& backend, const Dataset& ds) {
  std::uint64_t sum = 0;
  std::vector<std::vector<std::byte>> objects(ds.objects.size());
  const loader::DecodePlan plan(ds, loader::default_decoders());
  for (const Sample& s : ds.samples) {
    auto& obj = objects[s.object];
    if (obj.empty()) obj = testing::read_object(backend, ds.objects[s.object].key);
    REQUIRE(s.offset + s.length <= obj.size());
    const ConstBytes range = ConstBytes(obj).subspan(s.offset, s.length);
    for (const Member& m : ds.members_of(s)) {
      REQUIRE(m.offset + m.size <= s.length);
      const auto decoded = testing::decode(m.name, range.subspan(m.offset, m.size));
      if (m.decoded_size != 0) CHECK(m.decoded_size == decoded.size());
      CHECK(plan.decodes(static_cast<std::size_t>(&m - ds.members.data())) ==
            m.name.ends_with(".zst"));
      sum += testing::xxh3(decoded);
    }
  }
  return sum;
}

// The same samples and members at the same places of the same objects. A shard opened through
// its index starts each sample's range at its first member's header (MemberCheck::kTarHeader),
// a scanned one at its data: compared are where members and ranges end and where data starts.
void check_same_samples(const Dataset& a, const Dataset& b) {
  REQUIRE(a.samples.size() == b.samples.size());
  REQUIRE(a.members.size() == b.members.size());
  std::uint64_t headers = 0;  // bytes a's ranges hold before their first member's data, b's not
  for (std::size_t i = 0; i < a.samples.size(); ++i) {
    INFO("sample " << i);
    const Sample &sa = a.samples[i], &sb = b.samples[i];
    CHECK(sa.key == sb.key);
    CHECK(sa.object == sb.object);
    CHECK(sa.first_member == sb.first_member);
    CHECK(sa.member_count == sb.member_count);
    CHECK(sa.offset + sa.length == sb.offset + sb.length);
    for (std::uint32_t m = 0; m < sa.member_count; ++m) {
      const Member &ma = a.members[sa.first_member + m], &mb = b.members[sb.first_member + m];
      CHECK(ma.name == mb.name);
      CHECK(sa.offset + ma.offset == sb.offset + mb.offset);
      CHECK(ma.size == mb.size);
    }
    headers += sb.offset - sa.offset;
  }
  CHECK(a.total_bytes == b.total_bytes + headers);
}

std::string text_of(storage::Backend& backend, const std::string& key) {
  const auto bytes = testing::read_object(backend, key);
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

void write_text(storage::Backend& backend, const std::string& key, std::string_view text) {
  REQUIRE(backend.write(key, std::as_bytes(std::span(text.data(), text.size()))));
}

TarIndex index_of(storage::Backend& backend, const std::string& key) {
  auto r = parse_tar_index(text_of(backend, key), key);
  REQUIRE(r);
  return std::move(*r);
}

// An index as a tool would write it: well-formed, its checksum right, whatever it says.
void write_index(storage::Backend& backend, const std::string& key, const TarIndex& index) {
  write_text(backend, key, format_tar_index(index).value());
}

}  // namespace

TEST_CASE("dataset: format names", "[dataset][formats]") {
  CHECK(parse_format("files").value() == DatasetFormat::kFiles);
  CHECK(parse_format("tar").value() == DatasetFormat::kTar);
  CHECK(format_name(DatasetFormat::kTar) == "tar");
  auto r = parse_format("parquet");
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::kInvalidArgument);
  CHECK(r.error().what().find("parquet") != std::string::npos);
}

TEST_CASE(
    "dataset: generated datasets open on every backend, with and without compression and index",
    "[dataset][formats]") {
  for (const char* kind : {"mem", "file", "file-direct"}) {
    for (DatasetFormat f : {DatasetFormat::kFiles, DatasetFormat::kTar}) {
      for (bool zstd : {false, true}) {
        if (zstd && !zstd_available()) continue;
        DYNAMIC_SECTION(kind << " " << format_name(f) << (zstd ? " zstd" : "")) {
          Store st = make_store(kind, std::string(format_name(f)) + (zstd ? "-zstd" : ""));
          GenConfig c;
          c.format = f;
          c.samples = 45;
          c.samples_per_shard = 16;
          // Mostly small samples, some larger than the 1 MiB scan chunk (the scan jumps over them).
          c.sample_size = SizeDistribution::parse("lognormal:300KiB:600KiB").value();
          c.max_sample_size = 3 << 20;
          c.compress = {zstd ? Compression::kZstd : Compression::kNone, 1};
          c.compressibility = 0.3;
          c.seed = 9;
          auto summary = generate_dataset(*st.backend, st.root, c);
          REQUIRE(summary);

          DatasetOptions o;
          o.format = f;
          auto ds = open_dataset(*st.backend, st.root, o);
          REQUIRE(ds);
          CHECK(ds->format == f);
          CHECK(ds->notes.empty());
          REQUIRE(ds->samples.size() == 45);
          CHECK(ds->objects.size() == (f == DatasetFormat::kFiles ? 45u : 3u));
          CHECK(ds->members.size() == (f == DatasetFormat::kFiles ? 45u : 90u));
          std::uint64_t total = 0, max = 0;
          for (std::size_t i = 0; i < ds->samples.size(); ++i) {
            const Sample& s = ds->samples[i];
            CHECK(s.key == sample_key(i, 45));
            total += s.length;
            max = std::max(max, s.length);
            const auto members = ds->members_of(s);
            REQUIRE(members.size() == (f == DatasetFormat::kFiles ? 1u : 2u));
            CHECK(members[0].name == s.key + (zstd ? ".bin.zst" : ".bin"));
            if (f == DatasetFormat::kTar) {
              // Opened through the index: each member read with its header, and checked.
              CHECK(members[0].offset == 512);
              CHECK(members[0].check == MemberCheck::kTarHeader);
              CHECK(members[1].check == MemberCheck::kTarHeader);
              CHECK(members[1].name == s.key + ".cls");
              CHECK(members[1].offset > members[0].size);  // a tar header lies between them
              CHECK(s.object == i / 16);
            } else {
              CHECK(members[0].offset == 0);
              CHECK(members[0].check == MemberCheck::kNone);
              CHECK(s.offset == 0);
              CHECK(s.object == i);
            }
          }
          CHECK(ds->total_bytes == total);
          CHECK(ds->max_sample_bytes == max);
          CHECK(max > (1u << 20));
          CHECK(digest_through_samples(*st.backend, *ds) == summary->digest);

          if (f == DatasetFormat::kTar) {
            CHECK(ds->indexed);
            o.use_index = false;
            auto scanned = open_dataset(*st.backend, st.root, o);
            REQUIRE(scanned);
            CHECK_FALSE(scanned->indexed);
            CHECK(scanned->notes.empty());
            check_same_samples(*ds, *scanned);
            CHECK(scanned->members[0].offset == 0);  // read from the data on: no header check
            CHECK(scanned->members[0].check == MemberCheck::kNone);
            CHECK(digest_through_samples(*st.backend, *scanned) == summary->digest);
            // Only the index knows decoded sizes of compressed members without reading them.
            CHECK(ds->members[0].decoded_size != 0);
            CHECK(scanned->members[0].decoded_size == (zstd ? 0 : scanned->members[0].size));
          }
        }
      }
    }
  }
}

TEST_CASE("dataset: stale or corrupt indexes are noted and the shard scanned",
          "[dataset][formats]") {
  Store st = make_store("mem", "stale");
  GenConfig c;
  c.format = DatasetFormat::kTar;
  c.samples = 20;
  c.samples_per_shard = 10;
  c.sample_size = SizeDistribution::parse("normal:8KiB:2KiB").value();
  REQUIRE(generate_dataset(*st.backend, st.root, c));
  DatasetOptions o;
  o.format = DatasetFormat::kTar;
  o.use_index = false;
  const Dataset scanned = open_dataset(*st.backend, st.root, o).value();
  o.use_index = true;

  SECTION("stale: written for another shard size") {
    // Rendered with its checksum (a hand edit is caught by the checksum first: below).
    const std::string key = join(st.root, "shard-000001.tar.idx");
    TarIndex index = index_of(*st.backend, key);
    index.shard_bytes += 100000;
    write_index(*st.backend, key, index);
    auto ds = open_dataset(*st.backend, st.root, o);
    REQUIRE(ds);
    CHECK_FALSE(ds->indexed);
    REQUIRE(ds->notes.size() == 1);
    CHECK(ds->notes[0].find("stale index") != std::string::npos);
    CHECK(ds->notes[0].find("shard-000001.tar.idx") != std::string::npos);
    check_same_samples(*ds, scanned);
  }
  SECTION("corrupt: garbage") {
    const std::string key = join(st.root, "shard-000000.tar.idx");
    REQUIRE(
        st.backend->write(key, std::as_bytes(std::span("feedline-tar-index 1\nnonsense\n", 30))));
    auto ds = open_dataset(*st.backend, st.root, o);
    REQUIRE(ds);
    REQUIRE(ds->notes.size() == 1);
    CHECK(ds->notes[0].find("corrupt tar index") != std::string::npos);
    check_same_samples(*ds, scanned);
  }
  SECTION("truncated index") {
    const std::string key = join(st.root, "shard-000000.tar.idx");
    auto bytes = testing::read_object(*st.backend, key);
    bytes.resize(bytes.size() / 2);
    REQUIRE(st.backend->write(key, bytes));
    auto ds = open_dataset(*st.backend, st.root, o);
    REQUIRE(ds);
    REQUIRE(ds->notes.size() == 1);
    CHECK(mentions(ds->notes, "shard-000000.tar.idx", "(truncated?)"));
    check_same_samples(*ds, scanned);
  }
  SECTION("a stored size edited by hand: the checksum") {
    const std::string key = join(st.root, "shard-000000.tar.idx");
    std::string text = text_of(*st.backend, key);
    const TarIndex index = index_of(*st.backend, key);
    const std::string line = fmt::format("{} {} {} ", index.entries[2].header_offset,
                                         index.entries[2].data_offset, index.entries[2].size);
    const std::size_t at = text.find(line);
    REQUIRE(at != std::string::npos);
    text.replace(at, line.size(),
                 fmt::format("{} {} {} ", index.entries[2].header_offset,
                             index.entries[2].data_offset, index.entries[2].size - 1));
    write_text(*st.backend, key, text);
    auto ds = open_dataset(*st.backend, st.root, o);
    REQUIRE(ds);
    CHECK_FALSE(ds->indexed);
    REQUIRE(ds->notes.size() == 1);
    CHECK(mentions(ds->notes, "shard-000000.tar.idx", "checksum mismatch"));
    CHECK(mentions(ds->notes, "scanned the shard instead"));
    check_same_samples(*ds, scanned);
  }
  SECTION("a name edited by hand: the checksum") {
    const std::string key = join(st.root, "shard-000001.tar.idx");
    std::string text = text_of(*st.backend, key);
    const std::size_t at = text.find("000012.cls");
    REQUIRE(at != std::string::npos);
    text.replace(at, 10, "000013.cls");
    write_text(*st.backend, key, text);
    auto ds = open_dataset(*st.backend, st.root, o);
    REQUIRE(ds);
    REQUIRE(ds->notes.size() == 1);
    CHECK(mentions(ds->notes, "shard-000001.tar.idx", "checksum mismatch"));
    check_same_samples(*ds, scanned);
  }
  SECTION("a tool's index, checksum right, with a wrong size or name: the probes") {
    const std::string key = join(st.root, "shard-000000.tar.idx");
    TarIndex index = index_of(*st.backend, key);
    SECTION("the first member's size") { index.entries.front().size -= 1; }
    SECTION("the last member's name") { index.entries.back().name = "000099.cls"; }
    write_index(*st.backend, key, index);
    auto ds = open_dataset(*st.backend, st.root, o);
    REQUIRE(ds);
    CHECK_FALSE(ds->indexed);
    REQUIRE(ds->notes.size() == 1);
    CHECK(mentions(ds->notes, "shard-000000.tar.idx", "disagrees with the shard"));
    check_same_samples(*ds, scanned);
  }
  SECTION("a version 1 index (no checksum): scanned, with a note saying so") {
    const std::string key = join(st.root, "shard-000001.tar.idx");
    std::string text = text_of(*st.backend, key);
    text.erase(text.rfind("checksum "));
    text.replace(0, 20, "feedline-tar-index 1");
    REQUIRE(parse_tar_index(text, key)->version == 1);  // a valid version 1 index of this shard
    write_text(*st.backend, key, text);
    auto ds = open_dataset(*st.backend, st.root, o);
    REQUIRE(ds);
    CHECK_FALSE(ds->indexed);
    REQUIRE(ds->notes.size() == 1);
    CHECK(mentions(ds->notes, "shard-000001.tar.idx", "old format 1"));
    CHECK(mentions(ds->notes, "regenerate", "delete the .idx"));
    check_same_samples(*ds, scanned);

    // Every shard's index of version 1: one note for them all.
    const std::string key0 = join(st.root, "shard-000000.tar.idx");
    std::string text0 = text_of(*st.backend, key0);
    text0.erase(text0.rfind("checksum "));
    text0.replace(0, 20, "feedline-tar-index 1");
    write_text(*st.backend, key0, text0);
    auto all = open_dataset(*st.backend, st.root, o);
    REQUIRE(all);
    REQUIRE(all->notes.size() == 1);
    CHECK(mentions(all->notes, "2 indexes", "old format 1"));
    check_same_samples(*all, scanned);
  }
  SECTION("a good index is used: a few reads per shard, not the shard") {
    auto ds = open_dataset(*st.backend, st.root, o);
    REQUIRE(ds);
    CHECK(ds->indexed);
    CHECK(ds->notes.empty());
    check_same_samples(*ds, scanned);
    std::uint64_t shard_bytes = 0;
    for (const auto& obj : ds->objects) shard_bytes += obj.size;
    // The manifest, then per shard its index and the 8 probed members' headers (one batch).
    CHECK(ds->open_reads == 1 + 2 * (1 + kTarIndexProbes));
    CHECK(ds->open_bytes < shard_bytes / 2);
    CHECK(scanned.open_bytes >= shard_bytes);
  }
}

TEST_CASE("dataset: an index copied from another shard of the same size is not trusted",
          "[dataset][formats]") {
  for (const char* kind : {"mem", "file-direct"}) {
    DYNAMIC_SECTION(kind) {
      Store st = make_store(kind, "copied");
      Store other = make_store(kind, "copied-other");
      GenConfig c;
      c.format = DatasetFormat::kTar;
      c.samples = 30;
      c.samples_per_shard = 10;
      c.sample_size = SizeDistribution::parse("10000").value();  // every shard the same size
      c.seed = 1;
      const GenSummary summary = generate_dataset(*st.backend, st.root, c).value();
      c.seed = 7;
      REQUIRE(generate_dataset(*other.backend, other.root, c));
      const std::string shard = join(st.root, "shard-000000.tar");
      const std::string copied = join(other.root, "shard-000001.tar.idx");
      // Same size, so the size check alone would trust it; its labels' sizes differ from this
      // shard's, so trusting it would deliver wrong bytes.
      REQUIRE(index_of(*other.backend, copied).shard_bytes == st.backend->stat(shard)->size);
      write_text(*st.backend, shard + ".idx", text_of(*other.backend, copied));

      DatasetOptions o;
      o.format = DatasetFormat::kTar;
      auto ds = open_dataset(*st.backend, st.root, o);
      REQUIRE(ds);
      CHECK_FALSE(ds->indexed);
      REQUIRE(ds->notes.size() == 1);
      CHECK(mentions(ds->notes, "shard-000000.tar.idx", "stale index"));
      CHECK(mentions(ds->notes, "'000010.bin'"));  // the member the copied index names
      o.use_index = false;
      check_same_samples(*ds, open_dataset(*st.backend, st.root, o).value());
      CHECK(digest_through_samples(*st.backend, *ds) == summary.digest);
      CHECK(ds->manifest_digest == summary.digest);
    }
  }
}

TEST_CASE("dataset: a generated dataset's manifest proves it complete",
          "[dataset][formats][manifest]") {
  Store st = make_store("file", "manifest");
  const fs::path dir = st.root;
  GenConfig c;
  c.format = DatasetFormat::kTar;
  c.samples = 25;
  c.samples_per_shard = 10;
  c.sample_size = SizeDistribution::parse("3000").value();
  const GenSummary summary = generate_dataset(*st.backend, st.root, c).value();
  const std::string manifest = (dir / ".feedline-dataset").string();
  DatasetOptions o;
  o.format = DatasetFormat::kTar;

  SECTION("as written: the manifest and its digest") {
    auto ds = open_dataset(*st.backend, st.root, o);
    REQUIRE(ds);
    CHECK(ds->notes.empty());
    CHECK(ds->manifest == manifest);
    CHECK(ds->manifest_digest == summary.digest);
    CHECK(digest_through_samples(*st.backend, *ds) == summary.digest);
  }
  SECTION("a shard deleted since: an error naming the dataset, the manifest and what is missing") {
    fs::remove(dir / "shard-000001.tar");
    fs::remove(dir / "shard-000001.tar.idx");
    auto r = open_dataset(*st.backend, st.root, o);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kCorrupt);
    CHECK(r.error().object() == st.root);
    const std::string what = r.error().what();
    CHECK(what.find(manifest) != std::string::npos);
    CHECK(what.find("lists 3 tar shards, 2 are there") != std::string::npos);
    CHECK(what.find("shard-000001.tar first") != std::string::npos);
    CHECK(r.error().hint().find("re-run the same feedline gen") != std::string::npos);
  }
  SECTION("a shard cut at a member boundary: an error naming it; a note with skip_bad_objects") {
    const fs::path shard = dir / "shard-000002.tar";  // samples 20..24
    const TarIndex index = index_of(*st.backend, shard.string() + ".idx");
    fs::remove(shard.string() + ".idx");
    fs::resize_file(shard, index.entries[4].header_offset);  // samples 20 and 21 left
    auto r = open_dataset(*st.backend, st.root, o);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kCorrupt);
    CHECK(r.error().object() == shard.string());
    CHECK(r.error().message().find("holds 2 samples (4 members)") != std::string::npos);
    CHECK(r.error().message().find("says 5 (10)") != std::string::npos);
    o.skip_bad_objects = true;
    auto skipped = open_dataset(*st.backend, st.root, o);
    REQUIRE(skipped);
    CHECK(skipped->samples.size() == 22);
    CHECK(mentions(skipped->notes, shard.string(), "holds 2 samples"));
    CHECK_FALSE(skipped->manifest_digest);
  }
  SECTION("an object added since: opened, but the manifest's digest no longer applies") {
    REQUIRE(fs::copy_file(dir / "shard-000000.tar", dir / "shard-000003.tar"));
    auto ds = open_dataset(*st.backend, st.root, o);
    REQUIRE(ds);
    CHECK(ds->samples.size() == 35);
    CHECK(ds->notes.empty());
    CHECK(ds->manifest == manifest);
    CHECK_FALSE(ds->manifest_digest);
  }
  SECTION("a manifest claiming far more than is there: an error at once, not a count of them") {
    std::string text(4096, '\0');
    {
      std::FILE* f = std::fopen(manifest.c_str(), "rb");
      REQUIRE(f);
      text.resize(std::fread(text.data(), 1, text.size(), f));
      std::fclose(f);
    }
    // Consistent in itself (objects as the samples make), a day's enumeration were it done.
    for (auto [from, to] : {std::pair{"\nsamples 25\n", "\nsamples 1000000000000000\n"},
                            std::pair{"\nobjects 3\n", "\nobjects 100000000000000\n"}}) {
      const auto at = text.find(from);
      REQUIRE(at != std::string::npos);
      text.replace(at, std::strlen(from), to);
    }
    write_text(*st.backend, manifest, text);
    auto r = open_dataset(*st.backend, st.root, o);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kCorrupt);
    const std::string what = r.error().what();
    INFO(what);
    CHECK(what.find("3 found there") != std::string::npos);
    CHECK(what.find("at least 99999999999997 missing") != std::string::npos);
    CHECK(what.find("shard-00000000000000.tar first") != std::string::npos);  // names widen
  }
  SECTION("a corrupt manifest: an error naming it") {
    write_text(*st.backend, manifest, "feedline-dataset 1\nstate complete\n");
    auto r = open_dataset(*st.backend, st.root, o);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kCorrupt);
    CHECK(r.error().object() == manifest);
    CHECK(r.error().message().find("corrupt dataset manifest") != std::string::npos);
  }
  SECTION("opened in another format, or one shard of it: no check") {
    fs::remove(dir / "shard-000001.tar");
    DatasetOptions as_files;
    as_files.format = DatasetFormat::kFiles;
    auto files = open_dataset(*st.backend, st.root, as_files);  // each remaining object a sample
    REQUIRE(files);
    CHECK(files->samples.size() == 2);
    auto one = open_dataset(*st.backend, (dir / "shard-000000.tar").string(), o);
    REQUIRE(one);
    CHECK(one->samples.size() == 10);
    CHECK(one->manifest.empty());
  }
  SECTION("a manifest saying in-progress below the root: an error naming it") {
    const fs::path sub = dir / "more";
    c.format = DatasetFormat::kFiles;
    std::stop_source stop;
    GenHooks hooks;
    hooks.stop = stop.get_token();
    hooks.progress = [&](std::uint64_t n) {
      if (n == 3) stop.request_stop();
    };
    REQUIRE_FALSE(generate_dataset(*st.backend, sub.string(), c, hooks));
    auto r = open_dataset(*st.backend, st.root, {});
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kCorrupt);
    CHECK(r.error().object() == (sub / ".feedline-dataset").string());
    CHECK(r.error().message().find(sub.string() + " is incomplete") != std::string::npos);
  }
}

TEST_CASE("dataset: a stop request ends the open with kCancelled, also with skip_bad_objects",
          "[dataset][formats]") {
  Store st = make_store("mem", "stop");
  GenConfig c;
  c.format = DatasetFormat::kTar;
  c.samples = 20;
  c.samples_per_shard = 10;
  REQUIRE(generate_dataset(*st.backend, st.root, c));
  std::stop_source stop;
  stop.request_stop();
  DatasetOptions o;
  o.format = DatasetFormat::kTar;
  o.stop = stop.get_token();
  o.skip_bad_objects = true;
  for (bool index : {true, false}) {
    o.use_index = index;
    auto r = open_dataset(*st.backend, st.root, o);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kCancelled);
  }
  o.stop = {};
  CHECK(open_dataset(*st.backend, st.root, o));
}

TEST_CASE("dataset: a stop while a read of the open is in flight says what was being opened",
          "[dataset][formats]") {
  // Every read takes 30 s (a stalled server, a slow disk): the stop cancels the one in flight,
  // whose error names no object (only an offset). The open's error must still say what it was
  // opening: "interrupted while opening the dataset ROOT", naming an object, no bare offset.
  for (const DatasetFormat f : {DatasetFormat::kTar, DatasetFormat::kTfRecord}) {
    if (f == DatasetFormat::kTfRecord && !tfrecord_available()) continue;
    INFO(format_name(f));
    Store st = make_store("mem", fmt::format("stop-in-flight-{}", format_name(f)));
    GenConfig c;
    c.format = f;
    c.samples = 20;
    c.samples_per_shard = 10;
    REQUIRE(generate_dataset(*st.backend, st.root, c));
    auto slow =
        storage::make_throttle(std::move(st.backend), {.latency = std::chrono::seconds(30)});
    std::stop_source stop;
    std::jthread stopper([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      stop.request_stop();
    });
    DatasetOptions o;
    o.format = f;
    o.stop = stop.get_token();
    const auto t0 = std::chrono::steady_clock::now();
    auto r = open_dataset(*slow, st.root, o);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kCancelled);
    CHECK(r.error().message().find("interrupted while opening the dataset") != std::string::npos);
    CHECK(r.error().message().find(st.root) != std::string::npos);
    CHECK_FALSE(r.error().object().empty());
    CHECK_FALSE(r.error().offset().has_value());
  }
}

TEST_CASE("dataset: shards made by GNU tar, with directories and links", "[dataset][formats]") {
  std::string out;
  if (testing::run_command("tar --version", &out) != 0 ||
      out.find("GNU tar") == std::string::npos) {
    FAIL("GNU tar is required by this test (apt-get install tar): " << out);
  }
  const fs::path dir = testing::scratch_dir("dataset-gnutar");
  const fs::path src = dir / "src", data = dir / "data";
  fs::remove_all(dir / "src");
  fs::remove_all(data);
  fs::create_directories(src / "train");
  fs::create_directories(data);
  for (int i = 0; i < 5; ++i) {
    const std::string k = "train/s" + std::to_string(i);
    testing::write_file(src / (k + ".jpg"), testing::pattern_bytes(1000 + 777 * i, i));
    testing::write_file(src / (k + ".cls"), {std::byte('0' + i)});
    testing::write_file(src / (k + ".json"), testing::pattern_bytes(20, 100 + i));
  }
  fs::create_symlink("s0.jpg", src / "train" / "zz-link");
  testing::write_file(src / "train" / ".hidden", testing::pattern_bytes(10, 1));
  REQUIRE(testing::run_command("tar --format=pax --sort=name -cf '" + (data / "a.tar").string() +
                               "' -C '" + src.string() + "' train") == 0);
  testing::write_file(data / "README.txt", testing::pattern_bytes(10, 2));  // not a shard: ignored

  Store st = make_store("file", "unused");
  DatasetOptions o;
  o.format = DatasetFormat::kTar;
  auto ds = open_dataset(*st.backend, data.string(), o);
  REQUIRE(ds);
  CHECK_FALSE(ds->indexed);
  REQUIRE(ds->samples.size() == 5);
  for (int i = 0; i < 5; ++i) {
    const Sample& s = ds->samples[i];
    CHECK(s.key == "train/s" + std::to_string(i));
    const auto m = ds->members_of(s);
    REQUIRE(m.size() == 3);  // .cls, .jpg, .json in name order
    CHECK(m[0].name == s.key + ".cls");
    CHECK(m[1].name == s.key + ".jpg");
    CHECK(m[1].size == 1000u + 777u * i);
    CHECK(m[2].name == s.key + ".json");
  }
  // Every member's bytes are where the dataset says.
  const auto bytes = testing::read_object(*st.backend, (data / "a.tar").string());
  for (const Sample& s : ds->samples) {
    for (const Member& m : ds->members_of(s)) {
      const auto want = testing::read_object(*st.backend, (src / m.name).string());
      CHECK(std::equal(want.begin(), want.end(),
                       bytes.begin() + static_cast<std::ptrdiff_t>(s.offset + m.offset)));
    }
  }

  SECTION("a root naming one shard is a dataset of that shard") {
    auto one = open_dataset(*st.backend, (data / "a.tar").string(), o);
    REQUIRE(one);
    check_same_samples(*ds, *one);
  }
  SECTION("the same files as a files dataset: one sample per file, hidden files skipped") {
    DatasetOptions fo;
    auto files = open_dataset(*st.backend, (src / "train").string(), fo);
    REQUIRE(files);
    CHECK(files->samples.size() == 16);  // 15 files and the symlink (it names a file)
    CHECK(files->samples[0].key == "s0");
    CHECK(files->members[0].name == "s0.cls");
  }
}

TEST_CASE("dataset: bad input gives clear errors", "[dataset][formats]") {
  DatasetOptions tar_opts;
  tar_opts.format = DatasetFormat::kTar;

  SECTION("an empty location") {
    Store st = make_store("mem", "empty");
    auto r = open_dataset(*st.backend, st.root, {});
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kNotFound);
    CHECK(r.error().what().find("no samples under mem://dataset/empty") != std::string::npos);
    auto t = open_dataset(*st.backend, st.root, tar_opts);
    REQUIRE_FALSE(t);
    CHECK(t.error().code() == Errc::kNotFound);
    CHECK(t.error().what().find("no tar shards under") != std::string::npos);
  }
  SECTION("a missing directory") {
    Store st = make_store("file", "missing");
    auto r = open_dataset(*st.backend, join(st.root, "nope"), {});
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kNotFound);
  }
  SECTION("objects but no tar shards") {
    Store st = make_store("mem", "noshards");
    REQUIRE(st.backend->write(join(st.root, "a.bin"), std::as_bytes(std::span("abc", 3))));
    auto t = open_dataset(*st.backend, st.root, tar_opts);
    REQUIRE_FALSE(t);
    CHECK(t.error().what().find("{format=files}") != std::string::npos);
  }
  SECTION("a non-tar object in a tar dataset") {
    Store st = make_store("file", "nontar");
    GenConfig c;
    c.format = DatasetFormat::kTar;
    c.samples = 4;
    c.samples_per_shard = 2;
    REQUIRE(generate_dataset(*st.backend, st.root, c));
    const std::string bad = join(st.root, "shard-000000.tar");
    const auto junk = testing::pattern_bytes(5000, 3);
    REQUIRE(st.backend->write(bad, junk));
    auto r = open_dataset(*st.backend, st.root, tar_opts);  // the index is stale: scanned
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kCorrupt);
    CHECK(r.error().object() == bad);
    CHECK(r.error().offset() == 0u);
    CHECK(r.error().what().find("not a tar archive: bad header checksum at offset 0") !=
          std::string::npos);
  }
  SECTION("truncated shards") {
    Store st = make_store("mem", "trunc");
    GenConfig c;
    c.format = DatasetFormat::kTar;
    c.samples = 4;
    c.samples_per_shard = 4;
    c.sample_size = SizeDistribution::parse("10000").value();
    REQUIRE(generate_dataset(*st.backend, st.root, c));
    const std::string generated = join(st.root, "shard-000000.tar");
    const auto full = testing::read_object(*st.backend, generated);
    tar_opts.use_index = false;
    // The shard as another tool's dataset (no manifest of gen): what the scan alone says.
    const std::string plain = join(st.root, "plain");
    const std::string key = join(plain, "shard-000000.tar");

    // Mid-member: sample 1's data starts at 512 + 10240 + 1024 + 512.
    REQUIRE(st.backend->write(key, ConstBytes(full).first(12288 + 5000)));
    auto r = open_dataset(*st.backend, plain, tar_opts);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kCorrupt);
    CHECK(r.error().object() == st.backend->display_name(key));  // as the user can paste it
    CHECK(r.error().what().find("truncated tar: member '000001.bin' at offset 11776") !=
          std::string::npos);

    // Mid-header.
    REQUIRE(st.backend->write(key, ConstBytes(full).first(11776 + 100)));
    r = open_dataset(*st.backend, plain, tar_opts);
    REQUIRE_FALSE(r);
    CHECK(r.error().what().find(
              "truncated tar: header at offset 11776 needs 512 bytes, object ends at 11876") !=
          std::string::npos);

    // At a member boundary: readable, but noted.
    REQUIRE(st.backend->write(key, ConstBytes(full).first(11776)));
    auto ok = open_dataset(*st.backend, plain, tar_opts);
    REQUIRE(ok);
    CHECK(ok->samples.size() == 1);
    REQUIRE(ok->notes.size() == 1);
    CHECK(ok->notes[0].find("no end-of-archive marker") != std::string::npos);

    // The same cut in the generated dataset: its manifest says the shard held 4 samples.
    REQUIRE(st.backend->write(generated, ConstBytes(full).first(11776)));
    auto cut = open_dataset(*st.backend, st.root, tar_opts);
    REQUIRE_FALSE(cut);
    CHECK(cut.error().code() == Errc::kCorrupt);
    CHECK(cut.error().object() == "mem://dataset/trunc/shard-000000.tar");
    CHECK(cut.error().message().find("holds 1 sample (2 members), its dataset's manifest") !=
          std::string::npos);
  }
  SECTION("hidden files, temporary files and indexes are not samples") {
    Store st = make_store("mem", "hidden");
    const auto one = std::as_bytes(std::span("x", 1));
    REQUIRE(st.backend->write(join(st.root, "a.bin"), one));
    REQUIRE(st.backend->write(join(st.root, ".DS_Store"), one));
    REQUIRE(st.backend->write(join(st.root, ".git/config"), one));
    REQUIRE(st.backend->write(join(st.root, "b.bin.feedline-tmp-Ab12Cd"), one));
    REQUIRE(st.backend->write(join(st.root, "x.tar.idx"), one));
    auto ds = open_dataset(*st.backend, st.root, {});
    REQUIRE(ds);
    REQUIRE(ds->samples.size() == 1);
    CHECK(ds->samples[0].key == "a");
  }
}
