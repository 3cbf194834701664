// libFuzzer target: brace patterns (storage/src/url_pattern.cpp) on arbitrary text. It must never
// crash, and never allocate more than its limits imply: a rejected pattern allocates nothing in
// proportion to the names it would have made, an accepted one no more than the names themselves
// (the allocator's hooks measure the peak of every call). An accepted pattern yields exactly the
// names count_brace_names() counted, and the same names as a plain reference expansion (the
// original, obviously-correct algorithm, for small counts).
#include <sanitizer/allocator_interface.h>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/storage/url_pattern.hpp"

namespace {

// Peak heap bytes held by allocations made while `tracking` (single-threaded: libFuzzer's loop).
bool tracking = false;
std::int64_t live = 0, peak = 0;

void on_malloc(const volatile void*, std::size_t size) {
  if (!tracking) return;
  live += static_cast<std::int64_t>(size);
  peak = std::max(peak, live);
}
void on_free(const volatile void* p) {
  if (!tracking || !p) return;
  live -= static_cast<std::int64_t>(__sanitizer_get_allocated_size(p));
}

template <typename F>
auto measured(F&& f) {
  live = peak = 0;
  tracking = true;
  auto r = f();
  tracking = false;
  return r;
}

// The reference: each group materialised, names multiplied out left to right (no limits beyond
// `limit` on the product; errors only as a yes/no).
bool reference(std::string_view text, std::size_t limit, std::vector<std::string>& names) {
  names.assign(1, std::string());
  std::size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '\\' && i + 1 < text.size() && (text[i + 1] == '{' || text[i + 1] == '}')) {
      for (auto& n : names) n += text[i + 1];
      i += 2;
      continue;
    }
    if (c == '}') return false;
    if (c != '{') {
      for (auto& n : names) n += c;
      ++i;
      continue;
    }
    const auto close = text.find('}', i + 1);
    if (close == std::string_view::npos) return false;
    const std::string_view body = text.substr(i + 1, close - i - 1);
    if (body.empty() || body.find('{') != std::string_view::npos) return false;
    std::vector<std::string> items;
    if (const auto dots = body.find(".."); dots != std::string_view::npos) {
      const std::string_view a = body.substr(0, dots), b = body.substr(dots + 2);
      std::uint64_t lo = 0, hi = 0;
      for (auto [s, v] : {std::pair{a, &lo}, std::pair{b, &hi}}) {
        if (s.empty() || s.size() > 18) return false;
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
        if (ec != std::errc() || p != s.data() + s.size()) return false;
      }
      const std::size_t width = a.size() > 1 && a.front() == '0' ? a.size() : 0;
      const std::uint64_t n = (lo <= hi ? hi - lo : lo - hi) + 1;
      if (n > limit) return false;
      for (std::uint64_t k = 0; k < n; ++k) {
        std::string v = std::to_string(lo <= hi ? lo + k : lo - k);
        if (v.size() < width) v.insert(0, width - v.size(), '0');
        items.push_back(std::move(v));
      }
    } else {
      std::size_t start = 0;
      for (;;) {
        const auto comma = body.find(',', start);
        items.emplace_back(body.substr(start, comma - start));
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
      if (items.size() < 2) return false;
    }
    if (names.size() * items.size() > limit) return false;
    std::vector<std::string> next;
    for (const auto& n : names) {
      for (const auto& it : items) next.push_back(n + it);
    }
    names = std::move(next);
    i = close + 1;
  }
  return true;
}

void check(std::string_view text, std::size_t limit, std::size_t max_bytes) {
  using feedline::storage::expand_braces;
  const auto count = measured([&] { return feedline::storage::count_brace_names(text); });
  // Counting allocates nothing unless it fails (then only the error's strings).
  if (count && peak != 0) __builtin_trap();
  if (!count && peak > 4096 + 4 * static_cast<std::int64_t>(text.size())) __builtin_trap();

  const auto r = measured([&] { return expand_braces(text, limit, max_bytes); });
  const std::int64_t overhead = 65536 + 256 * static_cast<std::int64_t>(text.size());
  if (!r) {
    if (r.error().code() != feedline::Errc::kInvalidArgument || r.error().message().empty())
      __builtin_trap();
    if (r.error().what().size() > 2000) __builtin_trap();  // long patterns are shown abbreviated
    if (peak > overhead) __builtin_trap();                 // a refusal builds nothing
    if (!feedline::storage::has_brace_pattern(text) && text.size() + 64 < max_bytes)
      __builtin_trap();
    if (count && *count <= limit && r.error().message().find("taking") == std::string::npos)
      __builtin_trap();
    return;
  }
  if (!count || *count != r->size() || r->empty() || r->size() > limit) __builtin_trap();
  std::size_t longest = 0, bytes = 0;
  for (const auto& n : *r) {
    longest = std::max(longest, n.size());
    bytes += sizeof(std::string) + n.size();
  }
  if (bytes > max_bytes) __builtin_trap();
  if (peak > static_cast<std::int64_t>(max_bytes + limit + 2 * longest) + overhead)
    __builtin_trap();
  if (*count <= 64) {
    std::vector<std::string> want;
    if (!reference(text, 64, want) || want != *r) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  check(text, 4096, 1 << 20);
  check(text, 7, 4096);  // limits small enough that inputs cross them
  // A malformed pattern fails whatever the limits; a well-formed one fails only by them.
  std::vector<std::string> ref;
  const bool ok = reference(text, 4096, ref);
  const auto big = feedline::storage::expand_braces(text, 4096, std::size_t{64} << 20);
  if (ok != big.has_value()) __builtin_trap();
  return 0;
}
