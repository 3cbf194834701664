// What open_dataset() (dataset.cpp) shares with the openers of its formats (FormatSpec::open,
// format.hpp; tar/tar_open.cpp, tfrecord/tfrecord_open.cpp, npy/npy_open.cpp, files/): naming
// rules, the SampleBuilder that fills a Dataset, whole and batched reads through one IoQueue, and
// the openers of the built-in formats.
//
// Private to the formats module. Lifetimes: an OpenContext borrows everything it names for the
// duration of one open_dataset() call; RangeRead owns its buffer, and its op must not move while
// read_ranges() runs (a std::vector sized before the call does not).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/bytes.hpp"
#include "feedline/core/error.hpp"
#include "feedline/loader/dataset.hpp"
#include "feedline/storage/backend.hpp"

namespace feedline::loader::detail {

// Reads the TFRecord, npz and npy openers keep in flight together (their batches of small reads
// over many files): the depth of the open's queue for those formats.
inline constexpr std::size_t kOpenBatchDepth = 64;
// How long an open waits for a completion before it looks at its stop token again.
inline constexpr auto kOpenPollSlice = std::chrono::milliseconds(100);
// The largest index file (tar, TFRecord) an open reads whole.
inline constexpr std::uint64_t kMaxIndexBytes = std::uint64_t{1} << 30;
// Shards whose ignored index gets a note of its own; the rest are counted in one more line.
inline constexpr std::size_t kMaxIndexNotes = 5;

// The key of a member or file name: the path up to the first '.' of its last component.
std::string_view key_of(std::string_view name);
// Hidden: some path component starts with '.' ("./x" and "../x" components do not count).
bool hidden(std::string_view rel);
inline bool is_zstd(std::string_view name) { return name.ends_with(".zst"); }

Error cancelled(std::string_view what);

// Counts down the completions of a batch of reads.
struct Countdown final : storage::ReadCompletion {
  std::size_t left = 0;
  void on_read_complete(storage::ReadOp&) noexcept override { --left; }
};

// Fills a Dataset's samples and members in storage order. Keys and names are copied once (short
// ones fit in std::string's inline buffer).
class SampleBuilder {
 public:
  explicit SampleBuilder(Dataset& ds) : ds_(ds) {}

  // A regular member (tar member, file) of object `object` with its data at [data_offset,
  // data_offset + size): consecutive members sharing a key (key_of) make one sample. With a
  // header_offset (a tar member from the shard's index), the member carries
  // MemberCheck::kTarHeader: a sample it opens starts at that offset, so its header is read too.
  void add(std::uint32_t object, std::string_view name, std::uint64_t data_offset,
           std::uint64_t size, std::uint64_t decoded_size,
           std::optional<std::uint64_t> header_offset = std::nullopt);
  void close();

  // A whole sample at [offset, offset + length) of its object, its members given explicitly
  // (uncompressed: decoded size = size), each at `offset` of the object. Closes the sample that
  // add() may have opened.
  struct MemberSpec {
    std::string name;
    std::uint64_t offset = 0;  // in the object
    std::uint64_t size = 0;
    MemberCheck check = MemberCheck::kNone;
  };
  void add_sample(std::uint32_t object, std::string_view key, std::uint64_t offset,
                  std::uint64_t length, std::span<const MemberSpec> members);

 private:
  Dataset& ds_;
  Sample cur_;
  bool open_ = false;
};

// Reads a whole small object (an index, a manifest) of at most max_bytes.
Result<std::string> read_object(storage::Backend& backend, storage::IoQueue& queue,
                                const storage::ObjectInfo& info, const std::stop_token& stop,
                                std::uint64_t max_bytes, std::string_view what);

// One read of a batch (read_ranges): [offset, offset + length) of object.
struct RangeRead {
  const storage::ObjectHandle* object = nullptr;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  // Filled by read_ranges(): the bytes read (fewer where the object ends), or the read's error.
  Result<ConstBytes> bytes = ConstBytes{};

  AlignedBuffer buf;  // read_ranges()'s: aligned to the backend
  storage::ReadOp op;
};

// Reads every range in one batch: all submitted together (one round trip on network backends,
// depth permitting), aligned to `align` (O_DIRECT) with the extra bytes cut off again. Fails only
// when stopped (kCancelled) or out of memory; each read's own outcome is in its `bytes`.
Result<void> read_ranges(storage::IoQueue& queue, std::uint64_t align, std::span<RangeRead> reads,
                         const std::stop_token& stop);

// What the openers of the formats share for one open_dataset() call.
struct OpenContext {
  storage::Backend& backend;
  // The queue for the open's reads (depth FormatSpec::open_depth); null for a format that reads
  // nothing (FormatSpec::reads_objects false).
  storage::IoQueue* queue = nullptr;
  const DatasetOptions& options;
  Dataset& ds;
  SampleBuilder& builder;
  std::vector<bool>& skipped_objects;  // by index in ds.objects: left out with skip_bad_objects
  // How errors and notes name an object (Backend::display_name).
  std::function<std::string(std::string_view)> shown;
  // The backend's read alignment (at least 4 KiB).
  std::uint64_t align = kPageAlign;
};

// A data object of the dataset: its listing entry, its path relative to the root, and its index
// when one is listed beside it (else null). The listing entry is the opener's to copy, or to move
// into ds.objects once it is done with rel (a view of its key).
struct FoundObject {
  storage::ObjectInfo* info = nullptr;
  std::string_view rel;
  const storage::ObjectInfo* index = nullptr;
};

// The openers of the built-in formats (FormatSpec::open, format.hpp): each appends its objects to
// ctx.ds.objects (in the order given) and their samples. A damaged object fails the open, or with
// options.skip_bad_objects is recorded in ds.skipped (its whole samples before the damage kept
// where the format allows).
Result<void> open_tar_shards(OpenContext& ctx, std::span<const FoundObject> shards);
Result<void> open_tfrecord_files(OpenContext& ctx, std::span<const FoundObject> files);
Result<void> open_npz_files(OpenContext& ctx, std::span<const FoundObject> files);
Result<void> open_npy_files(OpenContext& ctx, std::span<const FoundObject> files);

}  // namespace feedline::loader::detail
