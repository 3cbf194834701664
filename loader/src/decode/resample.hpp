// A separable image resampler for uint8 HWC images: a triangle (bilinear) filter, widened by the
// shrink factor so that shrinking averages every source pixel (antialiased), with the
// coefficients, their fixed-point rounding and the two passes (horizontal into uint8 rows, then
// vertical) as Pillow's Image.resize(..., BILINEAR, box) computes them (libImaging/Resample.c).
// An unscaled decode followed by this resize gives Pillow's crop-then-resize pixels, which is
// what torchvision's RandomResizedCrop and Resize do on PIL images.
//
// Written here rather than taken from a library: Debian's image libraries either resize whole
// images only through their own image types and allocations (libvips, GraphicsMagick), or with
// other filters (stb_image_resize's float kernels, libswscale's), and the point of this one is
// to be Pillow's filter on a region of rows we decoded ourselves, with no copy in between.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace feedline::loader::detail {

struct ImageView {
  const std::uint8_t* data = nullptr;
  std::size_t stride = 0;  // bytes between rows
  std::uint32_t width = 0, height = 0;
  unsigned channels = 3;
};

struct ImageBox {  // a region of a source image, in its pixels (fractional where scaled)
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// Reusable coefficient and row buffers (one per decode thread).
struct ResampleScratch {
  std::vector<std::int32_t> kx, ky;
  std::vector<std::int32_t> bx, by;  // per output column/row: first source pixel, count
  std::vector<std::uint8_t> rows;    // the horizontal pass's output
  std::vector<std::int32_t> acc;     // the vertical pass's sums, one output row
};

// Resizes `box` of `src` (clamped to its bounds: pixels outside src are never used; one byte past
// its last row's last pixel may be read, so its buffer must have that byte) to a
// dst_width x dst_height image at `dst` (rows dst_stride bytes apart, src.channels each).
void resample(const ImageView& src, const ImageBox& box, std::uint8_t* dst, std::size_t dst_stride,
              std::uint32_t dst_width, std::uint32_t dst_height, ResampleScratch& scratch);

}  // namespace feedline::loader::detail
