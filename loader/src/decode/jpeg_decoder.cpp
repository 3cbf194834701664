// The JPEG decoder (image.hpp) on libjpeg-turbo's libjpeg API.
//
// libjpeg reports errors by calling error_exit, which must not return: it longjmp()s back to the
// setjmp() in guarded(). Between the two there are only libjpeg's C frames and lambdas that hold
// references and plain values, so no C++ destructor is skipped; every allocation of ours happens
// outside a guarded call.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "exif.hpp"
#include "feedline/loader/image.hpp"
#include "resample.hpp"

#ifdef FEEDLINE_HAVE_JPEG
// jpeglib.h first: its configuration decides which of jerror.h's codes exist.
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on
#endif

namespace feedline::loader {

#ifdef FEEDLINE_HAVE_JPEG

namespace {

struct ErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void on_error(j_common_ptr c) {
  auto* e = reinterpret_cast<ErrorManager*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

// libjpeg's warnings: those that mean lost or damaged image data end the decode (a truncated
// file would otherwise decode to grey rows); the rest (extraneous bytes between markers, an
// unknown JFIF revision or Adobe transform, a bad ICC profile) leave the pixels whole.
void on_message(j_common_ptr c, int level) {
  if (level >= 0) return;  // trace messages
  switch (c->err->msg_code) {
    case JWRN_JPEG_EOF:
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
#if JPEG_LIB_VERSION >= 70 || defined(D_ARITH_CODING_SUPPORTED)
    case JWRN_ARITH_BAD_CODE:
#endif
    case JWRN_MUST_RESYNC:
    case JWRN_BOGUS_PROGRESSION:
    case JWRN_NOT_SEQUENTIAL:
    case JWRN_TOO_MUCH_DATA:
      on_error(c);
    default:
      ++c->err->num_warnings;
  }
}

// Where a displayed pixel (x, y) of a w x h display comes from in the stored image (sw x sh),
// for EXIF orientation o (what Pillow's ImageOps.exif_transpose undoes).
struct Point {
  std::uint32_t x, y;
};
Point stored_of(unsigned o, std::uint32_t x, std::uint32_t y, std::uint32_t sw, std::uint32_t sh) {
  switch (o) {
    case 2:
      return {sw - 1 - x, y};
    case 3:
      return {sw - 1 - x, sh - 1 - y};
    case 4:
      return {x, sh - 1 - y};
    case 5:
      return {y, x};
    case 6:
      return {y, sh - 1 - x};
    case 7:
      return {sw - 1 - y, sh - 1 - x};
    case 8:
      return {sw - 1 - y, x};
    default:
      return {x, y};
  }
}

bool swaps_axes(unsigned o) { return o >= 5 && o <= 8; }

// Copies a stored-orientation image (sw x sh, 3 channels) into its displayed orientation.
void orient(unsigned o, const std::uint8_t* src, std::uint32_t sw, std::uint32_t sh,
            std::uint8_t* dst, std::size_t dst_stride) {
  const std::uint32_t dw = swaps_axes(o) ? sh : sw, dh = swaps_axes(o) ? sw : sh;
  for (std::uint32_t y = 0; y < dh; ++y) {
    std::uint8_t* row = dst + y * dst_stride;
    for (std::uint32_t x = 0; x < dw; ++x) {
      const Point p = stored_of(o, x, y, sw, sh);
      std::memcpy(row + 3 * x, src + (std::size_t{p.y} * sw + p.x) * 3, 3);
    }
  }
}

std::string_view space_name(J_COLOR_SPACE s) {
  switch (s) {
    case JCS_GRAYSCALE:
      return "gray";
    case JCS_YCbCr:
      return "ycbcr";
    case JCS_RGB:
      return "rgb";
    case JCS_CMYK:
      return "cmyk";
    case JCS_YCCK:
      return "ycck";
    default:
      return "other";
  }
}

Error corrupt(std::string_view member, std::string_view why) {
  return Error(Errc::kCorrupt, fmt::format("JPEG member '{}': {}", member, why));
}

class JpegState final : public DecoderState {
 public:
  explicit JpegState(const ImageConfig& config) : config_(config) {
    cinfo_.err = jpeg_std_error(&err_.pub);
    err_.pub.error_exit = on_error;
    err_.pub.emit_message = on_message;
    created_ = guarded([&] { jpeg_create_decompress(&cinfo_); });
  }
  ~JpegState() override {
    if (created_) jpeg_destroy_decompress(&cinfo_);
  }
  JpegState(const JpegState&) = delete;
  JpegState& operator=(const JpegState&) = delete;

  Result<std::uint64_t> output_size(ConstBytes in, const DecodeContext& ctx) override {
    if (config_.size) return std::uint64_t{config_.size} * config_.size * 3;
    FEEDLINE_TRY(read_header(in, ctx));
    jpeg_abort_decompress(&cinfo_);
    return std::uint64_t{info_.width} * info_.height * 3;
  }

  Result<Decoded> decode(ConstBytes in, MutableBytes out, const DecodeContext& ctx) override {
    FEEDLINE_ASSIGN_OR_RETURN(JpegInfo info, decode_into(in, out, ctx));
    return Decoded{info.shape.bytes(), info.shape};
  }

  // The whole decode, for decode() and decode_jpeg().
  Result<JpegInfo> decode_into(ConstBytes in, MutableBytes out, const DecodeContext& ctx);

 private:
  template <class F>
  bool guarded(F&& f) {
    if (setjmp(err_.jump)) return false;
    f();
    return true;
  }
  Error libjpeg_error(std::string_view member) {
    if (created_) jpeg_abort_decompress(&cinfo_);
    return corrupt(member, err_.message);
  }
  // Reads the header (and the EXIF orientation) into info_: the decompressor is then mid-image
  // until jpeg_abort_decompress().
  Result<void> read_header(ConstBytes in, const DecodeContext& ctx);

  const ImageConfig config_;
  jpeg_decompress_struct cinfo_{};
  ErrorManager err_{};
  bool created_ = false;
  JpegInfo info_;
  std::vector<std::uint8_t> region_;  // decoded rows covering the crop (stored orientation)
  std::vector<std::uint8_t> cmyk_;    // one row of CMYK before its conversion
  std::vector<std::uint8_t> turned_;  // resized, before its orientation is applied
  detail::ResampleScratch resample_;
};

Result<void> JpegState::read_header(ConstBytes in, const DecodeContext& ctx) {
  if (!created_) {
    return fail(Error(Errc::kResourceExhausted, "cannot create a libjpeg decompressor"));
  }
  if (in.size() < 4)
    return fail(corrupt(ctx.member, fmt::format("{} bytes is no JPEG", in.size())));
  if (std::to_integer<unsigned>(in[0]) != 0xff || std::to_integer<unsigned>(in[1]) != 0xd8) {
    const bool png = in.size() >= 8 && std::memcmp(in.data(), "\x89PNG\r\n\x1a\n", 8) == 0;
    return fail(corrupt(ctx.member, png ? "this is a PNG file, not a JPEG"
                                        : fmt::format("not a JPEG file (it starts with 0x{:02x} "
                                                      "0x{:02x}, not the SOI marker 0xff 0xd8)",
                                                      std::to_integer<unsigned>(in[0]),
                                                      std::to_integer<unsigned>(in[1]))));
  }
  int header = 0;
  const auto* data = reinterpret_cast<const unsigned char*>(in.data());
  const bool ok = guarded([&] {
    jpeg_mem_src(&cinfo_, data, static_cast<unsigned long>(in.size()));
    jpeg_save_markers(&cinfo_, JPEG_APP0 + 1, 0xffff);
    header = jpeg_read_header(&cinfo_, FALSE);
  });
  if (!ok) return fail(libjpeg_error(ctx.member));
  if (header != JPEG_HEADER_OK) {
    jpeg_abort_decompress(&cinfo_);
    return fail(corrupt(ctx.member, "it holds tables only, no image"));
  }
  JpegInfo& i = info_;
  i = JpegInfo{};
  i.stored_width = cinfo_.image_width;
  i.stored_height = cinfo_.image_height;
  i.components = static_cast<unsigned>(cinfo_.num_components);
  i.color_space = space_name(cinfo_.jpeg_color_space);
  i.progressive = cinfo_.progressive_mode != 0;
  for (jpeg_saved_marker_ptr m = cinfo_.marker_list; m; m = m->next) {
    if (m->marker == JPEG_APP0 + 1) {
      i.orientation = detail::exif_orientation(m->data, m->data_length);
      if (i.orientation != 1) break;
    }
  }
  const bool turned = swaps_axes(i.orientation);
  i.width = turned ? i.stored_height : i.stored_width;
  i.height = turned ? i.stored_width : i.stored_height;
  const J_COLOR_SPACE cs = cinfo_.jpeg_color_space;
  if (cs != JCS_GRAYSCALE && cs != JCS_YCbCr && cs != JCS_RGB && cs != JCS_CMYK && cs != JCS_YCCK) {
    jpeg_abort_decompress(&cinfo_);
    return fail(Error(Errc::kUnsupported,
                      fmt::format("JPEG member '{}': its colour space ({} components) is none of "
                                  "gray, YCbCr, RGB, CMYK or YCCK",
                                  ctx.member, i.components)));
  }
  const std::uint64_t full = std::uint64_t{i.width} * i.height * 3;
  if (ctx.max_bytes && full > ctx.max_bytes && config_.size == 0) {
    jpeg_abort_decompress(&cinfo_);
    return fail(Error(Errc::kResourceExhausted,
                      fmt::format("JPEG member '{}' is {} x {} pixels: {} bytes decoded, more "
                                  "than the {} bytes a sample may take",
                                  ctx.member, i.width, i.height, full, ctx.max_bytes))
                    .with_hint("give {image_size} (224) to decode a crop of it, or raise "
                               "{max_sample_size} / {memory_budget}"));
  }
  return {};
}

Result<JpegInfo> JpegState::decode_into(ConstBytes in, MutableBytes out, const DecodeContext& ctx) {
  FEEDLINE_TRY(read_header(in, ctx));
  JpegInfo& i = info_;
  const unsigned o = i.orientation;
  const bool turned = swaps_axes(o);
  // The crop, in displayed pixels, then in stored ones.
  i.crop = choose_crop(config_, i.width, i.height, ctx.seed, ctx.sample, ctx.epoch);
  const CropBox& c = i.crop;
  const Point a = stored_of(o, c.x, c.y, i.stored_width, i.stored_height);
  const Point b =
      stored_of(o, c.x + c.width - 1, c.y + c.height - 1, i.stored_width, i.stored_height);
  const std::uint32_t sx = std::min(a.x, b.x), sy = std::min(a.y, b.y);
  const std::uint32_t sw = std::max(a.x, b.x) - sx + 1, sh = std::max(a.y, b.y) - sy + 1;
  // The output, displayed and stored.
  const std::uint32_t ow = config_.size ? config_.size : c.width;
  const std::uint32_t oh = config_.size ? config_.size : c.height;
  i.shape = {oh, ow, 3};
  const std::uint32_t ows = turned ? oh : ow, ohs = turned ? ow : oh;
  if (out.size() < i.shape.bytes()) {
    jpeg_abort_decompress(&cinfo_);
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("JPEG member '{}' decodes to {} bytes ({} x {} x 3), its output "
                                  "has room for {}",
                                  ctx.member, i.shape.bytes(), ow, oh, out.size())));
  }
  // The smallest DCT scale M/8 whose image still has at least the output's pixels across the
  // crop (a shrink then finishes in the filter, never an enlargement by the DCT's).
  unsigned m = 8;
  if (config_.size && config_.dct_scaling) {
    while (m > 1 && std::uint64_t{sw} * (m / 2) >= std::uint64_t{ows} * 8 &&
           std::uint64_t{sh} * (m / 2) >= std::uint64_t{ohs} * 8)
      m /= 2;
  }
  i.scale_eighths = m;
  const bool cmyk = cinfo_.jpeg_color_space == JCS_CMYK || cinfo_.jpeg_color_space == JCS_YCCK;
  cinfo_.scale_num = m;
  cinfo_.scale_denom = 8;
  cinfo_.out_color_space = cmyk ? JCS_CMYK : JCS_EXT_RGB;
  if (!guarded([&] { jpeg_calc_output_dimensions(&cinfo_); }))
    return fail(libjpeg_error(ctx.member));
  const std::uint32_t scaled_w = cinfo_.output_width, scaled_h = cinfo_.output_height;
  // The crop at that scale, and the whole rows and columns that cover it.
  const double f = m / 8.0;
  detail::ImageBox box{sx * f, sy * f, (sx + sw) * f, (sy + sh) * f};
  const auto x0 = static_cast<std::uint32_t>(std::floor(box.x0));
  const auto y0 = static_cast<std::uint32_t>(std::floor(box.y0));
  const auto x1 = std::min(scaled_w, static_cast<std::uint32_t>(std::ceil(box.x1)));
  const auto y1 = std::min(scaled_h, static_cast<std::uint32_t>(std::ceil(box.y1)));
  const std::uint32_t rows = y1 - y0;
  const std::uint64_t region_bytes = std::uint64_t{rows} * scaled_w * 3;
  if (ctx.max_bytes && region_bytes > ctx.max_bytes) {
    jpeg_abort_decompress(&cinfo_);
    return fail(Error(Errc::kResourceExhausted,
                      fmt::format("JPEG member '{}' is {} x {} pixels: decoding its crop takes {} "
                                  "bytes, more than the {} bytes a sample may take",
                                  ctx.member, i.width, i.height, region_bytes, ctx.max_bytes))
                    .with_hint("a corrupt or hostile header? {on_error=skip} leaves it out"));
  }
  // Decoded straight into the output when nothing follows (full size, as stored, RGB).
  const bool straight = !config_.size && o == 1 && !cmyk && c.x == 0 && c.y == 0 &&
                        c.width == i.width && c.height == i.height;
  // One byte to spare past the last row for the resampler's reads (resample.hpp); grown only,
  // never shrunk or cleared (it is written before it is read).
  if (!straight && region_.size() < region_bytes + 1) region_.resize(region_bytes + 1);
  if (cmyk) cmyk_.resize(std::size_t{scaled_w} * 4);
  // libjpeg's own allocations (a progressive image's coefficients: 2 bytes a sample) are bounded
  // too: past this it fails with "insufficient memory", never takes more.
  if (ctx.max_bytes)
    cinfo_.mem->max_memory_to_use = static_cast<long>(std::min<std::uint64_t>(
        std::max<std::uint64_t>(ctx.max_bytes, 64ull << 20) * 4, 1ull << 40));
  std::uint8_t* base = straight ? reinterpret_cast<std::uint8_t*>(out.data()) : region_.data();
  std::uint32_t left = 0, width = scaled_w;
  bool whole = false, short_read = false;
  const bool ok = guarded([&] {
    jpeg_start_decompress(&cinfo_);
    // Two columns more on each side where the image has them: libjpeg upsamples the chroma of
    // a cropped row's first and last columns as if they were the image's edge, which shifts
    // them by up to ~10 levels; the filter reads only the crop's own columns.
    const std::uint32_t cx0 = x0 >= 2 ? x0 - 2 : 0, cx1 = std::min(scaled_w, x1 + 2);
    if (cx1 - cx0 < scaled_w) {
      JDIMENSION xo = cx0, xw = cx1 - cx0;
      jpeg_crop_scanline(&cinfo_, &xo, &xw);
      left = xo;
      width = xw;
    }
    if (y0 > 0) jpeg_skip_scanlines(&cinfo_, y0);
    const std::size_t stride = std::size_t{width} * 3;
    while (cinfo_.output_scanline < y1) {
      std::uint8_t* row = base + std::size_t{cinfo_.output_scanline - y0} * stride;
      JSAMPROW r = cmyk ? cmyk_.data() : row;
      if (jpeg_read_scanlines(&cinfo_, &r, 1) != 1) break;
      if (cmyk) {
        // As Pillow converts: the stored values are Adobe's inverted CMYK (Pillow assumes so for
        // every CMYK JPEG), R = (255 - K) - (C x (255 - K)) / 255 rounded, and so on.
        const std::uint8_t* p = cmyk_.data();
        for (std::uint32_t x = 0; x < width; ++x, p += 4) {
          const unsigned nk = p[3];
          for (int ch = 0; ch < 3; ++ch) {
            const unsigned t = (255u - p[ch]) * nk + 128;
            row[3 * x + ch] = static_cast<std::uint8_t>(nk - (((t >> 8) + t) >> 8));
          }
        }
      }
    }
    short_read = cinfo_.output_scanline < y1;
    if (short_read) return;
    // The whole image read: finish it, so that damage after the last row is found too. A crop
    // leaves the rest undecoded; a file that does not end in EOI (truncated) is read to its end.
    whole = y1 == scaled_h;
    const bool ends_in_eoi = in.size() >= 2 &&
                             std::to_integer<unsigned>(in[in.size() - 2]) == 0xff &&
                             std::to_integer<unsigned>(in[in.size() - 1]) == 0xd9;
    if (!whole && !ends_in_eoi) {
      jpeg_skip_scanlines(&cinfo_, scaled_h - cinfo_.output_scanline);
      whole = true;
    }
    if (whole) jpeg_finish_decompress(&cinfo_);
  });
  if (!ok) return fail(libjpeg_error(ctx.member));
  if (!whole) jpeg_abort_decompress(&cinfo_);
  if (short_read) return fail(corrupt(ctx.member, "libjpeg gave fewer rows than the image has"));
  if (straight) return i;
  // The crop within the decoded columns.
  const detail::ImageView view{region_.data(), std::size_t{width} * 3, width, rows, 3};
  box.x0 -= left;
  box.x1 -= left;
  box.y0 -= y0;
  box.y1 -= y0;
  auto* dst = reinterpret_cast<std::uint8_t*>(out.data());
  if (o == 1) {
    detail::resample(view, box, dst, std::size_t{ow} * 3, ow, oh, resample_);
  } else {
    if (turned_.size() < std::size_t{ows} * ohs * 3) turned_.resize(std::size_t{ows} * ohs * 3);
    detail::resample(view, box, turned_.data(), std::size_t{ows} * 3, ows, ohs, resample_);
    orient(o, turned_.data(), ows, ohs, dst, std::size_t{ow} * 3);
  }
  return i;
}

class JpegDecoder final : public Decoder {
 public:
  explicit JpegDecoder(const ImageConfig& config) : config_(config) {}
  std::string_view name() const noexcept override { return "jpeg"; }
  std::string describe() const override {
    if (!config_.size) return "RGB, each image at its own size";
    if (config_.crop == Crop::kNone)
      return fmt::format("{0}x{0}x3 RGB, whole images resized", config_.size);
    return fmt::format("{0}x{0}x3 RGB, {1} crop", config_.size, crop_name(config_.crop));
  }
  std::uint64_t fixed_output_size() const noexcept override {
    return std::uint64_t{config_.size} * config_.size * 3;
  }
  bool exact() const noexcept override { return false; }
  std::unique_ptr<DecoderState> make_state() const override {
    return std::make_unique<JpegState>(config_);
  }

 private:
  const ImageConfig config_;
};

}  // namespace

bool jpeg_available() noexcept { return true; }

Result<std::shared_ptr<const Decoder>> jpeg_decoder(const ImageConfig& config) {
  FEEDLINE_TRY(validate(config));
  return std::shared_ptr<const Decoder>(std::make_shared<const JpegDecoder>(config));
}

Result<JpegInfo> decode_jpeg(ConstBytes jpeg, const ImageConfig& config, std::uint64_t seed,
                             std::uint32_t sample, std::uint32_t epoch,
                             std::vector<std::uint8_t>* out, std::uint64_t max_bytes) {
  ImageConfig c = config;
  c.decode = true;
  FEEDLINE_TRY(validate(c));
  JpegState state(c);
  DecodeContext ctx{"image", sample, epoch, seed, max_bytes};
  FEEDLINE_ASSIGN_OR_RETURN(std::uint64_t size, state.output_size(jpeg, ctx));
  if (max_bytes && size > max_bytes) {
    return fail(Error(
        Errc::kResourceExhausted,
        fmt::format("the image decodes to {} bytes, more than the {} allowed", size, max_bytes)));
  }
  std::vector<std::uint8_t> pixels(size);
  FEEDLINE_ASSIGN_OR_RETURN(
      JpegInfo info,
      state.decode_into(jpeg, MutableBytes(reinterpret_cast<std::byte*>(pixels.data()), size),
                        ctx));
  if (out) *out = std::move(pixels);
  return info;
}

#else  // !FEEDLINE_HAVE_JPEG

namespace {
Error no_jpeg() {
  return Error(Errc::kUnsupported, "built without JPEG decoding")
      .with_hint("rebuild with -DFEEDLINE_WITH_JPEG=ON (libjpeg62-turbo-dev, libexif-dev)");
}
}  // namespace

bool jpeg_available() noexcept { return false; }
Result<std::shared_ptr<const Decoder>> jpeg_decoder(const ImageConfig&) { return fail(no_jpeg()); }
Result<JpegInfo> decode_jpeg(ConstBytes, const ImageConfig&, std::uint64_t, std::uint32_t,
                             std::uint32_t, std::vector<std::uint8_t>*, std::uint64_t) {
  return fail(no_jpeg());
}

#endif  // FEEDLINE_HAVE_JPEG

Result<DecoderRegistry> image_decoders(const ImageConfig& config) {
  DecoderRegistry r = default_decoders();
  if (!config.decode) return r;
  FEEDLINE_ASSIGN_OR_RETURN(auto jpeg, jpeg_decoder(config));
  FEEDLINE_TRY(r.add(".jpg", jpeg));
  FEEDLINE_TRY(r.add(".jpeg", jpeg));
  return r;
}

}  // namespace feedline::loader
