// feedline gen's pictures (gen_parts.hpp: draw_image): content a JPEG encoder and decoder treat
// as they treat photographs. Smooth areas (a gradient, flat shapes), edges (shapes with
// anti-aliased borders), textures (stripes of a few pixels' period inside some shapes, like
// fabric or foliage) and sensor-like grain everywhere; its amounts are set so that 400 x 350 at
// quality 90 encodes to about ImageNet's average of 110 KiB, so decoding costs what it costs
// on real data. Every value comes from the sample's own generator: deterministic.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "../random_bits.hpp"
#include "gen_parts.hpp"

namespace feedline::loader::detail {
namespace {

double between(std::mt19937_64& rng, double lo, double hi) {
  return lo + (hi - lo) * uniform01(rng);
}

struct Rgb {
  float r, g, b;
};
Rgb colour(std::mt19937_64& rng) {
  return {static_cast<float>(between(rng, 0, 255)), static_cast<float>(between(rng, 0, 255)),
          static_cast<float>(between(rng, 0, 255))};
}

}  // namespace

void draw_image(std::mt19937_64& rng, const ImageSpec& spec, std::vector<std::uint8_t>& pixels) {
  const int w = static_cast<int>(spec.width), h = static_cast<int>(spec.height);
  std::vector<float> img(std::size_t(w) * h * 3);
  // A gradient from one colour to another along a random direction.
  {
    const Rgb a = colour(rng), b = colour(rng);
    const double angle = between(rng, 0, 2 * std::numbers::pi);
    const double dx = std::cos(angle), dy = std::sin(angle);
    const double span = std::abs(dx) * w + std::abs(dy) * h + 1;
    const double lo = std::min(0.0, dx * w) + std::min(0.0, dy * h);
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        const auto t = static_cast<float>((x * dx + y * dy - lo) / span);
        float* p = &img[(std::size_t(y) * w + x) * 3];
        p[0] = a.r + (b.r - a.r) * t;
        p[1] = a.g + (b.g - a.g) * t;
        p[2] = a.b + (b.b - a.b) * t;
      }
    }
  }
  // Shapes: ellipses and rectangles, flat or striped, with a one-pixel soft edge.
  const int shapes = 10 + static_cast<int>(rng() % 12);
  const double scale = std::sqrt(double(w) * h);
  for (int s = 0; s < shapes; ++s) {
    const bool ellipse = rng() % 2 == 0;
    const double cx = between(rng, 0, w), cy = between(rng, 0, h);
    const double rx = between(rng, 0.03, 0.3) * scale, ry = between(rng, 0.03, 0.3) * scale;
    const Rgb c = colour(rng);
    const bool striped = rng() % 3 != 0;
    const double period = between(rng, 2.5, 9.0);
    const double sangle = between(rng, 0, std::numbers::pi);
    const double sx = std::cos(sangle) * 2 * std::numbers::pi / period;
    const double sy = std::sin(sangle) * 2 * std::numbers::pi / period;
    const auto amp = static_cast<float>(between(rng, 25, 70));
    const int x0 = std::max(0, static_cast<int>(cx - rx - 1)),
              x1 = std::min(w, static_cast<int>(cx + rx + 2));
    const int y0 = std::max(0, static_cast<int>(cy - ry - 1)),
              y1 = std::min(h, static_cast<int>(cy + ry + 2));
    for (int y = y0; y < y1; ++y) {
      for (int x = x0; x < x1; ++x) {
        // Signed distance-like measure in pixels: inside < 0.
        double d;
        if (ellipse) {
          const double u = (x - cx) / rx, v = (y - cy) / ry;
          d = (std::sqrt(u * u + v * v) - 1) * std::min(rx, ry);
        } else {
          d = std::max(std::abs(x - cx) - rx, std::abs(y - cy) - ry);
        }
        const auto alpha = static_cast<float>(std::clamp(0.5 - d, 0.0, 1.0));
        if (alpha <= 0) continue;
        const float stripe = striped ? amp * static_cast<float>(std::sin(x * sx + y * sy)) : 0.0f;
        float* p = &img[(std::size_t(y) * w + x) * 3];
        p[0] += alpha * (c.r + stripe - p[0]);
        p[1] += alpha * (c.g + stripe - p[1]);
        p[2] += alpha * (c.b + stripe - p[2]);
      }
    }
  }
  // Texture over everything: value noise (random values on a lattice, bilinearly interpolated)
  // at periods of 32 down to 2 pixels, the finer the weaker, as the detail of natural scenes
  // falls off with frequency.
  {
    std::vector<float> lattice;
    const int periods[] = {32, 16, 8, 4, 2};
    const float amps[] = {14, 12, 12, 12, 12};
    std::vector<float> tex(std::size_t(w) * h, 0.0f);
    for (int o = 0; o < 5; ++o) {
      const int p = periods[o];
      const int gw = w / p + 2, gh = h / p + 2;
      lattice.resize(std::size_t(gw) * gh);
      for (float& v : lattice) v = static_cast<float>(between(rng, -1, 1)) * amps[o];
      for (int y = 0; y < h; ++y) {
        const int gy = y / p;
        const float fy = float(y % p) / p;
        for (int x = 0; x < w; ++x) {
          const int gx = x / p;
          const float fx = float(x % p) / p;
          const float* l0 = &lattice[std::size_t(gy) * gw + gx];
          const float* l1 = l0 + gw;
          const float top = l0[0] + (l0[1] - l0[0]) * fx, bottom = l1[0] + (l1[1] - l1[0]) * fx;
          tex[std::size_t(y) * w + x] += top + (bottom - top) * fy;
        }
      }
    }
    for (std::size_t i = 0; i < tex.size(); ++i) {
      for (int ch = 0; ch < 3; ++ch) img[3 * i + ch] += tex[i];
    }
  }
  // Grain, then to bytes.
  pixels.resize(img.size());
  for (std::size_t i = 0; i < img.size(); i += 3) {
    const std::uint64_t bits = rng();
    const float luma = static_cast<float>(int(bits & 0xff) - 128) * (36.0f / 128.0f);
    for (int ch = 0; ch < 3; ++ch) {
      const float chroma =
          static_cast<float>(int((bits >> (8 + 8 * ch)) & 0xff) - 128) * (4.0f / 128.0f);
      pixels[i + ch] =
          static_cast<std::uint8_t>(std::clamp(img[i + ch] + luma + chroma, 0.0f, 255.0f) + 0.5f);
    }
  }
}

}  // namespace feedline::loader::detail
