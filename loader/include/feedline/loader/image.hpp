// Images: JPEG members decoded into HWC uint8 RGB, with the crops and resizes training uses.
//
// The JPEG decoder (".jpg", ".jpeg") is libjpeg-turbo's, through its libjpeg API: that API,
// unlike TurboJPEG 2.1's, decodes a region (jpeg_crop_scanline, jpeg_skip_scanlines) and keeps
// the EXIF marker (jpeg_save_markers). A crop is chosen in the image as it is displayed (EXIF
// orientation applied, libexif reading it), then only the rows and iMCU columns that cover it are
// decoded, at the smallest of libjpeg-turbo's DCT scales M/8 that still gives at least the output
// size (the largest saving there is: a 1/2 scale does a quarter of the IDCT and colour work), and
// the crop is resized to its output by a separable triangle (bilinear, antialiased when it
// shrinks) filter computed as Pillow's resize computes it, so that an unscaled decode gives
// Pillow's pixels. Grayscale is expanded to RGB, CMYK and YCCK converted to RGB as Pillow
// converts them; progressive JPEGs decode; anything else (a PNG named .jpg, a truncated or
// damaged file, libjpeg's warnings of data lost) is a data error naming the member, never a
// partial image.
//
// Deterministic: a random crop is drawn from (seed, sample, epoch) alone, so the same run gives
// the same pixels, and each epoch its own crop of each image.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/bytes.hpp"
#include "feedline/core/error.hpp"
#include "feedline/loader/decoder.hpp"

namespace feedline::loader {

enum class Crop : std::uint8_t {
  kNone,           // the whole image (resized to size x size when size is set: squashed)
  kCenter,         // the central square, center_fraction of the shorter side (Resize(256) +
                   // CenterCrop(224) is 0.875), resized to size x size
  kRandomResized,  // torchvision's RandomResizedCrop: an area fraction and an aspect ratio drawn
                   // in [min_area, max_area] and [min_ratio, max_ratio] (log-uniform), ten
                   // tries, then the whole image clamped to the ratio range; resized to size
};
std::string_view crop_name(Crop c) noexcept;
Result<Crop> parse_crop(std::string_view text);  // "none", "center", "random-resized"

struct ImageConfig {
  bool decode = false;  // decode JPEG members (false: they are delivered as stored)
  unsigned size = 0;    // output height and width; 0: the image's own size (crop kNone only)
  Crop crop = Crop::kCenter;
  double center_fraction = 0.875;
  double min_area = 0.08, max_area = 1.0;
  double min_ratio = 3.0 / 4.0, max_ratio = 4.0 / 3.0;
  // Decode at libjpeg-turbo's DCT scales where the crop allows (false: at full size, then
  // resize: Pillow's pixels, at a higher CPU cost).
  bool dct_scaling = true;
};

inline constexpr unsigned kMaxImageSize = 16384;
// The most pixels one output image may have: Pillow's Image.MAX_IMAGE_PIXELS (beyond it Pillow
// calls a file a decompression bomb), so an image size above 9459 is refused as Python's
// feedline.MAX_PIXELS refuses it.
inline constexpr std::uint64_t kMaxImagePixels = 89'478'485;

// kInvalidArgument naming the field for a config that cannot work (size 0 with a crop, ranges
// out of order or outside (0, 1], a size above kMaxImageSize).
Result<void> validate(const ImageConfig& config);

// True when this build has the JPEG decoder (libjpeg-turbo and libexif).
bool jpeg_available() noexcept;

// The JPEG decoder for these settings; kUnsupported "built without JPEG" without it.
Result<std::shared_ptr<const Decoder>> jpeg_decoder(const ImageConfig& config);

// default_decoders() plus, when config.decode, the JPEG decoder for ".jpg" and ".jpeg".
Result<DecoderRegistry> image_decoders(const ImageConfig& config);

// A crop in an image's displayed pixels (EXIF orientation applied).
struct CropBox {
  std::uint32_t x = 0, y = 0, width = 0, height = 0;
  friend bool operator==(const CropBox&, const CropBox&) = default;
};
// The crop the decoder takes of a width x height image for this sample and epoch.
CropBox choose_crop(const ImageConfig& config, std::uint32_t width, std::uint32_t height,
                    std::uint64_t seed, std::uint32_t sample, std::uint32_t epoch);

// What decode_jpeg_file tells of one image (the `feedline decode` command, tests).
struct JpegInfo {
  std::uint32_t width = 0, height = 0;  // as displayed (orientation applied)
  std::uint32_t stored_width = 0, stored_height = 0;
  unsigned components = 0;  // 1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK
  std::string color_space;  // "gray", "ycbcr", "rgb", "cmyk", "ycck"
  bool progressive = false;
  unsigned orientation = 1;    // EXIF, 1..8
  CropBox crop;                // in displayed pixels
  unsigned scale_eighths = 8;  // the DCT scale decoded at: M/8
  ImageShape shape;            // the output's
};
// Decodes one JPEG as the pipeline would decode sample `sample` of `epoch`; the pixels in *out.
// max_bytes (0: no limit) bounds the output and what the decode allocates (a header may claim
// 65500 x 65500 pixels): beyond it, kResourceExhausted before anything is allocated.
Result<JpegInfo> decode_jpeg(ConstBytes jpeg, const ImageConfig& config, std::uint64_t seed,
                             std::uint32_t sample, std::uint32_t epoch,
                             std::vector<std::uint8_t>* out, std::uint64_t max_bytes = 0);

// Encodes HWC RGB (or gray: channels 1) pixels as a baseline JPEG, 4:2:0, at quality 1-100
// (feedline gen's images).
Result<std::vector<std::byte>> encode_jpeg(std::span<const std::uint8_t> pixels,
                                           std::uint32_t width, std::uint32_t height,
                                           unsigned channels, int quality);

}  // namespace feedline::loader
