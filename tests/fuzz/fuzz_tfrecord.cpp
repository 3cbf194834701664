// libFuzzer target: TFRecord framing and the tfrecord2idx index. Over arbitrary bytes as a
// TFRecord file, the header walk must never crash, never report a record outside the file, and
// name the file and offset in every error; each record it accepts must pass check_tfrecord() with
// its CRCs fixed and fail it with its data CRC flipped. Over the bytes as an index, an accepted
// index must fit the file it was checked against, survive a round trip through
// format_tfrecord_index(), and each probe check must not crash.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/loader/tfrecord.hpp"

namespace {

using namespace feedline;
using namespace feedline::loader;

// A copy of the input where, walking from offset 0, each header's length CRC is made right: the
// walk then gets past the CRC check to the length bounds.
std::vector<std::byte> with_valid_length_crcs(ConstBytes input) {
  std::vector<std::byte> v(input.begin(), input.end());
  std::uint64_t offset = 0;
  for (int n = 0; n < 64 && offset <= v.size() && v.size() - offset >= kTfRecordHeaderBytes; ++n) {
    const ConstBytes length(v.data() + offset, 8);
    // The masked CRC of the length bytes is the data CRC of a record whose data they are.
    std::vector<std::byte> rec;
    if (!append_tfrecord(length, rec)) break;
    std::memcpy(v.data() + offset + 8, rec.data() + rec.size() - 4, 4);
    std::uint64_t len = 0;
    std::memcpy(&len, length.data(), 8);  // little-endian hosts only, as feedline is
    if (v.size() - offset < kTfRecordFramingBytes ||
        len > v.size() - offset - kTfRecordFramingBytes)
      break;
    offset += kTfRecordFramingBytes + len;
  }
  return v;
}

void walk(ConstBytes file, std::uint64_t claimed) {
  std::uint64_t offset = 0;
  for (std::size_t n = 0; offset < claimed; ++n) {
    if (n > claimed / kTfRecordFramingBytes + 1) __builtin_trap();  // each takes >= 16 bytes
    const ConstBytes header =
        offset < file.size() ? file.subspan(static_cast<std::size_t>(offset)) : ConstBytes{};
    auto len = parse_tfrecord_header(header.first(std::min<std::size_t>(header.size(), 12)), offset,
                                     claimed, "fuzz.tfrecord");
    if (!len) {
      if (len.error().object() != "fuzz.tfrecord" || len.error().message().empty() ||
          len.error().offset() != offset) {
        __builtin_trap();
      }
      return;
    }
    const std::uint64_t end = offset + kTfRecordFramingBytes + *len;
    if (end > claimed || end < offset) __builtin_trap();
    if (end <= file.size()) {
      std::vector<std::byte> rec(file.begin() + static_cast<std::ptrdiff_t>(offset),
                                 file.begin() + static_cast<std::ptrdiff_t>(end));
      auto ok = check_tfrecord(rec, *len, offset, "fuzz.tfrecord");
      if (!ok && ok.error().offset() != offset) __builtin_trap();
      // Reframed with the right data CRC it passes; with that CRC flipped it fails.
      std::vector<std::byte> good;
      if (!append_tfrecord(ConstBytes(rec).subspan(12, *len), good)) __builtin_trap();
      if (!check_tfrecord(good, *len, offset, "fuzz.tfrecord")) __builtin_trap();
      good.back() ^= std::byte{1};
      if (check_tfrecord(good, *len, offset, "fuzz.tfrecord")) __builtin_trap();
    }
    offset = end;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (!tfrecord_available()) return 0;
  const ConstBytes input(reinterpret_cast<const std::byte*>(data), size);
  walk(input, size);
  walk(input.first(size / 2), size);  // a reader that gets fewer bytes than the file claims
  const auto fixed = with_valid_length_crcs(input);
  walk(fixed, fixed.size());

  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const std::uint64_t file_bytes : {std::uint64_t{size}, std::uint64_t{1} << 40}) {
    auto idx = parse_tfrecord_index(text, file_bytes, "fuzz.idx");
    if (!idx) {
      if (idx.error().object() != "fuzz.idx" || idx.error().message().empty()) __builtin_trap();
      continue;
    }
    std::uint64_t next = 0;
    for (const TfRecordIndexEntry& e : *idx) {
      if (e.offset != next || e.length < kTfRecordFramingBytes) __builtin_trap();
      next = e.offset + e.length;
    }
    if (next != file_bytes) __builtin_trap();
    auto again = parse_tfrecord_index(format_tfrecord_index(*idx), file_bytes, "fuzz.idx");
    if (!again || *again != *idx) __builtin_trap();
    for (std::size_t i = 0; i < idx->size() && i < 8; ++i) {
      auto p = check_tfrecord_index_probe((*idx)[i], input, file_bytes, "fuzz.tfrecord");
      if (!p && p.error().message().empty()) __builtin_trap();
    }
  }
  return 0;
}
