// --what-if parsing (what_if.hpp).
#include "what_if.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "cli_checks.hpp"
#include "cli_error.hpp"
#include "feedline/core/units.hpp"
#include "feedline/loader/accelerators.hpp"
#include "feedline/loader/loader.hpp"

namespace feedline::tools {
namespace {

constexpr const char* kKeys =
    "decode-threads, io-depth, prefetch, memory-budget, storage-threads, batch-size, "
    "compute-time, accelerators, cores, storage-bw, storage-latency, order, shard-shuffle";

[[noreturn]] void bad(std::string_view text, std::string_view what) {
  throw UsageError(fmt::format("--what-if '{}': {}", text, what));
}

unsigned whole(std::string_view text, const std::string& key, const std::string& value,
               std::uint64_t lo, std::uint64_t hi) {
  std::string why;
  auto n = parse_whole_number(value, lo, hi, &why);
  if (!n) bad(text, fmt::format("{}={}: {}", key, value, why));
  return static_cast<unsigned>(*n);
}

std::string trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return std::string(s);
}

}  // namespace

WhatIf parse_what_if(std::string_view text, const RunOptions& base) {
  WhatIf w;
  w.text = std::string(text);
  w.options = base;
  w.accelerators = base.accelerators;
  if (trim(text).empty()) bad(text, fmt::format("empty: give KEY=VALUE (keys: {})", kKeys));
  std::set<std::string> seen;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string item = trim(text.substr(start, comma - start));
    start = comma + 1;
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
      bad(text, fmt::format("'{}' is not KEY=VALUE (keys: {})", item, kKeys));
    }
    const std::string key = trim(std::string_view(item).substr(0, eq));
    const std::string value = trim(std::string_view(item).substr(eq + 1));
    if (!seen.insert(key).second) bad(text, fmt::format("{} is given twice", key));
    w.changes.emplace_back(key, value);
    RunOptions& o = w.options;
    if (key == "decode-threads") {
      o.decode_threads = whole(text, key, value, 1, loader::kMaxDecodeThreads);
    } else if (key == "io-depth") {
      o.io_depth = whole(text, key, value, 1, loader::kMaxIoDepth);
    } else if (key == "prefetch") {
      o.prefetch = whole(text, key, value, 1, loader::kMaxPrefetchBatches);
    } else if (key == "storage-threads") {
      o.storage_threads = whole(text, key, value, 1, loader::kMaxStorageThreads);
    } else if (key == "batch-size") {
      o.batch_size = whole(text, key, value, 1, loader::kMaxBatchSize);
    } else if (key == "order") {
      if (value != "storage")
        bad(text, fmt::format("order={}: the order to try is 'storage'", value));
      o.shuffle = false;
      o.shard_shuffle = 0;
    } else if (key == "shard-shuffle") {
      o.shard_shuffle = whole(text, key, value, 1, 1u << 20);
      o.shuffle = true;
    } else if (key == "accelerators") {
      w.accelerators = whole(text, key, value, 1, loader::kMaxAccelerators);
    } else if (key == "cores") {
      w.cores = whole(text, key, value, 1, 1u << 16);
    } else if (key == "memory-budget") {
      auto size = parse_size(value);
      if (!size || *size == 0) {
        bad(text, fmt::format("{}={}: {}", key, value,
                              size ? "must be positive" : size.error().message()));
      }
      o.memory_budget = value;
    } else if (key == "compute-time") {
      auto c = loader::parse_compute_time(value);
      if (!c) bad(text, fmt::format("{}={}: {}", key, value, c.error().message()));
      o.compute_time = value;
    } else if (key == "storage-bw") {
      std::string_view v = value;
      if (v.ends_with("/s")) v.remove_suffix(2);
      auto bw = parse_size(v);
      if (!bw || *bw == 0) {
        bad(text,
            fmt::format("{}={}: {}", key, value, bw ? "must be positive" : bw.error().message()));
      }
      w.storage_bytes_per_second = static_cast<double>(*bw);
    } else if (key == "storage-latency") {
      std::string_view v = value;
      const bool added = v.starts_with('+');
      if (added) v.remove_prefix(1);
      auto d = parse_duration(v);
      if (!d || d->count() < 0) {
        bad(text,
            fmt::format("{}={}: {}", key, value, d ? "must not be negative" : d.error().message()));
      }
      const double s = std::chrono::duration<double>(*d).count();
      if (added) {
        w.added_latency_seconds = s;
      } else {
        w.latency_seconds = s;
      }
    } else {
      bad(text, fmt::format("unknown key '{}' (keys: {})", key, kKeys));
    }
  }
  return w;
}

std::vector<WhatIf> default_what_ifs(const RunOptions& base, unsigned cores,
                                     double storage_bytes_per_second_seen) {
  std::vector<std::string> texts = {
      fmt::format("decode-threads={}",
                  std::min(base.decode_threads * 2, loader::kMaxDecodeThreads)),
      fmt::format("io-depth={}", std::min(base.io_depth * 2, loader::kMaxIoDepth)),
      fmt::format("prefetch={}", std::min(base.prefetch * 2, loader::kMaxPrefetchBatches)),
  };
  if (auto budget = parse_size(base.memory_budget)) {
    texts.push_back(fmt::format("memory-budget={}MiB", (*budget * 2) >> 20));
  }
  if (storage_bytes_per_second_seen > 0) {
    texts.push_back(fmt::format(
        "storage-bw={}MiB/s", static_cast<std::uint64_t>(2 * storage_bytes_per_second_seen) >> 20));
  }
  texts.push_back("storage-latency=+5ms");
  if (base.shuffle && base.shard_shuffle == 0) texts.push_back("order=storage");
  texts.push_back(fmt::format("cores={}", 2 * cores));
  texts.push_back("accelerators=2");
  std::vector<WhatIf> out;
  for (const std::string& t : texts) out.push_back(parse_what_if(t, base));
  return out;
}

}  // namespace feedline::tools
