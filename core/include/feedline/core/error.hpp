// Error and Result: the data path returns values, never throws.
//
// Result<T> is a [[nodiscard]] std::expected<T, Error>. An Error carries a machine-readable code,
// the errno or HTTP status behind it (0 when none), a human message, and the context a user needs
// to act on it: the object (path, key or URL) and, where it matters, the byte offset. Error::what()
// renders all of it as one line, e.g.
//   "not found: /data/train.bin: No such file or directory (check the path)".
// Exceptions are reserved for bugs and for setup errors caught in main().
#pragma once

#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace feedline {

enum class Errc : std::uint8_t {
  kInvalidArgument,    // the caller (or user) asked for something malformed
  kNotFound,           // object, bucket or path does not exist
  kPermissionDenied,   // EACCES/EPERM, HTTP 401/403
  kIsDirectory,        // expected a regular object, found a directory
  kUnsupported,        // feature missing in this build, kernel or server
  kIo,                 // the storage failed the operation (EIO, HTTP 5xx, ...)
  kTimeout,            // a bounded wait ran out
  kCancelled,          // stopped by the caller (Ctrl-C, cancel())
  kResourceExhausted,  // ENOMEM, ENOSPC, EMFILE, memory budget exceeded
  kCorrupt,            // bytes that do not parse (bad tar header, bad zstd frame)
  kInternal,           // a bug: an invariant did not hold
};

std::string_view errc_name(Errc code) noexcept;

class [[nodiscard]] Error {
 public:
  Error(Errc code, std::string message) : code_(code), message_(std::move(message)) {}

  // Builds an error from a (positive) errno value, choosing the code from it.
  static Error from_errno(int err, std::string_view what);

  Error& with_object(std::string object) & {
    object_ = std::move(object);
    return *this;
  }
  Error&& with_object(std::string object) && {
    object_ = std::move(object);
    return std::move(*this);
  }
  Error& with_offset(std::uint64_t offset) & {
    offset_ = offset;
    return *this;
  }
  Error&& with_offset(std::uint64_t offset) && {
    offset_ = offset;
    return std::move(*this);
  }
  Error& with_hint(std::string hint) & {
    hint_ = std::move(hint);
    return *this;
  }
  Error&& with_hint(std::string hint) && {
    hint_ = std::move(hint);
    return std::move(*this);
  }
  Error& with_sys_errno(int err) & {
    sys_errno_ = err;
    return *this;
  }
  Error&& with_sys_errno(int err) && {
    sys_errno_ = err;
    return std::move(*this);
  }
  Error& with_http_status(int status) & {
    http_status_ = status;
    return *this;
  }
  Error&& with_http_status(int status) && {
    http_status_ = status;
    return std::move(*this);
  }

  Errc code() const noexcept { return code_; }
  int sys_errno() const noexcept { return sys_errno_; }
  int http_status() const noexcept { return http_status_; }
  const std::string& message() const noexcept { return message_; }
  const std::string& object() const noexcept { return object_; }
  std::optional<std::uint64_t> offset() const noexcept { return offset_; }
  const std::string& hint() const noexcept { return hint_; }

  // True for failures worth retrying with backoff: EAGAIN/EINTR, timeouts, connection resets,
  // HTTP 429 and 5xx.
  bool retryable() const noexcept;

  // One line: "<code>: <object>[ at offset N]: <message>[ (<hint>)]".
  std::string what() const;

 private:
  Errc code_;
  int sys_errno_ = 0;
  int http_status_ = 0;
  std::string message_;
  std::string object_;
  std::optional<std::uint64_t> offset_;
  std::string hint_;
};

// A std::expected<T, Error> that may not be ignored: a call whose Result is dropped does not
// compile with -Werror (-Wunused-result), so an error cannot vanish by accident. Write
// `(void)call();` where dropping it is meant (a best-effort clean-up), and say why.
template <typename T>
class [[nodiscard]] Result : public std::expected<T, Error> {
  using Base = std::expected<T, Error>;

 public:
  using Base::Base;
  using Base::operator=;
  Result() = default;
  Result(const Base& b) : Base(b) {}        // NOLINT(google-explicit-constructor): a Result is one
  Result(Base&& b) : Base(std::move(b)) {}  // NOLINT(google-explicit-constructor)
};

// Shorthand for returning an error from a function that returns Result<T>.
inline std::unexpected<Error> fail(Error e) { return std::unexpected<Error>(std::move(e)); }
inline std::unexpected<Error> fail(Errc code, std::string message) {
  return std::unexpected<Error>(Error(code, std::move(message)));
}

}  // namespace feedline

// Propagates the error of a Result-returning expression, else yields nothing.
#define FEEDLINE_TRY(expr)                                                           \
  do {                                                                               \
    if (auto feedline_try_r_ = (expr); !feedline_try_r_) {                           \
      return std::unexpected<::feedline::Error>(std::move(feedline_try_r_).error()); \
    }                                                                                \
  } while (false)

#define FEEDLINE_CONCAT_INNER_(a, b) a##b
#define FEEDLINE_CONCAT_(a, b) FEEDLINE_CONCAT_INNER_(a, b)
// FEEDLINE_ASSIGN_OR_RETURN(auto x, f()) declares x from a Result or propagates its error.
#define FEEDLINE_ASSIGN_OR_RETURN(decl, expr) \
  FEEDLINE_ASSIGN_OR_RETURN_IMPL_(FEEDLINE_CONCAT_(feedline_aor_, __LINE__), decl, expr)
#define FEEDLINE_ASSIGN_OR_RETURN_IMPL_(tmp, decl, expr)                       \
  auto tmp = (expr);                                                           \
  if (!tmp) return std::unexpected<::feedline::Error>(std::move(tmp).error()); \
  decl = std::move(*tmp)
