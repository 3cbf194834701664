// DecoderRegistry and DecodePlan (decoder.hpp): extensions to decoders, members to chains.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "feedline/loader/decoder.hpp"

namespace feedline::loader {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// The extensions part of a member's name: what follows the key (the first '.' of its last path
// component), e.g. ".jpg.zst" for "train/000123.jpg.zst".
std::string_view extensions_of(std::string_view name) {
  const std::size_t slash = name.rfind('/');
  const std::size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  const std::size_t dot = name.find('.', base);
  return dot == std::string_view::npos ? std::string_view{} : name.substr(dot);
}

}  // namespace

Result<void> DecoderRegistry::add(std::string_view extension,
                                  std::shared_ptr<const Decoder> decoder) {
  const bool well_formed =
      extension.size() >= 2 && extension.size() <= 17 && extension.front() == '.' &&
      std::all_of(extension.begin() + 1, extension.end(),
                  [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; });
  if (!well_formed) {
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("decoder extension '{}' is not a dot and 1-16 letters or digits",
                                  extension))
                    .with_hint("register extensions such as \".zst\" or \".jpg\""));
  }
  if (!decoder) {
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("no decoder given for extension '{}'", extension)));
  }
  const std::string ext = lower(extension);
  for (Entry& e : entries_) {
    if (e.extension == ext) {
      e.decoder = std::move(decoder);
      return {};
    }
  }
  entries_.push_back({ext, std::move(decoder)});
  return {};
}

std::shared_ptr<const Decoder> DecoderRegistry::find(std::string_view extension) const {
  for (const Entry& e : entries_) {
    if (equal_ignoring_case(e.extension, extension)) return e.decoder;
  }
  return nullptr;
}

std::vector<std::shared_ptr<const Decoder>> DecoderRegistry::chain_for(
    std::string_view name) const {
  std::vector<std::shared_ptr<const Decoder>> chain;
  std::string_view exts = extensions_of(name);
  while (!exts.empty() && chain.size() < kMaxChain) {
    const std::size_t dot = exts.rfind('.');
    auto d = find(exts.substr(dot));
    if (!d) break;
    chain.push_back(std::move(d));
    exts = exts.substr(0, dot);
  }
  return chain;
}

DecoderRegistry default_decoders() {
  DecoderRegistry r;
  (void)r.add(".zst", zstd_decoder());  // well-formed: cannot fail
  return r;
}

DecodePlan::DecodePlan() : chains_(1) {}

DecodePlan::DecodePlan(const Dataset& dataset, const DecoderRegistry& registry) : chains_(1) {
  of_member_.assign(dataset.members.size(), 0);
  if (registry.empty()) return;
  // Few distinct extension runs in a dataset (".bin.zst", ".cls"): each resolved once.
  std::map<std::string, std::uint16_t, std::less<>> by_exts;
  for (std::size_t i = 0; i < dataset.members.size(); ++i) {
    const std::string_view exts = extensions_of(dataset.members[i].name);
    if (exts.empty()) continue;
    auto it = by_exts.find(exts);
    if (it == by_exts.end()) {
      auto steps = registry.chain_for(dataset.members[i].name);
      std::uint16_t id = 0;
      if (!steps.empty()) {
        // Chains are few; one with the same steps is shared (".jpg" and ".jpeg").
        for (std::size_t c = 1; c < chains_.size(); ++c) {
          if (chains_[c].steps == steps) id = static_cast<std::uint16_t>(c);
        }
        if (id == 0 && chains_.size() < 0xffff) {
          Chain chain;
          chain.steps = std::move(steps);
          for (const auto& s : chain.steps) {
            if (!chain.name.empty()) chain.name += '+';
            chain.name += s->name();
          }
          chain.digest_after = chain.steps.size();
          for (std::size_t s = 0; s < chain.steps.size(); ++s) {
            if (!chain.steps[s]->exact()) {
              chain.digest_after = s;
              break;
            }
          }
          chain.fixed_size = chain.steps.back()->fixed_output_size();
          id = static_cast<std::uint16_t>(chains_.size());
          chains_.push_back(std::move(chain));
        }
      }
      it = by_exts.emplace(std::string(exts), id).first;
    }
    of_member_[i] = it->second;
    ++chains_[it->second].members;
  }
}

std::optional<std::uint64_t> DecodePlan::known_size(std::size_t index,
                                                    const Member& m) const noexcept {
  const Chain& c = chain_of(index);
  if (c.steps.empty()) {
    if (m.size == storage::kUnknownSize) return std::nullopt;
    return m.size;
  }
  if (c.fixed_size) return c.fixed_size;
  // An index's decoded size is the output of a one-step chain sized by it (zstd).
  if (c.steps.size() == 1 && c.steps.front()->sized_by_index() && m.decoded_size)
    return m.decoded_size;
  return std::nullopt;
}

}  // namespace feedline::loader
