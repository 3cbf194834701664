// An MPI job's report from its ranks' documents (job_report.hpp).
#include "job_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "feedline/core/units.hpp"
#include "feedline/loader/job_report.hpp"
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
                          (1 - loader::kStragglerRatio) * 100, text(s, "cause"))));
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
