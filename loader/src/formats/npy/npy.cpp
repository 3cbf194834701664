// The .npy header (see npy.hpp): its size, a strict parser of its dict literal, and numpy's own
// rendering of it.
#include "feedline/loader/npy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>

namespace feedline::loader {
namespace {

// numpy's layout (numpy/lib/format.py): array bytes start at a multiple of ARRAY_ALIGN, and a
// header leaves room for the first axis to grow to GROWTH_AXIS_MAX_DIGITS digits.
constexpr std::size_t kArrayAlign = 64;
constexpr std::size_t kGrowthAxisMaxDigits = 21;
constexpr std::uint64_t kMaxItemsize = std::uint64_t{1} << 32;

Error corrupt(std::string_view array, std::string why) {
  return Error(Errc::kCorrupt, fmt::format("{}: bad .npy header: {}", array, why));
}

Error unsupported(std::string_view array, std::string why, std::string hint) {
  return Error(Errc::kUnsupported, fmt::format("{}: {}", array, why)).with_hint(std::move(hint));
}

// Itemsize of a simple dtype string, or why it is not one.
struct Dtype {
  std::uint64_t itemsize = 0;
  std::optional<Error> error;
};

Dtype parse_descr(std::string_view descr, std::string_view array) {
  Dtype out;
  auto refuse = [&](std::string why) {
    out.error = unsupported(array, std::move(why),
                            "feedline delivers an array's bytes as stored: save arrays of "
                            "numbers, booleans, strings or bytes (np.save, np.savez)");
    return out;
  };
  auto malformed = [&](std::string why) {
    out.error = corrupt(array, std::move(why));
    return out;
  };
  std::string_view s = descr;
  if (!s.empty() && (s[0] == '<' || s[0] == '>' || s[0] == '|' || s[0] == '=')) s.remove_prefix(1);
  if (s.empty()) return malformed(fmt::format("empty dtype '{}'", descr));
  const char kind = s[0];
  s.remove_prefix(1);
  if (kind == 'O') {
    return refuse(fmt::format(
        "dtype '{}' holds Python objects (pickled, not array bytes): feedline cannot deliver it",
        descr));
  }
  if (kind == '?' && s.empty()) {
    out.itemsize = 1;
    return out;
  }
  std::string_view digits = s, unit;
  if (kind == 'm' || kind == 'M') {  // datetime64 / timedelta64: "M8" or "M8[ns]"
    const std::size_t br = s.find('[');
    if (br != std::string_view::npos) {
      digits = s.substr(0, br);
      unit = s.substr(br);
      if (unit.size() < 3 || unit.back() != ']' ||
          !std::all_of(unit.begin() + 1, unit.end() - 1,
                       [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; })) {
        return malformed(fmt::format("bad datetime unit in dtype '{}'", descr));
      }
    }
  }
  std::uint64_t n = 0;
  if (digits.empty() ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return refuse(fmt::format("dtype '{}' is not a simple dtype feedline reads", descr));
  }
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || p != digits.data() + digits.size() || n > kMaxItemsize) {
    return malformed(fmt::format("dtype '{}' has an item size out of range", descr));
  }
  auto one_of = [n](std::initializer_list<std::uint64_t> sizes) {
    return std::find(sizes.begin(), sizes.end(), n) != sizes.end();
  };
  bool ok = false;
  switch (kind) {
    case 'b':
      ok = n == 1;
      break;
    case 'i':
    case 'u':
      ok = one_of({1, 2, 4, 8});
      break;
    case 'f':
      ok = one_of({2, 4, 8, 12, 16});
      break;
    case 'c':
      ok = one_of({8, 16, 24, 32});
      break;
    case 'm':
    case 'M':
      ok = n == 8;
      break;
    case 'S':
    case 'a':
    case 'V':
      ok = true;
      break;
    case 'U':
      ok = true;
      n *= 4;  // UCS-4; n <= 2^32, no overflow
      break;
    default:
      return refuse(fmt::format("dtype '{}' is not a simple dtype feedline reads", descr));
  }
  if (!ok) return malformed(fmt::format("dtype '{}' has no such item size", descr));
  out.itemsize = n;
  return out;
}

// A cursor over the dict literal.
class Literal {
 public:
  explicit Literal(std::string_view text) : s_(text) {}
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  bool eat(char c) {
    skip_ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  char peek() {
    skip_ws();
    return i_ < s_.size() ? s_[i_] : '\0';
  }
  // A '...' or "..." literal without escapes.
  std::optional<std::string_view> string() {
    skip_ws();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) return std::nullopt;
    const char q = s_[i_];
    const std::size_t end = s_.find(q, i_ + 1);
    if (end == std::string_view::npos) return std::nullopt;
    const std::string_view v = s_.substr(i_ + 1, end - i_ - 1);
    if (v.find('\\') != std::string_view::npos || v.find('\n') != std::string_view::npos)
      return std::nullopt;
    i_ = end + 1;
    return v;
  }
  std::optional<bool> boolean() {
    skip_ws();
    for (const auto& [word, value] :
         {std::pair{std::string_view("True"), true}, std::pair{std::string_view("False"), false}}) {
      if (s_.substr(i_).starts_with(word)) {
        i_ += word.size();
        return value;
      }
    }
    return std::nullopt;
  }
  // A decimal integer that fits 64 bits.
  std::optional<std::uint64_t> integer() {
    skip_ws();
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(s_.data() + i_, s_.data() + s_.size(), v);
    if (ec != std::errc() || p == s_.data() + i_) return std::nullopt;
    i_ = static_cast<std::size_t>(p - s_.data());
    return v;
  }
  bool at_end() {
    skip_ws();
    return i_ == s_.size();
  }
  std::size_t pos() const { return i_; }

 private:
  std::string_view s_;
  std::size_t i_ = 0;
};

std::uint64_t load_le(const std::byte* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint64_t>(p[i]);
  return v;
}

}  // namespace

Result<std::uint64_t> npy_header_size(ConstBytes prefix, std::string_view array) {
  if (prefix.size() < kNpyMagic.size() + 2 ||
      std::string_view(reinterpret_cast<const char*>(prefix.data()), kNpyMagic.size()) !=
          kNpyMagic) {
    return fail(corrupt(array, "not an .npy array (no \\x93NUMPY magic)"));
  }
  const auto major = std::to_integer<int>(prefix[6]), minor = std::to_integer<int>(prefix[7]);
  if (minor != 0 || major < 1 || major > 3) {
    return fail(unsupported(array,
                            fmt::format(".npy format version {}.{} is not read (only 1.0, "
                                        "2.0 and 3.0 exist)",
                                        major, minor),
                            "save it again with numpy"));
  }
  const std::uint64_t prelude = major == 1 ? kNpyPreludeV1 : kNpyPreludeV2;
  if (prefix.size() < prelude) return fail(corrupt(array, "cut short inside its header"));
  const std::uint64_t hlen = load_le(prefix.data() + 8, major == 1 ? 2 : 4);
  if (hlen > kMaxNpyHeaderBytes) {
    return fail(corrupt(array, fmt::format("a header of {} bytes, more than the {} an .npy header "
                                           "may take",
                                           hlen, kMaxNpyHeaderBytes)));
  }
  return prelude + hlen;
}

Result<NpyHeader> parse_npy_header(ConstBytes bytes, std::string_view array) {
  FEEDLINE_ASSIGN_OR_RETURN(std::uint64_t total, npy_header_size(bytes, array));
  if (bytes.size() < total) return fail(corrupt(array, "cut short inside its header"));
  NpyHeader h;
  h.major = std::to_integer<int>(bytes[6]);
  h.minor = std::to_integer<int>(bytes[7]);
  h.header_bytes = total;
  const std::uint64_t prelude = h.major == 1 ? kNpyPreludeV1 : kNpyPreludeV2;
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + prelude),
                              static_cast<std::size_t>(total - prelude));
  Literal lit(text);
  auto bad = [&](std::string_view why) {
    return fail(corrupt(array, fmt::format("{} at byte {} of its dict", why, lit.pos())));
  };
  if (!lit.eat('{')) return bad("expected '{'");
  bool have_descr = false, have_order = false, have_shape = false, fortran = false;
  while (!lit.eat('}')) {
    auto key = lit.string();
    if (!key) return bad("expected a quoted key or '}'");
    if (!lit.eat(':')) return bad("expected ':'");
    if (*key == "descr") {
      if (have_descr) return bad("'descr' given twice");
      have_descr = true;
      if (lit.peek() == '[' || lit.peek() == '(') {
        return fail(unsupported(array,
                                "a structured dtype (a list 'descr': named fields, or "
                                "sub-arrays): feedline delivers plain arrays only",
                                "save each field as an array of its own (np.savez)"));
      }
      auto v = lit.string();
      if (!v) return bad("'descr' is not a string");
      h.descr = std::string(*v);
    } else if (*key == "fortran_order") {
      if (have_order) return bad("'fortran_order' given twice");
      have_order = true;
      auto v = lit.boolean();
      if (!v) return bad("'fortran_order' is not True or False");
      fortran = *v;
    } else if (*key == "shape") {
      if (have_shape) return bad("'shape' given twice");
      have_shape = true;
      if (!lit.eat('(')) return bad("'shape' is not a tuple");
      while (!lit.eat(')')) {
        auto d = lit.integer();
        if (!d) return bad("a dimension of 'shape' is not a whole number");
        h.shape.push_back(*d);
        if (h.shape.size() > 64) return bad("'shape' has more than 64 dimensions");
        if (!lit.eat(',')) {
          if (!lit.eat(')')) return bad("expected ',' or ')' in 'shape'");
          break;
        }
      }
    } else {
      return bad(fmt::format("unexpected key '{}'", *key));
    }
    if (!lit.eat(',')) {
      if (!lit.eat('}')) return bad("expected ',' or '}'");
      break;
    }
  }
  if (!lit.at_end()) return bad("text after the dict");
  if (!have_descr || !have_order || !have_shape) {
    return fail(corrupt(array, "the header lacks 'descr', 'fortran_order' or 'shape'"));
  }
  Dtype dt = parse_descr(h.descr, array);
  if (dt.error) return fail(std::move(*dt.error));
  h.itemsize = dt.itemsize;
  std::uint64_t elements = 1;
  for (const std::uint64_t d : h.shape) {
    if (__builtin_mul_overflow(elements, d, &elements)) {
      return fail(corrupt(array, "its shape holds more than 2^64 elements"));
    }
  }
  if (__builtin_mul_overflow(elements, h.itemsize, &h.data_bytes)) {
    return fail(corrupt(array, "its shape and dtype make more than 2^64 bytes"));
  }
  if (fortran && h.shape.size() > 1 && h.data_bytes > 0) {
    return fail(unsupported(array,
                            "stored in Fortran order (column-major): feedline delivers an array's "
                            "bytes as they lie, which members define as C order",
                            "save np.ascontiguousarray(a) instead"));
  }
  return h;
}

std::string format_npy_header(std::string_view descr, std::span<const std::uint64_t> shape) {
  std::string tuple = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) tuple += ", ";
    fmt::format_to(std::back_inserter(tuple), "{}", shape[i]);
  }
  tuple += shape.size() == 1 ? ",)" : ")";
  std::string dict =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, tuple);
  if (!shape.empty()) {
    const std::size_t first = fmt::formatted_size("{}", shape.front());
    dict.append(kGrowthAxisMaxDigits > first ? kGrowthAxisMaxDigits - first : 0, ' ');
  }
  const std::size_t hlen = dict.size() + 1;  // with the final '\n'
  const std::size_t pad = kArrayAlign - (kNpyPreludeV1 + hlen) % kArrayAlign;
  const std::size_t total = hlen + pad;
  std::string out(kNpyMagic);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(total & 0xFF);
  out += static_cast<char>((total >> 8) & 0xFF);
  out += dict;
  out.append(pad, ' ');
  out += '\n';
  return out;
}

}  // namespace feedline::loader
