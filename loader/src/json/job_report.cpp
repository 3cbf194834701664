// A job's report from its ranks' documents (job_report.hpp): nlohmann json, as every document
// of this folder.
#include "feedline/loader/job_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "feedline/loader/report_json.hpp"
#include "json_support.hpp"

namespace feedline::loader {

std::string held_back_by(std::string_view stage) {
  if (stage == "storage") return "its own storage link (its reads)";
  if (stage == "decode") return "decode CPU";
  if (stage == "collate") return "collate CPU (copies into batches)";
  if (stage == "device") return "its host-to-device copies";
  if (stage == "consumer") return "its accelerator's compute, not its input";
  return "nothing it measured (it delivered no batch)";
}

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

json merge_rows(const json& each, const char* table, std::initializer_list<const char*> sums,
                std::initializer_list<const char*> means, const char* weight) {
  json rows = each.front()[table];
  for (std::size_t k = 0; k < rows.size(); ++k) {
    double total_weight = 0;
    for (const char* f : sums) rows[k][f] = 0;
    std::vector<double> mean(means.size(), 0.0);
    for (const auto& doc : each) {
      const auto& row = doc[table].at(k);
      for (const char* f : sums) {
        if (row[f].is_number_integer()) {
          rows[k][f] = rows[k][f].get<std::uint64_t>() + row[f].get<std::uint64_t>();
        } else {
          rows[k][f] = rows[k][f].get<double>() + row[f].get<double>();
        }
      }
      const double w = weight ? row[weight].get<double>() : 1.0;
      total_weight += w;
      std::size_t i = 0;
      for (const char* f : means) mean[i++] += w * row[f].get<double>();
    }
    std::size_t i = 0;
    for (const char* f : means) rows[k][f] = total_weight > 0 ? mean[i++] / total_weight : 0.0;
  }
  return rows;
}

void sum_io_counts(const json& each, json& io) {
  for (const char* f : {"reads", "bytes", "ops", "errors", "retries", "short_reads",
                        "bounced_bytes", "storage_threads", "depth_cap"}) {
    std::uint64_t sum = 0;
    for (const auto& doc : each) {
      if (doc.contains("io")) sum += doc["io"].value(f, std::uint64_t{0});
    }
    io[f] = sum;
  }
}

// The stage and queue tables of several documents as one each, into `into` (merge_rows: the
// stages' fractions weighted by their threads).
void merge_tables(const json& each, json& into) {
  into["stages"] =
      merge_rows(each, "stages", {"threads", "cpu_seconds", "items", "items_inline", "bytes"},
                 {"busy_fraction", "starved_fraction", "blocked_fraction"}, "threads");
  into["queues"] = merge_rows(
      each, "queues", {"capacity", "items"},
      {"mean_occupancy", "producer_blocked_fraction", "consumer_starved_fraction"}, nullptr);
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
      merge_tables(docs, j);
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
  j["mlperf"] = json::parse(mlperf_json(m));
  j["ranks"] = std::move(ranks);
  return j;
}

}  // namespace

Result<std::string> job_report_json(const std::vector<std::string>& ranks, const JobSetup& setup,
                                    int indent) {
  std::vector<json> docs;
  docs.reserve(ranks.size());
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    json doc = json::parse(ranks[i], nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object()) {
      return fail(Errc::kInvalidArgument,
                  fmt::format("the job's report: rank {}'s document is not a JSON object", i));
    }
    docs.push_back(std::move(doc));
  }
  return detail::dump_utf8(job_document(std::move(docs), setup), indent);
}

std::string merged_tables_json(const std::vector<std::string>& docs) {
  json each = json::array();
  for (const std::string& d : docs) each.push_back(json::parse(d));
  json j = json::object();
  if (each.empty()) return j.dump();
  merge_tables(each, j);
  j["io"] = json::object();
  sum_io_counts(each, j["io"]);
  return detail::dump_utf8(j);
}

}  // namespace feedline::loader
