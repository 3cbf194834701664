#include "json_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "json_render.hpp"
#include "output.hpp"

namespace feedline::tools {

Result<JsonFile> JsonFile::prepare(std::string path, std::string_view flag) {
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
  JsonFile f;
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

JsonFile::JsonFile(JsonFile&& o) noexcept
    : path_(std::move(o.path_)), tmp_(std::move(o.tmp_)), fd_(std::move(o.fd_)) {
  o.path_.clear();
  o.tmp_.clear();
}

JsonFile& JsonFile::operator=(JsonFile&& o) noexcept {
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

JsonFile::~JsonFile() {
  fd_.reset();
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

Result<void> JsonFile::commit(const nlohmann::json& doc) {
  const std::string text = out::scrub(dump_json(doc, 2)) + "\n";
  return commit_streamed([&](const Sink& sink) { sink(text); }, "the JSON report");
}

Result<void> JsonFile::commit_streamed(const std::function<void(const Sink&)>& produce,
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

Result<void> JsonFile::finish(std::string_view what) {
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

}  // namespace feedline::tools
