// The synthetic dataset generator: size distributions, determinism, layouts, compressibility,
// and a digest that matches an independent reading of what it wrote.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "feedline/loader/codec.hpp"
#include "feedline/loader/gen.hpp"
#include "feedline/loader/tar_index.hpp"
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
        CHECK(one.size() == (f == DatasetFormat::kFiles ? 37u : 8u));
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
        const auto objs = mem.backend->list("ds/").value();
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
        const auto objs = mem.backend->list("ds/").value();
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
  if (!zstd_available()) return;
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
  CHECK(mem.backend->list("s/").value().size() == 5);
}

TEST_CASE("gen: sample keys are zero-padded, wider when needed", "[gen][formats]") {
  CHECK(sample_key(123, 1000) == "000123");
  CHECK(sample_key(0, 1) == "000000");
  CHECK(sample_key(5, 10000000) == "0000005");
  CHECK(sample_key(9999999, 10000000) == "9999999");
}
