#include "feedline/core/error.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "feedline/core/text.hpp"

namespace feedline {

std::string_view errc_name(Errc code) noexcept {
  switch (code) {
    case Errc::kInvalidArgument:
      return "invalid argument";
    case Errc::kNotFound:
      return "not found";
    case Errc::kPermissionDenied:
      return "permission denied";
    case Errc::kIsDirectory:
      return "is a directory";
    case Errc::kUnsupported:
      return "unsupported";
    case Errc::kIo:
      return "I/O error";
    case Errc::kTimeout:
      return "timed out";
    case Errc::kCancelled:
      return "cancelled";
    case Errc::kResourceExhausted:
      return "resource exhausted";
    case Errc::kCorrupt:
      return "corrupt data";
    case Errc::kInternal:
      return "internal error";
  }
  return "error";
}

namespace {
Errc code_for_errno(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return Errc::kNotFound;
    case EACCES:
    case EPERM:
    case EROFS:
      return Errc::kPermissionDenied;
    case EISDIR:
      return Errc::kIsDirectory;
    case EINVAL:
      return Errc::kInvalidArgument;
    case EOPNOTSUPP:
    case ENOSYS:
      return Errc::kUnsupported;
    case ETIMEDOUT:
      return Errc::kTimeout;
    case ECANCELED:
    case EINTR:
      return Errc::kCancelled;
    case ENOMEM:
    case ENOSPC:
    case EMFILE:
    case ENFILE:
    case EDQUOT:
      return Errc::kResourceExhausted;
    default:
      return Errc::kIo;
  }
}
}  // namespace

Error Error::from_errno(int err, std::string_view what) {
  Error e(code_for_errno(err), fmt::format("{}: {}", what, std::strerror(err)));
  e.sys_errno_ = err;
  return e;
}

bool Error::retryable() const noexcept {
  switch (sys_errno_) {
    case EAGAIN:
    case EINTR:
    case ETIMEDOUT:
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
      return code_ != Errc::kCancelled || sys_errno_ != EINTR;
    default:
      break;
  }
  if (http_status_ == 429 || http_status_ >= 500) return true;
  return code_ == Errc::kTimeout;
}

std::string Error::what() const {
  std::string out(errc_name(code_));
  if (!object_.empty()) out += fmt::format(": {}", object_);
  if (offset_) out += fmt::format(" at offset {}", *offset_);
  out += ": ";
  out += message_;
  if (!hint_.empty()) out += fmt::format(" ({})", hint_);
  // Names are bytes (a file name, an S3 key): shown on one line, with no control character and
  // nothing that is not UTF-8, wherever the line goes (a terminal, a JSON document, Python).
  return printable(out);
}

}  // namespace feedline
