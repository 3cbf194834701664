// The EXIF orientation of a JPEG, read with libexif from the payload of its APP1 marker.
#pragma once

#include <cstddef>
#include <cstdint>

namespace feedline::loader::detail {

// The orientation tag (1..8: how the stored pixels are turned for display) of an APP1 payload
// ("Exif\0\0" and a TIFF structure); 1 when the payload is no EXIF, has no such tag, or the tag
// holds a value outside 1..8 (an image is shown as stored rather than refused for its metadata).
unsigned exif_orientation(const std::uint8_t* app1, std::size_t size);

}  // namespace feedline::loader::detail
