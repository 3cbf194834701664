// What feedline gen's writers share (each format's, FormatSpec::Gen::write in format.hpp:
// files/files_format.cpp, tar/tar_format.cpp, ...): sample i's bytes, drawn from the config, the
// accounting of what is written, and writes that stop when asked.
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
#include "feedline/loader/codec.hpp"
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

// draw_sample(), and the bytes to store: the payload, or its zstd frame when c.compress asks for
// one (in parts.stored, made by compressor).
Result<ConstBytes> draw_stored(const GenConfig& c, std::uint64_t i, const GenHooks& hooks,
                               SampleParts& parts, Compressor& compressor, GenSummary& sum);

// Accounts one more member of the current sample (a label) in sum.
void account_member(ConstBytes decoded, GenSummary& sum);

// root + "/" + name (no double slash).
std::string join_key(std::string_view root, std::string_view name);

inline ConstBytes as_bytes(std::string_view s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

}  // namespace feedline::loader::detail
