// The decoder seam (decoder.hpp) and its decoders (zstd, JPEG: image.hpp): the registry's chains,
// the plan's sizes, a conformance table every decoder passes (good input, truncated, corrupt,
// an output too small, a header declaring more than allowed, several threads at once), the
// crops' geometry, and the pipeline running an embedding program's own decoder and JPEG samples.
#include <fmt/format.h>
#include <xxhash.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <thread>

#include "feedline/loader/codec.hpp"
#include "feedline/loader/decoder.hpp"
#include "feedline/loader/gen.hpp"
#include "feedline/loader/image.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/storage/registry.hpp"
#include "test_support.hpp"

using namespace feedline;
using namespace feedline::loader;

namespace {

// An embedding program's decoder, as docs/EMBEDDING.md registers one: ".xor" members are their
// bytes XORed with 0x5a. Lossless (exact): the digest covers its output.
class XorState final : public DecoderState {
 public:
  Result<std::uint64_t> output_size(ConstBytes in, const DecodeContext& ctx) override {
    if (ctx.max_bytes && in.size() > ctx.max_bytes)
      return fail(Errc::kResourceExhausted, "larger than allowed");
    return in.size();
  }
  Result<Decoded> decode(ConstBytes in, MutableBytes out, const DecodeContext&) override {
    if (out.size() < in.size()) return fail(Errc::kInvalidArgument, "output too small");
    for (std::size_t i = 0; i < in.size(); ++i) out[i] = in[i] ^ std::byte{0x5a};
    return Decoded{in.size(), {}};
  }
};
class XorDecoder final : public Decoder {
 public:
  std::string_view name() const noexcept override { return "xor"; }
  std::unique_ptr<DecoderState> make_state() const override { return std::make_unique<XorState>(); }
};

std::vector<std::byte> xored(ConstBytes in) {
  std::vector<std::byte> out(in.begin(), in.end());
  for (auto& b : out) b ^= std::byte{0x5a};
  return out;
}

// A smooth test picture: R follows x, G follows y, B a diagonal (JPEG keeps it well).
std::vector<std::uint8_t> gradient(std::uint32_t w, std::uint32_t h) {
  std::vector<std::uint8_t> p(std::size_t{w} * h * 3);
  for (std::uint32_t y = 0; y < h; ++y) {
    for (std::uint32_t x = 0; x < w; ++x) {
      std::uint8_t* q = &p[(std::size_t{y} * w + x) * 3];
      q[0] = static_cast<std::uint8_t>(x * 255 / std::max(1u, w - 1));
      q[1] = static_cast<std::uint8_t>(y * 255 / std::max(1u, h - 1));
      q[2] = static_cast<std::uint8_t>((x + y) * 255 / std::max(1u, w + h - 2));
    }
  }
  return p;
}

std::vector<std::byte> jpeg_of(std::uint32_t w, std::uint32_t h, int quality = 95) {
  return encode_jpeg(gradient(w, h), w, h, 3, quality).value();
}

ImageConfig image(unsigned size, Crop crop) {
  ImageConfig c;
  c.decode = true;
  c.size = size;
  c.crop = crop;
  return c;
}

double mean_abs_diff(ConstBytes a, const std::vector<std::uint8_t>& b) {
  REQUIRE(a.size() == b.size());
  double sum = 0;
  for (std::size_t i = 0; i < b.size(); ++i)
    sum += std::abs(std::to_integer<int>(a[i]) - int{b[i]});
  return sum / static_cast<double>(b.size());
}

// One row of the conformance table.
struct Row {
  std::string name;
  std::shared_ptr<const Decoder> decoder;
  std::vector<std::byte> good;
  // Checks a good input's output (its bytes and shape).
  std::function<void(ConstBytes, const Decoded&)> check;
};

std::vector<Row> conformance_rows() {
  std::vector<Row> rows;
  const auto payload = testing::pattern_bytes(50'000, 7);
  rows.push_back({"xor (an embedding program's)", std::make_shared<XorDecoder>(), payload,
                  [payload](ConstBytes out, const Decoded& d) {
                    CHECK(d.bytes == payload.size());
                    CHECK(std::equal(out.begin(), out.begin() + d.bytes, xored(payload).begin()));
                  }});
  if (zstd_available()) {
    rows.push_back({"zstd", zstd_decoder(), zstd_compress(payload, 3).value(),
                    [payload](ConstBytes out, const Decoded& d) {
                      CHECK(d.bytes == payload.size());
                      CHECK(std::equal(out.begin(), out.begin() + d.bytes, payload.begin()));
                    }});
  }
  if (jpeg_available()) {
    const auto pixels = gradient(96, 64);
    rows.push_back({"jpeg, full size", jpeg_decoder(image(0, Crop::kNone)).value(), jpeg_of(96, 64),
                    [pixels](ConstBytes out, const Decoded& d) {
                      CHECK(d.shape == ImageShape{64, 96, 3});
                      CHECK(d.bytes == pixels.size());
                      CHECK(mean_abs_diff(out.first(d.bytes), pixels) < 2.0);  // quality 95
                    }});
    for (Crop crop : {Crop::kCenter, Crop::kRandomResized, Crop::kNone}) {
      rows.push_back({fmt::format("jpeg, 40x40 {}", crop_name(crop)),
                      jpeg_decoder(image(40, crop)).value(), jpeg_of(96, 64),
                      [](ConstBytes, const Decoded& d) {
                        CHECK(d.shape == ImageShape{40, 40, 3});
                        CHECK(d.bytes == 40 * 40 * 3);
                      }});
    }
  }
  return rows;
}

constexpr std::size_t kGuard = 64;

// Decodes `in` into an output of `room` bytes followed by a guard that must stay untouched.
Result<Decoded> decode_guarded(DecoderState& st, ConstBytes in, std::size_t room,
                               std::vector<std::byte>& out, const DecodeContext& ctx) {
  out.assign(room + kGuard, std::byte{0xee});
  auto r = st.decode(in, MutableBytes(out.data(), room), ctx);
  for (std::size_t i = room; i < out.size(); ++i) REQUIRE(out[i] == std::byte{0xee});
  return r;
}

}  // namespace

TEST_CASE("decoder registry: extensions to chains, the last extension first, any case",
          "[decode]") {
  DecoderRegistry r = default_decoders();
  auto xor_decoder = std::make_shared<XorDecoder>();
  REQUIRE(r.add(".xor", xor_decoder));
  auto names = [&](std::string_view member) {
    std::string out;
    for (const auto& d : r.chain_for(member)) out += std::string(d->name()) + " ";
    return out;
  };
  CHECK(names("000001.bin.zst") == "zstd ");
  CHECK(names("dir.v2/000001.xor.zst") == "zstd xor ");  // the key ends at its own first dot
  CHECK(names("000001.ZST") == "zstd ");
  CHECK(names("000001.zst.bin") == "");  // a member's bytes are what its last extension says
  CHECK(names("000001.cls") == "");
  CHECK(names("000001") == "");
  CHECK(r.find(".XoR") == xor_decoder);
  // Replacing a decoder, and refusing what is no extension.
  REQUIRE(r.add(".zst", xor_decoder));
  CHECK(names("a.bin.zst") == "xor ");
  for (std::string_view bad : {"", ".", "zst", ".a/b", ".toolongextension17", ".x y"}) {
    auto e = r.add(bad, xor_decoder);
    REQUIRE_FALSE(e);
    CHECK(e.error().code() == Errc::kInvalidArgument);
  }
  CHECK_FALSE(r.add(".ok", nullptr));
  // At most kMaxChain steps, however many extensions.
  CHECK(r.chain_for("a.zst.zst.zst.zst.zst.zst").size() == DecoderRegistry::kMaxChain);
}

TEST_CASE("decode plan: which members decode, sizes known before reading, what the digest covers",
          "[decode]") {
  Dataset ds;
  auto member = [&](std::string name, std::uint64_t size, std::uint64_t decoded) {
    Member m;
    m.name = std::move(name);
    m.size = size;
    m.decoded_size = decoded;
    ds.members.push_back(m);
  };
  member("0.bin", 100, 100);
  member("0.bin.zst", 40, 100);  // the index knows
  member("1.bin.zst", 40, 0);    // no index
  member("1.jpg", 5000, 5000);
  member("2.jpg.zst", 4000, 5000);
  member("2.cls", 0, 0);
  DecoderRegistry none;
  const DecodePlan nothing(ds, none);
  CHECK_FALSE(nothing.any());
  CHECK(nothing.known_size(1, ds.members[1]) == 40u);  // delivered as stored

  const DecodePlan plain(ds, default_decoders());
  CHECK_FALSE(plain.decodes(0));
  CHECK(plain.decodes(1));
  CHECK(plain.chain_of(1).name == "zstd");
  CHECK(plain.known_size(0, ds.members[0]) == 100u);
  CHECK(plain.known_size(1, ds.members[1]) == 100u);
  CHECK_FALSE(plain.known_size(2, ds.members[2]));
  CHECK_FALSE(plain.decodes(3));                    // JPEG not asked for: its bytes as stored
  CHECK(plain.known_size(5, ds.members[5]) == 0u);  // an empty member is known: 0 bytes
  CHECK(plain.chain_of(1).digest_after == 1);       // zstd is exact: its output is digested
  if (!jpeg_available()) return testing::skip_test("built without JPEG: its plan rows");
  const DecodePlan images(ds, image_decoders(image(32, Crop::kCenter)).value());
  CHECK(images.chain_of(3).name == "jpeg");
  CHECK(images.chain_of(4).name == "zstd+jpeg");
  CHECK(images.known_size(3, ds.members[3]) == 32u * 32 * 3);
  CHECK(images.known_size(4, ds.members[4]) == 32u * 32 * 3);
  CHECK(images.chain_of(3).digest_after == 0);  // the JPEG's stored bytes, not its pixels
  CHECK(images.chain_of(4).digest_after == 1);  // the JPEG zstd gave back
  std::uint64_t members = 0;
  for (const auto& c : images.chains()) members += c.members;
  CHECK(members == 4);  // the .bin and .cls take none
  // At their own size, images' sizes are known only from their headers.
  const DecodePlan full(ds, image_decoders(image(0, Crop::kNone)).value());
  CHECK_FALSE(full.known_size(3, ds.members[3]));
}

TEST_CASE("decoder conformance: good, truncated, corrupt, too small an output, a bomb, threads",
          "[decode]") {
  const auto rows = conformance_rows();
  for (const Row& row : rows) {
    DYNAMIC_SECTION(row.name) {
      auto st = row.decoder->make_state();
      const DecodeContext ctx{"000001.x", 1, 0, 42, 0};
      std::vector<std::byte> out;
      // Good: output_size is what decode writes, and the output is right.
      const std::uint64_t size = st->output_size(row.good, ctx).value();
      const Decoded d = decode_guarded(*st, row.good, size, out, ctx).value();
      CHECK(d.bytes == size);
      row.check(out, d);
      const std::vector<std::byte> reference = out;
      // The same input twice gives the same bytes (the state carries nothing over).
      std::vector<std::byte> again;
      REQUIRE(decode_guarded(*st, row.good, size, again, ctx));
      CHECK(again == reference);
      const bool checks_bytes = row.decoder->name() != "xor";  // xor has no format to damage
      if (checks_bytes) {
        // Truncated: an error, never a partial result.
        for (std::size_t keep : {row.good.size() / 4, row.good.size() / 2, row.good.size() - 3}) {
          const ConstBytes cut = ConstBytes(row.good).first(keep);
          auto n = st->output_size(cut, ctx);
          auto r = decode_guarded(*st, cut, n ? *n : size, out, ctx);
          INFO("kept " << keep << " of " << row.good.size());
          REQUIRE_FALSE(r);
          CHECK(r.error().code() == Errc::kCorrupt);
        }
        // Damaged: an error or an output within bounds; never past them, never a crash.
        for (std::uint64_t seed = 1; seed <= 20; ++seed) {
          auto bad = row.good;
          const auto noise = testing::pattern_bytes(8, seed);
          for (std::size_t i = 0; i < noise.size(); ++i)
            bad[(bad.size() / 3 + seed * 977 + i * 131) % bad.size()] ^= noise[i];
          auto n = st->output_size(bad, ctx);
          if (!n || *n > (64u << 20)) continue;
          (void)decode_guarded(*st, bad, *n, out, ctx);
        }
      }
      // An output one byte too small: refused, nothing written past it.
      if (size > 0) {
        auto r = decode_guarded(*st, row.good, size - 1, out, ctx);
        REQUIRE_FALSE(r);
        CHECK((r.error().code() == Errc::kInvalidArgument ||
               r.error().code() == Errc::kCorrupt));  // zstd: "destination too small"
      }
      // The state still works after every failure above.
      REQUIRE(decode_guarded(*st, row.good, size, again, ctx));
      CHECK(again == reference);
      // Several threads, a state each: the single thread's bytes.
      std::atomic<int> mismatches{0};
      {
        std::vector<std::jthread> threads;
        for (int t = 0; t < 4; ++t) {
          threads.emplace_back([&] {
            auto mine = row.decoder->make_state();
            std::vector<std::byte> o(size + kGuard, std::byte{0xee});
            for (int i = 0; i < 8; ++i) {
              auto r = mine->decode(row.good, MutableBytes(o.data(), size), ctx);
              if (!r || !std::equal(o.begin(), o.begin() + static_cast<std::ptrdiff_t>(size),
                                    reference.begin()))
                ++mismatches;
            }
          });
        }
      }
      CHECK(mismatches == 0);
    }
  }
}

TEST_CASE("decoders refuse a header that declares more than a sample may take", "[decode]") {
  if (zstd_available()) {
    auto st = zstd_decoder()->make_state();
    const auto frame = zstd_compress(std::vector<std::byte>(100'000), 3).value();
    auto r = st->output_size(frame, DecodeContext{"a.bin.zst", 0, 0, 0, 50'000});
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kResourceExhausted);
    CHECK(r.error().message().find("a.bin.zst") != std::string::npos);
  }
  if (!jpeg_available()) return testing::skip_test("built without JPEG");
  // A small JPEG whose frame header says 60000 x 60000 (its SOF0 edited): 10.8 GB of pixels.
  auto bomb = jpeg_of(64, 48);
  bool patched = false;
  for (std::size_t i = 0; i + 9 < bomb.size(); ++i) {
    if (bomb[i] == std::byte{0xff} && bomb[i + 1] == std::byte{0xc0}) {
      for (std::size_t at : {i + 5, i + 7}) {  // height, then width, big-endian
        bomb[at] = std::byte{0xea};
        bomb[at + 1] = std::byte{0x60};
      }
      patched = true;
      break;
    }
  }
  REQUIRE(patched);
  const DecodeContext ctx{"huge.jpg", 0, 0, 0, 64u << 20};
  for (const ImageConfig& c :
       {image(0, Crop::kNone), image(224, Crop::kRandomResized), image(224, Crop::kCenter)}) {
    auto st = jpeg_decoder(c).value()->make_state();
    std::vector<std::byte> out(224 * 224 * 3);
    auto size = st->output_size(bomb, ctx);
    auto r = size ? st->decode(bomb, MutableBytes(out.data(), out.size()), ctx)
                  : Result<Decoded>(std::unexpected(size.error()));
    INFO(crop_name(c.crop));
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kResourceExhausted);
    CHECK(r.error().message().find("huge.jpg") != std::string::npos);
    CHECK(r.error().message().find("60000 x 60000") != std::string::npos);
  }
}

TEST_CASE("JPEG: what is not a JPEG is a data error saying what it is", "[decode]") {
  if (!jpeg_available()) return testing::skip_test("built without JPEG");
  auto st = jpeg_decoder(image(0, Crop::kNone)).value()->make_state();
  const DecodeContext ctx{"000007.jpg", 7, 0, 0, 0};
  auto error_of = [&](std::vector<std::byte> bytes) {
    auto r = st->output_size(bytes, ctx);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kCorrupt);
    CHECK(r.error().message().find("000007.jpg") != std::string::npos);
    return r.error().message();
  };
  std::vector<std::byte> png(64, std::byte{0});
  std::memcpy(png.data(), "\x89PNG\r\n\x1a\n", 8);
  CHECK(error_of(png).find("PNG") != std::string::npos);
  CHECK(error_of({}).find("no JPEG") != std::string::npos);
  CHECK(error_of(testing::pattern_bytes(100, 3)).find("not a JPEG") != std::string::npos);
  auto junk = testing::pattern_bytes(100, 4);  // the start of a JPEG, then noise
  junk[0] = std::byte{0xff};
  junk[1] = std::byte{0xd8};
  auto r = st->output_size(junk, ctx);
  if (r) {
    std::vector<std::byte> out(std::min<std::uint64_t>(*r, 1u << 20));
    CHECK_FALSE(st->decode(junk, MutableBytes(out.data(), out.size()), ctx));
  }
  // The decoder works after each of them.
  const auto good = jpeg_of(16, 16);
  std::vector<std::byte> out(16 * 16 * 3);
  CHECK(st->decode(good, MutableBytes(out.data(), out.size()), ctx));
}

TEST_CASE("crops: random-resized within torchvision's ranges, the same for the same draw",
          "[decode]") {
  const ImageConfig c = image(224, Crop::kRandomResized);
  std::map<std::uint32_t, int> distinct_x;
  int differs_by_epoch = 0;
  for (std::uint32_t sample = 0; sample < 500; ++sample) {
    for (auto [w, h] : {std::pair{400u, 350u}, std::pair{1000u, 200u}, std::pair{50u, 60u}}) {
      const CropBox b = choose_crop(c, w, h, 9, sample, 0);
      REQUIRE(b.width >= 1);
      REQUIRE(b.height >= 1);
      REQUIRE(b.x + b.width <= w);
      REQUIRE(b.y + b.height <= h);
      const double area = double(b.width) * b.height / (double(w) * h);
      const double ratio = double(b.width) / b.height;
      // One of the ten draws (area and ratio in range, up to rounding to whole pixels), or the
      // fallback: the whole image cut to the nearest ratio in range, centred.
      const bool drawn =
          area >= 0.08 * 0.9 && area <= 1.0 && ratio >= 0.75 * 0.9 && ratio <= 4.0 / 3.0 * 1.1;
      const bool fallback =
          (b.width == w || b.height == h) && b.x == (w - b.width) / 2 && b.y == (h - b.height) / 2;
      INFO(w << "x" << h << " sample " << sample << ": " << b.x << "," << b.y << " " << b.width
             << "x" << b.height);
      CHECK((drawn || fallback));
      CHECK(choose_crop(c, w, h, 9, sample, 0) == b);  // deterministic
      if (!(choose_crop(c, w, h, 9, sample, 1) == b)) ++differs_by_epoch;
      if (w == 400) ++distinct_x[b.x];
    }
  }
  CHECK(differs_by_epoch > 1400);  // each epoch draws its own
  CHECK(distinct_x.size() > 100);  // positions spread over the image
  CHECK_FALSE(choose_crop(c, 400, 350, 10, 3, 0) == choose_crop(c, 400, 350, 9, 3, 0));
}

TEST_CASE("crops: center is the central square of 0.875 the shorter side; none the whole",
          "[decode]") {
  CHECK(choose_crop(image(224, Crop::kCenter), 400, 350, 0, 0, 0) == CropBox{47, 22, 306, 306});
  CHECK(choose_crop(image(224, Crop::kCenter), 100, 300, 5, 9, 3) == CropBox{6, 106, 88, 88});
  CHECK(choose_crop(image(224, Crop::kNone), 400, 350, 0, 0, 0) == CropBox{0, 0, 400, 350});
  CHECK(parse_crop("random-resized").value() == Crop::kRandomResized);
  CHECK_FALSE(parse_crop("random"));
  // Settings that cannot work name what is wrong.
  ImageConfig bad = image(0, Crop::kCenter);
  CHECK(validate(bad).error().message().find("needs an output size") != std::string::npos);
  bad = image(224, Crop::kRandomResized);
  bad.min_area = 0.5;
  bad.max_area = 0.2;
  CHECK_FALSE(validate(bad));
}

TEST_CASE("JPEG: decoded as displayed, rotated by its EXIF orientation", "[decode]") {
  if (!jpeg_available()) return testing::skip_test("built without JPEG");
  // A wide gradient (R grows to the right): the full decode at its own size, and a crop's
  // geometry read off the pixels (R is x, G is y).
  const auto jpeg = jpeg_of(120, 80);
  std::vector<std::uint8_t> px;
  const JpegInfo info = decode_jpeg(jpeg, image(0, Crop::kNone), 0, 0, 0, &px).value();
  CHECK(info.shape == ImageShape{80, 120, 3});
  CHECK(info.orientation == 1);
  CHECK(mean_abs_diff(ConstBytes(reinterpret_cast<const std::byte*>(px.data()), px.size()),
                      gradient(120, 80)) < 2.0);
  // A crop resized to 32 x 32: its left column's R is the crop's left edge, its top row's G the
  // crop's top, scaled as the gradient was drawn.
  ImageConfig c = image(32, Crop::kRandomResized);
  for (std::uint32_t sample = 0; sample < 20; ++sample) {
    const JpegInfo i = decode_jpeg(jpeg, c, 5, sample, 0, &px).value();
    CHECK(i.shape == ImageShape{32, 32, 3});
    const double r_left = px[(16 * 32 + 0) * 3 + 0], g_top = px[(0 * 32 + 16) * 3 + 1];
    CHECK(std::abs(r_left - i.crop.x * 255.0 / 119) < 12);
    CHECK(std::abs(g_top - i.crop.y * 255.0 / 79) < 12);
    CHECK(i.crop == choose_crop(c, 120, 80, 5, sample, 0));
  }
}

TEST_CASE("pipeline: an embedding program's decoder runs on its members, digest of its output",
          "[decode][loader]") {
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto backend = std::move(registry.open("mem://x/", {})->backend);
  std::uint64_t want = 0;
  std::map<std::string, std::vector<std::byte>> plain;
  for (int i = 0; i < 50; ++i) {
    const auto bytes = testing::pattern_bytes(3000 + i * 10, i + 1);
    REQUIRE(backend->write(fmt::format("x/{:06}.xor", i), xored(bytes)));
    want += XXH3_64bits(bytes.data(), bytes.size());
    plain[fmt::format("{:06}", i)] = bytes;
  }
  DatasetOptions o;
  o.format = DatasetFormat::kFiles;
  const Dataset ds = open_dataset(*backend, "x/", o).value();
  auto decoders = std::make_shared<DecoderRegistry>(default_decoders());
  REQUIRE(decoders->add(".xor", std::make_shared<XorDecoder>()));
  LoaderConfig c;
  c.sampler.batch_size = 8;
  c.memory_budget = 64 << 20;
  c.decoders = decoders;
  auto loader = Loader::open(*backend, ds, c).value();
  std::uint64_t got = 0;
  std::size_t samples = 0;
  for (;;) {
    auto b = loader->next();
    REQUIRE(b);
    if (b->end()) break;
    got += b->digest();
    for (const auto& s : b->samples()) {
      const auto m = b->members_of(s);
      REQUIRE(m.size() == 1);
      const auto& expect = plain.at(std::string(s.key));
      REQUIRE(m[0].size == expect.size());
      CHECK(std::memcmp(b->data().data() + m[0].offset, expect.data(), expect.size()) == 0);
      ++samples;
    }
  }
  CHECK(samples == 50);
  CHECK(got == want);
  const PipelineReport r = loader->report();
  // Its output's size is known only from its input (no fixed size, no index): sample buffers.
  CHECK(data_path_name(r.data_path.path) == "bounce");
  REQUIRE(r.data_path.decoders.size() == 1);
  CHECK(r.data_path.decoders[0].name == "xor");
  CHECK(r.data_path.decoders[0].members == 50);
}

TEST_CASE("pipeline: JPEG tar samples decode into fixed-size slots; the digest stays gen's",
          "[decode][loader]") {
  if (!jpeg_available()) return testing::skip_test("built without JPEG");
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto backend = std::move(registry.open("mem://j/", {})->backend);
  GenConfig g;
  g.format = DatasetFormat::kTar;
  g.samples = 40;
  g.samples_per_shard = 16;
  g.image = ImageSpec::parse("jpeg:80x60:90").value();
  const GenSummary written = generate_dataset(*backend, "j", g).value();
  DatasetOptions o;
  o.format = DatasetFormat::kTar;
  const Dataset ds = open_dataset(*backend, "j", o).value();
  for (bool in_place : {true, false}) {
    LoaderConfig c;
    c.sampler.batch_size = 8;
    c.sampler.epochs = 2;
    c.sampler.seed = 4;
    c.memory_budget = 64 << 20;
    c.gpu_direct = in_place ? GpuDirect::kAuto : GpuDirect::kOff;
    c.decoders = std::make_shared<const DecoderRegistry>(
        image_decoders(image(32, Crop::kRandomResized)).value());
    auto loader = Loader::open(*backend, ds, c).value();
    std::map<std::string, std::vector<std::vector<std::byte>>> pixels;  // per key, per epoch
    std::uint64_t digest = 0;
    for (;;) {
      auto b = loader->next();
      REQUIRE(b);
      if (b->end()) break;
      digest += b->digest();
      for (const auto& s : b->samples()) {
        for (const auto& m : b->members_of(s)) {
          if (!m.name.ends_with(".jpg")) {
            CHECK(m.shape == ImageShape{});
            continue;
          }
          CHECK(m.shape == ImageShape{32, 32, 3});
          REQUIRE(m.size == 32 * 32 * 3);
          const auto* p = b->data().data() + m.offset;
          pixels[std::string(s.key)].emplace_back(p, p + m.size);
        }
      }
    }
    INFO((in_place ? "decode in place" : "bounce"));
    CHECK(digest == 2 * written.digest);  // the JPEGs' bytes, as gen wrote them
    REQUIRE(pixels.size() == 40);
    int differ = 0;
    for (const auto& [key, epochs] : pixels) {
      REQUIRE(epochs.size() == 2);
      differ += epochs[0] != epochs[1];  // each epoch its own crop
    }
    CHECK(differ > 30);
    const PipelineReport r = loader->report();
    CHECK(data_path_name(r.data_path.path) == (in_place ? "decode-in-place" : "bounce"));
    REQUIRE(r.data_path.decoders.size() == 1);
    CHECK(r.data_path.decoders[0].name == "jpeg");
    CHECK(r.data_path.decoders[0].output == "32x32x3 RGB, random-resized crop");
  }
}

TEST_CASE("pipeline: a member that is no JPEG fails its sample, naming the shard and offset",
          "[decode][loader]") {
  if (!jpeg_available()) return testing::skip_test("built without JPEG");
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto backend = std::move(registry.open("mem://p/", {})->backend);
  for (int i = 0; i < 12; ++i) {
    std::vector<std::byte> bytes = jpeg_of(40, 30);
    if (i == 5) {
      bytes.assign(200, std::byte{0});
      std::memcpy(bytes.data(), "\x89PNG\r\n\x1a\n", 8);
    }
    REQUIRE(backend->write(fmt::format("p/{:06}.jpg", i), bytes));
  }
  DatasetOptions o;
  o.format = DatasetFormat::kFiles;
  const Dataset ds = open_dataset(*backend, "p/", o).value();
  LoaderConfig c;
  c.sampler.batch_size = 4;
  c.memory_budget = 64 << 20;
  c.decoders =
      std::make_shared<const DecoderRegistry>(image_decoders(image(16, Crop::kCenter)).value());
  {
    auto loader = Loader::open(*backend, ds, c).value();
    std::optional<Error> error;
    for (;;) {
      auto b = loader->next();
      if (!b) {
        error = b.error();
        break;
      }
      if (b->end()) break;
    }
    REQUIRE(error);
    CHECK(error->code() == Errc::kCorrupt);
    CHECK(error->message().find("000005.jpg") != std::string::npos);
    CHECK(error->message().find("PNG") != std::string::npos);
    CHECK(error->object().find("000005.jpg") != std::string::npos);
  }
  c.on_error = OnError::kSkip;
  auto loader = Loader::open(*backend, ds, c).value();
  std::size_t samples = 0;
  for (;;) {
    auto b = loader->next();
    REQUIRE(b);
    if (b->end()) break;
    samples += b->samples().size();
  }
  CHECK(samples == 11);
  CHECK(loader->report().delivered.skipped == 1);
}
