#include "feedline/loader/digest.hpp"

#include <xxhash.h>
#if FEEDLINE_HAVE_XXH3_DISPATCH
#include <xxh_x86dispatch.h>
#endif

namespace feedline::loader {

std::uint64_t member_hash(ConstBytes bytes) noexcept {
#if FEEDLINE_HAVE_XXH3_DISPATCH
  return XXH3_64bits_dispatch(bytes.data(), bytes.size());
#else
  return XXH3_64bits(bytes.data(), bytes.size());
#endif
}

}  // namespace feedline::loader
