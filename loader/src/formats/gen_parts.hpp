// What feedline gen's writers share (gen.cpp writes files and tar, gen_formats.cpp TFRecord, npz
// and npy): sample i's bytes, drawn from the config, and the accounting of what is written.
//
// Private to the formats module. Single-threaded, as generate_dataset() is.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/bytes.hpp"
#include "feedline/core/error.hpp"
#include "feedline/loader/gen.hpp"
#include "feedline/storage/backend.hpp"

namespace feedline::loader::detail {

struct SampleParts {
  std::vector<std::byte> raw;        // the sample's payload (".bin", a record's data, array x)
  std::vector<std::byte> stored;     // what is written: raw, or its zstd frame
  std::string label;                 // the ".cls" payload: the class, in decimal
  std::uint64_t label_value = 0;     // the class (npz's array y)
  std::vector<std::uint8_t> pixels;  // an image's, before it is encoded (GenConfig::image)
};

// Draws an image's pixels (HWC RGB, spec.width x spec.height) from rng (gen_image.cpp).
void draw_image(std::mt19937_64& rng, const ImageSpec& spec, std::vector<std::uint8_t>& pixels);

// Draws sample i (size, then label, then content: changing this order changes every dataset).
// The content is drawn in chunks with `stop` checked between them: false (parts incomplete) once
// it is requested, so a sample of a GiB does not hold up a Ctrl-C for seconds.
bool make_sample(const GenConfig& c, std::uint64_t i, SampleParts& parts,
                 const std::stop_token& stop = {});

// Where gen checks its stop token inside one sample: between chunks of this many bytes drawn,
// compressed or written.
inline constexpr std::size_t kStopChunk = std::size_t{8} << 20;

// Creates the object `key` for gen: a writer that hands appends on in chunks of kStopChunk and
// checks hooks.stop between them (kCancelled, the object abandoned: none is left).
Result<std::unique_ptr<storage::ObjectWriter>> create_object(storage::Backend& backend,
                                                             const std::string& key,
                                                             const GenHooks& hooks);
// create_object(), one append, commit.
Result<void> write_object(storage::Backend& backend, const std::string& key, ConstBytes data,
                          const GenHooks& hooks);

// Draws sample i into parts and accounts its payload as a member of a new sample in sum (its
// digest, decoded bytes, members, samples). kCancelled once hooks.stop is requested.
Result<void> draw_sample(const GenConfig& c, std::uint64_t i, const GenHooks& hooks,
                         SampleParts& parts, GenSummary& sum);

// Accounts one more member of the current sample (a label) in sum.
void account_member(ConstBytes decoded, GenSummary& sum);

// root + "/" + name (no double slash).
std::string join_key(std::string_view root, std::string_view name);

inline ConstBytes as_bytes(std::string_view s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

// The data objects of the other formats, in order, accounted in sum (gen_formats.cpp).
Result<void> write_tfrecord_files(storage::Backend& backend, std::string_view root,
                                  const GenConfig& c, const GenHooks& hooks, GenSummary& sum);
Result<void> write_npz_files(storage::Backend& backend, std::string_view root, const GenConfig& c,
                             const GenHooks& hooks, GenSummary& sum);
Result<void> write_npy_files(storage::Backend& backend, std::string_view root, const GenConfig& c,
                             const GenHooks& hooks, GenSummary& sum);

}  // namespace feedline::loader::detail
