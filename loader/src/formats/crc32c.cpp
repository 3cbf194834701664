// The CRC wrappers of crc32c.hpp. ISA-L's crc32_iscsi() applies neither the initial inversion nor
// the final one of the standard CRC32C (checked against python3-crc32c: crc32_iscsi(d, n,
// 0xFFFFFFFF) ^ 0xFFFFFFFF is crc32c.crc32c(d)); crc32_gzip_refl() does both itself (as zlib's
// crc32()). crc32_iscsi() takes an int length: longer inputs go in 1 GiB pieces.
#include "crc32c.hpp"

#include <algorithm>

#ifdef FEEDLINE_HAVE_ISAL
#include <isa-l.h>
#endif

namespace feedline::loader::detail {
namespace {
[[maybe_unused]] constexpr std::size_t kPiece = std::size_t{1} << 30;
}  // namespace

#ifdef FEEDLINE_HAVE_ISAL

bool crc_available() noexcept { return true; }

std::uint32_t crc32c(ConstBytes data, std::uint32_t crc) noexcept {
  unsigned int c = crc ^ 0xFFFFFFFFu;
  for (std::size_t pos = 0; pos < data.size();) {
    const std::size_t n = std::min(kPiece, data.size() - pos);
    // ISA-L takes a non-const pointer but only reads.
    c = crc32_iscsi(reinterpret_cast<unsigned char*>(const_cast<std::byte*>(data.data() + pos)),
                    static_cast<int>(n), c);
    pos += n;
  }
  return c ^ 0xFFFFFFFFu;
}

std::uint32_t crc32_ieee(ConstBytes data, std::uint32_t crc) noexcept {
  return crc32_gzip_refl(crc, reinterpret_cast<const unsigned char*>(data.data()), data.size());
}

#else

bool crc_available() noexcept { return false; }
std::uint32_t crc32c(ConstBytes, std::uint32_t) noexcept { return 0; }
std::uint32_t crc32_ieee(ConstBytes, std::uint32_t) noexcept { return 0; }

#endif

}  // namespace feedline::loader::detail
