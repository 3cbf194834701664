// Decoders: what the decode stage makes of a member's bytes, chosen by the member's extension.
//
// A Decoder is the registered, immutable description of one format ("zstd" for ".zst", "jpeg"
// for ".jpg"/".jpeg"); each decode thread asks it for a DecoderState of its own (a zstd context,
// a libjpeg decompressor, scratch rows), so decoders never share mutable state between threads.
// A DecoderRegistry maps extensions to decoders. A member goes through the decoders its
// extensions name, outermost first: "000123.jpg.zst" is decompressed by zstd, then decoded as a
// JPEG; "000123.cls" names none and is delivered as stored.
//
// The pipeline resolves every member once, before the run (DecodePlan), so it knows which
// samples need the decode threads, and where every member's decoded size is known before it is
// read (a fixed-size image crop, a zstd size from the shard's index), that samples can be decoded
// straight into their batch slot (the decode-in-place path).
//
// The digest (exactly-once): a member's digest covers its bytes as the dataset holds them after
// every exact() step (zstd's output), not what a non-exact decoder makes of them (an image's
// pixels, which depend on the crop drawn for the epoch): `feedline gen`'s digest stays the one a
// run delivers, decoded images or not.
//
// An embedding program registers its own decoder (LoaderConfig::decoders); Python code keeps
// transform= (transform.hpp), which runs after every decoder.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/bytes.hpp"
#include "feedline/core/error.hpp"
#include "feedline/loader/dataset.hpp"

namespace feedline::loader {

// An image's layout in its bytes: rows of width pixels of channels uint8 (HWC). All 0 for a
// member that is not an image.
struct ImageShape {
  std::uint32_t height = 0;
  std::uint32_t width = 0;
  std::uint32_t channels = 0;
  std::uint64_t bytes() const noexcept { return std::uint64_t{height} * width * channels; }
  bool image() const noexcept { return channels != 0; }
  friend bool operator==(const ImageShape&, const ImageShape&) = default;
};

// What a decoder knows of the member it decodes.
struct DecodeContext {
  std::string_view member;   // its name in the dataset ("000123.jpg")
  std::uint32_t sample = 0;  // index into Dataset::samples
  std::uint32_t epoch = 0;
  std::uint64_t seed =
      0;  // the run's seed: with sample and epoch, any random choice a decoder makes
  // The most bytes the call may write or allocate for this member (0: no limit): a header that
  // declares more (a zstd bomb, a 65535 x 65535 JPEG) is refused with kResourceExhausted before
  // anything is allocated.
  std::uint64_t max_bytes = 0;
};

struct Decoded {
  std::uint64_t bytes = 0;  // written at the start of the output
  ImageShape shape;         // for an image
};

// One thread's decoder (contexts, scratch buffers). Not thread-safe; reused for many members.
// Errors name no object: the pipeline adds the dataset object, the member and its offset.
class DecoderState {
 public:
  virtual ~DecoderState() = default;
  // The bytes `in` decodes to, from its header alone: kCorrupt when it is not this format,
  // kResourceExhausted when it declares more than ctx.max_bytes.
  virtual Result<std::uint64_t> output_size(ConstBytes in, const DecodeContext& ctx) = 0;
  // Decodes `in` into `out`. kInvalidArgument when `out` is smaller than output_size() (nothing
  // is written past out), kCorrupt for damaged or truncated input (never a silently partial
  // result), kUnsupported for a variant the decoder cannot decode.
  virtual Result<Decoded> decode(ConstBytes in, MutableBytes out, const DecodeContext& ctx) = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::string_view name() const noexcept = 0;  // "zstd", "jpeg"
  // A short description of what it outputs, for the report ("224x224x3 RGB, random-resized
  // crop"); empty when the name says it all.
  virtual std::string describe() const { return {}; }
  // Every member's output size when it does not depend on the bytes (a crop of a fixed size),
  // else 0.
  virtual std::uint64_t fixed_output_size() const noexcept { return 0; }
  // True when the output is the data itself, losslessly (zstd): the digest then covers the
  // output. False when the decoder makes something of the data (an image's pixels, a crop drawn
  // per epoch): the digest covers its input.
  virtual bool exact() const noexcept { return true; }
  // True when a shard index's decoded size (Member::decoded_size) is this decoder's output size
  // (zstd: the index records the decompressed size).
  virtual bool sized_by_index() const noexcept { return false; }
  virtual std::unique_ptr<DecoderState> make_state() const = 0;
};

class DecoderRegistry {
 public:
  // Decoders for names ending in `extension` (".zst"; matched without regard to case). A later
  // add() for the same extension replaces the earlier one. kInvalidArgument for an extension
  // that is not "." and 1-16 letters or digits, or a null decoder.
  Result<void> add(std::string_view extension, std::shared_ptr<const Decoder> decoder);
  // The decoder for one extension (".zst"), or null.
  std::shared_ptr<const Decoder> find(std::string_view extension) const;
  // The decoders a member named `name` goes through, in the order they run: its extensions from
  // the last one back while each names a decoder ("a.jpg.zst": zstd, jpeg; "a.bin.zst": zstd;
  // "a.cls": none). At most kMaxChain.
  std::vector<std::shared_ptr<const Decoder>> chain_for(std::string_view name) const;
  bool empty() const noexcept { return entries_.empty(); }

  static constexpr std::size_t kMaxChain = 4;

 private:
  struct Entry {
    std::string extension;  // lower case, with the dot
    std::shared_ptr<const Decoder> decoder;
  };
  std::vector<Entry> entries_;
};

// The zstd decoder (".zst"): kUnsupported "built without zstd" from every call in a build
// without it. The default registry (LoaderConfig::decoders null) holds it alone.
std::shared_ptr<const Decoder> zstd_decoder();
DecoderRegistry default_decoders();

// Every member of a dataset resolved through a registry, once, before a run.
class DecodePlan {
 public:
  struct Chain {
    std::vector<std::shared_ptr<const Decoder>> steps;  // empty: delivered as stored
    std::string name;                                   // "zstd", "zstd+jpeg"; "" when empty
    std::uint64_t members = 0;                          // members of the dataset that take it
    // Steps before this one are exact(): the digest covers the output of the one before it
    // (the stored bytes when 0).
    std::size_t digest_after = 0;
    std::uint64_t fixed_size = 0;  // the last step's fixed_output_size() (0: none)
  };

  DecodePlan();  // nothing decodes
  DecodePlan(const Dataset& dataset, const DecoderRegistry& registry);

  // The chain of dataset member `index` (Dataset::members).
  const Chain& chain_of(std::size_t index) const noexcept {
    return chains_[index < of_member_.size() ? of_member_[index] : 0];
  }
  bool decodes(std::size_t index) const noexcept { return !chain_of(index).steps.empty(); }
  // True when some member of the dataset has a decoder.
  bool any() const noexcept { return chains_.size() > 1; }
  // Chains with steps, for the report.
  std::span<const Chain> chains() const noexcept {
    return std::span<const Chain>(chains_).subspan(1);
  }
  // The bytes member `index` (m) takes once decoded, when known before it is read: its stored
  // size without decoders, a fixed-size output, the index's decoded size for a decoder sized by
  // it. nullopt when only its bytes can tell.
  std::optional<std::uint64_t> known_size(std::size_t index, const Member& m) const noexcept;

 private:
  std::vector<Chain> chains_;  // [0]: no steps
  std::vector<std::uint16_t> of_member_;
};

}  // namespace feedline::loader
