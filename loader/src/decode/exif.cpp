#include "exif.hpp"

#include <libexif/exif-data.h>

#include <cstring>

namespace feedline::loader::detail {

unsigned exif_orientation(const std::uint8_t* app1, std::size_t size) {
  constexpr unsigned char kExifHeader[] = {'E', 'x', 'i', 'f', 0, 0};
  if (!app1 || size < sizeof kExifHeader + 8 || std::memcmp(app1, kExifHeader, 6) != 0) return 1;
  ExifData* ed = exif_data_new();
  if (!ed) return 1;
  // Read what is there, as it is: no entries added or fixed up to the specification, no maker
  // notes interpreted beyond what the load does.
  exif_data_unset_option(ed, EXIF_DATA_OPTION_FOLLOW_SPECIFICATION);
  exif_data_set_option(ed, EXIF_DATA_OPTION_DONT_CHANGE_MAKER_NOTE);
  exif_data_load_data(ed, app1, static_cast<unsigned int>(size));
  unsigned orientation = 1;
  if (ExifEntry* e = exif_content_get_entry(ed->ifd[EXIF_IFD_0], EXIF_TAG_ORIENTATION)) {
    if (e->format == EXIF_FORMAT_SHORT && e->components >= 1 && e->data && e->size >= 2) {
      const unsigned v = exif_get_short(e->data, exif_data_get_byte_order(ed));
      if (v >= 1 && v <= 8) orientation = v;
    }
  }
  exif_data_unref(ed);
  return orientation;
}

}  // namespace feedline::loader::detail
