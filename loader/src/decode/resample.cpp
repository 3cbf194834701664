#include "resample.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define FEEDLINE_RESAMPLE_SSE41 1
#endif

namespace feedline::loader::detail {
namespace {

// Pillow's: 8-bit sums carry 22 fractional bits (32 - 8 - 2), rounded by adding a half first.
constexpr int kPrecisionBits = 32 - 8 - 2;
constexpr std::int32_t kHalf = 1 << (kPrecisionBits - 1);

double triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Coefficients for one axis, as Pillow's precompute_coeffs + normalize_coeffs_8bpc: for output
// pixel i, bounds[2i] is its first source pixel and bounds[2i+1] how many it reads; its
// coefficients are k[i * ksize ...]. Returns ksize. The filter reads only the pixels the box
// covers (at least partly), as Pillow's on a crop does: what torchvision's crop-then-resize
// gives, whatever lies outside the box in the source.
std::size_t coefficients(std::uint32_t in_size, double in0, double in1, std::uint32_t out_size,
                         std::vector<std::int32_t>& k, std::vector<std::int32_t>& bounds) {
  const int lo = std::clamp(static_cast<int>(std::floor(in0)), 0, static_cast<int>(in_size));
  const int hi = std::clamp(static_cast<int>(std::ceil(in1)), lo, static_cast<int>(in_size));
  const double scale = (in1 - in0) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;  // the triangle's support is 1
  const std::size_t ksize = static_cast<std::size_t>(std::ceil(support)) * 2 + 1;
  k.assign(ksize * out_size, 0);
  bounds.assign(2 * std::size_t{out_size}, 0);
  std::vector<double> w(ksize);
  for (std::uint32_t xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    // Pillow's rounding of the support's ends (a cast: towards zero), then the box's bounds.
    int xmin = static_cast<int>(center - support + 0.5);
    xmin = std::max(xmin, lo);
    int xmax = static_cast<int>(center + support + 0.5);
    xmax = std::min(xmax, hi);
    xmax = std::clamp(xmax - xmin, 0, static_cast<int>(ksize));
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      w[x] = triangle((x + xmin - center + 0.5) * ss);
      ww += w[x];
    }
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[x] / ww : w[x];
      k[xx * ksize + x] = v < 0 ? static_cast<std::int32_t>(-0.5 + v * (1 << kPrecisionBits))
                                : static_cast<std::int32_t>(0.5 + v * (1 << kPrecisionBits));
    }
    bounds[2 * xx] = xmin;
    bounds[2 * xx + 1] = xmax;
  }
  return ksize;
}

inline std::uint8_t clip8(std::int32_t v) {
  v >>= kPrecisionBits;
  return static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// The horizontal pass over `rows` rows: per output pixel, its taps of each channel.
template <unsigned Ch>
void horizontal(const std::uint8_t* in, std::size_t in_stride, std::size_t rows,
                std::uint32_t out_w, const std::int32_t* kk, std::size_t ksize,
                const std::int32_t* bounds, std::uint8_t* out, std::size_t out_stride,
                unsigned ch) {
  const unsigned c_n = Ch ? Ch : ch;
  for (std::size_t r = 0; r < rows; ++r) {
    const std::uint8_t* src = in + r * in_stride;
    std::uint8_t* dst = out + r * out_stride;
    for (std::uint32_t xx = 0; xx < out_w; ++xx) {
      const std::int32_t* k = kk + xx * ksize;
      const int n = bounds[2 * xx + 1];
      const std::uint8_t* p = src + std::size_t(bounds[2 * xx]) * c_n;
      if constexpr (Ch == 3) {
        std::int32_t s0 = kHalf, s1 = kHalf, s2 = kHalf;
        for (int x = 0; x < n; ++x, p += 3) {
          s0 += p[0] * k[x];
          s1 += p[1] * k[x];
          s2 += p[2] * k[x];
        }
        dst[3 * xx + 0] = clip8(s0);
        dst[3 * xx + 1] = clip8(s1);
        dst[3 * xx + 2] = clip8(s2);
      } else {
        for (unsigned c = 0; c < c_n; ++c) {
          std::int32_t sum = kHalf;
          for (int x = 0; x < n; ++x) sum += p[c_n * x + c] * k[x];
          dst[c_n * xx + c] = clip8(sum);
        }
      }
    }
  }
}

// The vertical pass: each output row a weighted sum of whole input rows, accumulated row by row
// (the same integer sums as Pillow's per-pixel loop, in an order the compiler vectorises).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
__attribute__((target_clones("avx2", "default")))
#endif
void vertical(const std::uint8_t* in, std::size_t in_stride, std::size_t row_bytes,
              std::uint32_t out_h, const std::int32_t* kk, std::size_t ksize,
              const std::int32_t* bounds, int first, std::uint8_t* out, std::size_t out_stride,
              std::int32_t* acc) {
  for (std::uint32_t yy = 0; yy < out_h; ++yy) {
    const std::int32_t* k = kk + yy * ksize;
    const int ymin = bounds[2 * yy] - first, n = bounds[2 * yy + 1];
    for (std::size_t i = 0; i < row_bytes; ++i) acc[i] = kHalf;
    for (int y = 0; y < n; ++y) {
      const std::uint8_t* src = in + std::size_t(ymin + y) * in_stride;
      const std::int32_t w = k[y];
      for (std::size_t i = 0; i < row_bytes; ++i) acc[i] += src[i] * w;
    }
    std::uint8_t* dst = out + yy * out_stride;
    for (std::size_t i = 0; i < row_bytes; ++i) dst[i] = clip8(acc[i]);
  }
}

#ifdef FEEDLINE_RESAMPLE_SSE41
// horizontal<3> with the three channels of a tap in one vector: a pixel's 4 bytes (its RGB and
// the next pixel's R, multiplied and then dropped) widened to 32 bits, times the coefficient.
// The same integer sums as the scalar loop. Reads one byte past a tap's pixel: `in` must have a
// byte to spare after its last row's last pixel (ResampleScratch's buffers and the decoder's
// rows do); writes 4 bytes for every output pixel but the last of a row.
__attribute__((target("sse4.1"))) void horizontal3_sse41(
    const std::uint8_t* in, std::size_t in_stride, std::size_t rows, std::uint32_t out_w,
    const std::int32_t* kk, std::size_t ksize, const std::int32_t* bounds, std::uint8_t* out,
    std::size_t out_stride) {
  const __m128i half = _mm_set1_epi32(kHalf);
  for (std::size_t r = 0; r < rows; ++r) {
    const std::uint8_t* src = in + r * in_stride;
    std::uint8_t* dst = out + r * out_stride;
    for (std::uint32_t xx = 0; xx < out_w; ++xx) {
      const std::int32_t* k = kk + xx * ksize;
      const int n = bounds[2 * xx + 1];
      const std::uint8_t* p = src + std::size_t(bounds[2 * xx]) * 3;
      __m128i sum = half;
      for (int x = 0; x < n; ++x, p += 3) {
        std::int32_t four;
        std::memcpy(&four, p, 4);
        const __m128i px = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(four));
        sum = _mm_add_epi32(sum, _mm_mullo_epi32(px, _mm_set1_epi32(k[x])));
      }
      sum = _mm_srai_epi32(sum, kPrecisionBits);
      const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(sum, sum), sum);
      const std::int32_t v = _mm_cvtsi128_si32(bytes);
      if (xx + 1 < out_w) {
        std::memcpy(dst + 3 * xx, &v, 4);
      } else {
        std::memcpy(dst + 3 * xx, &v, 3);
      }
    }
  }
}
#endif

void horizontal_any(const std::uint8_t* in, std::size_t in_stride, std::size_t rows,
                    std::uint32_t out_w, const std::vector<std::int32_t>& kk, std::size_t ksize,
                    const std::vector<std::int32_t>& bounds, std::uint8_t* out,
                    std::size_t out_stride, unsigned ch) {
#ifdef FEEDLINE_RESAMPLE_SSE41
  if (ch == 3 && __builtin_cpu_supports("sse4.1")) {
    horizontal3_sse41(in, in_stride, rows, out_w, kk.data(), ksize, bounds.data(), out, out_stride);
    return;
  }
#endif
  if (ch == 3) {
    horizontal<3>(in, in_stride, rows, out_w, kk.data(), ksize, bounds.data(), out, out_stride, 3);
  } else {
    horizontal<0>(in, in_stride, rows, out_w, kk.data(), ksize, bounds.data(), out, out_stride, ch);
  }
}

}  // namespace

void resample(const ImageView& src, const ImageBox& box, std::uint8_t* dst, std::size_t dst_stride,
              std::uint32_t dst_width, std::uint32_t dst_height, ResampleScratch& s) {
  const unsigned ch = src.channels;
  const std::size_t kx = coefficients(src.width, box.x0, box.x1, dst_width, s.kx, s.bx);
  const std::size_t ky = coefficients(src.height, box.y0, box.y1, dst_height, s.ky, s.by);
  // The source rows the vertical pass reads.
  const int first = s.by[0];
  const int last = s.by[2 * (dst_height - 1)] + s.by[2 * (dst_height - 1) + 1];
  const std::size_t rows = static_cast<std::size_t>(std::max(last - first, 0));
  // The scalar horizontal pass costs per row it makes: where the crop has more rows than the
  // output, shrink the rows first (vectorised), then the columns of the fewer rows. Each order
  // rounds its intermediate to bytes, so the two differ from each other (and from Pillow, which
  // always goes horizontal first) by at most a level here and there.
  const int cfirst = s.bx[0];
  const int clast = s.bx[2 * (dst_width - 1)] + s.bx[2 * (dst_width - 1) + 1];
  const std::size_t cols = static_cast<std::size_t>(std::max(clast - cfirst, 0));
  if (rows > dst_height) {
    const std::size_t row_bytes = cols * ch;
    if (s.rows.size() < dst_height * row_bytes + 1) s.rows.resize(dst_height * row_bytes + 1);
    if (s.acc.size() < row_bytes) s.acc.resize(row_bytes);
    vertical(src.data + std::size_t(cfirst) * ch, src.stride, row_bytes, dst_height, s.ky.data(),
             ky, s.by.data(), 0, s.rows.data(), row_bytes, s.acc.data());
    for (std::uint32_t xx = 0; xx < dst_width; ++xx) s.bx[2 * xx] -= cfirst;
    horizontal_any(s.rows.data(), row_bytes, dst_height, dst_width, s.kx, kx, s.bx, dst, dst_stride,
                   ch);
    return;
  }
  const std::size_t row_bytes = std::size_t{dst_width} * ch;
  if (s.rows.size() < rows * row_bytes + 1) s.rows.resize(rows * row_bytes + 1);
  if (s.acc.size() < row_bytes) s.acc.resize(row_bytes);
  horizontal_any(src.data + std::size_t(first) * src.stride, src.stride, rows, dst_width, s.kx, kx,
                 s.bx, s.rows.data(), row_bytes, ch);
  vertical(s.rows.data(), row_bytes, row_bytes, dst_height, s.ky.data(), ky, s.by.data(), first,
           dst, dst_stride, s.acc.data());
}

}  // namespace feedline::loader::detail
