// The .npy array format (numpy's own: numpy/lib/format.py), read and written.
//
// A .npy file (and each entry of an .npz archive, see zip.hpp) is
//
//   "\x93NUMPY" major minor   magic and version: 1.0, 2.0 or 3.0
//   u16 LE (1.0) / u32 LE (2.0, 3.0)   the header's length, HLEN
//   HLEN bytes                a Python dict literal, padded with spaces and ending in '\n':
//                             {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
//   the array's bytes         product(shape) x itemsize of them
//
// feedline delivers the array's bytes as stored (the header is not delivered), so the members it
// makes are only meaningful for arrays whose bytes are their values in C order: parse_npy_header()
// accepts a simple dtype ('descr' a string: a byte order '<', '>', '|' or '=', then b1, i1-i8,
// u1-u8, f2-f16, c8-c32, S<n>, U<n>, V<n>, or m8/M8 with a unit) and fortran_order False, and
// refuses with a clear error: Python objects ('|O': pickled, not bytes), structured or
// sub-array dtypes (a list or tuple 'descr'), Fortran order. No library parses Python dict
// literals from C++; the header's grammar is small and fixed (three keys, string / boolean /
// tuple-of-integers values), so this is a strict hand parser of just that.
//
// Bounds: a header longer than kMaxNpyHeaderBytes is refused before it is read; a shape whose
// size overflows 64 bits is refused.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/bytes.hpp"
#include "feedline/core/error.hpp"

namespace feedline::loader {

inline constexpr std::string_view kNpyMagic = "\x93NUMPY";
// numpy itself refuses headers over 10,000 bytes unless told otherwise (np.load's
// max_header_size); a 1.0 header cannot pass 65,535.
inline constexpr std::uint64_t kMaxNpyHeaderBytes = 64 * 1024;
// The bytes before the header text in version 1.0 (magic, version, u16 length) and 2.0/3.0.
inline constexpr std::uint64_t kNpyPreludeV1 = 10;
inline constexpr std::uint64_t kNpyPreludeV2 = 12;

struct NpyHeader {
  int major = 1;
  int minor = 0;
  std::uint64_t header_bytes = 0;  // where the array's bytes start, from the start of the .npy
  std::string descr;               // as written, e.g. "<f4"
  std::uint64_t itemsize = 0;
  std::vector<std::uint64_t> shape;  // () for a scalar
  std::uint64_t data_bytes = 0;      // product(shape) x itemsize
};

// The header's total size (header_bytes) from the first bytes of a .npy (at least 12 of them,
// or the whole thing when shorter): lets a reader fetch exactly the header. kCorrupt for a bad
// magic or version, a length over kMaxNpyHeaderBytes, or too few bytes to tell. `array` names the
// array in messages ("array 'x'"); the caller adds the object.
Result<std::uint64_t> npy_header_size(ConstBytes prefix, std::string_view array);

// Parses the header at the start of `bytes` (which must hold all of it; more is ignored).
// kCorrupt for malformed bytes, kUnsupported (with what to do) for a dtype or layout feedline does
// not deliver (see above); both name `array`.
Result<NpyHeader> parse_npy_header(ConstBytes bytes, std::string_view array);

// A version 1.0 header for an array of `descr` and `shape` in C order, as numpy writes it: the
// dict literal padded with spaces so that the array's bytes start at a multiple of 64.
std::string format_npy_header(std::string_view descr, std::span<const std::uint64_t> shape);

}  // namespace feedline::loader
