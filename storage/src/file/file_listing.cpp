// The local backend's listing (file_listing.hpp).
#include "file_listing.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <memory>
#include <thread>

#include "feedline/core/cpus.hpp"
#include "feedline/core/unique_fd.hpp"

namespace feedline::storage::detail {
namespace {

// What the listing learned of one directory entry.
struct Listed {
  std::string name;
  unsigned char type = DT_UNKNOWN;  // d_type
  enum class Kind : std::uint8_t {
    kGone,
    kDir,
    kFile,
    kSpecial,
    kDirLink,  // a link to a directory: not walked
    kDangling  // a link to nothing (or a loop of links)
  } kind = Kind::kGone;
  std::uint64_t size = 0;
};

// Sets what each entry is: a directory to walk (never through a link), a regular file and its
// size (links followed, as stat() does), something special, a link to a directory (not walked:
// its files could list twice, or loop), a link to nothing, or gone (removed since the directory
// was read).
void resolve(int dfd, Listed& e) {
  struct stat st {};
  if (e.type == DT_DIR) {
    e.kind = Listed::Kind::kDir;
    return;
  }
  if (e.type == DT_UNKNOWN) {  // some filesystems do not say: a directory unless a link
    if (::fstatat(dfd, e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return;
    if (S_ISDIR(st.st_mode)) {
      e.kind = Listed::Kind::kDir;
      return;
    }
  }
  if (::fstatat(dfd, e.name.c_str(), &st, 0) != 0) {
    // A link whose target is missing (or a loop of links) is still there itself.
    if (::fstatat(dfd, e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
      e.kind = Listed::Kind::kDangling;
    }
    return;
  }
  if (S_ISDIR(st.st_mode)) {
    e.kind = Listed::Kind::kDirLink;
    return;
  }
  e.kind = S_ISREG(st.st_mode) ? Listed::Kind::kFile : Listed::Kind::kSpecial;
  e.size = static_cast<std::uint64_t>(st.st_size);
}

// Entries of one directory from which its stats are spread over the cores: a stat of a small
// file's cached inode costs ~2.5 us here, most of listing a directory of small files (reading the
// directory itself, ~1 us an entry, stays on one thread).
constexpr std::size_t kParallelStats = 4096;

void resolve_all(int dfd, std::vector<Listed>& entries) {
  const std::size_t threads =
      std::min<std::size_t>(usable_cores(), entries.size() / (kParallelStats / 2));
  if (threads < 2) {
    for (Listed& e : entries) resolve(dfd, e);
    return;
  }
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    constexpr std::size_t kChunk = 256;
    for (std::size_t i; (i = next.fetch_add(kChunk)) < entries.size();) {
      const std::size_t end = std::min(entries.size(), i + kChunk);
      for (; i < end; ++i) resolve(dfd, entries[i]);
    }
  };
  std::vector<std::jthread> helpers;
  for (std::size_t i = 1; i < threads; ++i) helpers.emplace_back(work);
  work();
}

}  // namespace

Result<void> list_tree(const std::string& root, std::string_view stem,
                       std::vector<ObjectInfo>& out) {
  struct Dir {
    UniqueFd fd;
    std::string path;  // ends with '/'
  };
  std::vector<Dir> todo;
  {
    UniqueFd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) return fail(Error::from_errno(errno, "listing").with_object(root));
    todo.push_back({std::move(fd), root.ends_with('/') ? root : root + "/"});
  }
  std::vector<Listed> entries;
  while (!todo.empty()) {
    Dir d = std::move(todo.back());
    todo.pop_back();
    const int dfd = d.fd.get();
    std::unique_ptr<DIR, int (*)(DIR*)> dir(::fdopendir(dfd), &::closedir);
    if (!dir) return fail(Error::from_errno(errno, "listing").with_object(d.path));
    (void)d.fd.release();  // the DIR owns it now
    entries.clear();
    for (;;) {
      errno = 0;
      const dirent* e = ::readdir(dir.get());
      if (!e) {
        if (errno != 0) return fail(Error::from_errno(errno, "listing").with_object(d.path));
        break;
      }
      const std::string_view name(e->d_name);
      if (name == "." || name == "..") continue;
      if (!stem.empty() && (!name.starts_with(stem) || e->d_type == DT_DIR)) continue;
      entries.push_back({std::string(name), e->d_type});
    }
    resolve_all(dfd, entries);
    // In name order (short names: a cheap sort), so that a flat directory's paths come out
    // sorted already and list() need not sort 100,000 long paths again.
    std::sort(entries.begin(), entries.end(),
              [](const Listed& a, const Listed& b) { return a.name < b.name; });
    for (Listed& e : entries) {
      if (e.kind == Listed::Kind::kGone || (e.kind == Listed::Kind::kDir && !stem.empty()))
        continue;
      std::string path = d.path + e.name;
      switch (e.kind) {
        case Listed::Kind::kDir: {
          UniqueFd sub(::openat(dfd, e.name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
          if (!sub) {
            if (errno == ENOENT) continue;  // removed since the directory was read
            if (errno == EACCES || errno == EPERM) {
              out.push_back({std::move(path) + '/', 0, LeftOut::kUnreadableDirectory});
              continue;
            }
            return fail(Error::from_errno(errno, "listing").with_object(path));
          }
          path += '/';
          todo.push_back({std::move(sub), std::move(path)});
          break;
        }
        case Listed::Kind::kFile:
          out.push_back({std::move(path), e.size, LeftOut::kNo});
          break;
        case Listed::Kind::kSpecial:
          out.push_back({std::move(path), 0, LeftOut::kSpecialFile});
          break;
        case Listed::Kind::kDirLink:
          out.push_back({std::move(path), 0, LeftOut::kLinkToDirectory});
          break;
        case Listed::Kind::kDangling:
          out.push_back({std::move(path), 0, LeftOut::kDanglingLink});
          break;
        case Listed::Kind::kGone:
          break;
      }
    }
  }
  return {};
}

}  // namespace feedline::storage::detail
