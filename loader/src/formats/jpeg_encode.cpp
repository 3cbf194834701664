// encode_jpeg (image.hpp): libjpeg-turbo's compressor, baseline 4:2:0 as cameras and ImageNet's
// JPEGs are, for feedline gen's images.
#include <fmt/format.h>

#include <csetjmp>
#include <cstdlib>
#include <cstring>

#include "feedline/loader/image.hpp"

#ifdef FEEDLINE_HAVE_JPEG
#include <jpeglib.h>
#endif

namespace feedline::loader {

#ifdef FEEDLINE_HAVE_JPEG
namespace {

struct EncodeErrors {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void on_encode_error(j_common_ptr c) {
  auto* e = reinterpret_cast<EncodeErrors*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

// The libjpeg calls, with only plain values in this frame (error_exit longjmp()s here).
bool compress(jpeg_compress_struct& c, EncodeErrors& err, const std::uint8_t* pixels,
              std::uint32_t width, std::uint32_t height, unsigned channels, int quality,
              unsigned char** out, unsigned long* out_size) {
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&c);
    return false;
  }
  jpeg_create_compress(&c);
  jpeg_mem_dest(&c, out, out_size);
  c.image_width = width;
  c.image_height = height;
  c.input_components = static_cast<int>(channels);
  c.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  jpeg_start_compress(&c, TRUE);
  const std::size_t stride = std::size_t{width} * channels;
  while (c.next_scanline < c.image_height) {
    // libjpeg's row pointer is not const; it only reads the rows it is given.
    JSAMPROW row = const_cast<JSAMPROW>(pixels + c.next_scanline * stride);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  return true;
}

}  // namespace

Result<std::vector<std::byte>> encode_jpeg(std::span<const std::uint8_t> pixels,
                                           std::uint32_t width, std::uint32_t height,
                                           unsigned channels, int quality) {
  if (width == 0 || height == 0 || width > 65500 || height > 65500 ||
      (channels != 1 && channels != 3) || quality < 1 || quality > 100 ||
      pixels.size() != std::size_t{width} * height * channels) {
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("cannot encode a {} x {} x {} image of {} bytes at quality {} "
                                  "(1-65500 pixels a side, 1 or 3 channels, quality 1-100)",
                                  width, height, channels, pixels.size(), quality)));
  }
  jpeg_compress_struct c{};
  EncodeErrors err{};
  c.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = on_encode_error;
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const bool ok = compress(c, err, pixels.data(), width, height, channels, quality, &buf, &size);
  std::vector<std::byte> out;
  if (ok && buf)
    out.assign(reinterpret_cast<std::byte*>(buf), reinterpret_cast<std::byte*>(buf) + size);
  std::free(buf);
  if (!ok)
    return fail(Error(Errc::kInternal, fmt::format("JPEG encoding failed: {}", err.message)));
  return out;
}

#else

Result<std::vector<std::byte>> encode_jpeg(std::span<const std::uint8_t>, std::uint32_t,
                                           std::uint32_t, unsigned, int) {
  return fail(Error(Errc::kUnsupported, "built without JPEG: cannot write images")
                  .with_hint("rebuild with -DFEEDLINE_WITH_JPEG=ON (libjpeg62-turbo-dev, "
                             "libexif-dev)"));
}

#endif

}  // namespace feedline::loader
