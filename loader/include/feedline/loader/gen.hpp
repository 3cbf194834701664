// Synthetic datasets: what `feedline gen URL` writes.
//
// Five layouts (the formats open_dataset() reads, see dataset.hpp):
//  - files:    one object per sample, "ROOT/<key>.bin" (or "<key>.bin.zst" when compressed;
//              ".jpg" / ".jpg.zst" for images, GenConfig::image).
//  - tar:      WebDataset-style shards "ROOT/shard-000000.tar", ... holding samples_per_shard
//              samples each; a sample is the member "<key>.bin[.zst]" followed (with_label) by
//              "<key>.cls", a decimal class label. Beside each shard its index
//              "shard-000000.tar.idx" (tar_index.hpp).
//  - tfrecord: TFRecord files "ROOT/shard-000000.tfrecord", ... of samples_per_shard records
//              each, a record's data the sample's bytes (no label), and beside each its index
//              "shard-000000.tfrecord.idx" in DALI's tfrecord2idx format (tfrecord.hpp).
//  - npz:      one archive per sample, "ROOT/<key>.npz", written as numpy's np.savez writes one
//              (zip.hpp: stored entries, numpy's ZIP64 extra fields and .npy headers): array x, the
//              sample's bytes (uint8, shape (n,)), and with_label array y, the class (int64, a
//              scalar). np.load reads it.
//  - npy:      one array per sample, "ROOT/<key>.npy" (np.save's layout), the sample's bytes as
//              uint8.
// tfrecord, npz and npy are written uncompressed (compress must be none); tfrecord and npz need
// ISA-L for their CRCs (validate() says so). All: the manifest "ROOT/.feedline-dataset"
// (manifest.hpp), hidden, which says whether the generation finished and what it wrote.
// Keys are zero-padded sample numbers: "000123" (six digits, more when needed).
//
// Deterministic: the same GenConfig gives the same bytes. Sample i draws its size, content and
// label from its own std::mt19937_64 seeded from (seed, i) through splitmix64, with feedline's own
// uniform/normal transforms (the standard library's distributions differ between
// implementations), so samples can later be generated in parallel and in any order.
//
// Content: each sample is cut into 4 KiB blocks; in every block a `compressibility` fraction of
// the bytes repeats a short per-sample pattern and the rest is random. zstd therefore shrinks a
// sample to about (1 - compressibility) of its size, evenly along the sample.
//
// The digest is the one the pipeline reports for exactly-once checks: the sum modulo 2^64 of
// XXH3-64 (seed 0) over the decoded bytes of every member (every file, or every tar member after
// decompression, the ".cls" members included; a TFRecord record's data; an npz or npy array's
// bytes without their .npy header, y's 8 little-endian bytes included).
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <stop_token>
#include <string>
#include <string_view>

#include "feedline/core/error.hpp"
#include "feedline/loader/dataset.hpp"
#include "feedline/storage/backend.hpp"

namespace feedline::loader {

// Sample sizes: fixed, or drawn per sample. Parameters are bytes.
struct SizeDistribution {
  enum class Kind : std::uint8_t { kFixed, kNormal, kLognormal, kUniform };
  Kind kind = Kind::kFixed;
  double a = 128 * 1024;  // fixed: the size; normal/lognormal: the mean; uniform: the minimum
  double b = 0;           // normal/lognormal: the standard deviation; uniform: the maximum

  // "128KiB" (or "fixed:128KiB"), "normal:MEAN:STDEV", "lognormal:MEAN:STDEV" (mean and standard
  // deviation of the sizes themselves), "uniform:MIN:MAX"; every number in size units
  // ("4KiB", "1.5MiB", "300"). kInvalidArgument naming the text otherwise.
  static Result<SizeDistribution> parse(std::string_view text);
  // Round-trips through parse(): "fixed:131072", "lognormal:131072:32768", ...
  std::string to_string() const;
  // The mean of the distribution before clamping.
  double mean() const noexcept;
  // One draw, rounded to whole bytes and clamped to [1, max_bytes].
  std::uint64_t draw(std::mt19937_64& rng, std::uint64_t max_bytes) const;
};

enum class Compression : std::uint8_t { kNone, kZstd };

struct CompressionSpec {
  Compression codec = Compression::kNone;
  int level = 3;  // zstd level
  // "none", "zstd" or "zstd:LEVEL".
  static Result<CompressionSpec> parse(std::string_view text);
  std::string to_string() const;
};

// Samples as pictures: each sample's payload a JPEG of width x height (libjpeg-turbo's encoder,
// baseline, 4:2:0) of image-like content drawn from the sample's generator: a gradient, shapes
// with textures, grain (about 110 KiB at 400 x 350, quality 90, as ImageNet's average).
struct ImageSpec {
  bool jpeg = false;
  std::uint32_t width = 400, height = 350;
  int quality = 95;
  // "none", "jpeg:WxH" or "jpeg:WxH:QUALITY".
  static Result<ImageSpec> parse(std::string_view text);
  std::string to_string() const;
};

struct GenConfig {
  DatasetFormat format = DatasetFormat::kFiles;
  std::uint64_t samples = 1000;
  SizeDistribution sample_size;
  std::uint64_t max_sample_size = std::uint64_t{1} << 30;  // draws are clamped to this
  std::uint64_t samples_per_shard = 1000;  // samples per object: tar shard, TFRecord file
  CompressionSpec compress;
  double compressibility = 0.0;  // in [0, 1]: the share of each sample's bytes that compresses
  // tar: a "<key>.cls" member after each "<key>.bin"; npz: an array y beside x. Others: none.
  bool with_label = true;
  std::uint32_t num_classes = 1000;
  std::uint64_t seed = 0;
  // JPEG payloads (files and tar; the size distribution is then unused: a JPEG is as large as
  // its content encodes to).
  ImageSpec image;
};

// The extension of a sample's payload: ".bin", ".jpg" (images), with ".zst" when compressed.
std::string payload_extension(const GenConfig& config);

// Checks ranges (samples >= 1, compressibility in [0,1], a zstd level zstd accepts, zstd present
// in this build when asked for, compression only for files and tar, ISA-L for tfrecord and npz,
// ...). generate_dataset() calls it first.
Result<void> validate(const GenConfig& config);

struct GenSummary {
  std::uint64_t objects = 0;        // data objects written: files, shards, archives
  std::uint64_t index_objects = 0;  // tar and TFRecord indexes written
  std::uint64_t samples = 0;
  std::uint64_t members = 0;        // members over all samples (files: one per sample)
  std::uint64_t bytes_stored = 0;   // bytes of the data objects (headers and padding included)
  std::uint64_t bytes_decoded = 0;  // bytes of all members after decompression
  std::uint64_t digest = 0;         // sum of XXH3-64 over decoded members, mod 2^64
  std::string manifest;             // key of the manifest written last (manifest.hpp)
};

struct GenHooks {
  // Called after each sample with the count done so far (from the calling thread).
  std::function<void(std::uint64_t samples_done)> progress;
  // Checked between samples, and within a large one every few MiB drawn, compressed or written:
  // generation stops with kCancelled, leaving whole objects only (an object is committed whole
  // or not at all) and the manifest saying "in progress".
  std::stop_token stop;
  // Before writing anything, compare what the dataset will take (estimate_footprint()) with the
  // room the backend reports (Backend::free_space(): local filesystems): a dataset that cannot
  // fit is refused (kInvalidArgument naming both) rather than begun. Off for filesystems that
  // compress or deduplicate, where the free space understates the room.
  bool check_space = true;
};

// What a generation will write, estimated before it starts: its objects (data objects, indexes,
// the manifest) and their bytes, each object rounded up to whole blocks of `block_size`. From the
// mean sample size (draws vary), a zstd frame taken as the sample's incompressible share, a JPEG
// as a quarter byte per pixel (less than any quality writes): an estimate that errs low, so that
// a check against free space refuses only what cannot fit.
struct GenFootprint {
  std::uint64_t objects = 0;
  std::uint64_t bytes = 0;
};
GenFootprint estimate_footprint(const GenConfig& config, std::uint64_t block_size);

// Writes the dataset under root (a directory or key prefix) through backend, one object at a
// time from the calling thread: first the manifest ROOT/.feedline-dataset saying "in progress",
// then the data objects (and indexes), last the manifest saying "complete" with the summary
// (manifest.hpp), so a generation that stops half-way (GenHooks::stop, a failed write, a crash)
// leaves a dataset that open_dataset() refuses as incomplete. Refuses (kInvalidArgument) a
// dataset the backend says has no room (GenHooks::check_space), and (naming an object found) a
// root that is not empty unless gen wrote it (its manifest is there), and a
// root holding objects this config would not write (a different or larger dataset), so datasets
// never mix and nobody's files are overwritten; in a root gen wrote, objects with the names it
// writes are replaced (regeneration in place). Errors name the object.
Result<GenSummary> generate_dataset(storage::Backend& backend, std::string_view root,
                                    const GenConfig& config, const GenHooks& hooks = {});

// The key of sample i in a dataset of n samples: "000123".
std::string sample_key(std::uint64_t i, std::uint64_t n);

}  // namespace feedline::loader
