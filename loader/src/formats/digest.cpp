#include "feedline/loader/digest.hpp"

#include <memory>
#include <string_view>

#include "feedline/loader/dataset.hpp"
#include "feedline/loader/format.hpp"

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

namespace {

// Updates state with a field and its length (so that "ab" + "c" and "a" + "bc" differ).
void add(XXH3_state_t& state, std::string_view text) noexcept {
  const std::uint64_t n = text.size();
  XXH3_64bits_update(&state, &n, sizeof n);
  XXH3_64bits_update(&state, text.data(), text.size());
}

void add(XXH3_state_t& state, std::uint64_t v) noexcept {
  XXH3_64bits_update(&state, &v, sizeof v);
}

// key without the dataset's root in front (and the slash after it).
std::string_view relative(std::string_view key, std::string_view root) noexcept {
  if (!root.empty() && key.starts_with(root)) key.remove_prefix(root.size());
  while (key.starts_with('/')) key.remove_prefix(1);
  return key;
}

}  // namespace

std::uint64_t listing_fingerprint(const Dataset& dataset, SamplePlaces places) noexcept {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> owned(XXH3_createState(),
                                                                 &XXH3_freeState);
  if (!owned) return 0;  // no memory for 576 bytes: the state then says nothing of its dataset
  XXH3_state_t& state = *owned;
  XXH3_64bits_reset(&state);
  // The format: the number the built-in ones had as an enum (saved loader states resume), else
  // its name.
  if (dataset.format.is_auto()) {
    add(state, std::uint64_t{2});
  } else if (const int id = dataset.format.spec().legacy_id; id >= 0) {
    add(state, static_cast<std::uint64_t>(id));
  } else {
    add(state, dataset.format.name());
  }
  add(state, dataset.objects.size());
  for (const auto& o : dataset.objects) {
    add(state, relative(o.key, dataset.root));
    add(state, o.size);
  }
  add(state, dataset.samples.size());
  for (const Sample& s : dataset.samples) {
    add(state, s.object);
    if (places == SamplePlaces::kSpans) {
      add(state, s.offset);
      add(state, s.length);
    } else {
      // Each member's stored bytes: the same whether a shard was read through its index (whose
      // spans start at the first member's header, to check it) or by a scan of its headers.
      for (std::uint32_t i = 0; i < s.member_count; ++i) {
        const std::size_t m = std::size_t{s.first_member} + i;
        if (m >= dataset.members.size()) break;
        add(state, s.offset + dataset.members[m].offset);
        add(state, dataset.members[m].size);
      }
    }
    add(state, s.member_count);
    add(state, relative(s.key, dataset.root));
  }
  // What gen recorded of the bytes, where the dataset is exactly what it wrote: two generations
  // of the same shape with other seeds list alike, and differ here.
  add(state, dataset.manifest_digest ? 1 : 0);
  add(state, dataset.manifest_digest.value_or(0));
  return XXH3_64bits_digest(&state);
}

}  // namespace feedline::loader
