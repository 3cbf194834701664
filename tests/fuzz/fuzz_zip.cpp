// libFuzzer target: the zip directory reader of npz archives. Over arbitrary bytes as a whole
// file (and as a file larger than the bytes that reach the reader), find_zip_directory(),
// parse_zip_directory() and zip_local_header_size() must never crash, hang or allocate beyond
// the bounds they state; every error must name the archive; an accepted directory must lie in
// the file before its end records, its entries sorted, each (local header and data) ending by its
// limit, and the limits never past the directory. Stored entries rebuilt with zip_local_header()
// and zip_directory() from what was read must read back the same.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "feedline/loader/zip.hpp"

namespace {

using namespace feedline;
using namespace feedline::loader;

std::vector<ZipEntry> read_zip(ConstBytes file) {
  const std::size_t tail_bytes = std::min<std::size_t>(file.size(), kZipTailBytes);
  const ConstBytes tail = file.subspan(file.size() - tail_bytes);
  auto loc = find_zip_directory(tail, file.size(), "fuzz.npz");
  if (!loc) {
    if (loc.error().object() != "fuzz.npz" || loc.error().message().empty()) __builtin_trap();
    return {};
  }
  if (loc->offset > file.size() || loc->size > file.size() - loc->offset) __builtin_trap();
  if (loc->size > kMaxZipDirectoryBytes || loc->entries > loc->size / 46) __builtin_trap();
  auto entries = parse_zip_directory(
      file.subspan(static_cast<std::size_t>(loc->offset), static_cast<std::size_t>(loc->size)),
      *loc, file.size(), "fuzz.npz");
  if (!entries) {
    if (entries.error().object() != "fuzz.npz") __builtin_trap();
    return {};
  }
  if (entries->size() != loc->entries) __builtin_trap();
  std::uint64_t prev = 0;
  for (const ZipEntry& e : *entries) {
    if (e.local_header_offset < prev || e.limit > loc->offset || e.limit <= e.local_header_offset)
      __builtin_trap();
    if (e.compressed_size > e.limit - e.local_header_offset) __builtin_trap();
    prev = e.local_header_offset;
    const ConstBytes local = file.subspan(static_cast<std::size_t>(e.local_header_offset));
    auto size = zip_local_header_size(local, e, "fuzz.npz");
    if (size && (*size < kZipLocalHeaderBytes ||
                 e.local_header_offset + *size + e.compressed_size > e.limit)) {
      __builtin_trap();
    }
    if (!size && size.error().object() != "fuzz.npz") __builtin_trap();
  }
  return std::move(*entries);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ConstBytes input(reinterpret_cast<const std::byte*>(data), size);
  const std::vector<ZipEntry> entries = read_zip(input);
  // Rebuild an archive of the entries read (their data zeros): it must read back with the same
  // names, sizes and offsets. Only printable names: zip's signatures are not printable, so none
  // can appear inside the rebuilt directory and be taken for an end record.
  std::string rebuilt;
  std::vector<ZipEntry> written;
  for (const ZipEntry& e : entries) {
    if (e.compressed_size > 4096 || written.size() >= 16) break;
    if (!std::all_of(e.name.begin(), e.name.end(), [](char c) { return c >= 0x20 && c < 0x7f; }))
      break;
    ZipEntry& w = written.emplace_back();
    w.name = e.name;
    w.size = w.compressed_size = e.compressed_size;
    w.crc32 = e.crc32;
    w.local_header_offset = rebuilt.size();
    rebuilt += zip_local_header(w.name, w.crc32, w.size);
    rebuilt.append(static_cast<std::size_t>(w.size), '\0');
  }
  if (written.empty()) return 0;
  rebuilt += zip_directory(written, rebuilt.size());
  const std::vector<ZipEntry> back =
      read_zip(std::as_bytes(std::span(rebuilt.data(), rebuilt.size())));
  if (back.size() != written.size()) __builtin_trap();
  for (std::size_t i = 0; i < back.size(); ++i) {
    if (back[i].name != written[i].name || back[i].size != written[i].size ||
        back[i].local_header_offset != written[i].local_header_offset) {
      __builtin_trap();
    }
  }
  return 0;
}
