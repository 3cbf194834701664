// The checkpoint state as a JSON document (state.hpp): written, and parsed trusting nothing.
#include "feedline/loader/state.hpp"

#include <fmt/format.h>

#include <charconv>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <type_traits>
#include <utility>

#include "feedline/loader/digest.hpp"
#include "json_support.hpp"

namespace feedline::loader {
namespace {

using json = nlohmann::json;

Error bad(std::string why) {
  return Error(Errc::kInvalidArgument, "state: " + std::move(why)).with_object("state");
}

// The fields of one JSON object, each checked for its type and range.
class Fields {
 public:
  explicit Fields(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  Result<std::uint64_t> count(const char* key, std::uint64_t max) const {
    auto v = get(key);
    if (!v) return fail(v.error());
    if (!(*v)->is_number_unsigned())  // the parser reads every integer >= 0 as unsigned
      return fail(bad(fmt::format("{}{} is not a count", where_, key)));
    const std::uint64_t n = (*v)->get<std::uint64_t>();
    if (n > max) return fail(bad(fmt::format("{}{} is {}, above {}", where_, key, n, max)));
    return n;
  }
  Result<bool> flag(const char* key) const {
    auto v = get(key);
    if (!v) return fail(v.error());
    if (!(*v)->is_boolean())
      return fail(bad(fmt::format("{}{} is not true or false", where_, key)));
    return (*v)->get<bool>();
  }
  Result<std::string> text(const char* key) const {
    auto v = get(key);
    if (!v) return fail(v.error());
    if (!(*v)->is_string()) return fail(bad(fmt::format("{}{} is not a string", where_, key)));
    return (*v)->get<std::string>();
  }
  Result<const json*> get(const char* key) const {
    auto it = obj_.find(key);
    if (it == obj_.end()) return fail(bad(fmt::format("it has no \"{}{}\"", where_, key)));
    return &*it;
  }

 private:
  const json& obj_;
  std::string where_;
};

std::string fingerprint_text(std::uint64_t f) { return fmt::format("{:016x}", f); }

// 16 hex digits (fingerprint_text's), or nullopt.
std::optional<std::uint64_t> parse_fingerprint(const std::string& text) {
  if (text.size() != 16) return std::nullopt;
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, 16);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

constexpr std::uint64_t kU32 = std::numeric_limits<std::uint32_t>::max();
constexpr std::uint64_t kU64 = std::numeric_limits<std::uint64_t>::max();

}  // namespace

LoaderState loader_state(std::string url, std::uint64_t num_samples, std::uint64_t fingerprint,
                         const SamplerConfig& c, ResumePoint where) {
  return LoaderState{std::move(url), num_samples, fingerprint,  c.batch_size,
                     c.epochs,       c.seed,      c.shuffle,    c.shard_shuffle,
                     c.drop_last,    c.rank,      c.world_size, std::move(where)};
}

LoaderState loader_state(std::string url, const Dataset& dataset, const SamplerConfig& c,
                         ResumePoint where) {
  return loader_state(std::move(url), dataset.samples.size(), listing_fingerprint(dataset), c,
                      std::move(where));
}

std::string format_loader_state(const LoaderState& s) {
  json doc = {{"format", kLoaderStateFormat},
              {"version", kLoaderStateVersion},
              {"url", s.url},
              {"num_samples", s.num_samples},
              {"dataset", fingerprint_text(s.dataset_fingerprint)},
              {"batch_size", s.batch_size},
              {"epochs", s.epochs},
              {"seed", s.seed},
              {"shuffle", s.shuffle},
              {"shard_shuffle", s.shard_shuffle},
              {"drop_last", s.drop_last},
              {"rank", s.rank},
              {"world_size", s.world_size}};
  doc.update(detail::resume_point_doc(s.resume));
  // A url from outside may hold bytes that are not UTF-8: written escaped, not refused.
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<LoaderState> parse_loader_state(std::string_view text) {
  const json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return fail(bad("not a feedline loader state (from Loader.state_dict()): not a JSON object"));
  auto format = doc.find("format");
  if (format == doc.end() || !format->is_string() ||
      format->get<std::string>() != kLoaderStateFormat)
    return fail(bad("not a feedline loader state (from Loader.state_dict())"));
  auto version = doc.find("version");
  if (version != doc.end() && version->is_number_integer() && version->get<std::int64_t>() == 1) {
    // Before states named their dataset: a resume on another listing would duplicate some
    // samples and lose others, and nothing here can tell.
    const auto epoch = doc.find("epoch");
    return fail(bad(fmt::format(
        "version 1 (saved by an older feedline) does not say which dataset it was saved on, and "
        "a state resumed on another dataset duplicates some samples and loses others: start "
        "epoch {} afresh instead, without the state, and save states with this feedline",
        epoch != doc.end() && epoch->is_number_unsigned() ? epoch->dump() : "its epoch")));
  }
  if (version == doc.end() || !version->is_number_integer() ||
      version->get<std::int64_t>() != kLoaderStateVersion) {
    return fail(
        bad(fmt::format("version {} is not one this feedline reads ({})",
                        version == doc.end() ? "none" : version->dump(), kLoaderStateVersion)));
  }
  const Fields f(doc, "");
  LoaderState s;
  std::optional<Error> first;  // the first field refused, in the document's order
  auto take = [&first](auto result, auto& out) {
    if (!result) {
      if (!first) first = result.error();
    } else {
      out = static_cast<std::remove_reference_t<decltype(out)>>(std::move(*result));
    }
  };
  take(f.text("url"), s.url);
  take(f.count("num_samples", kU64), s.num_samples);
  if (auto t = f.text("dataset"); !t) {
    if (!first) first = t.error();
  } else if (auto fp = parse_fingerprint(*t)) {
    s.dataset_fingerprint = *fp;
  } else if (!first) {
    first = bad("dataset is not a fingerprint (16 hex digits)");
  }
  take(f.count("batch_size", kU32), s.batch_size);
  take(f.count("epochs", kU32), s.epochs);
  take(f.count("seed", kU64), s.seed);
  take(f.flag("shuffle"), s.shuffle);
  take(f.count("shard_shuffle", kU32), s.shard_shuffle);
  take(f.flag("drop_last"), s.drop_last);
  take(f.count("rank", kU32), s.rank);
  take(f.count("world_size", kU32), s.world_size);
  take(f.count("epoch", kU32), s.resume.epoch);
  if (first) return fail(std::move(*first));
  if (s.resume.epoch > s.epochs)
    return fail(bad(fmt::format("epoch {} is past epochs {}", s.resume.epoch, s.epochs)));
  auto progress = f.get("progress");
  if (!progress) return fail(progress.error());
  if (!(*progress)->is_array()) return fail(bad("progress is not a list"));
  if ((*progress)->size() > kLoaderStateMaxRuns) {
    return fail(bad(fmt::format("progress lists {} runs, at most {}", (*progress)->size(),
                                kLoaderStateMaxRuns)));
  }
  for (const json& e : **progress) {
    if (!e.is_object()) return fail(bad("an entry of progress is not an object"));
    const Fields pf(e, "progress.");
    auto w = pf.count("world_size", kU32);
    if (!w) return fail(w.error());
    if (*w == 0) return fail(bad("progress.world_size is 0"));
    auto b = pf.count("batches", kU64);
    if (!b) return fail(b.error());
    s.resume.progress.push_back({static_cast<std::uint32_t>(*w), *b});
  }
  return s;
}

std::optional<std::string> loader_state_mismatch(const LoaderState& s, const SamplerConfig& c) {
  auto differs = [](const char* option, auto saved, auto mine) -> std::optional<std::string> {
    if (saved == mine) return std::nullopt;
    return fmt::format(
        "state: it was saved with {}={}, and this loader has {}={}: resume with the same settings",
        option, saved, option, mine);
  };
  for (auto m :
       {differs("batch_size", s.batch_size, c.batch_size), differs("epochs", s.epochs, c.epochs),
        differs("seed", s.seed, c.seed), differs("shuffle", s.shuffle, c.shuffle),
        differs("shard_shuffle", s.shard_shuffle, c.shard_shuffle),
        differs("drop_last", s.drop_last, c.drop_last)}) {
    if (m) return m;
  }
  return std::nullopt;
}

std::optional<std::string> loader_state_dataset_mismatch(const LoaderState& s,
                                                         const Dataset& dataset,
                                                         std::string_view url) {
  if (s.num_samples != dataset.samples.size()) {
    return fmt::format(
        "state: it was saved on a dataset of {} samples, and {} has {}: the dataset changed",
        s.num_samples, url, dataset.samples.size());
  }
  const std::uint64_t here = listing_fingerprint(dataset);
  if (s.dataset_fingerprint != here &&
      s.dataset_fingerprint != listing_fingerprint(dataset, SamplePlaces::kSpans)) {
    return fmt::format(
        "state: it was saved on a dataset whose listing's fingerprint is {}, and {} lists {}: "
        "another dataset of the same size, or objects renamed, resized, replaced or with their "
        "contents swapped since: resuming would deliver some samples twice and lose others; "
        "resume on the dataset it was saved on, or start epoch {} afresh without the state",
        fingerprint_text(s.dataset_fingerprint), url, fingerprint_text(here), s.resume.epoch);
  }
  return std::nullopt;
}

Result<void> resume_from(const LoaderState& s, const Dataset& dataset, std::string_view url,
                         SamplerConfig& c) {
  auto why = loader_state_mismatch(s, c);
  if (!why) why = loader_state_dataset_mismatch(s, dataset, url);
  if (why) return fail(Error(Errc::kInvalidArgument, std::move(*why)).with_object("state"));
  c.resume = s.resume;
  return {};
}

}  // namespace feedline::loader
