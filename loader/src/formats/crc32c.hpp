// CRC32C (Castagnoli, iSCSI: TFRecord's framing) and CRC-32 (IEEE, reflected: zip's entry
// checksum), through ISA-L.
//
// ISA-L stays behind this header: <isa-l.h> appears only in crc32c.cpp. Built with
// -DFEEDLINE_WITH_ISAL=OFF the functions exist, crc_available() is false and every checksum is 0;
// callers ask crc_available() first and refuse with a "built without ISA-L" error (see
// tfrecord.hpp, gen.cpp). ISA-L picks its fastest kernel (SSE4.2 crc32, PCLMULQDQ folding) at run
// time: ~10+ GB/s per core, against XXH3's ~20 for the digest.
//
// Private to the formats module; stateless, so any thread may call them.
#pragma once

#include <cstdint>

#include "feedline/core/bytes.hpp"

namespace feedline::loader::detail {

// True when this build has ISA-L.
bool crc_available() noexcept;

// The standard CRC32C of data (initial value and final xor 0xFFFFFFFF: crc32c("123456789") =
// 0xE3069283, as python3-crc32c's crc32c.crc32c() gives), continuing from `crc`, the CRC32C of
// the bytes before: crc32c(b, crc32c(a)) == crc32c(a + b).
std::uint32_t crc32c(ConstBytes data, std::uint32_t crc = 0) noexcept;

// The CRC-32 of zip, gzip and zlib (crc32("123456789") = 0xCBF43926, as Python's zlib.crc32),
// continuing from `crc` the same way.
std::uint32_t crc32_ieee(ConstBytes data, std::uint32_t crc = 0) noexcept;

}  // namespace feedline::loader::detail
