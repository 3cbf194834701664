// An MPI job's report from its ranks' documents (job_report.hpp).
#include "job_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "feedline/core/units.hpp"
#include "host_run.hpp"
#include "output.hpp"
#include "run_report.hpp"

namespace feedline::tools {
namespace {

using nlohmann::json;

double number(const json& doc, const char* key, double otherwise = 0) {
  const auto it = doc.find(key);
  return it != doc.end() && it->is_number() ? it->get<double>() : otherwise;
}

std::uint64_t count(const json& doc, const char* key) {
  const auto it = doc.find(key);
  return it != doc.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
}

std::string text(const json& doc, const char* key, std::string otherwise = {}) {
  const auto it = doc.find(key);
  return it != doc.end() && it->is_string() ? it->get<std::string>() : otherwise;
}

std::string stage_of(const json& doc) {
  const auto it = doc.find("bottleneck");
  return it != doc.end() && it->is_object() ? text(*it, "stage", "none") : "none";
}

// A rank's rate over its own time: the epoch barriers' waits (time it spent waiting for the
// others) left out, so that the rank holding the job back shows, not every rank at its pace.
double own_rate(const json& rank) {
  const double wall = number(rank, "wall_seconds") - number(rank, "sync_seconds");
  return wall > 0 ? static_cast<double>(count(rank, "samples")) / wall : 0;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

json agreement_json(const Agreement& a) {
  json items = json::array();
  for (const auto& [name, value] : a) items.push_back(json::array({name, value}));
  return items;
}

std::optional<std::string> first_disagreement(const std::vector<json>& ranks,
                                              const std::function<std::string(unsigned)>& who) {
  if (ranks.empty() || !ranks.front().is_array()) return std::nullopt;
  // rank r's value of `name`, or nullopt where it has none (a rank of another build).
  auto value_of = [&](std::size_t r, const std::string& name) -> std::optional<std::string> {
    if (!ranks[r].is_array()) return std::nullopt;
    for (const json& item : ranks[r]) {
      if (item.is_array() && item.size() == 2 && item[0] == name && item[1].is_string())
        return item[1].get<std::string>();
    }
    return std::nullopt;
  };
  for (const json& item : ranks.front()) {
    if (!item.is_array() || item.size() != 2 || !item[0].is_string() || !item[1].is_string())
      continue;
    const std::string name = item[0].get<std::string>(), mine = item[1].get<std::string>();
    std::vector<std::string> others;
    for (std::size_t r = 1; r < ranks.size(); ++r) {
      const auto v = value_of(r, name);
      if (v && *v == mine) continue;
      others.push_back(fmt::format("{} has {}", who(static_cast<unsigned>(r)), v ? *v : "none"));
    }
    if (others.empty()) continue;
    constexpr std::size_t kNamed = 4;  // the ranks named; the rest counted
    std::string list;
    for (std::size_t i = 0; i < std::min(others.size(), kNamed); ++i) list += ", " + others[i];
    if (others.size() > kNamed)
      list += fmt::format(", and {} more rank(s)", others.size() - kNamed);
    const bool dataset = name.starts_with("the ");
    return fmt::format(
        "the ranks of this job differ in {}: {} has {}{}; {}", name, who(0), mine, list,
        dataset ? "every rank must read the same dataset (the same samples, listed alike), or "
                  "the shards overlap and leave samples out"
                : fmt::format("give every rank the same {} (a rank that differs would wait at "
                              "barriers the others never reach, or deliver some samples twice "
                              "and others never)",
                              name));
  }
  return std::nullopt;
}

std::string held_back_by(const std::string& stage) {
  if (stage == "storage") return "its own storage link (its reads)";
  if (stage == "decode") return "decode CPU";
  if (stage == "collate") return "collate CPU (copies into batches)";
  if (stage == "device") return "its host-to-device copies";
  if (stage == "consumer") return "its accelerator's compute, not its input";
  return "nothing it measured (it delivered no batch)";
}

json job_document(std::vector<json> ranks, const JobSetup& setup) {
  // The documents of ranks that ran (a failed open leaves a short one with "error" only).
  std::vector<const json*> ran;
  for (const json& r : ranks) {
    if (r.contains("stages") && r["stages"].is_array()) ran.push_back(&r);
  }
  json j = ran.empty() ? json::object() : *ran.front();
  for (const char* k : {"per_accelerator", "rank", "host", "split", "stragglers", "runs"}) {
    j.erase(k);
  }
  std::uint64_t samples = 0, bytes = 0, batches = 0, skipped = 0, digest = 0, peak_rss = 0;
  bool digest_computed = true;
  double wall = 0, sync = 0, wait = 0;
  unsigned accelerators = 0, per_rank = 0;
  for (const json* r : ran) {
    samples += count(*r, "samples");
    bytes += count(*r, "bytes");
    batches += count(*r, "batches");
    wall = std::max(wall, number(*r, "wall_seconds"));
    sync = std::max(sync, number(*r, "sync_seconds"));
    wait += number(r->value("consumer_wait", json::object()), "fraction");
    const json& d = r->value("delivered", json::object());
    if (d.contains("digest") && d["digest"].is_number_unsigned()) {
      digest += d["digest"].get<std::uint64_t>();  // mod 2^64
    } else {
      digest_computed = false;
    }
    skipped += count(r->value("skipped", json::object()), "samples");
    peak_rss = std::max(peak_rss, count(r->value("memory", json::object()), "peak_rss_bytes"));
    const unsigned n = r->value("accelerators", 1u);
    accelerators += n;
    per_rank = std::max(per_rank, n);
  }
  j["samples"] = samples;
  j["bytes"] = bytes;
  j["batches"] = batches;
  j["wall_seconds"] = wall;
  j["samples_per_second"] = wall > 0 ? static_cast<double>(samples) / wall : 0.0;
  j["bytes_per_second"] = wall > 0 ? static_cast<double>(bytes) / wall : 0.0;
  j["sync_seconds"] = sync;
  j["accelerators"] = accelerators;
  j["accelerators_per_rank"] = per_rank;
  j["hosts"] = setup.hosts;
  if (!ran.empty()) {
    j["consumer_wait"]["fraction"] = wait / static_cast<double>(ran.size());
    json docs = json::array();
    for (const json* r : ran) docs.push_back(*r);
    if (std::all_of(ran.begin(), ran.end(), [&](const json* r) {
          return (*r)["stages"].size() == (*ran.front())["stages"].size() &&
                 r->value("queues", json::array()).size() == (*ran.front())["queues"].size();
        })) {
      j["stages"] =
          merge_rows(docs, "stages", {"threads", "cpu_seconds", "items", "items_inline", "bytes"},
                     {"busy_fraction", "starved_fraction", "blocked_fraction"}, "threads");
      j["queues"] = merge_rows(
          docs, "queues", {"capacity", "items"},
          {"mean_occupancy", "producer_blocked_fraction", "consumer_starved_fraction"}, nullptr);
    }
    sum_io_counts(docs, j["io"]);
    j["memory"]["peak_rss_bytes"] = peak_rss;  // the largest rank's
  }
  // AU over every accelerator of every rank.
  std::optional<double> au_min, au_max;
  double au_sum = 0;
  unsigned au_count = 0;
  json au_min_at = nullptr;
  for (const json* r : ran) {
    const json& each = r->value("per_accelerator", json::array({*r}));
    for (std::size_t i = 0; i < each.size(); ++i) {
      if (!each[i].contains("au") || !each[i]["au"].is_number()) continue;
      const double au = each[i]["au"].get<double>();
      if (!au_min || au < *au_min) {
        au_min = au;
        au_min_at = {{"rank", r->value("rank", 0u)}, {"accelerator", i}};
      }
      au_max = au_max ? std::max(*au_max, au) : au;
      au_sum += au;
      ++au_count;
    }
  }
  const std::optional<double> au_mean =
      au_count ? std::optional<double>(au_sum / au_count) : std::nullopt;
  j["au"] = au_mean ? json(*au_mean) : json(nullptr);
  j["au_mean"] = j["au"];
  j["au_min"] = au_min ? json(*au_min) : json(nullptr);
  j["au_max"] = au_max ? json(*au_max) : json(nullptr);
  j["au_min_at"] = au_min_at;
  if (setup.au_target > 0) {
    j["au_target"] = setup.au_target;
    j["au_pass"] = au_min ? json(*au_min >= setup.au_target) : json(nullptr);
  }
  // The slowest rank against the median, over each one's own time.
  std::vector<double> rates;
  const json* slowest = nullptr;
  for (const json* r : ran) {
    rates.push_back(own_rate(*r));
    if (!slowest || own_rate(*r) < own_rate(*slowest)) slowest = r;
  }
  const double median = median_of(rates);
  if (slowest) {
    const double rate = own_rate(*slowest);
    const double ratio = median > 0 ? rate / median : 1;
    const std::string stage = stage_of(*slowest);
    const json& b = (*slowest)["bottleneck"];
    j["stragglers"] = {{"rank", slowest->value("rank", 0u)},
                       {"host", text(*slowest, "host")},
                       {"samples_per_second", rate},
                       {"median_samples_per_second", median},
                       {"ratio", ratio},
                       {"straggler", ran.size() > 1 && ratio < kStragglerRatio},
                       {"bottleneck", stage},
                       {"cause", held_back_by(stage)},
                       {"evidence", text(b, "evidence")}};
  } else {
    j["stragglers"] = nullptr;
  }
  // The job's verdict: with a straggler, what holds it back holds the job back (the others wait
  // for it at every epoch); else the stage most ranks name (a tie: the slowest rank's).
  {
    std::map<std::string, unsigned> votes;
    for (const json* r : ran) {
      if (stage_of(*r) != "none") ++votes[stage_of(*r)];
    }
    json verdict = {{"stage", "none"},
                    {"evidence", "no rank delivered a batch: nothing to judge"},
                    {"suggestion", ""},
                    {"next", json::array()}};
    if (slowest && !votes.empty()) {
      std::string stage = stage_of(*slowest);
      unsigned most = votes.count(stage) ? votes[stage] : 0;
      const bool straggler = j["stragglers"]["straggler"].get<bool>();
      if (!straggler) {
        for (const auto& [s, k] : votes) {
          if (k > most) {
            stage = s;
            most = k;
          }
        }
      }
      const json& b = (*slowest)["bottleneck"];
      verdict["stage"] = stage;
      verdict["evidence"] = fmt::format(
          "{} of {} rank(s) name {}{}; the slowest, rank {} (host {}), delivered {:.0f} "
          "samples/s over its own time against the median {:.0f}: {}",
          most, ran.size(), stage,
          straggler ? fmt::format(", and the others wait for rank {} at every epoch",
                                  slowest->value("rank", 0u))
                    : "",
          slowest->value("rank", 0u), text(*slowest, "host"), own_rate(*slowest), median,
          text(b, "evidence"));
      verdict["suggestion"] = text(b, "suggestion");
      verdict["next"] = b.value("next", json::array());
    }
    j["bottleneck"] = verdict;
  }
  j["delivered"] = {{"samples", samples},
                    {"digest", digest_computed && !ran.empty() ? json(digest) : json(nullptr)},
                    {"verified", nullptr}};
  j["skipped"]["samples"] = skipped;
  // The first failure, naming its rank; a rank stopped because of another's is not one.
  json error = nullptr;
  bool interrupted = false;
  for (const json& r : ranks) {
    if (r.contains("error") && r["error"].is_string() && error.is_null()) {
      error = fmt::format("rank {} (host {}): {}", r.value("rank", 0u), text(r, "host"),
                          r["error"].get<std::string>());
    }
    interrupted = interrupted || r.value("interrupted", false);
  }
  j["error"] = error;
  j["interrupted"] = interrupted && error.is_null();
  MlperfFigures m;
  m.accelerators = accelerators;
  m.hosts = setup.hosts;
  m.samples_per_second = j["samples_per_second"].get<double>();
  m.bytes_per_second = j["bytes_per_second"].get<double>();
  if (setup.emulated) {
    m.au_mean = au_mean;
    m.au_min = au_min;
  }
  m.au_target = setup.au_target;
  j["mlperf"] = mlperf_document(m);
  j["ranks"] = std::move(ranks);
  return j;
}

std::string job_text(const json& j) {
  std::string out;
  auto line = [&out](std::string_view l) { out::add_line(out, l); };
  const json& ranks = j["ranks"];
  line(
      fmt::format("feedline run: {} ({}, {} samples) on {} rank(s) x {} accelerator(s), {} host(s)",
                  text(j, "url", "?"), text(j, "format", "?"),
                  count(j.value("dataset", json::object()), "samples"), ranks.size(),
                  j.value("accelerators_per_rank", 1u), j.value("hosts", 1u)));
  line(
      "   rank  host              samples   samples/s  own samples/s     AU min  barrier  "
      "bottleneck");
  for (const json& r : ranks) {
    if (!r.contains("stages")) {
      // Failed before its run, or stopped before its first read by another rank's failure.
      const bool failed = r.contains("error") && r["error"].is_string();
      line(fmt::format("  {:>5}  {:<16}  {}: {}", r.value("rank", 0u), text(r, "host"),
                       failed ? "failed" : "stopped",
                       failed ? text(r, "error") : text(r, "stopped_by", "before its run")));
      continue;
    }
    std::string au = "-";
    if (r.contains("au_min") && r["au_min"].is_number()) {
      au = fmt::format("{:.1f}%", r["au_min"].get<double>() * 100);
    } else if (r.contains("au") && r["au"].is_number()) {
      au = fmt::format("{:.1f}%", r["au"].get<double>() * 100);
    }
    line(fmt::format("  {:>5}  {:<16} {:>8} {:>11.0f} {:>14.0f} {:>10} {:>7.2f}s  {}",
                     r.value("rank", 0u), text(r, "host"), count(r, "samples"),
                     number(r, "samples_per_second"), own_rate(r), au, number(r, "sync_seconds"),
                     stage_of(r)));
  }
  line(fmt::format(
      "  job: delivered {} samples in {} batches, {} in {:.2f} s: {:.0f} samples/s, {}{}",
      count(j, "samples"), count(j, "batches"), format_bytes(number(j, "bytes")),
      number(j, "wall_seconds"), number(j, "samples_per_second"),
      format_rate(number(j, "bytes_per_second")),
      j.value("interrupted", false) ? "  [interrupted: partial result]" : ""));
  if (j["au_min"].is_number()) {
    line(
        fmt::format("  accelerator utilisation (AU) over {} accelerator(s): min {:.1f}% (rank {}, "
                    "accelerator {}), mean {:.1f}%, max {:.1f}%",
                    j.value("accelerators", 0u), j["au_min"].get<double>() * 100,
                    j["au_min_at"].value("rank", 0u), j["au_min_at"].value("accelerator", 0u),
                    j["au_mean"].get<double>() * 100, j["au_max"].get<double>() * 100));
  }
  if (const json& s = j["stragglers"]; s.is_object() && ranks.size() > 1) {
    line(fmt::format(
        "  slowest rank: {} (host {}) at {:.2f}x the median {:.0f} samples/s over its own time: "
        "{}",
        s.value("rank", 0u), text(s, "host"), number(s, "ratio"),
        number(s, "median_samples_per_second"),
        s.value("straggler", false)
            ? fmt::format("a straggler, held back by {}", text(s, "cause"))
            : fmt::format("within {:.0f}% of the median, no straggler (limited by {})",
                          (1 - kStragglerRatio) * 100, text(s, "cause"))));
  }
  const json& m = j["mlperf"];
  if (m.is_object()) {
    MlperfFigures f;
    f.accelerators = m.value("num_accelerators", 0u);
    f.hosts = m.value("num_hosts", 1u);
    f.samples_per_second = number(m, "train_throughput_mean_samples_per_second");
    f.bytes_per_second = number(m, "train_io_mean_MB_per_second") * 1024.0 * 1024.0;
    if (m["train_au_mean_percentage"].is_number()) {
      f.au_mean = number(m, "train_au_mean_percentage") / 100;
      f.au_min = j["au_min"].is_number() ? j["au_min"].get<double>() : *f.au_mean;
    }
    f.au_target = number(j, "au_target");
    if (f.au_mean) line(mlperf_text(f));
  }
  const json& b = j["bottleneck"];
  line(fmt::format("  bottleneck (job): {}", text(b, "stage", "none")));
  line(fmt::format("    evidence: {}", text(b, "evidence")));
  if (!text(b, "suggestion").empty()) line(fmt::format("    next: {}", text(b, "suggestion")));
  if (j["delivered"]["digest"].is_number()) {
    line(fmt::format("  delivered digest: {} ({} samples, summed over the ranks)",
                     j["delivered"]["digest"].get<std::uint64_t>(), count(j, "samples")));
  }
  if (j["error"].is_string()) line(fmt::format("  error: {}", j["error"].get<std::string>()));
  return out;
}

}  // namespace feedline::tools
