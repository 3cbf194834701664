// The synthetic dataset generator (see gen.hpp for the layouts and the determinism contract).
#include "feedline/loader/gen.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "../random_bits.hpp"
#include "feedline/core/units.hpp"
#include "feedline/loader/codec.hpp"
#include "feedline/loader/digest.hpp"
#include "feedline/loader/format.hpp"
#include "feedline/loader/image.hpp"
#include "feedline/loader/manifest.hpp"
#include "feedline/loader/tar_index.hpp"
#include "gen_parts.hpp"

namespace feedline::loader {

namespace detail {

std::string join_key(std::string_view root, std::string_view name) {
  if (root.empty()) return std::string(name);
  if (root.ends_with('/')) return fmt::format("{}{}", root, name);
  return fmt::format("{}/{}", root, name);
}

}  // namespace detail

namespace {

using detail::as_bytes;
using detail::join_key;
using detail::SampleParts;

constexpr std::size_t kContentBlock = 4096;  // compressibility is spread evenly at this grain

using detail::splitmix64;
using detail::uniform01;

// Standard normal by Box-Muller (one value per call; the second is dropped to keep draws simple).
double standard_normal(std::mt19937_64& rng) {
  const double u1 = 1.0 - uniform01(rng);  // (0, 1]: log() stays finite
  const double u2 = uniform01(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// Sample i's content: random bytes and, per 4 KiB block, a compressible run of a repeated
// 8-byte pattern. `out` is resized (its capacity reused). Grown and drawn kStopChunk bytes at a
// time with stop checked between (a GiB zero-filled at once took 10-30 s of page faults on a
// loaded VM, deaf to Ctrl-C): false once stop is requested (out is then incomplete).
bool fill_content(std::mt19937_64& rng, std::uint64_t size, double compressibility,
                  std::vector<std::byte>& out, const std::stop_token& stop) {
  static_assert(detail::kStopChunk % kContentBlock == 0);
  out.clear();
  out.reserve(static_cast<std::size_t>(size));
  std::uint64_t pattern_word = rng();
  std::byte pattern[8];
  std::memcpy(pattern, &pattern_word, 8);
  const auto random_per_block = [&](std::size_t block) {
    return static_cast<std::size_t>(
        std::llround((1.0 - compressibility) * static_cast<double>(block)));
  };
  while (out.size() < size) {
    if (stop.stop_requested()) return false;
    const std::size_t at = out.size();
    out.resize(at +
               static_cast<std::size_t>(std::min<std::uint64_t>(detail::kStopChunk, size - at)));
    std::byte* p = out.data() + at;
    std::size_t left = out.size() - at;
    while (left > 0) {
      const std::size_t block = std::min(left, kContentBlock);
      const std::size_t random_bytes = random_per_block(block);
      std::size_t i = 0;
      for (; i + 8 <= random_bytes; i += 8) {
        const std::uint64_t w = rng();
        std::memcpy(p + i, &w, 8);
      }
      if (i < random_bytes) {
        const std::uint64_t w = rng();
        std::memcpy(p + i, &w, random_bytes - i);
        i = random_bytes;
      }
      for (; i < block; ++i) p[i] = pattern[i % 8];
      p += block;
      left -= block;
    }
  }
  return true;
}

// True when `text` is all digits, at least `width` of them; the number goes to n.
bool parse_padded(std::string_view text, std::size_t width, std::uint64_t& n) {
  if (text.size() < width || text.empty()) return false;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  return ec == std::errc() && p == text.data() + text.size() &&
         std::all_of(text.begin(), text.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
}

// Would this config write the object named `rel` (relative to the root): data object n of the
// `objects` it writes, for some n, or the index beside one? Object names hold their number (a
// sample's key, a shard's), zero-padded: each run of digits in the name is tried as n.
bool is_ours(const GenConfig& c, std::string_view rel, std::uint64_t objects) {
  std::string_view data = rel;
  if (!c.format.is_auto() && c.format.spec().indexed && data.ends_with(kTarIndexSuffix)) {
    data.remove_suffix(kTarIndexSuffix.size());
  }
  const auto digit = [](char ch) { return ch >= '0' && ch <= '9'; };
  for (std::size_t at = 0; at < data.size();) {
    if (!digit(data[at])) {
      ++at;
      continue;
    }
    std::size_t end = at;
    while (end < data.size() && digit(data[end])) ++end;
    std::uint64_t n = 0;
    if (parse_padded(data.substr(at, end - at), 1, n) && n < objects &&
        generated_object_name(c, n) == data) {
      return true;
    }
    at = end;
  }
  return false;
}

// The built-in formats gen writes that take what `takes` says ("files and tar"), for messages.
std::string formats_that(bool FormatSpec::Gen::*takes, std::string_view conjunction) {
  std::vector<std::string_view> names;
  for (const FormatSpec* f : builtin_formats().formats()) {
    if (f->gen.write && f->gen.*takes) names.push_back(f->name);
  }
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? fmt::format(" {} ", conjunction) : ", ";
    out += names[i];
  }
  return out;
}

}  // namespace

namespace detail {

// Draws sample i: size first, then label, then content (this order is part of the contract:
// changing it changes every generated dataset).
bool make_sample(const GenConfig& c, std::uint64_t i, SampleParts& parts,
                 const std::stop_token& stop) {
  std::mt19937_64 rng(splitmix64(splitmix64(c.seed) ^ i));
  const std::uint64_t size = c.sample_size.draw(rng, c.max_sample_size);
  const std::uint64_t label = rng() % c.num_classes;
  parts.label_value = label;
  parts.label.clear();
  fmt::format_to(std::back_inserter(parts.label), "{}", label);
  if (c.image.jpeg) {
    draw_image(rng, c.image, parts.pixels);
    auto jpeg = encode_jpeg(parts.pixels, c.image.width, c.image.height, 3, c.image.quality);
    // validate() accepted the spec and JPEG is in this build: the encoder cannot refuse it.
    parts.raw = jpeg ? std::move(*jpeg) : std::vector<std::byte>{};
    return true;
  }
  return fill_content(rng, size, c.compressibility, parts.raw, stop);
}

namespace {

class StoppableWriter final : public storage::ObjectWriter {
 public:
  StoppableWriter(std::unique_ptr<storage::ObjectWriter> out, std::string key, std::stop_token stop)
      : out_(std::move(out)), key_(std::move(key)), stop_(std::move(stop)) {}
  Result<void> append(ConstBytes data) override {
    while (!data.empty()) {
      if (stop_.stop_requested()) {
        return fail(Error(Errc::kCancelled, "generation stopped while writing").with_object(key_));
      }
      const std::size_t n = std::min(data.size(), kStopChunk);
      FEEDLINE_TRY(out_->append(data.first(n)));
      data = data.subspan(n);
    }
    return {};
  }
  Result<void> commit() override { return out_->commit(); }

 private:
  std::unique_ptr<storage::ObjectWriter> out_;
  std::string key_;
  std::stop_token stop_;
};

}  // namespace

Result<std::unique_ptr<storage::ObjectWriter>> create_object(storage::Backend& backend,
                                                             const std::string& key,
                                                             const GenHooks& hooks) {
  FEEDLINE_ASSIGN_OR_RETURN(auto writer, backend.create(key));
  return std::unique_ptr<storage::ObjectWriter>(
      std::make_unique<StoppableWriter>(std::move(writer), key, hooks.stop));
}

Result<void> write_object(storage::Backend& backend, const std::string& key, ConstBytes data,
                          const GenHooks& hooks) {
  FEEDLINE_ASSIGN_OR_RETURN(auto writer, create_object(backend, key, hooks));
  FEEDLINE_TRY(writer->append(data));
  return writer->commit();
}

void account_member(ConstBytes decoded, GenSummary& sum) {
  sum.digest += member_hash(decoded);
  sum.bytes_decoded += decoded.size();
  ++sum.members;
}

Result<void> draw_sample(const GenConfig& c, std::uint64_t i, const GenHooks& hooks,
                         SampleParts& parts, GenSummary& sum) {
  if (hooks.stop.stop_requested() || !make_sample(c, i, parts, hooks.stop)) {
    return fail(Error(Errc::kCancelled, "generation stopped"));
  }
  account_member(parts.raw, sum);
  ++sum.samples;
  return {};
}

Result<ConstBytes> draw_stored(const GenConfig& c, std::uint64_t i, const GenHooks& hooks,
                               SampleParts& parts, Compressor& compressor, GenSummary& sum) {
  FEEDLINE_TRY(draw_sample(c, i, hooks, parts, sum));
  if (c.compress.codec != Compression::kZstd) return ConstBytes(parts.raw);
  parts.stored.clear();
  FEEDLINE_TRY(compressor.compress_append(parts.raw, c.compress.level, parts.stored, hooks.stop));
  return ConstBytes(parts.stored);
}

}  // namespace detail

// ---- SizeDistribution -----------------------------------------------------------------------

Result<SizeDistribution> SizeDistribution::parse(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return fail(Error(Errc::kInvalidArgument, fmt::format("bad sample size '{}': {}", text, why))
                    .with_hint("expected SIZE, normal:MEAN:STDEV, lognormal:MEAN:STDEV or "
                               "uniform:MIN:MAX, e.g. 128KiB or lognormal:128KiB:32KiB"));
  };
  std::vector<std::string_view> parts;
  for (std::size_t start = 0;;) {
    const std::size_t colon = text.find(':', start);
    parts.push_back(text.substr(start, colon == std::string_view::npos ? colon : colon - start));
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  SizeDistribution d;
  std::vector<double> nums;
  const bool named = parts.size() > 1;
  for (std::size_t i = named ? 1 : 0; i < parts.size(); ++i) {
    auto v = parse_size(parts[i]);
    if (!v) return bad(v.error().message());
    nums.push_back(static_cast<double>(*v));
  }
  const std::string_view kind = named ? parts[0] : "fixed";
  const std::size_t want = kind == "fixed" ? 1 : 2;
  if (kind == "fixed") {
    d.kind = Kind::kFixed;
  } else if (kind == "normal") {
    d.kind = Kind::kNormal;
  } else if (kind == "lognormal") {
    d.kind = Kind::kLognormal;
  } else if (kind == "uniform") {
    d.kind = Kind::kUniform;
  } else {
    return bad(fmt::format("unknown distribution '{}'", kind));
  }
  if (nums.size() != want) {
    return bad(fmt::format("'{}' takes {} size{}", kind, want, want == 1 ? "" : "s"));
  }
  d.a = nums[0];
  d.b = want == 2 ? nums[1] : 0;
  if (d.kind == Kind::kFixed && d.a < 1) return bad("the size must be at least 1 byte");
  if ((d.kind == Kind::kNormal || d.kind == Kind::kLognormal) && d.a < 1) {
    return bad("the mean must be at least 1 byte");
  }
  if (d.kind == Kind::kUniform && d.b < d.a) return bad("the maximum is below the minimum");
  return d;
}

std::string SizeDistribution::to_string() const {
  const auto ia = static_cast<std::uint64_t>(std::llround(a));
  const auto ib = static_cast<std::uint64_t>(std::llround(b));
  switch (kind) {
    case Kind::kFixed:
      return fmt::format("fixed:{}", ia);
    case Kind::kNormal:
      return fmt::format("normal:{}:{}", ia, ib);
    case Kind::kLognormal:
      return fmt::format("lognormal:{}:{}", ia, ib);
    case Kind::kUniform:
      return fmt::format("uniform:{}:{}", ia, ib);
  }
  return "?";
}

double SizeDistribution::mean() const noexcept { return kind == Kind::kUniform ? (a + b) / 2 : a; }

std::uint64_t SizeDistribution::draw(std::mt19937_64& rng, std::uint64_t max_bytes) const {
  double v = a;
  switch (kind) {
    case Kind::kFixed:
      break;
    case Kind::kNormal:
      v = a + b * standard_normal(rng);
      break;
    case Kind::kLognormal: {
      // Mean a and standard deviation b of the sizes: sigma^2 = ln(1 + b^2/a^2), mu = ln a -
      // sigma^2/2.
      const double sigma2 = std::log1p((b / a) * (b / a));
      v = std::exp(std::log(a) - sigma2 / 2 + std::sqrt(sigma2) * standard_normal(rng));
      break;
    }
    case Kind::kUniform:
      v = std::floor(a + uniform01(rng) * (b - a + 1));
      break;
  }
  const double hi = static_cast<double>(std::max<std::uint64_t>(max_bytes, 1));
  if (!(v >= 1)) return 1;  // negatives and NaN
  if (v >= hi) return static_cast<std::uint64_t>(hi);
  return static_cast<std::uint64_t>(std::llround(v));
}

// ---- CompressionSpec ------------------------------------------------------------------------

Result<CompressionSpec> CompressionSpec::parse(std::string_view text) {
  CompressionSpec s;
  if (text == "none") return s;
  if (text == "zstd" || text.starts_with("zstd:")) {
    s.codec = Compression::kZstd;
    if (text.size() > 4) {
      const std::string_view num = text.substr(5);
      auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), s.level);
      if (num.empty() || ec != std::errc() || p != num.data() + num.size()) {
        return fail(Error(Errc::kInvalidArgument, fmt::format("bad zstd level in '{}'", text))
                        .with_hint("write zstd:LEVEL, e.g. zstd:3"));
      }
    }
    return s;
  }
  return fail(Error(Errc::kInvalidArgument, fmt::format("unknown compression '{}'", text))
                  .with_hint("expected none, zstd or zstd:LEVEL"));
}

std::string CompressionSpec::to_string() const {
  return codec == Compression::kNone ? std::string("none") : fmt::format("zstd:{}", level);
}

// ---- ImageSpec ------------------------------------------------------------------------------

Result<ImageSpec> ImageSpec::parse(std::string_view text) {
  ImageSpec s;
  if (text == "none") return s;
  auto bad = [&] {
    return fail(Error(Errc::kInvalidArgument, fmt::format("bad image '{}'", text))
                    .with_hint("write jpeg:WIDTHxHEIGHT or jpeg:WIDTHxHEIGHT:QUALITY, e.g. "
                               "jpeg:400x350 or jpeg:400x350:90, or none"));
  };
  if (!text.starts_with("jpeg:")) return bad();
  std::string_view rest = text.substr(5);
  const std::size_t x = rest.find('x');
  if (x == std::string_view::npos) return bad();
  const std::size_t colon = rest.find(':', x);
  auto number = [](std::string_view t, std::uint64_t& v) {
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    return !t.empty() && ec == std::errc() && p == t.data() + t.size();
  };
  std::uint64_t w = 0, h = 0, q = 95;
  if (!number(rest.substr(0, x), w) ||
      !number(rest.substr(x + 1, colon == std::string_view::npos ? colon : colon - x - 1), h) ||
      (colon != std::string_view::npos && !number(rest.substr(colon + 1), q))) {
    return bad();
  }
  if (w < 1 || h < 1 || w > kMaxImageSize || h > kMaxImageSize || q < 1 || q > 100) {
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("image '{}': sides of 1-{} pixels and a quality of 1-100", text,
                                  kMaxImageSize)));
  }
  s.jpeg = true;
  s.width = static_cast<std::uint32_t>(w);
  s.height = static_cast<std::uint32_t>(h);
  s.quality = static_cast<int>(q);
  return s;
}

std::string ImageSpec::to_string() const {
  return jpeg ? fmt::format("jpeg:{}x{}:{}", width, height, quality) : std::string("none");
}

std::string payload_extension(const GenConfig& c) {
  std::string ext = c.image.jpeg ? ".jpg" : ".bin";
  if (c.compress.codec == Compression::kZstd) ext += ".zst";
  return ext;
}

// ---- generation -----------------------------------------------------------------------------

std::string sample_key(std::uint64_t i, std::uint64_t n) {
  // At least six digits; as many as the largest number, n - 1, has.
  const std::size_t width = std::max<std::size_t>(6, fmt::formatted_size("{}", n > 0 ? n - 1 : 0));
  return fmt::format("{:0{}}", i, width);
}

Result<void> validate(const GenConfig& c) {
  auto bad = [](std::string msg) { return fail(Error(Errc::kInvalidArgument, std::move(msg))); };
  if (c.samples < 1) return bad("a dataset needs at least one sample");
  const SizeDistribution& d = c.sample_size;
  if (!std::isfinite(d.a) || !std::isfinite(d.b) || d.a < 0 || d.b < 0) {
    return bad("sample size parameters must be finite and non-negative");
  }
  if (d.kind != SizeDistribution::Kind::kUniform && d.a < 1) {
    return bad("the sample size (or its mean) must be at least 1 byte");
  }
  if (d.kind == SizeDistribution::Kind::kUniform && d.b < d.a) {
    return bad("uniform sample sizes: the maximum is below the minimum");
  }
  if (c.max_sample_size < 1) return bad("the maximum sample size must be at least 1 byte");
  if (c.format.is_auto()) {
    return bad(fmt::format("gen writes one format: {}, not auto",
                           builtin_formats().names_text(/*writable=*/true)));
  }
  const FormatSpec::Gen& gen = c.format.spec().gen;
  if (!gen.write) return bad(fmt::format("gen does not write {} datasets", c.format.name()));
  if (!c.format.spec().one_sample_per_object && c.samples_per_shard < 1) {
    return bad("samples per shard must be at least 1");
  }
  if (c.compress.codec != Compression::kNone && !gen.compresses) {
    return bad(
        fmt::format("compress {}: only {} samples are compressed; {} is written uncompressed",
                    c.compress.to_string(), formats_that(&FormatSpec::Gen::compresses, "and"),
                    c.format.name()));
  }
  if (gen.available) FEEDLINE_TRY(gen.available());
  if (!(c.compressibility >= 0 && c.compressibility <= 1)) {
    return bad(fmt::format("compressibility {} is outside [0, 1]", c.compressibility));
  }
  if (c.num_classes < 1) return bad("num_classes must be at least 1");
  if (c.image.jpeg) {
    if (!gen.images) {
      return bad(fmt::format("images ({}) are written as {} members, not {}", c.image.to_string(),
                             formats_that(&FormatSpec::Gen::images, "or"), c.format.name()));
    }
    if (!jpeg_available()) {
      return fail(Error(Errc::kUnsupported, "cannot write JPEG images: built without JPEG")
                      .with_hint("rebuild with -DFEEDLINE_WITH_JPEG=ON (libjpeg62-turbo-dev, "
                                 "libexif-dev)"));
    }
    if (c.image.width < 1 || c.image.height < 1 || c.image.width > kMaxImageSize ||
        c.image.height > kMaxImageSize || c.image.quality < 1 || c.image.quality > 100) {
      return bad(fmt::format("image {}: sides of 1-{} pixels and a quality of 1-100",
                             c.image.to_string(), kMaxImageSize));
    }
  }
  if (c.compress.codec == Compression::kZstd) {
    if (!zstd_available()) {
      return fail(Error(Errc::kUnsupported, "cannot compress: built without zstd")
                      .with_hint("use --compress none, or rebuild with -DFEEDLINE_WITH_ZSTD=ON"));
    }
    const ZstdLevelRange r = zstd_level_range();
    if (c.compress.level < r.min || c.compress.level > r.max) {
      return bad(
          fmt::format("zstd level {} is out of range [{}, {}]", c.compress.level, r.min, r.max));
    }
  }
  return {};
}

GenFootprint estimate_footprint(const GenConfig& c, std::uint64_t block_size) {
  const double block = static_cast<double>(std::max<std::uint64_t>(block_size, 1));
  auto blocks = [&](double bytes) { return std::ceil(std::max(bytes, 1.0) / block) * block; };
  double payload = std::min(c.sample_size.mean(), static_cast<double>(c.max_sample_size));
  if (c.image.jpeg) payload = static_cast<double>(c.image.width) * c.image.height / 4;
  if (c.compress.codec == Compression::kZstd) payload *= 1.0 - c.compressibility;
  const double samples = static_cast<double>(c.samples);
  const double objects = static_cast<double>(generated_objects(c));
  const FormatSpec* spec = c.format.is_auto() ? nullptr : &c.format.spec();
  const GenEstimate e = spec && spec->gen.footprint ? spec->gen.footprint(c, payload)
                                                    : GenEstimate{.data = samples * payload};
  GenFootprint f;
  const bool indexed = spec && spec->indexed;
  f.objects = generated_objects(c) * (indexed ? 2 : 1) + 1;  // indexes, the manifest
  const double bytes = objects * blocks(e.data / objects + e.per_object) +
                       (indexed ? objects * blocks(e.indexes / objects) : 0) + blocks(4096);
  f.bytes = bytes >= 1.8e19 ? ~std::uint64_t{0} : static_cast<std::uint64_t>(bytes);
  return f;
}

namespace {

// Refuses a dataset the backend says has no room for (GenHooks::check_space): estimate_footprint()
// against Backend::free_space(), less what the objects it replaces take now.
Result<void> check_room(storage::Backend& backend, std::string_view root, const GenConfig& c,
                        std::uint64_t replaced) {
  const std::optional<storage::SpaceInfo> room = backend.free_space(root);
  if (!room) return {};
  const GenFootprint need = estimate_footprint(c, room->block_size);
  const std::uint64_t bytes = need.bytes > replaced ? need.bytes - replaced : 0;
  const std::string what = fmt::format(
      "{} samples of {}{}", c.samples,
      c.image.jpeg
          ? c.image.to_string()
          : format_bytes(std::min(c.sample_size.mean(), static_cast<double>(c.max_sample_size))),
      c.compress.codec == Compression::kZstd ? fmt::format(" ({})", c.compress.to_string()) : "");
  const char* hint =
      "free some space, or write fewer or smaller samples (--samples, --sample-size, "
      "--for-host MEMORY); --no-space-check skips this check where the filesystem compresses or "
      "deduplicates";
  if (bytes > room->free_bytes) {
    return fail(
        Error(Errc::kInvalidArgument,
              fmt::format("the dataset needs about {} ({} bytes: {} in {} objects), the "
                          "filesystem has {} ({} bytes) free",
                          format_bytes(static_cast<double>(bytes)), bytes, what, need.objects,
                          format_bytes(static_cast<double>(room->free_bytes)), room->free_bytes))
            .with_object(backend.display_name(root))
            .with_hint(hint));
  }
  if (need.objects > room->free_objects) {
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("the dataset needs {} files ({}), the filesystem has {} free "
                                  "inodes",
                                  need.objects, what, room->free_objects))
                    .with_object(backend.display_name(root))
                    .with_hint("write fewer, larger objects (--samples-per-file with tar or "
                               "tfrecord), or use a filesystem with more inodes"));
  }
  return {};
}

}  // namespace

Result<GenSummary> generate_dataset(storage::Backend& backend, std::string_view root,
                                    const GenConfig& c, const GenHooks& hooks) {
  FEEDLINE_TRY(validate(c));
  const std::uint64_t shards = generated_objects(c);

  // Never mix datasets, never overwrite what gen did not write: a root that is not empty must hold
  // a manifest of gen (a dataset gen wrote, or began to write), and nothing this config would not
  // write.
  std::string prefix(root);
  if (!prefix.empty() && !prefix.ends_with('/')) prefix += '/';
  std::uint64_t replaced = 0;  // bytes of gen's objects there, which the new ones replace
  if (auto existing = backend.list(prefix)) {
    // Keys a server listed outside the prefix are none of the dataset's (and shorter than it).
    std::erase_if(*existing, [](const storage::ObjectInfo& o) { return o.outside; });
    const bool gen_made =
        std::any_of(existing->begin(), existing->end(), [&](const storage::ObjectInfo& o) {
          return std::string_view(o.key).substr(prefix.size()) == kManifestName;
        });
    for (const storage::ObjectInfo& o : *existing) {
      const std::string_view rel = std::string_view(o.key).substr(prefix.size());
      if (rel.find(".feedline-tmp-") != std::string_view::npos) continue;  // a crashed writer's
      if (rel == kManifestName) continue;
      if (!gen_made) {
        return fail(
            Error(Errc::kInvalidArgument,
                  fmt::format("{} is not empty and was not written by feedline gen (no {} there)",
                              backend.display_name(root), kManifestName))
                .with_object(backend.display_name(o.key))
                .with_hint("generate into an empty or new location, or remove what is there: gen "
                           "rewrites in place only a dataset it wrote"));
      }
      if (!is_ours(c, rel, shards)) {
        return fail(Error(Errc::kInvalidArgument,
                          fmt::format("{} already holds objects of another dataset", root))
                        .with_object(o.key)
                        .with_hint("generate into an empty location, or remove what is there"));
      }
      replaced += o.size;
    }
  } else if (existing.error().code() != Errc::kNotFound &&
             existing.error().code() != Errc::kUnsupported) {
    return fail(
        std::move(existing).error());  // kUnsupported: no listing (plain HTTP): nothing to check
  }

  if (hooks.check_space) FEEDLINE_TRY(check_room(backend, root, c, replaced));

  // The manifest, written first as "in progress" and last as "complete" (manifest.hpp): the last
  // write decides, so an interrupted generation is known as one on any backend.
  DatasetManifest manifest;
  manifest.config = c;
  manifest.summary.objects = generated_objects(c);
  const std::string manifest_key = join_key(root, kManifestName);
  FEEDLINE_TRY(backend.write(manifest_key, as_bytes(format_manifest(manifest))));

  GenSummary sum;
  FEEDLINE_TRY(c.format.spec().gen.write(backend, root, c, hooks, sum));  // validate(): one
  manifest.complete = true;
  manifest.summary = sum;
  FEEDLINE_TRY(backend.write(manifest_key, as_bytes(format_manifest(manifest))));
  sum.manifest = manifest_key;
  return sum;
}

}  // namespace feedline::loader
