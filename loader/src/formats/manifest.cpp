// The dataset manifest (see manifest.hpp): rendering, parsing, and the check of an opened dataset
// against it.
#include "feedline/loader/manifest.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <map>

#include "feedline/loader/format.hpp"

namespace feedline::loader {
namespace {

bool parse_u64(std::string_view text, std::uint64_t& out) {
  if (text.empty() ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && p == text.data() + text.size();
}

bool parse_double(std::string_view text, double& out) {
  if (text.empty()) return false;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && p == text.data() + text.size();
}

std::string_view plural(std::uint64_t n, std::string_view one, std::string_view many) {
  return n == 1 ? one : many;
}

}  // namespace

namespace {

// The format gen writes (null for auto, which validate() refuses: named as files are).
const FormatSpec* spec_of(const GenConfig& c) {
  return c.format.is_auto() ? nullptr : &c.format.spec();
}

// Formats whose objects hold samples_per_shard samples each (the others one).
bool sharded(const GenConfig& c) {
  const FormatSpec* f = spec_of(c);
  return f && !f->one_sample_per_object;
}

// Members gen writes per sample.
std::uint64_t members_per_sample(const GenConfig& c) {
  const FormatSpec* f = spec_of(c);
  if (!f) return 1;
  return f->gen.members + (f->gen.labels && c.with_label ? 1 : 0);
}

}  // namespace

std::uint64_t generated_objects(const GenConfig& c) {
  if (!sharded(c)) return c.samples;
  if (c.samples_per_shard == 0) return 0;
  return c.samples / c.samples_per_shard + (c.samples % c.samples_per_shard != 0);
}

std::string generated_object_name(const GenConfig& c, std::uint64_t i) {
  const FormatSpec* f = spec_of(c);
  if (!f) return sample_key(i, c.samples) + payload_extension(c);
  if (f->gen.object_name) return f->gen.object_name(c, i);
  const std::string_view ext = f->extensions.empty() ? std::string_view() : f->extensions.front();
  if (!sharded(c)) return fmt::format("{}{}", sample_key(i, c.samples), ext);
  return fmt::format("shard-{}{}", sample_key(i, generated_objects(c)), ext);
}

std::uint64_t generated_samples_in(const GenConfig& c, std::uint64_t i) {
  if (!sharded(c)) return 1;
  const std::uint64_t first = i * c.samples_per_shard;
  return first >= c.samples ? 0 : std::min(c.samples_per_shard, c.samples - first);
}

std::string format_manifest(const DatasetManifest& m) {
  const GenConfig& c = m.config;
  std::string out = fmt::format(
      "{} {}\nstate {}\nformat {}\nsamples {}\nsamples-per-shard {}\nlabel {}\nsample-size {}\n"
      "max-sample-size {}\ncompress {}\ncompressibility {}\nclasses {}\nseed {}\nobjects {}\n",
      kManifestMagic, kManifestVersion, m.complete ? "complete" : "in-progress", c.format.name(),
      c.samples, c.samples_per_shard, c.with_label ? "true" : "false", c.sample_size.to_string(),
      c.max_sample_size, c.compress.to_string(), c.compressibility, c.num_classes, c.seed,
      m.summary.objects);
  if (c.image.jpeg) fmt::format_to(std::back_inserter(out), "image {}\n", c.image.to_string());
  if (m.complete) {
    const GenSummary& s = m.summary;
    fmt::format_to(std::back_inserter(out),
                   "members {}\nindex-objects {}\nbytes-stored {}\nbytes-decoded {}\ndigest {}\n",
                   s.members, s.index_objects, s.bytes_stored, s.bytes_decoded, s.digest);
  }
  return out;
}

Result<DatasetManifest> parse_manifest(std::string_view text, std::string_view object_name,
                                       const FormatRegistry& formats) {
  std::size_t pos = 0;  // start of the line being looked at
  auto bad = [&](std::string_view why) {
    return fail(Error(Errc::kCorrupt, fmt::format("corrupt dataset manifest: {}", why))
                    .with_object(std::string(object_name))
                    .with_offset(pos)
                    .with_hint("regenerate the dataset with feedline gen, or delete the manifest "
                               "(the dataset is then opened as it is, unchecked)"));
  };
  if (text.size() > kMaxManifestBytes) {
    return bad(
        fmt::format("{} bytes, more than a manifest holds ({})", text.size(), kMaxManifestBytes));
  }
  // key -> (value, offset of its line)
  std::map<std::string_view, std::pair<std::string_view, std::size_t>, std::less<>> kv;
  bool first = true;
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos)
      return bad("the last line does not end in a newline (truncated?)");
    const std::string_view line = text.substr(pos, nl - pos);
    const std::size_t sp = line.find(' ');
    if (sp == std::string_view::npos || sp == 0)
      return bad(fmt::format("expected 'KEY VALUE', got '{}'", line));
    const std::string_view key = line.substr(0, sp), value = line.substr(sp + 1);
    if (first) {
      std::uint64_t v = 0;
      if (key != kManifestMagic || !parse_u64(value, v)) {
        return bad(fmt::format("not a feedline dataset manifest (expected '{} {}')", kManifestMagic,
                               kManifestVersion));
      }
      if (v != static_cast<std::uint64_t>(kManifestVersion)) {
        return fail(
            Error(Errc::kUnsupported,
                  fmt::format("dataset manifest version {} is not supported (this build reads {})",
                              v, kManifestVersion))
                .with_object(std::string(object_name))
                .with_hint("use the feedline that wrote it, or delete the manifest"));
      }
      first = false;
    } else if (!kv.emplace(key, std::pair{value, pos}).second) {
      return bad(fmt::format("'{}' given twice", key));
    }
    pos = nl + 1;
  }
  if (first) return bad("empty");

  auto value_of = [&](std::string_view key, std::string_view& out) -> Result<void> {
    auto it = kv.find(key);
    if (it == kv.end()) {
      pos = text.size();
      return bad(fmt::format("no '{}' line", key));
    }
    out = it->second.first;
    pos = it->second.second;
    return {};
  };
  auto number = [&](std::string_view key, std::uint64_t& out) -> Result<void> {
    std::string_view v;
    FEEDLINE_TRY(value_of(key, v));
    if (!parse_u64(v, out)) return bad(fmt::format("'{}' is not a whole number: '{}'", key, v));
    return {};
  };

  DatasetManifest m;
  GenConfig& c = m.config;
  std::string_view v;
  FEEDLINE_TRY(value_of("state", v));
  if (v != "complete" && v != "in-progress") {
    return bad(fmt::format("state '{}' (expected complete or in-progress)", v));
  }
  m.complete = v == "complete";
  FEEDLINE_TRY(value_of("format", v));
  auto format = formats.parse(v);
  if (!format) return bad(fmt::format("unknown format '{}'", v));
  c.format = *format;
  FEEDLINE_TRY(number("samples", c.samples));
  if (c.samples < 1) return bad("'samples' must be at least 1");
  FEEDLINE_TRY(number("samples-per-shard", c.samples_per_shard));
  if (c.samples_per_shard < 1) return bad("'samples-per-shard' must be at least 1");
  FEEDLINE_TRY(value_of("label", v));
  if (v != "true" && v != "false")
    return bad(fmt::format("label '{}' (expected true or false)", v));
  c.with_label = v == "true";
  FEEDLINE_TRY(value_of("sample-size", v));
  auto size = SizeDistribution::parse(v);
  if (!size) return bad(size.error().message());
  c.sample_size = *size;
  FEEDLINE_TRY(number("max-sample-size", c.max_sample_size));
  FEEDLINE_TRY(value_of("compress", v));
  auto compress = CompressionSpec::parse(v);
  if (!compress) return bad(compress.error().message());
  c.compress = *compress;
  FEEDLINE_TRY(value_of("compressibility", v));
  if (!parse_double(v, c.compressibility)) return bad(fmt::format("compressibility '{}'", v));
  std::uint64_t classes = 0;
  FEEDLINE_TRY(number("classes", classes));
  if (classes < 1 || classes > std::numeric_limits<std::uint32_t>::max()) {
    return bad(fmt::format("classes {} is out of range", classes));
  }
  c.num_classes = static_cast<std::uint32_t>(classes);
  FEEDLINE_TRY(number("seed", c.seed));
  if (auto it = kv.find("image"); it != kv.end()) {  // absent: no images (manifests before them)
    pos = it->second.second;
    auto image = ImageSpec::parse(it->second.first);
    if (!image) return bad(image.error().message());
    c.image = *image;
  }
  FEEDLINE_TRY(number("objects", m.summary.objects));
  if (m.summary.objects != generated_objects(c)) {
    return bad(fmt::format("'objects {}' disagrees with the settings, which make {}",
                           m.summary.objects, generated_objects(c)));
  }
  if (m.complete) {
    GenSummary& s = m.summary;
    s.samples = c.samples;
    FEEDLINE_TRY(number("members", s.members));
    FEEDLINE_TRY(number("index-objects", s.index_objects));
    FEEDLINE_TRY(number("bytes-stored", s.bytes_stored));
    FEEDLINE_TRY(number("bytes-decoded", s.bytes_decoded));
    FEEDLINE_TRY(number("digest", s.digest));
  }
  return m;
}

Result<void> check_manifest(const DatasetManifest& m, std::string_view manifest_key,
                            std::string_view dir, bool root_manifest,
                            const std::vector<bool>& skipped_objects, bool skip_bad_objects,
                            const std::function<std::string(std::string_view)>& shown,
                            Dataset& ds) {
  if (root_manifest) ds.manifest = std::string(manifest_key);
  const GenConfig& c = m.config;
  if (!m.complete || c.format != ds.format) return {};  // another format: each object read as it is
  const FormatSpec& spec = ds.format.spec();
  const std::string_view kind = spec.object_noun.empty() ? "object" : spec.object_noun;
  const std::string kinds = fmt::format("{}s", kind);
  const std::string where = dir.empty()
                                ? shown(ds.root)
                                : shown(dir.substr(0, dir.size() - (dir.ends_with('/') ? 1 : 0)));
  const std::string manifest = shown(manifest_key);
  const std::string hint = fmt::format(
      "re-run the same feedline gen to rewrite the dataset, with the settings recorded in {}, or "
      "delete that manifest to use the dataset as it is",
      manifest);

  // gen's object names matched to the data objects found under dir (ds.objects is in key order).
  std::vector<std::uint32_t> under;  // the objects under dir, in key order
  for (std::size_t i = 0; i < ds.objects.size(); ++i) {
    if (ds.objects[i].key.starts_with(dir)) under.push_back(static_cast<std::uint32_t>(i));
  }
  auto name_of = [&](std::uint32_t o) {
    return std::string_view(ds.objects[o].key).substr(dir.size());
  };
  const std::uint64_t want = generated_objects(c);
  auto incomplete = [&](std::string_view there, std::string_view missing, std::uint64_t first) {
    return fail(
        Error(Errc::kCorrupt,
              fmt::format("incomplete dataset: its manifest {} lists {} {}, {} there; {} missing, "
                          "{} first (deleted since it was generated?)",
                          manifest, want, want == 1 ? kind : kinds, there, missing,
                          generated_object_name(c, first)))
            .with_object(where)
            .with_hint(hint));
  };
  if (want > 2 * under.size() + 1024) {
    // Far more than are there: a manifest may claim any number (10^15 would take days to
    // enumerate), so they are not. The first missing one is among the first under.size() + 1.
    std::uint64_t first = 0;
    while (std::ranges::binary_search(under, std::string_view(generated_object_name(c, first)), {},
                                      name_of)) {
      ++first;
    }
    return incomplete(fmt::format("{} found", under.size()),
                      fmt::format("at least {}", want - under.size()), first);
  }
  // One merge walk: gen's names are zero-padded numbers, already in order (sorted here if not),
  // so no map (a hash map of 100,000 file names was a tenth of opening such a dataset).
  struct Expected {
    std::string name;
    std::uint64_t index;  // gen's object number
  };
  std::vector<Expected> expected;
  expected.reserve(static_cast<std::size_t>(want));
  for (std::uint64_t i = 0; i < want; ++i) expected.push_back({generated_object_name(c, i), i});
  auto by_name = [](const Expected& a, const Expected& b) { return a.name < b.name; };
  if (!std::is_sorted(expected.begin(), expected.end(), by_name)) {
    std::sort(expected.begin(), expected.end(), by_name);
  }
  std::vector<std::uint32_t> object_of(expected.size());  // gen's object i -> ds.objects
  std::uint64_t missing = 0;
  std::uint64_t first_missing = want;
  std::size_t j = 0;
  for (const Expected& e : expected) {
    while (j < under.size() && name_of(under[j]) < e.name) ++j;
    if (j < under.size() && name_of(under[j]) == e.name) {
      object_of[static_cast<std::size_t>(e.index)] = under[j++];
    } else {
      ++missing;
      first_missing = std::min(first_missing, e.index);
    }
  }
  if (missing > 0) {
    return incomplete(fmt::format("{} {}", want - missing, plural(want - missing, "is", "are")),
                      fmt::format("{}", missing), first_missing);
  }

  // Every shard (TFRecord file, archive) holds what gen put in it; an object of a format whose
  // opener reads nothing (files) is one sample by construction.
  bool exact = under.size() == ds.objects.size() && under.size() == want;
  if (spec.reads_objects) {
    std::vector<std::uint64_t> samples(ds.objects.size()), members(ds.objects.size());
    for (const Sample& s : ds.samples) {
      ++samples[s.object];
      members[s.object] += s.member_count;
    }
    const std::uint64_t per_sample = members_per_sample(c);
    for (std::uint64_t i = 0; i < want; ++i) {
      const std::uint32_t o = object_of[static_cast<std::size_t>(i)];
      const std::uint64_t want_samples = generated_samples_in(c, i),
                          want_members = want_samples * per_sample;
      if (samples[o] == want_samples && members[o] == want_members) continue;
      exact = false;
      if (o < skipped_objects.size() && skipped_objects[o]) continue;  // reported as skipped
      if (samples[o] >= want_samples && members[o] >= want_members)
        continue;  // more: not ours to judge
      Error e =
          Error(Errc::kCorrupt,
                fmt::format("holds {} {} ({} members), its dataset's manifest {} says {} ({}): it "
                            "was cut short or replaced since it was generated",
                            samples[o], plural(samples[o], "sample", "samples"), members[o],
                            manifest, want_samples, want_members))
              .with_object(shown(ds.objects[o].key))
              .with_hint(hint);
      if (!skip_bad_objects) return fail(std::move(e));
      ds.notes.push_back(e.what());
    }
  }
  if (root_manifest && exact) {
    std::uint64_t bytes = 0, members = 0;
    for (const storage::ObjectInfo& o : ds.objects) bytes += o.size;
    for (const Sample& s : ds.samples) members += s.member_count;
    if (bytes == m.summary.bytes_stored && members == m.summary.members &&
        ds.samples.size() == c.samples) {
      ds.manifest_digest = m.summary.digest;
    }
  }
  return {};
}

}  // namespace feedline::loader
