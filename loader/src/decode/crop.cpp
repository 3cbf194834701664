// The crops of image.hpp: which part of an image a sample gets, drawn deterministically.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "../random_bits.hpp"
#include "feedline/loader/image.hpp"

namespace feedline::loader {
namespace {

using detail::splitmix64;

// A small generator of its own (not <random>'s distributions, which differ between standard
// libraries): the same crop for the same (seed, sample, epoch) on every build.
class CropRng {
 public:
  CropRng(std::uint64_t seed, std::uint32_t sample, std::uint32_t epoch)
      : state_(splitmix64(splitmix64(seed ^ 0x6a70656763726f70ull) ^
                          (std::uint64_t{sample} << 32 | epoch))) {}
  double uniform(double lo, double hi) {  // [lo, hi)
    state_ = splitmix64(state_);
    return lo + (hi - lo) * static_cast<double>(state_ >> 11) * 0x1.0p-53;
  }
  std::uint32_t below(std::uint32_t n) {  // [0, n)
    return std::min(n - 1, static_cast<std::uint32_t>(uniform(0, n)));
  }

 private:
  std::uint64_t state_;
};

// Python's round(): halves to even.
std::int64_t round_even(double v) { return static_cast<std::int64_t>(std::nearbyint(v)); }

}  // namespace

std::string_view crop_name(Crop c) noexcept {
  switch (c) {
    case Crop::kNone:
      return "none";
    case Crop::kCenter:
      return "center";
    case Crop::kRandomResized:
      return "random-resized";
  }
  return "?";
}

Result<Crop> parse_crop(std::string_view text) {
  if (text == "none") return Crop::kNone;
  if (text == "center") return Crop::kCenter;
  if (text == "random-resized") return Crop::kRandomResized;
  return fail(Error(Errc::kInvalidArgument, fmt::format("unknown crop '{}'", text))
                  .with_hint("choose random-resized, center or none"));
}

Result<void> validate(const ImageConfig& c) {
  auto bad = [](std::string msg, std::string hint = {}) {
    return fail(Error(Errc::kInvalidArgument, std::move(msg)).with_hint(std::move(hint)));
  };
  if (!c.decode) return {};
  if (c.size > kMaxImageSize)
    return bad(fmt::format("image size {} is above the largest, {}", c.size, kMaxImageSize));
  if (const std::uint64_t pixels = std::uint64_t{c.size} * c.size; pixels > kMaxImagePixels) {
    return bad(fmt::format("image size {} makes images of {} x {} = {} pixels, more than {} "
                           "(Pillow's limit for one image, its MAX_IMAGE_PIXELS)",
                           c.size, c.size, c.size, pixels, kMaxImagePixels),
               "a smaller image size");
  }
  if (c.size == 0 && c.crop != Crop::kNone) {
    return bad(fmt::format("a {} crop needs an output size", crop_name(c.crop)),
               "give the image size (224), or crop none to decode images at their own size");
  }
  if (!(c.center_fraction > 0 && c.center_fraction <= 1))
    return bad(fmt::format("center fraction {} is outside (0, 1]", c.center_fraction));
  if (!(c.min_area > 0 && c.min_area <= c.max_area && c.max_area <= 1)) {
    return bad(fmt::format("crop area range [{}, {}] must lie in (0, 1], smallest first",
                           c.min_area, c.max_area));
  }
  if (!(c.min_ratio > 0 && c.min_ratio <= c.max_ratio && std::isfinite(c.max_ratio))) {
    return bad(fmt::format("crop aspect ratio range [{}, {}] must be positive, smallest first",
                           c.min_ratio, c.max_ratio));
  }
  return {};
}

CropBox choose_crop(const ImageConfig& c, std::uint32_t width, std::uint32_t height,
                    std::uint64_t seed, std::uint32_t sample, std::uint32_t epoch) {
  CropBox whole{0, 0, width, height};
  if (width == 0 || height == 0) return whole;
  switch (c.crop) {
    case Crop::kNone:
      return whole;
    case Crop::kCenter: {
      const auto side = static_cast<std::uint32_t>(std::clamp<std::int64_t>(
          round_even(std::min(width, height) * c.center_fraction), 1, std::min(width, height)));
      return {static_cast<std::uint32_t>(round_even((width - side) / 2.0)),
              static_cast<std::uint32_t>(round_even((height - side) / 2.0)), side, side};
    }
    case Crop::kRandomResized:
      break;
  }
  // torchvision's RandomResizedCrop.get_params, with this generator.
  CropRng rng(seed, sample, epoch);
  const double area = double(width) * height;
  const double log_lo = std::log(c.min_ratio), log_hi = std::log(c.max_ratio);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * rng.uniform(c.min_area, c.max_area);
    const double ratio = std::exp(rng.uniform(log_lo, log_hi));
    const std::int64_t w = round_even(std::sqrt(target * ratio));
    const std::int64_t h = round_even(std::sqrt(target / ratio));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const std::uint32_t y = rng.below(height - static_cast<std::uint32_t>(h) + 1);
      const std::uint32_t x = rng.below(width - static_cast<std::uint32_t>(w) + 1);
      return {x, y, static_cast<std::uint32_t>(w), static_cast<std::uint32_t>(h)};
    }
  }
  // The fallback: the whole image, cut to the nearest aspect ratio in range, centred.
  const double in_ratio = double(width) / height;
  std::uint32_t w = width, h = height;
  if (in_ratio < c.min_ratio) {
    h = static_cast<std::uint32_t>(
        std::clamp<std::int64_t>(round_even(w / c.min_ratio), 1, height));
  } else if (in_ratio > c.max_ratio) {
    w = static_cast<std::uint32_t>(std::clamp<std::int64_t>(round_even(h * c.max_ratio), 1, width));
  }
  return {(width - w) / 2, (height - h) / 2, w, h};
}

}  // namespace feedline::loader
