// tar archives: an incremental header parser and a ustar/pax writer.
//
// Written by hand on purpose. No Debian library offers a small, allocation-light tar header parser
// that reads byte ranges through our own I/O: libarchive is a large dependency built around
// streaming the whole archive through its own read callbacks, while feedline needs to read only
// the 512-byte headers of a shard (through any storage backend) and leave the member data for the
// pipeline's ranged reads. The format is small enough to own.
//
// Reading understands what GNU tar and Python's tarfile write:
//  - v7, ustar (POSIX 1003.1-1988: the 155-byte prefix is joined to the name when the magic is
//    "ustar\0") and old GNU ("ustar  \0", whose prefix area holds other fields);
//  - GNU long names and long link names (typeflag 'L' / 'K');
//  - pax extended headers: 'x' applies to the next entry, 'g' to every later entry until
//    overridden (POSIX). The records used are path, linkpath and size; GNU.sparse.* marks the
//    entry as sparse; every other record (mtime, uid, comment, ...) is skipped;
//  - base-256 numeric fields (GNU, for sizes of 8 GiB and more);
//  - header checksums computed both ways (unsigned, as POSIX says, and signed, as some old tars
//    wrote them);
//  - the end of the archive: two zero blocks; a zero block then end of object, or a lone zero
//    block followed by anything (what GNU tar accepts); or the end of the object at an entry
//    boundary with no zero blocks at all (GNU tar and tarfile accept it too, so do we, but
//    Reader::end() says so: the caller may flag it as a possible truncation).
// Directories, symlinks, hard links, devices, fifos, sparse files and unknown types are reported
// with their EntryType so callers can ignore them; data is skipped the way tarfile skips it (for
// regular, sparse and unknown types by the size field; none for links, directories, devices and
// fifos).
//
// Every error names the object and the offset: "truncated tar: header at offset N needs 512
// bytes, object ends at M", "not a tar archive: bad header checksum at offset 0", ...
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/bytes.hpp"
#include "feedline/core/error.hpp"
#include "feedline/storage/backend.hpp"

namespace feedline::loader::tar {

inline constexpr std::uint64_t kBlockSize = 512;
// Largest GNU long name or pax extended header accepted (real ones are a few hundred bytes; the
// cap bounds what a corrupt size field can make the reader fetch).
inline constexpr std::uint64_t kMaxExtendedHeader = 512 * 1024;
// Sizes above this are treated as corrupt (no storage object is 2^62 bytes).
inline constexpr std::uint64_t kMaxMemberSize = std::uint64_t{1} << 62;

enum class EntryType : std::uint8_t {
  kRegular,      // '0', '\0', '7' (contiguous): a file with data
  kDirectory,    // '5', GNU dumpdir 'D', or an old-style name ending in '/'
  kSymlink,      // '2'
  kHardLink,     // '1'
  kCharDevice,   // '3'
  kBlockDevice,  // '4'
  kFifo,         // '6'
  kSparse,       // GNU sparse ('S' or pax GNU.sparse.*): its stored bytes are not the file
  kOther,        // volume labels, multi-volume continuations, unknown typeflags
};
std::string_view entry_type_name(EntryType type) noexcept;

// One archive member as found in its headers.
struct Entry {
  std::string name;       // full path: pax path, else GNU long name, else ustar prefix + name
  std::string link_name;  // symlink / hard-link target (pax linkpath, GNU 'K', or the field)
  EntryType type = EntryType::kOther;
  char typeflag = 0;                // the raw typeflag byte of the main header
  std::uint64_t header_offset = 0;  // first header block of the entry, 'L'/'K'/'x' included
  std::uint64_t data_offset = 0;    // first byte of the member's data
  std::uint64_t size = 0;           // bytes of data following the header in the archive

  bool regular() const noexcept { return type == EntryType::kRegular; }
  std::uint64_t data_end() const noexcept { return data_offset + size; }
};

// How the archive ended (Reader::end()).
enum class End : std::uint8_t {
  kNotYet,            // next() has not returned false yet
  kTwoZeroBlocks,     // the standard end-of-archive marker
  kZeroBlockThenEof,  // one zero block, then the object ends (GNU tar accepts this)
  kLoneZeroBlock,     // one zero block followed by a non-zero block (GNU tar stops there too)
  kEofNoMarker,       // the object ended at an entry boundary without zero blocks
};

// Returns a view of up to `length` bytes of the archive starting at `offset`. It returns fewer
// bytes only where the object ends (none at or past the end). The view must stay valid until the
// next call. Errors (I/O) are passed through to the caller of Reader::next().
using ReadFn = std::function<Result<ConstBytes>(std::uint64_t offset, std::size_t length)>;

// A ReadFn over bytes in memory (tests, fuzzing, an object already read whole). The bytes must
// outlive the returned function.
ReadFn memory_reader(ConstBytes archive);

// Walks an archive's headers one entry at a time, reading only header blocks (and extended
// header data) through the ReadFn; member data is never read. One Reader per archive; it is not
// thread-safe. It owns its ReadFn (and whatever that captures by value).
class Reader {
 public:
  // object names the archive in error messages; object_size is its size in bytes.
  Reader(std::string object, std::uint64_t object_size, ReadFn read);

  // Parses the next entry into `out`, reusing its strings' capacity (no allocation per entry once
  // names have reached their longest). Returns true with an entry, false at the end of the
  // archive (then end() says how it ended), or an error. After an error or the end, every further
  // call returns the same outcome without reading.
  Result<bool> next(Entry& out);

  End end() const noexcept { return end_; }
  // Offset of the end-of-archive marker (or of the object's end for kEofNoMarker), once ended.
  std::uint64_t end_offset() const noexcept { return offset_; }
  const std::string& object() const noexcept { return object_; }
  std::uint64_t object_size() const noexcept { return object_size_; }

 private:
  // Overrides from extended headers ('x' for the next entry, 'g' for all later ones).
  struct Overrides {
    bool has_path = false, has_linkpath = false, has_size = false, sparse = false;
    std::string path, linkpath;
    std::uint64_t size = 0;
    void clear() noexcept {
      has_path = has_linkpath = has_size = sparse = false;
      path.clear();
      linkpath.clear();
    }
  };

  Result<bool> next_impl(Entry& out);
  // Reads a header block into header_ (copied: the ReadFn's view does not outlive the next call).
  Result<void> read_block(std::uint64_t offset, std::string_view what);
  Result<ConstBytes> read_exact(std::uint64_t offset, std::uint64_t length, std::string_view what);
  Result<void> parse_pax(std::uint64_t offset, ConstBytes records, bool global);
  Error corrupt(std::uint64_t offset, std::string message) const;
  Error truncated(std::uint64_t offset, std::uint64_t need, std::uint64_t have,
                  std::string_view what) const;

  std::string object_;
  std::uint64_t object_size_;
  ReadFn read_;
  std::uint64_t offset_ = 0;  // where the next header starts
  End end_ = End::kNotYet;
  std::optional<Error> error_;  // sticky: set once next() failed
  Overrides local_, global_;
  std::array<unsigned char, kBlockSize> header_{};
  bool has_long_name_ = false, has_long_link_ = false;
  std::string long_name_, long_link_;
};

// Reads every entry of an archive held in memory (tests and tools; not the scan hot path).
Result<std::vector<Entry>> list_entries(ConstBytes archive, std::string_view object_name);

// Where Writer::add() put a member.
struct Placement {
  std::uint64_t header_offset = 0;  // its first header block (a pax header when the name is long)
  std::uint64_t data_offset = 0;
  std::uint64_t size = 0;
};

// Writes a POSIX tar archive through an ObjectWriter: one ustar header per regular member, with a
// pax 'x' header before it when the name is longer than 100 bytes (a path record) or the size is
// 8 GiB or more (a size record, with the base-256 size in the ustar field as GNU tar does).
// Members are mode 0644, owner 0/0, mtime 0, so the same members give the same bytes. Small
// writes are staged in a 64 KiB buffer; large member data goes straight to the ObjectWriter.
// The Writer does not own the ObjectWriter, which must outlive it; after finish() the caller
// commits the ObjectWriter (abandoning it leaves no object).
class Writer {
 public:
  Writer(storage::ObjectWriter& out, std::string object_name);

  // Appends a regular member. The name must be non-empty and contain no NUL byte.
  Result<Placement> add(std::string_view name, ConstBytes data);
  // Writes the end-of-archive marker (two zero blocks) and flushes. add() is refused afterwards.
  Result<void> finish();
  // Bytes of archive produced so far (staged or written).
  std::uint64_t offset() const noexcept { return offset_; }

 private:
  Result<void> stage(ConstBytes bytes);
  Result<void> stage_zeros(std::size_t n);
  Result<void> flush();

  storage::ObjectWriter& out_;
  std::string object_;
  std::vector<std::byte> staged_;
  std::uint64_t offset_ = 0;
  bool finished_ = false;
};

}  // namespace feedline::loader::tar
