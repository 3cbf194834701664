// dlopen/dlsym helpers shared by the CUDA runtime and cuFile shims (private to src/cuda/).
#pragma once

#include <dlfcn.h>
#include <fmt/format.h>

#include <string>
#include <vector>

#include "feedline/core/error.hpp"

namespace feedline::transports::detail {

// Looks up one symbol into a typed function pointer; false when the library lacks it.
template <typename Fn>
bool resolve(void* lib, const char* name, Fn& out) {
  void* p = ::dlsym(lib, name);
  if (!p) return false;
  out = reinterpret_cast<Fn>(p);
  return true;
}

struct OpenedLibrary {
  void* handle = nullptr;
  std::string soname;
};

// Opens the first of sonames that loads. kUnsupported naming every soname tried and dlopen's last
// complaint, with hint when one is given.
inline Result<OpenedLibrary> open_first(const std::vector<std::string>& sonames, const char* what,
                                        const char* hint = "") {
  std::string last_error;
  for (const auto& name : sonames) {
    if (void* lib = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return OpenedLibrary{lib, name};
    if (const char* e = ::dlerror()) last_error = e;
  }
  Error e(Errc::kUnsupported, fmt::format("{} not found (tried {}; last: {})", what,
                                          fmt::join(sonames, ", "), last_error));
  if (*hint) e.with_hint(hint);
  return fail(std::move(e));
}

}  // namespace feedline::transports::detail
