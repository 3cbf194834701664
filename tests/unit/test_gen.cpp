// The synthetic dataset generator: size distributions, determinism, layouts, compressibility,
// and a digest that matches an independent reading of what it wrote.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <stop_token>

#include "feedline/loader/codec.hpp"
#include "feedline/loader/gen.hpp"
#include "feedline/loader/manifest.hpp"
#include "feedline/loader/tar_index.hpp"
#include "feedline/loader/tfrecord.hpp"
#include "feedline/storage/forwarding.hpp"
#include "feedline/storage/registry.hpp"
#include "formats_support.hpp"
#include "test_support.hpp"

using namespace feedline;
using namespace feedline::loader;

namespace {

storage::Resolved open_url(const std::string& url) {
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto r = registry.open(url, {});
  REQUIRE(r);
  return std::move(*r);
}

// Every object under root, by key relative to root, with its bytes.
std::map<std::string, std::vector<std::byte>> snapshot(storage::Backend& b,
                                                       const std::string& root) {
  std::map<std::string, std::vector<std::byte>> out;
  const auto objects = b.list(root).value();
  for (const auto& o : objects) out[o.key.substr(root.size())] = testing::read_object(b, o.key);
  return out;
}

// The objects under root that are not hidden: the data objects and indexes.
std::vector<storage::ObjectInfo> data_objects(storage::Backend& b, const std::string& root) {
  auto all = b.list(root).value();
  std::erase_if(all, [&](const storage::ObjectInfo& o) {
    return o.key.substr(root.size()).starts_with('.');
  });
  return all;
}

DatasetManifest manifest_of(storage::Backend& b, const std::string& key) {
  const auto bytes = testing::read_object(b, key);
  auto m = parse_manifest(
      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), key);
  REQUIRE(m);
  return std::move(*m);
}

GenConfig small_config(DatasetFormat f, bool zstd) {
  GenConfig c;
  c.format = f;
  c.samples = 37;
  c.sample_size = SizeDistribution::parse("lognormal:20KiB:8KiB").value();
  c.samples_per_shard = 10;
  c.compress.codec = zstd ? Compression::kZstd : Compression::kNone;
  c.compressibility = 0.5;
  c.seed = 42;
  return c;
}

std::pair<double, double> mean_stdev(const std::vector<double>& v) {
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  for (double x : v) s += (x - m) * (x - m);
  return {m, std::sqrt(s / static_cast<double>(v.size() - 1))};
}

// A backend that reports `room` as its free space, and counts (and can stop at) appends.
class RoomBackend final : public storage::ForwardingBackend {
 public:
  RoomBackend(std::unique_ptr<storage::Backend> inner, std::optional<storage::SpaceInfo> room)
      : ForwardingBackend(std::move(inner)), room_(room) {}
  std::optional<storage::SpaceInfo> free_space(std::string_view) override { return room_; }
  Result<std::unique_ptr<storage::ObjectWriter>> create(std::string_view key) override {
    FEEDLINE_ASSIGN_OR_RETURN(auto w, inner().create(key));
    return std::unique_ptr<storage::ObjectWriter>(std::make_unique<Writer>(std::move(w), *this));
  }
  std::uint64_t appends = 0, appended = 0;
  std::function<void()> on_append;

 private:
  struct Writer final : storage::ObjectWriter {
    Writer(std::unique_ptr<storage::ObjectWriter> w, RoomBackend& b) : w_(std::move(w)), b_(b) {}
    Result<void> append(ConstBytes data) override {
      ++b_.appends;
      b_.appended += data.size();
      if (b_.on_append) b_.on_append();
      return w_->append(data);
    }
    Result<void> commit() override { return w_->commit(); }
    std::unique_ptr<storage::ObjectWriter> w_;
    RoomBackend& b_;
  };
  std::optional<storage::SpaceInfo> room_;
};

}  // namespace

TEST_CASE("gen: sample sizes parse, print and reject nonsense", "[gen][formats]") {
  auto d = SizeDistribution::parse("128KiB");
  REQUIRE(d);
  CHECK(d->kind == SizeDistribution::Kind::kFixed);
  CHECK(d->a == 131072);
  CHECK(d->to_string() == "fixed:131072");
  CHECK(SizeDistribution::parse("fixed:4k")->a == 4096);
  auto n = SizeDistribution::parse("normal:128KiB:32KiB").value();
  CHECK(n.kind == SizeDistribution::Kind::kNormal);
  CHECK(n.a == 131072);
  CHECK(n.b == 32768);
  auto ln = SizeDistribution::parse("lognormal:1MiB:256KiB").value();
  CHECK(ln.kind == SizeDistribution::Kind::kLognormal);
  CHECK(SizeDistribution::parse(ln.to_string())->to_string() == ln.to_string());
  auto u = SizeDistribution::parse("uniform:4KiB:128KiB").value();
  CHECK(u.mean() == (4096.0 + 131072.0) / 2);

  for (const char* bad : {"", "0", "-5", "normal:1KiB", "normal:1:2:3", "gamma:1:2",
                          "uniform:2KiB:1KiB", "normal:0:1", "fixed:4x", "normal:1KiB:"}) {
    INFO(bad);
    auto r = SizeDistribution::parse(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kInvalidArgument);
    CHECK(r.error().what().find("bad sample size") != std::string::npos);
  }
}

TEST_CASE("gen: draws follow the distribution", "[gen][formats]") {
  std::mt19937_64 rng(7);
  constexpr int kDraws = 10000;
  auto draws = [&](std::string_view spec, std::uint64_t max = std::uint64_t{1} << 40) {
    const auto d = SizeDistribution::parse(spec).value();
    std::vector<double> v;
    for (int i = 0; i < kDraws; ++i) v.push_back(static_cast<double>(d.draw(rng, max)));
    return v;
  };
  SECTION("fixed is exact") {
    for (double x : draws("128KiB")) REQUIRE(x == 131072);
  }
  SECTION("normal") {
    auto [m, s] = mean_stdev(draws("normal:128KiB:16KiB"));
    CHECK(m == Approx(131072).epsilon(0.02));
    CHECK(s == Approx(16384).epsilon(0.05));
  }
  SECTION("lognormal: mean and stdev of the sizes themselves") {
    auto v = draws("lognormal:128KiB:64KiB");
    auto [m, s] = mean_stdev(v);
    CHECK(m == Approx(131072).epsilon(0.03));
    CHECK(s == Approx(65536).epsilon(0.10));
    CHECK(*std::min_element(v.begin(), v.end()) >= 1);
  }
  SECTION("uniform stays in its bounds, both ends reached") {
    auto v = draws("uniform:100:200");
    CHECK(*std::min_element(v.begin(), v.end()) == 100);
    CHECK(*std::max_element(v.begin(), v.end()) == 200);
    CHECK(mean_stdev(v).first == Approx(150).epsilon(0.02));
  }
  SECTION("clamped to [1, max]") {
    auto v = draws("normal:100:1000", 500);
    CHECK(*std::min_element(v.begin(), v.end()) == 1);
    CHECK(*std::max_element(v.begin(), v.end()) == 500);
  }
}

TEST_CASE("gen: compression specs", "[gen][formats]") {
  CHECK(CompressionSpec::parse("none")->codec == Compression::kNone);
  auto z = CompressionSpec::parse("zstd").value();
  CHECK(z.codec == Compression::kZstd);
  CHECK(z.level == 3);
  CHECK(CompressionSpec::parse("zstd:19")->level == 19);
  CHECK(CompressionSpec::parse("zstd:-5")->level == -5);
  CHECK(CompressionSpec::parse("zstd:19")->to_string() == "zstd:19");
  for (const char* bad : {"gzip", "zstd:", "zstd:x", "zstd:3x", "ZSTD"}) {
    INFO(bad);
    CHECK(CompressionSpec::parse(bad).error().code() == Errc::kInvalidArgument);
  }
}

TEST_CASE("gen: config validation", "[gen][formats]") {
  GenConfig c;
  CHECK(validate(c));
  auto bad = [](GenConfig x) {
    auto r = validate(x);
    REQUIRE_FALSE(r);
    return r.error();
  };
  GenConfig x = c;
  x.samples = 0;
  CHECK(bad(x).code() == Errc::kInvalidArgument);
  x = c;
  x.compressibility = 1.5;
  CHECK(bad(x).message().find("compressibility") != std::string::npos);
  x = c;
  x.compressibility = std::nan("");
  CHECK(bad(x).code() == Errc::kInvalidArgument);
  x = c;
  x.format = DatasetFormat::kTar;
  x.samples_per_shard = 0;
  CHECK(bad(x).code() == Errc::kInvalidArgument);
  x = c;
  x.compress = {Compression::kZstd, 999};
  CHECK(bad(x).code() == (zstd_available() ? Errc::kInvalidArgument : Errc::kUnsupported));
  x.compress.level = 3;
  if (zstd_available()) {
    CHECK(validate(x));
  } else {
    CHECK(bad(x).what().find("built without zstd") != std::string::npos);
  }
}

TEST_CASE("gen: the same config gives the same bytes, another seed other bytes", "[gen][formats]") {
  for (DatasetFormat f : {DatasetFormat::kFiles, DatasetFormat::kTar}) {
    for (bool zstd : {false, true}) {
      if (zstd && !zstd_available()) continue;
      DYNAMIC_SECTION(format_name(f) << (zstd ? " zstd" : "")) {
        auto mem = open_url("mem://gen/");
        const GenConfig c = small_config(f, zstd);
        REQUIRE(generate_dataset(*mem.backend, "one", c));
        REQUIRE(generate_dataset(*mem.backend, "two/", c));
        GenConfig other = c;
        other.seed = 43;
        REQUIRE(generate_dataset(*mem.backend, "three", other));
        const auto one = snapshot(*mem.backend, "one/"), two = snapshot(*mem.backend, "two/"),
                   three = snapshot(*mem.backend, "three/");
        CHECK(one.size() == (f == DatasetFormat::kFiles ? 37u : 8u) + 1);  // and the manifest
        CHECK(one.count(".feedline-dataset") == 1);
        CHECK(one == two);
        REQUIRE(three.size() == one.size());
        std::size_t differ = 0;
        for (const auto& [k, v] : one) differ += three.at(k) != v;
        CHECK(differ == one.size());

        // The file backend writes the very same bytes.
        const auto dir =
            testing::scratch_dir("gen-det") / (std::string(format_name(f)) + (zstd ? "-zstd" : ""));
        auto file = open_url(dir.string());
        REQUIRE(generate_dataset(*file.backend, dir.string(), c));
        CHECK(snapshot(*file.backend, dir.string() + "/") == one);
      }
    }
  }
}

TEST_CASE("gen: layouts, labels, index, summary and digest", "[gen][formats]") {
  for (bool zstd : {false, true}) {
    if (zstd && !zstd_available()) continue;
    DYNAMIC_SECTION((zstd ? "zstd" : "raw")) {
      auto mem = open_url("mem://gen/");
      SECTION("files") {
        const GenConfig c = small_config(DatasetFormat::kFiles, zstd);
        auto s = generate_dataset(*mem.backend, "ds", c);
        REQUIRE(s);
        const auto objs = data_objects(*mem.backend, "ds/");
        REQUIRE(objs.size() == 37);
        CHECK(objs.front().key == (zstd ? "ds/000000.bin.zst" : "ds/000000.bin"));
        CHECK(objs.back().key == (zstd ? "ds/000036.bin.zst" : "ds/000036.bin"));
        std::uint64_t stored = 0;
        for (const auto& o : objs) stored += o.size;
        CHECK(s->objects == 37);
        CHECK(s->index_objects == 0);
        CHECK(s->samples == 37);
        CHECK(s->members == 37);
        CHECK(s->bytes_stored == stored);
        CHECK(s->digest == testing::independent_digest(*mem.backend, "ds/", false));
        if (!zstd) CHECK(s->bytes_decoded == stored);
      }
      SECTION("tar") {
        const GenConfig c = small_config(DatasetFormat::kTar, zstd);
        auto s = generate_dataset(*mem.backend, "ds", c);
        REQUIRE(s);
        const auto objs = data_objects(*mem.backend, "ds/");
        REQUIRE(objs.size() == 8);  // 4 shards of <= 10 samples, 4 indexes
        CHECK(objs[0].key == "ds/shard-000000.tar");
        CHECK(objs[1].key == "ds/shard-000000.tar.idx");
        CHECK(objs[7].key == "ds/shard-000003.tar.idx");
        CHECK(s->objects == 4);
        CHECK(s->index_objects == 4);
        CHECK(s->samples == 37);
        CHECK(s->members == 74);
        CHECK(s->digest == testing::independent_digest(*mem.backend, "ds/", true));

        std::uint64_t stored = 0, decoded = 0, sample = 0;
        for (std::size_t i = 0; i < objs.size(); i += 2) {
          const auto bytes = testing::read_object(*mem.backend, objs[i].key);
          stored += bytes.size();
          const auto entries = tar::list_entries(bytes, objs[i].key).value();
          CHECK(entries.size() == (i == 6 ? 14u : 20u));
          const auto idx_bytes = testing::read_object(*mem.backend, objs[i + 1].key);
          const auto index = parse_tar_index(
              std::string_view(reinterpret_cast<const char*>(idx_bytes.data()), idx_bytes.size()),
              objs[i + 1].key);
          REQUIRE(index);
          CHECK(index->version == kTarIndexVersion);
          CHECK(index->shard_bytes == bytes.size());
          REQUIRE(index->entries.size() == entries.size());
          for (std::size_t k = 0; k < entries.size(); ++k) {
            const auto& e = entries[k];
            const auto& ie = index->entries[k];
            CHECK(ie.name == e.name);
            CHECK(ie.header_offset == e.header_offset);
            CHECK(ie.data_offset == e.data_offset);
            CHECK(ie.size == e.size);
            const auto dec =
                testing::decode(e.name, ConstBytes(bytes).subspan(e.data_offset, e.size));
            CHECK(ie.decoded_size == dec.size());
            decoded += dec.size();
            const std::string key = sample_key(sample, 37);
            if (k % 2 == 0) {
              CHECK(e.name == key + (zstd ? ".bin.zst" : ".bin"));
            } else {
              CHECK(e.name == key + ".cls");
              const std::string label(reinterpret_cast<const char*>(dec.data()), dec.size());
              CHECK(std::stoul(label) < c.num_classes);
              CHECK(std::to_string(std::stoul(label)) == label);
              ++sample;
            }
          }
        }
        CHECK(s->bytes_stored == stored);
        CHECK(s->bytes_decoded == decoded);
      }
      SECTION("tar without labels") {
        GenConfig c = small_config(DatasetFormat::kTar, zstd);
        c.with_label = false;
        auto s = generate_dataset(*mem.backend, "nl", c);
        REQUIRE(s);
        CHECK(s->members == 37);
        CHECK(s->digest == testing::independent_digest(*mem.backend, "nl/", true));
      }
    }
  }
}

TEST_CASE("gen: compressibility controls how much zstd saves", "[gen][formats]") {
  if (!zstd_available()) return testing::skip_test("built without zstd");
  auto ratio = [](double compressibility) {
    auto mem = open_url("mem://gen/");
    GenConfig c;
    c.samples = 1;
    c.sample_size = SizeDistribution::parse("1MiB").value();
    c.compress = {Compression::kZstd, 3};
    c.compressibility = compressibility;
    auto s = generate_dataset(*mem.backend, "c", c).value();
    CHECK(s.bytes_decoded == 1u << 20);
    return static_cast<double>(s.bytes_stored) / static_cast<double>(s.bytes_decoded);
  };
  const double half = ratio(0.5), none = ratio(0.0), all = ratio(1.0), most = ratio(0.9);
  CHECK(half <= 0.55);
  CHECK(half >= 0.45);
  CHECK(none >= 0.99);
  CHECK(most <= 0.15);
  CHECK(all <= 0.01);
}

TEST_CASE("gen: never mixes datasets; a rerun replaces its own objects", "[gen][formats]") {
  auto mem = open_url("mem://gen/");
  GenConfig c = small_config(DatasetFormat::kTar, false);
  REQUIRE(generate_dataset(*mem.backend, "ds", c));
  CHECK(generate_dataset(*mem.backend, "ds", c));  // same config: fine
  c.samples = 9;  // fewer shards: shard-000001.. would be left over
  auto r = generate_dataset(*mem.backend, "ds", c);
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::kInvalidArgument);
  CHECK(r.error().object() == "ds/shard-000001.tar");
  GenConfig f = small_config(DatasetFormat::kFiles, false);
  CHECK_FALSE(generate_dataset(*mem.backend, "ds", f));
  REQUIRE(mem.backend->write("other/notes.txt", std::as_bytes(std::span("x", 1))));
  CHECK_FALSE(generate_dataset(*mem.backend, "other", f));
}

TEST_CASE("gen: progress and stop", "[gen][formats]") {
  auto mem = open_url("mem://gen/");
  GenConfig c = small_config(DatasetFormat::kFiles, false);
  std::stop_source stop;
  std::uint64_t last = 0;
  GenHooks hooks;
  hooks.stop = stop.get_token();
  hooks.progress = [&](std::uint64_t done) {
    last = done;
    if (done == 5) stop.request_stop();
  };
  auto r = generate_dataset(*mem.backend, "s", c, hooks);
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::kCancelled);
  CHECK(last == 5);
  CHECK(data_objects(*mem.backend, "s/").size() == 5);
  CHECK_FALSE(
      manifest_of(*mem.backend, "s/.feedline-dataset").complete);  // see "interrupted" below
}

TEST_CASE("gen: a dataset the backend has no room for is refused before anything is written",
          "[gen][formats]") {
  GenConfig c = small_config(DatasetFormat::kTar, false);  // 37 samples of ~20 KiB: ~800 KB
  storage::SpaceInfo room;
  room.free_bytes = 100'000;
  room.block_size = 4096;
  auto tight = std::make_unique<RoomBackend>(open_url("mem://gen-room/").backend, room);
  auto r = generate_dataset(*tight, "ds", c);
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::kInvalidArgument);
  CHECK(r.error().message().find("needs about") != std::string::npos);
  CHECK(r.error().message().find("100000 bytes") != std::string::npos);
  CHECK(tight->appends == 0);
  CHECK(tight->list("ds/").value().empty());
  // Told not to look (a filesystem that compresses), it writes.
  GenHooks go;
  go.check_space = false;
  CHECK(generate_dataset(*tight, "ds", c, go));

  // Room for the bytes, not for the files.
  room.free_bytes = std::uint64_t{1} << 40;
  room.free_objects = 10;
  RoomBackend few_inodes(open_url("mem://gen-inodes/").backend, room);
  auto f = generate_dataset(few_inodes, "ds", small_config(DatasetFormat::kFiles, false));
  REQUIRE_FALSE(f);
  CHECK(f.error().message().find("free inodes") != std::string::npos);
  CHECK(few_inodes.appends == 0);
  // Room enough, or a backend that cannot tell: written.
  RoomBackend roomy(open_url("mem://gen-roomy/").backend,
                    storage::SpaceInfo{std::uint64_t{1} << 40, 4096});
  CHECK(generate_dataset(roomy, "ds", c));
}

TEST_CASE("gen: the footprint estimate errs low, never high", "[gen][formats]") {
  // What a check against free space may refuse: only what cannot fit. For each format, the
  // estimate (block size 1) is at most what gen writes, and not far below it.
  for (const DatasetFormat f : {DatasetFormat::kFiles, DatasetFormat::kTar, DatasetFormat::kNpz,
                                DatasetFormat::kNpy, DatasetFormat::kTfRecord}) {
    if ((f == DatasetFormat::kTfRecord || f == DatasetFormat::kNpz) && !tfrecord_available())
      continue;  // their CRCs are ISA-L's
    for (const bool zstd : {false, true}) {
      if (zstd && (f == DatasetFormat::kNpz || f == DatasetFormat::kNpy ||
                   f == DatasetFormat::kTfRecord || !zstd_available()))
        continue;
      GenConfig c = small_config(f, zstd);
      if (!validate(c)) continue;
      INFO(format_name(f) << (zstd ? " zstd" : ""));
      auto mem = open_url(fmt::format("mem://gen-footprint-{}-{}/", format_name(f), zstd));
      REQUIRE(generate_dataset(*mem.backend, "ds", c));
      const std::vector<storage::ObjectInfo> objects = mem.backend->list("ds/").value();
      std::uint64_t written = 0;
      for (const auto& o : objects) written += o.size;
      const GenFootprint est = estimate_footprint(c, 1);
      CHECK(est.bytes <= written + 4096);  // the manifest counted as a block of 4 KiB
      CHECK(est.bytes >= written / 2);
      CHECK(est.objects >= objects.size());
    }
  }
}

TEST_CASE("gen: a stop inside one large sample ends it between chunks", "[gen][formats]") {
  // One sample of 64 MiB: the stop requested at its first write must end the generation before
  // the rest of the sample is written (8 MiB chunks), and leave no object of it.
  GenConfig c;
  c.format = DatasetFormat::kFiles;
  c.samples = 1;
  c.sample_size = SizeDistribution::parse("64MiB").value();
  c.max_sample_size = std::uint64_t{1} << 30;
  c.compressibility = 0.5;
  REQUIRE(validate(c));
  RoomBackend b(open_url("mem://gen-big-stop/").backend, std::nullopt);
  std::stop_source stop;
  GenHooks hooks;
  hooks.stop = stop.get_token();
  b.on_append = [&] {
    if (b.appended >= 4u << 20) stop.request_stop();  // the manifest is smaller
  };
  auto r = generate_dataset(b, "ds", c, hooks);
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::kCancelled);
  CHECK(b.appended < (std::uint64_t{24} << 20));  // not the whole 64 MiB
  CHECK(data_objects(b, "ds/").empty());
}

TEST_CASE("gen: sample keys are zero-padded, wider when needed", "[gen][formats]") {
  CHECK(sample_key(123, 1000) == "000123");
  CHECK(sample_key(0, 1) == "000000");
  CHECK(sample_key(5, 10000000) == "0000005");
  CHECK(sample_key(9999999, 10000000) == "9999999");
}

namespace {

// A backend over another that records the keys it is asked to create, in order; from the
// (fail_after + 1)-th on, every object's first append fails as a full disk does, and the object is
// abandoned (never committed).
class RecordingBackend final : public storage::Backend {
 public:
  explicit RecordingBackend(storage::Backend& inner, std::size_t fail_after = SIZE_MAX)
      : inner_(inner), fail_after_(fail_after) {}
  std::vector<std::string> created;

  std::string_view scheme() const noexcept override { return inner_.scheme(); }
  Result<storage::ObjectInfo> stat(std::string_view key) override { return inner_.stat(key); }
  Result<std::vector<storage::ObjectInfo>> list(std::string_view prefix) override {
    return inner_.list(prefix);
  }
  Result<std::unique_ptr<storage::ObjectHandle>> open(std::string_view key) override {
    return inner_.open(key);
  }
  Result<std::unique_ptr<storage::ObjectWriter>> create(std::string_view key) override {
    created.emplace_back(key);
    FEEDLINE_ASSIGN_OR_RETURN(auto w, inner_.create(key));
    if (created.size() <= fail_after_) return w;
    return std::unique_ptr<storage::ObjectWriter>(
        std::make_unique<FullDisk>(std::string(key), std::move(w)));
  }
  Result<std::unique_ptr<storage::IoQueue>> make_queue(
      const storage::QueueOptions& options) override {
    return inner_.make_queue(options);
  }
  storage::BackendCaps caps() const override { return inner_.caps(); }
  std::string display_name(std::string_view key) const override { return inner_.display_name(key); }

 private:
  struct FullDisk final : storage::ObjectWriter {
    FullDisk(std::string k, std::unique_ptr<storage::ObjectWriter> w)
        : key(std::move(k)), inner(std::move(w)) {}
    Result<void> append(ConstBytes) override {
      return fail(Error::from_errno(ENOSPC, "write").with_object(key).with_offset(0));
    }
    Result<void> commit() override {
      return fail(Error::from_errno(ENOSPC, "write").with_object(key));
    }
    std::string key;
    std::unique_ptr<storage::ObjectWriter> inner;  // abandoned: leaves no object
  };
  storage::Backend& inner_;
  std::size_t fail_after_;
};

void check_incomplete(storage::Backend& b, const std::string& root, DatasetFormat f) {
  DatasetOptions o;
  o.format = f;
  auto r = open_dataset(b, root, o);
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::kCorrupt);
  CHECK(r.error().object() == b.display_name(root + "/.feedline-dataset"));
  CHECK(r.error().message().find(b.display_name(root) + " is incomplete") != std::string::npos);
  CHECK(r.error().message().find("did not finish writing it") != std::string::npos);
  CHECK(r.error().hint().find("re-run the same feedline gen") != std::string::npos);
  CHECK(r.error().hint().find("delete .feedline-dataset") != std::string::npos);
}

}  // namespace

TEST_CASE("gen: the manifest is written first (in progress) and last (complete)",
          "[gen][formats][manifest]") {
  for (DatasetFormat f : {DatasetFormat::kFiles, DatasetFormat::kTar}) {
    DYNAMIC_SECTION(format_name(f)) {
      auto mem = open_url("mem://gen/");
      RecordingBackend rec(*mem.backend);
      GenConfig c = small_config(f, false);
      c.compressibility = 0.3;
      const GenSummary s = generate_dataset(rec, "m", c).value();
      CHECK(s.manifest == "m/.feedline-dataset");
      REQUIRE(rec.created.size() == s.objects + s.index_objects + 2);
      CHECK(rec.created.front() == "m/.feedline-dataset");
      CHECK(rec.created.back() == "m/.feedline-dataset");
      CHECK(std::count(rec.created.begin(), rec.created.end(), "m/.feedline-dataset") == 2);

      const DatasetManifest m = manifest_of(*mem.backend, "m/.feedline-dataset");
      CHECK(m.complete);
      CHECK(m.config.format == c.format);
      CHECK(m.config.samples == c.samples);
      CHECK(m.config.samples_per_shard == c.samples_per_shard);
      CHECK(m.config.sample_size.to_string() == c.sample_size.to_string());
      CHECK(m.config.max_sample_size == c.max_sample_size);
      CHECK(m.config.compress.to_string() == c.compress.to_string());
      CHECK(m.config.compressibility == c.compressibility);
      CHECK(m.config.with_label == c.with_label);
      CHECK(m.config.num_classes == c.num_classes);
      CHECK(m.config.seed == c.seed);
      CHECK(m.summary.objects == s.objects);
      CHECK(m.summary.index_objects == s.index_objects);
      CHECK(m.summary.samples == s.samples);
      CHECK(m.summary.members == s.members);
      CHECK(m.summary.bytes_stored == s.bytes_stored);
      CHECK(m.summary.bytes_decoded == s.bytes_decoded);
      CHECK(m.summary.digest == s.digest);
      CHECK(generated_objects(c) == s.objects);

      DatasetOptions o;
      o.format = f;
      auto ds = open_dataset(*mem.backend, "m", o);
      REQUIRE(ds);
      CHECK(ds->manifest == "m/.feedline-dataset");
      CHECK(ds->manifest_digest == s.digest);
    }
  }
}

TEST_CASE("gen: an interrupted generation does not open as complete; the same gen finishes it",
          "[gen][formats][manifest]") {
  for (DatasetFormat f : {DatasetFormat::kFiles, DatasetFormat::kTar}) {
    for (const char* how : {"stop", "full disk"}) {
      DYNAMIC_SECTION(format_name(f) << " " << how) {
        auto mem = open_url("mem://gen/");
        GenConfig c = small_config(f, false);
        c.samples_per_shard = 5;
        const GenSummary ref = generate_dataset(*mem.backend, "ref", c).value();
        if (std::string_view(how) == "stop") {
          std::stop_source stop;
          GenHooks hooks;
          hooks.stop = stop.get_token();
          hooks.progress = [&](std::uint64_t n) {
            if (n == 12) stop.request_stop();
          };
          auto r = generate_dataset(*mem.backend, "i", c, hooks);
          REQUIRE_FALSE(r);
          CHECK(r.error().code() == Errc::kCancelled);
        } else {
          RecordingBackend full(*mem.backend, 4);  // the marker and three objects, then ENOSPC
          auto r = generate_dataset(full, "i", c);
          REQUIRE_FALSE(r);
          CHECK(r.error().sys_errno() == ENOSPC);
          CHECK(full.created.size() == 5);
        }
        CHECK_FALSE(data_objects(*mem.backend, "i/").empty());  // whole objects were written
        check_incomplete(*mem.backend, "i", f);

        // The same generation again, in place: it finishes the dataset, byte for byte.
        const GenSummary again = generate_dataset(*mem.backend, "i", c).value();
        CHECK(again.digest == ref.digest);
        CHECK(snapshot(*mem.backend, "i/") == snapshot(*mem.backend, "ref/"));
        DatasetOptions o;
        o.format = f;
        auto ds = open_dataset(*mem.backend, "i", o);
        REQUIRE(ds);
        CHECK(ds->manifest_digest == ref.digest);
      }
    }
  }
}

TEST_CASE("gen: refuses a root it did not write, and leaves what is there untouched",
          "[gen][formats][manifest]") {
  const auto dir = testing::scratch_dir("gen-refuse");
  auto file = open_url(dir.string());
  const GenConfig c = small_config(DatasetFormat::kFiles, false);
  auto refused = [&](const std::filesystem::path& root, const std::filesystem::path& theirs) {
    const auto before = testing::read_object(*file.backend, theirs.string());
    auto r = generate_dataset(*file.backend, root.string(), c);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kInvalidArgument);
    CHECK(r.error().object() == theirs.string());
    CHECK(r.error().message() == root.string() +
                                     " is not empty and was not written by feedline gen (no "
                                     ".feedline-dataset there)");
    CHECK(testing::read_object(*file.backend, theirs.string()) == before);
    CHECK_FALSE(std::filesystem::exists(root / ".feedline-dataset"));
    CHECK_FALSE(std::filesystem::exists(root / "000001.bin"));
  };
  SECTION("a user's file with a name gen writes") {
    std::filesystem::remove_all(dir / "a");
    std::filesystem::create_directories(dir / "a");
    testing::write_file(dir / "a" / "000000.bin", testing::pattern_bytes(10, 1));
    refused(dir / "a", dir / "a" / "000000.bin");
  }
  SECTION("any file, hidden ones too") {
    std::filesystem::remove_all(dir / "b");
    std::filesystem::create_directories(dir / "b" / "sub");
    testing::write_file(dir / "b" / "sub" / ".notes", testing::pattern_bytes(10, 2));
    refused(dir / "b", dir / "b" / "sub" / ".notes");
  }
  SECTION("a crashed writer's temporary file only: generated") {
    std::filesystem::remove_all(dir / "c");
    std::filesystem::create_directories(dir / "c");
    testing::write_file(dir / "c" / "000003.bin.feedline-tmp-AbC123",
                        testing::pattern_bytes(10, 3));
    CHECK(generate_dataset(*file.backend, (dir / "c").string(), c));
  }
  SECTION("a dataset gen wrote, with another seed: regenerated in place") {
    std::filesystem::remove_all(dir / "d");
    GenConfig other = c;
    other.seed = 1234;
    REQUIRE(generate_dataset(*file.backend, (dir / "d").string(), other));
    const GenSummary s = generate_dataset(*file.backend, (dir / "d").string(), c).value();
    auto ds = open_dataset(*file.backend, (dir / "d").string(), {});
    REQUIRE(ds);
    CHECK(ds->manifest_digest == s.digest);
    CHECK(s.digest == testing::independent_digest(*file.backend, (dir / "d/").string(), false));
  }
}

TEST_CASE("gen: manifests parse back; bad ones are refused, naming the object",
          "[gen][formats][manifest]") {
  DatasetManifest m;
  m.config = small_config(DatasetFormat::kTar, false);
  m.summary.objects = generated_objects(m.config);
  const std::string in_progress = format_manifest(m);
  CHECK(in_progress.starts_with("feedline-dataset 1\nstate in-progress\nformat tar\n"));
  auto p = parse_manifest(in_progress, "x");
  REQUIRE(p);
  CHECK_FALSE(p->complete);
  CHECK(format_manifest(*p) == in_progress);
  m.complete = true;
  m.summary.samples = 37;
  m.summary.members = 74;
  m.summary.index_objects = 4;
  m.summary.bytes_stored = 1000;
  m.summary.bytes_decoded = 900;
  m.summary.digest = 0xfedcba9876543210ull;
  const std::string complete = format_manifest(m);
  p = parse_manifest(complete, "x");
  REQUIRE(p);
  CHECK(p->complete);
  CHECK(p->summary.digest == 0xfedcba9876543210ull);
  CHECK(format_manifest(*p) == complete);
  // Keys in any order, unknown keys ignored.
  CHECK(parse_manifest(
      "feedline-dataset 1\nsomething-new 5\n" + complete.substr(complete.find('\n') + 1), "x"));

  auto bad = [](const std::string& text, std::string_view needle, Errc code = Errc::kCorrupt) {
    INFO(text);
    auto r = parse_manifest(text, "ds/.feedline-dataset");
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == code);
    CHECK(r.error().object() == "ds/.feedline-dataset");
    CHECK(r.error().message().find(needle) != std::string::npos);
  };
  auto replaced = [&](std::string from, std::string to) {
    std::string t = complete;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  bad("", "empty");
  bad("hello\n", "expected 'KEY VALUE'");
  bad("feedline-dataset 2\n", "version 2", Errc::kUnsupported);
  bad("not-a-manifest 1\n", "not a feedline dataset manifest");
  bad(complete.substr(0, complete.size() - 1), "does not end in a newline");
  bad(complete + "seed 4\n", "'seed' given twice");
  bad(replaced("digest 18364758544493064720\n", ""), "no 'digest' line");
  bad(replaced("samples 37", "samples 3x"), "'samples' is not a whole number");
  bad(replaced("objects 4", "objects 5"), "disagrees with the settings");
  bad(replaced("state complete", "state done"), "state 'done'");
  bad(replaced("format tar", "format zip"), "unknown format 'zip'");
  bad(complete + std::string(kMaxManifestBytes, 'x') + "\n", "more than a manifest holds");
}
