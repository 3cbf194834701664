// The loader's own small random-number pieces, the same on every build (the standard library's
// distributions differ between implementations): gen's samples and pictures, image crops.
// Private to loader/src.
#pragma once

#include <cstdint>
#include <random>

namespace feedline::loader::detail {

// SplitMix64's finaliser: a seed (or a seed mixed with an index) to a well-spread 64-bit value.
inline std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// In [0, 1), 53 random bits.
inline double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

}  // namespace feedline::loader::detail
