#include "feedline/loader/output_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <utility>

#include "feedline/storage/registry.hpp"
#include "feedline/storage/url_pattern.hpp"

namespace feedline::loader {
namespace {

std::optional<std::string> real_path(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) return std::nullopt;
  return std::string(buf);
}

// The directory entry writing `path` replaces (the rename into place replaces that entry, a
// symlink there included, not what it points to): its parent's real path and its own name.
std::optional<std::string> entry_of(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string name = p.filename().string();
  if (name.empty() || name == "." || name == "..") return real_path(path);
  const std::string parent = p.has_parent_path() ? p.parent_path().string() : ".";
  auto dir = real_path(parent.empty() ? "/" : parent);
  if (!dir) return std::nullopt;
  return *dir == "/" ? "/" + name : *dir + "/" + name;
}

// The local paths a dataset URL reads: its root (a directory or one file) as its real path, or
// the files of its brace list; empty for a dataset that is not local.
std::vector<std::string> dataset_paths(std::string_view url) {
  auto parsed = storage::parse_url(url);
  if (!parsed || parsed->scheme != "file" || parsed->path.empty()) return {};
  std::vector<std::string> names;
  if (storage::has_brace_pattern(parsed->path)) {
    auto all = storage::expand_braces(parsed->path);
    if (!all) return {};  // refused by the open, with its reason
    names = std::move(*all);
  } else {
    names.push_back(parsed->path);
  }
  std::vector<std::string> paths;
  for (const std::string& n : names) {
    if (auto r = real_path(n)) {
      paths.push_back(*r);
    } else if (auto e = entry_of(n)) {
      paths.push_back(*e);  // not there (yet): bench storage --create lays it out
    }
  }
  return paths;
}

// Whether writing `entry` would replace or add to what `data` (a real path) holds.
bool inside(const std::string& entry, const std::string& data) {
  if (entry == data) return true;
  std::error_code ec;
  if (!std::filesystem::is_directory(data, ec)) {
    return entry == data + ".idx";  // the index beside a tar shard or TFRecord file
  }
  return data == "/" || entry.starts_with(data + "/");
}

}  // namespace

Result<void> check_output_paths(const std::vector<OutputPath>& outputs, std::string_view url) {
  const std::vector<std::string> data = dataset_paths(url);
  std::vector<std::pair<const OutputPath*, std::string>> seen;
  for (const OutputPath& o : outputs) {
    if (o.path.empty()) continue;  // prepare() says it needs a name
    const auto entry = entry_of(o.path);
    if (!entry) continue;  // prepare() says the directory is missing
    for (const std::string& d : data) {
      if (!inside(*entry, d)) continue;
      return fail(Error(Errc::kInvalidArgument,
                        fmt::format("{} {}: {} the dataset {} being read: writing there would "
                                    "overwrite or add to its data",
                                    o.flag, o.path, *entry == d ? "is" : "is inside", url))
                      .with_hint("write the report outside the dataset"));
    }
    for (const auto& [other, other_entry] : seen) {
      if (other_entry != *entry) continue;
      return fail(Error(Errc::kInvalidArgument,
                        fmt::format("{} {} and {} {} name the same file ({}): one would "
                                    "overwrite the other",
                                    other->flag, other->path, o.flag, o.path, *entry))
                      .with_hint("give each output a file of its own"));
    }
    seen.emplace_back(&o, *entry);
  }
  return {};
}

Result<void> check_output_paths(
    std::initializer_list<std::pair<std::string_view, const std::optional<std::string>*>> given,
    std::string_view url) {
  std::vector<OutputPath> outputs;
  for (const auto& [flag, path] : given) {
    if (path && *path) outputs.push_back({flag, **path});
  }
  return check_output_paths(outputs, url);
}

Result<OutputFile> OutputFile::prepare(std::string path, std::string_view flag) {
  if (path.empty()) {
    return fail(Error(Errc::kInvalidArgument, fmt::format("{} needs a file name", flag)));
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("{} {}: {}", flag, path,
                                  S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file"))
                    .with_hint("name a file to write the report to"));
  }
  OutputFile f;
  f.path_ = std::move(path);
  f.tmp_ = f.path_ + ".feedline-tmp-XXXXXX";
  f.fd_.reset(::mkostemp(f.tmp_.data(), O_CLOEXEC));
  if (!f.fd_) {
    const int err = errno;
    f.tmp_.clear();
    return fail(
        Error::from_errno(err, fmt::format("{} {}: cannot create a file there", flag, f.path_))
            .with_hint("check that the directory exists and is writable"));
  }
  ::fchmod(f.fd_.get(), 0644);
  return f;
}

OutputFile::OutputFile(OutputFile&& o) noexcept
    : path_(std::move(o.path_)), tmp_(std::move(o.tmp_)), fd_(std::move(o.fd_)) {
  o.path_.clear();
  o.tmp_.clear();
}

OutputFile& OutputFile::operator=(OutputFile&& o) noexcept {
  if (this != &o) {
    fd_.reset();
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
    path_ = std::move(o.path_);
    tmp_ = std::move(o.tmp_);
    fd_ = std::move(o.fd_);
    o.path_.clear();
    o.tmp_.clear();
  }
  return *this;
}

OutputFile::~OutputFile() {
  fd_.reset();
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

Result<void> OutputFile::commit(std::string_view text, std::string_view what) {
  return commit_streamed([&](const Sink& sink) { sink(text); }, what);
}

Result<void> OutputFile::commit_streamed(const std::function<void(const Sink&)>& produce,
                                         std::string_view what) {
  if (!enabled() || !fd_) return {};
  int write_errno = 0;
  auto sink = [&](std::string_view piece) {
    const char* p = piece.data();
    std::size_t left = piece.size();
    while (left > 0 && write_errno == 0) {
      const ssize_t n = ::write(fd_.get(), p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        write_errno = n < 0 ? errno : EIO;
        break;
      }
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  };
  produce(sink);
  if (write_errno != 0) {
    fd_.reset();
    ::unlink(tmp_.c_str());
    tmp_.clear();
    return fail(Error::from_errno(write_errno, fmt::format("writing {}", what)).with_object(path_));
  }
  return finish(what);
}

Result<void> OutputFile::finish(std::string_view what) {
  if (const int err = fd_.close(); err != 0) {
    ::unlink(tmp_.c_str());
    tmp_.clear();
    return fail(Error::from_errno(err, fmt::format("writing {}", what)).with_object(path_));
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    tmp_.clear();
    return fail(
        Error::from_errno(err, fmt::format("renaming {} into place", what)).with_object(path_));
  }
  tmp_.clear();
  return {};
}

}  // namespace feedline::loader
