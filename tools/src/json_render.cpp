#include "json_render.hpp"

namespace feedline::tools {

nlohmann::json histogram_json(const Histogram& h) {
  return {{"min", h.min()},
          {"mean", h.mean()},
          {"p50", h.percentile(0.50)},
          {"p90", h.percentile(0.90)},
          {"p99", h.percentile(0.99)},
          {"p999", h.percentile(0.999)},
          {"p9999", h.percentile(0.9999)},
          {"max", h.max()},
          {"count", h.count()}};
}

nlohmann::json io_stats_json(const storage::QueueStats& s) {
  nlohmann::json histograms = nlohmann::json::object();
  for (const auto& [name, h] : s.histograms) histograms[name] = histogram_json(h);
  return {{"ops", s.ops},
          {"bytes", s.bytes},
          {"errors", s.errors},
          {"cancelled", s.cancelled},
          {"short_reads", s.short_reads},
          {"retries", s.retries},
          {"bounced_bytes", s.bounced_bytes},
          {"mean_in_flight", s.mean_depth()},
          {"at_cap_fraction",
           s.span_ns ? static_cast<double>(s.at_cap_ns) / static_cast<double>(s.span_ns) : 0.0},
          {"latency_ns", histogram_json(s.lat)},
          {"slat_ns", histogram_json(s.slat)},
          {"clat_ns", histogram_json(s.clat)},
          {"counters", s.counters},
          {"histograms", histograms}};
}

}  // namespace feedline::tools
