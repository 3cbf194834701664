// The dataset-format registry (format.hpp): a format added through it alone, and the names, parse
// and help text the CLI and the Python module take from it.
//
// "halves" is defined here as a new folder under loader/src/formats/ would define it (its opener,
// its writer, its FormatSpec, against the formats module's private kit) and registered in a copy
// of the built-in registry: gen writes it, open_dataset() detects and opens it (and checks it
// against gen's manifest), the Loader delivers it with gen's digest. Nothing outside this file
// knows it.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <string_view>

#include "feedline/loader/dataset.hpp"
#include "feedline/loader/digest.hpp"
#include "feedline/loader/format.hpp"
#include "feedline/loader/gen.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/loader/manifest.hpp"
#include "formats/gen_parts.hpp"
#include "formats/open_common.hpp"
#include "formats_support.hpp"
#include "test_support.hpp"

using namespace feedline;
using namespace feedline::loader;

namespace {

// ---- the format: one object "<key>.halves" per sample, its bytes the sample's payload, read as
// one sample of two members, "<key>.a" (the first half) and "<key>.b" (the rest).

Result<void> open_halves(detail::OpenContext& ctx, std::span<const detail::FoundObject> objects) {
  for (const detail::FoundObject& f : objects) {
    const auto object = static_cast<std::uint32_t>(ctx.ds.objects.size());
    const std::uint64_t size = f.info->size;
    const std::string key(detail::key_of(f.rel));
    const detail::SampleBuilder::MemberSpec members[] = {{key + ".a", 0, size / 2},
                                                         {key + ".b", size / 2, size - size / 2}};
    ctx.builder.add_sample(object, key, 0, size, members);
    ctx.ds.objects.push_back(*f.info);
  }
  return {};
}

Result<void> write_halves(storage::Backend& backend, std::string_view root, const GenConfig& c,
                          const GenHooks& hooks, GenSummary& sum) {
  detail::SampleParts parts;
  for (std::uint64_t i = 0; i < c.samples; ++i) {
    if (!detail::make_sample(c, i, parts, hooks.stop)) {
      return fail(Error(Errc::kCancelled, "generation stopped"));
    }
    // The digest covers the members a run delivers: the two halves.
    const ConstBytes payload(parts.raw);
    detail::account_member(payload.first(payload.size() / 2), sum);
    detail::account_member(payload.subspan(payload.size() / 2), sum);
    ++sum.samples;
    FEEDLINE_TRY(detail::write_object(backend, detail::join_key(root, generated_object_name(c, i)),
                                      payload, hooks));
    ++sum.objects;
    sum.bytes_stored += payload.size();
    if (hooks.progress) hooks.progress(sum.samples);
  }
  return {};
}

constexpr std::string_view kHalvesExtensions[] = {".halves"};

const FormatSpec kHalves{
    .name = "halves",
    .description = "one object per sample, read as two members",
    .extensions = kHalvesExtensions,
    .one_sample_per_object = true,  // reads_objects (the default): the opener needs the sizes
    .objects_noun = "halves objects",
    .object_noun = "halves object",
    .open = open_halves,
    .gen = {.write = write_halves, .members = 2},
};

FormatRegistry with_halves() {
  FormatRegistry formats = builtin_formats();
  REQUIRE(formats.add(kHalves));
  return formats;
}

// One epoch through the Loader: samples delivered and their digest.
std::pair<std::uint64_t, std::uint64_t> run_epoch(storage::Backend& backend, const Dataset& ds) {
  LoaderConfig c;
  c.sampler.batch_size = 4;
  c.sampler.epochs = 1;
  c.memory_budget = 64 << 20;
  auto loader = Loader::open(backend, ds, c);
  REQUIRE(loader);
  std::uint64_t samples = 0, digest = 0;
  for (;;) {
    auto b = (*loader)->next();
    REQUIRE(b);
    if (b->end()) break;
    samples += b->samples().size();
    digest += b->digest();
  }
  return {samples, digest};
}

}  // namespace

TEST_CASE(
    "format registry: a format added through the registry alone is generated, opened and "
    "delivered",
    "[formats][registry]") {
  const FormatRegistry formats = with_halves();
  for (const char* kind : {"mem", "file"}) {
    INFO(kind);
    testing::Store st = testing::make_store(kind, "halves", "format-registry");
    GenConfig c;
    c.format = formats.parse("halves").value();
    c.samples = 9;
    c.sample_size = SizeDistribution::parse("uniform:1:5000").value();
    c.seed = 3;
    const GenSummary sum = generate_dataset(*st.backend, st.root, c).value();
    CHECK(sum.objects == 9);
    CHECK(sum.members == 18);
    CHECK(generated_object_name(c, 4) == "000004.halves");

    // Auto detects it by its extension; the manifest gen wrote is checked and its digest kept.
    DatasetOptions o;
    o.formats = &formats;
    const Dataset ds = open_dataset(*st.backend, st.root, o).value();
    CHECK(ds.format == c.format);
    CHECK(ds.format.name() == "halves");
    CHECK(ds.samples.size() == 9);
    REQUIRE(ds.members.size() == 18);
    CHECK(ds.members[0].name == "000000.a");
    CHECK(ds.members[1].name == "000000.b");
    CHECK(ds.manifest_digest == sum.digest);
    CHECK(ds.notes.empty());
    const auto [samples, digest] = run_epoch(*st.backend, ds);
    CHECK(samples == 9);
    CHECK(digest == sum.digest);

    // Asked for by name, the same; gen regenerates it in place (its objects are known as gen's).
    o.format = c.format;
    CHECK(open_dataset(*st.backend, st.root, o).value().manifest_digest == sum.digest);
    CHECK(generate_dataset(*st.backend, st.root, c).value().digest == sum.digest);

    // The built-in registry does not know it: gen's manifest names a format the open cannot
    // read.
    auto unknown = open_dataset(*st.backend, st.root, {});
    REQUIRE_FALSE(unknown);
    CHECK_THAT(unknown.error().message(), Catch::Contains("unknown format 'halves'"));

    // An object gone since gen wrote it is found out, in the format's words.
    if (!st.dir.empty()) {
      REQUIRE(std::filesystem::remove(st.dir / "000004.halves"));
      auto gone = open_dataset(*st.backend, st.root, o);
      REQUIRE_FALSE(gone);
      CHECK_THAT(gone.error().message(), Catch::Contains("lists 9 halves objects, 8 are there") &&
                                             Catch::Contains("000004.halves first"));
    }
  }
}

TEST_CASE("format registry: names, parse and help come from the registered formats",
          "[formats][registry]") {
  const FormatRegistry& builtin = builtin_formats();
  REQUIRE(builtin.formats().size() == 5);  // each built-in spec is well-formed
  CHECK(builtin.names_text() == "files, tar, tfrecord, npz or npy");
  CHECK(builtin.help() == "files, tar, tfrecord, npz, npy, or auto (from the objects' extensions)");
  CHECK(builtin.gen_help() ==
        "files (one sample per file), tar (WebDataset shards), tfrecord (TFRecord files with DALI "
        "indexes), npz (one np.savez archive per sample) or npy (one np.save array per sample)");
  CHECK(builtin.fallback() == &DatasetFormat::kFiles.spec());
  CHECK(builtin.parse("auto").value().is_auto());
  CHECK(DatasetFormat::kAuto.name() == "auto");
  for (const FormatSpec* f : builtin.formats()) {
    CHECK(builtin.parse(f->name).value().name() == f->name);
    CHECK(parse_format(f->name).value() == DatasetFormat(*f));
  }
  auto bad = builtin.parse("halves");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message() == "unknown dataset format 'halves'");
  CHECK(bad.error().hint() ==
        "expected files, tar, tfrecord, npz or npy, or auto to choose from what is there");

  const FormatRegistry formats = with_halves();
  CHECK(formats.formats().size() == 6);
  CHECK(formats.help() ==
        "files, tar, tfrecord, npz, npy, halves, or auto (from the objects' extensions)");
  CHECK_THAT(formats.gen_help(),
             Catch::EndsWith("npy (one np.save array per sample) or halves (one object per "
                             "sample, read as two members)"));
  CHECK_THAT(formats.parse("parquet").error().hint(), Catch::Contains("npz, npy or halves"));

  // Adding one of a name already there replaces it in its place.
  FormatRegistry again = formats;
  REQUIRE(again.add(kHalves));
  CHECK(again.formats().size() == 6);

  // What add() refuses.
  FormatSpec spec = kHalves;
  FormatRegistry r;
  for (const std::string_view name : {"", "auto", "Halves", "two words", "a/b"}) {
    spec.name = name;
    CHECK_FALSE(r.add(spec));
  }
  spec.name = "ok";
  constexpr std::string_view kNoDot[] = {"halves"};
  spec.extensions = kNoDot;
  CHECK_FALSE(r.add(spec));
  spec.extensions = kHalvesExtensions;
  spec.open = nullptr;
  CHECK_FALSE(r.add(spec));
  CHECK(r.formats().empty());
}

TEST_CASE("format registry: the built-in formats keep the listing fingerprints they had",
          "[formats][registry]") {
  // A saved loader state names its dataset by the listing's fingerprint, which covers the format:
  // these are the values the built-in formats gave before they were registered (as the numbers
  // of an enum), so states saved then still resume.
  auto fingerprint = [](DatasetFormat f) {
    Dataset d;
    d.format = f;
    d.root = "ds";
    d.objects.push_back({.key = "ds/shard-000000.tar", .size = 10240});
    d.samples.push_back({.object = 0,
                         .offset = 512,
                         .length = 1000,
                         .first_member = 0,
                         .member_count = 1,
                         .key = "000000"});
    d.members.push_back({.name = "000000.bin", .offset = 0, .size = 1000, .decoded_size = 1000});
    d.manifest_digest = 42;
    return listing_fingerprint(d);
  };
  CHECK(fingerprint(DatasetFormat::kFiles) == 0xb9434fb7a06fcd45);
  CHECK(fingerprint(DatasetFormat::kTar) == 0x233b41ad8a451e91);
  CHECK(fingerprint(DatasetFormat::kTfRecord) == 0xcfbee254b228bfb5);
  CHECK(fingerprint(DatasetFormat::kNpz) == 0xcc5d1956649dffe2);
  CHECK(fingerprint(DatasetFormat::kNpy) == 0xc935413de0a93320);
  CHECK(fingerprint(DatasetFormat(kHalves)) != fingerprint(DatasetFormat::kFiles));
}
