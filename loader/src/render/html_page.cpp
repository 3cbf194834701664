#include "feedline/loader/html_page.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "../json/json_support.hpp"
#include "feedline/core/units.hpp"
#include "feedline/loader/report.hpp"
#include "svg_plot.hpp"

namespace feedline::loader {
namespace {

using nlohmann::json;
using svg::escape;

// The stages' and queues' colours, the same in every plot.
constexpr const char* kBusy = "#2f7ed8";
constexpr const char* kStarved = "#f4b400";
constexpr const char* kBlocked = "#d9534f";
constexpr const char* kQueueColors[] = {"#2f7ed8", "#8e44ad", "#27ae60", "#e67e22", "#7f8c8d"};

svg::LineChart chart(std::string id, std::string title, std::string x, std::string y) {
  svg::LineChart c;
  c.id = std::move(id);
  c.title = std::move(title);
  c.x_label = std::move(x);
  c.y_label = std::move(y);
  return c;
}
svg::Series series(std::string name, std::string color) {
  svg::Series s;
  s.name = std::move(name);
  s.color = std::move(color);
  return s;
}

// j[key] where j is an object that has it, else null (a const json's [] must not miss).
const json& at(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it != j.end() ? *it : kNull;
}

double num(const json& j, const char* key, double fallback = 0) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}
std::string str(const json& j, const char* key) {
  if (!j.is_object()) return {};
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A knob's value in bottleneck.next[] as the text report shows it ("64", "1 GiB").
std::string knob_value(const json& next, const char* key) {
  if (!next.is_object()) return {};
  auto it = next.find(key);
  if (it == next.end() || !it->is_number_unsigned()) return {};
  const auto knob = knob_from_name(str(next, "knob"));
  return knob ? knob_value_text(*knob, it->get<std::uint64_t>())
              : fmt::format("{}", it->get<std::uint64_t>());
}

// A figure shown with its JSON key and exact value, for a reader and for a test.
std::string tile(const std::string& key, const std::string& label, const std::string& shown,
                 const json& value) {
  return fmt::format(
      "<div class=\"tile\"><div class=\"value\" data-key=\"{}\" data-value=\"{}\">{}</div>"
      "<div class=\"name\">{}</div></div>",
      escape(key), escape(value.dump()), escape(shown), escape(label));
}

std::string percent(double f) { return fmt::format("{:.1f}%", f * 100); }

const char* kStyle = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2330;background:#f5f6f8}
main{max-width:1360px;margin:0 auto;padding:20px 28px 40px}
h1{font-size:21px;margin:0 0 2px}h2{font-size:17px;margin:28px 0 10px;border-bottom:1px solid #d8dce3;padding-bottom:4px}
.sub{color:#5b6474;margin-bottom:14px;word-break:break-all}
.verdict{background:#fff;border-left:6px solid #d9534f;padding:12px 16px;border-radius:4px;box-shadow:0 1px 2px #0001}
.verdict.ok{border-left-color:#27ae60}.verdict .stage{font-size:18px;font-weight:600}
.verdict p{margin:6px 0}.verdict code{background:#eef1f5;padding:1px 5px;border-radius:3px}
.tiles{display:flex;flex-wrap:wrap;gap:10px;margin:14px 0}
.tile{background:#fff;border-radius:4px;padding:8px 14px;min-width:130px;box-shadow:0 1px 2px #0001}
.tile .value{font-size:19px;font-weight:600}.tile .name{color:#5b6474;font-size:12px}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(640px,1fr));gap:14px}
figure.plot{background:#fff;margin:0;padding:8px 10px;border-radius:4px;box-shadow:0 1px 2px #0001}
figure.plot figcaption{font-weight:600;margin-bottom:2px}
svg{max-width:100%;height:auto;font-size:11px;fill:#1d2330}
svg .grid{stroke:#e3e6eb}svg .axis{stroke:#8a93a3}svg .label{fill:#5b6474;font-size:12px}
svg .inbar{fill:#fff;font-size:11px}svg .empty{fill:#8a93a3;font-size:14px}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px #0001;margin:6px 0 12px}
th,td{padding:4px 10px;border-bottom:1px solid #eceef2;text-align:right}th{background:#f0f2f5}
td:first-child,th:first-child{text-align:left}.notes{color:#5b6474}
.error{background:#fdecea;border-left:6px solid #d9534f;padding:10px 14px;margin:10px 0;border-radius:4px}
)";

// Checks, once the page is laid out, that every plot drew something (a path or bar of non-zero
// size), and says so on each figure (data-drawn) and on the page (data-plots-drawn): what a
// test reads back from the rendered DOM. The page needs none of it to show.
const char* kCheckScript = R"(
(function(){var figs=document.querySelectorAll('figure.plot'),drawn=0;
figs.forEach(function(f){var ok=false;f.querySelectorAll('.series,.segment').forEach(function(e){
var b=e.getBBox();if(b.width>0||b.height>0)ok=true;});f.dataset.drawn=ok?'true':'false';if(ok)drawn++;});
document.documentElement.dataset.plots=String(figs.length);document.documentElement.dataset.plotsDrawn=String(drawn);})();
)";

std::string verdict_section(const json& run, const json* diag) {
  const json& b =
      diag && diag->contains("bottleneck") ? at(*diag, "bottleneck") : at(run, "bottleneck");
  const std::string stage = str(b, "stage");
  const bool input_bound = str(run, "input_bound") != "no" && !str(run, "input_bound").empty();
  std::string out = fmt::format(
      "<section class=\"verdict{}\" id=\"verdict\"><div class=\"stage\">Bottleneck: <span "
      "data-key=\"bottleneck.stage\" data-value=\"{}\">{}</span></div>",
      input_bound ? "" : " ok", escape(json(stage).dump()), escape(stage.empty() ? "none" : stage));
  out += fmt::format(
      "<p><b>Input-bound:</b> <span data-key=\"input_bound\" data-value=\"{}\">{}</span> (the "
      "consumer waited {} of the time for data)</p>",
      escape(json(str(run, "input_bound")).dump()), escape(str(run, "input_bound")),
      percent(num(run.value("consumer_wait", json::object()), "fraction")));
  out += fmt::format("<p><b>Evidence:</b> {}</p>", escape(str(b, "evidence")));
  out += fmt::format("<p><b>Next:</b> {}</p>", escape(str(b, "suggestion")));
  if (b.contains("next") && b["next"].is_array() && !b["next"].empty()) {
    std::string knobs;
    for (const auto& k : b["next"]) {
      knobs += fmt::format("{}<code>{} {}</code> (now {})", knobs.empty() ? "" : ", ",
                           escape(str(k, "flag")), escape(knob_value(k, "to")),
                           escape(knob_value(k, "from")));
    }
    out += fmt::format("<p><b>Try:</b> {}</p>", knobs);
  }
  if (diag && diag->contains("conclusion") && (*diag)["conclusion"].is_string()) {
    out += fmt::format("<p><b>Conclusion:</b> {}</p>",
                       escape((*diag)["conclusion"].get<std::string>()));
  }
  out += "</section>";
  return out;
}

std::string tiles_section(const json& run) {
  const json cw = run.value("consumer_wait", json::object());
  std::string out = "<div class=\"tiles\">";
  out += tile("samples_per_second", "samples/s",
              fmt::format("{:.0f}", num(run, "samples_per_second")), at(run, "samples_per_second"));
  out += tile("bytes_per_second", "delivered", format_rate(num(run, "bytes_per_second")),
              at(run, "bytes_per_second"));
  out += tile("consumer_wait.fraction", "consumer waiting (steady state)",
              percent(num(cw, "fraction")), cw.value("fraction", json(0)));
  out += tile("consumer_wait.p99_ms", "wait per batch, p99",
              fmt::format("{:.2f} ms", num(cw, "p99_ms")), cw.value("p99_ms", json(0)));
  if (num(run, "au_steps") > 0 && num(run, "compute_seconds") > 0) {
    out += tile("au", "accelerator utilisation", percent(num(run, "au")), at(run, "au"));
  }
  out += tile("samples", "samples delivered", fmt::format("{:.0f}", num(run, "samples")),
              run.value("samples", json(0)));
  out += tile("wall_seconds", "wall time", fmt::format("{:.2f} s", num(run, "wall_seconds")),
              run.value("wall_seconds", json(0)));
  if (run.contains("data_paths") && run["data_paths"].is_array() && !run["data_paths"].empty()) {
    const json& p = run["data_paths"][0];
    out += tile("data_paths.0.path", "data path", str(p, "path"), p.value("path", json("")));
    out += tile("data_paths.0.copy_amplification", "copy amplification",
                fmt::format("{:.3f}", num(p, "copy_amplification")),
                p.value("copy_amplification", json(0)));
  }
  const json mem = run.value("memory", json::object());
  out +=
      tile("memory.peak_bytes", "memory held at peak",
           format_bytes(num(mem, "peak_bytes")) + " of " + format_bytes(num(mem, "budget_bytes")),
           mem.value("peak_bytes", json(0)));
  out += "</div>";
  return out;
}

// Rates between consecutive points (per second of the interval), at the interval's end.
svg::Series rate(const std::vector<TimelinePoint>& pts, double TimelinePoint::*field,
                 const std::string& name, const std::string& color, double scale = 1) {
  svg::Series s = series(name, color);
  for (std::size_t i = 1; i < pts.size(); ++i) {
    const double dt = pts[i].seconds - pts[i - 1].seconds;
    if (dt <= 0) continue;
    s.x.push_back(pts[i].seconds);
    s.y.push_back(std::max(0.0, (pts[i].*field - pts[i - 1].*field) / dt * scale));
  }
  return s;
}

std::string timeline_plots(const std::vector<TimelinePoint>& pts) {
  std::string out;
  {
    svg::LineChart c = chart("throughput", "Throughput over time", "seconds", "samples/s");
    c.series.push_back(rate(pts, &TimelinePoint::samples, "samples/s delivered", "#2f7ed8"));
    out += svg::line_chart(c);
  }
  {
    svg::LineChart c = chart("storage", "Storage reads over time", "seconds", "MB/s");
    c.series.push_back(
        rate(pts, &TimelinePoint::storage_bytes, "read from storage", "#8e44ad", 1e-6));
    c.series.push_back(rate(pts, &TimelinePoint::bytes, "delivered (decoded)", "#27ae60", 1e-6));
    out += svg::line_chart(c);
  }
  {
    // The share of each interval the consumers spent waiting for a batch.
    svg::LineChart c =
        chart("consumer-wait", "Consumer waiting for data", "seconds", "of the time");
    c.y_max = 1;
    c.y_unit = "%";
    svg::Series s = series("waiting", kBlocked);
    for (std::size_t i = 1; i < pts.size(); ++i) {
      const double dt = pts[i].seconds - pts[i - 1].seconds;
      const double n = std::max(1u, std::max(pts[i].consumers, pts[i - 1].consumers));
      if (dt <= 0) continue;
      s.x.push_back(pts[i].seconds);
      s.y.push_back(
          std::clamp((pts[i].wait_seconds - pts[i - 1].wait_seconds) / (dt * n), 0.0, 1.0));
    }
    c.series.push_back(std::move(s));
    out += svg::line_chart(c);
  }
  {
    svg::LineChart c =
        chart("queues", "Queue occupancy (mean over each interval)", "seconds", "of capacity");
    c.y_max = 1;
    c.y_unit = "%";
    // The mean depth over each interval (the integral's difference), where the run measured
    // it; the depth at each point otherwise.
    for (std::size_t q = 0; q < 5; ++q) {
      svg::Series s = series(std::string(queue_name(static_cast<QueueId>(q))), kQueueColors[q]);
      for (std::size_t i = 0; i < pts.size(); ++i) {
        const TimelinePoint& p = pts[i];
        if (p.queue_capacity[q] <= 0) continue;
        double depth = p.queue_depth[q];
        if (i > 0 && p.queue_depth_seconds[q] > pts[i - 1].queue_depth_seconds[q]) {
          const double dt = p.seconds - pts[i - 1].seconds;
          if (dt > 0) depth = (p.queue_depth_seconds[q] - pts[i - 1].queue_depth_seconds[q]) / dt;
        }
        s.x.push_back(p.seconds);
        s.y.push_back(std::min(1.0, depth / p.queue_capacity[q]));
      }
      if (!s.x.empty()) c.series.push_back(std::move(s));
    }
    svg::Series m = series("memory in use (of the budget)", "#444");
    m.dashed = true;
    for (const auto& p : pts) {
      if (p.memory_budget <= 0) continue;
      m.x.push_back(p.seconds);
      m.y.push_back(p.memory_in_use / p.memory_budget);
    }
    c.series.push_back(std::move(m));
    out += svg::line_chart(c);
  }
  return out;
}

std::string stage_bars(const json& run) {
  std::vector<svg::Bar> bars;
  if (!run.contains("stages") || !run["stages"].is_array()) return {};
  for (const auto& s : run["stages"]) {
    bars.push_back({str(s, "name"),
                    {{"busy", kBusy, num(s, "busy_fraction")},
                     {"starved", kStarved, num(s, "starved_fraction")},
                     {"blocked", kBlocked, num(s, "blocked_fraction")}}});
  }
  return svg::stacked_bars("stages", "Stages: busy / starved / blocked (of threads x wall time)",
                           bars);
}

std::string latency_plot(const Histogram* h, const json& run) {
  svg::LineChart c = chart("read-latency", "Storage read latency (CDF)", "milliseconds (log)",
                           "reads at or below");
  c.log_x = true;
  c.y_max = 1;
  c.y_unit = "%";
  svg::Series s = series("reads", "#2f7ed8");
  if (h && h->count() > 0) {
    // The CDF through a fine grid of quantiles, denser in the tail.
    std::vector<double> qs;
    for (double q = 0; q <= 0.9; q += 0.01) qs.push_back(q);
    for (double q = 0.9; q < 0.999; q += 0.001) qs.push_back(q);
    for (double q : {0.999, 0.9995, 0.9999, 1.0}) qs.push_back(q);
    for (double q : qs) {
      const double v =
          q >= 1 ? static_cast<double>(h->max()) : static_cast<double>(h->percentile(q));
      s.x.push_back(std::max(v, 1.0) / 1e6);
      s.y.push_back(q);
    }
  } else {
    // A saved document's percentiles: a coarser CDF through the same points as the table's.
    const json lat = run.value("io", json::object()).value("latency_ns", json::object());
    for (const auto& [key, q] :
         std::initializer_list<std::pair<const char*, double>>{{"min", 0.0},
                                                               {"p50", 0.5},
                                                               {"p90", 0.9},
                                                               {"p99", 0.99},
                                                               {"p999", 0.999},
                                                               {"p9999", 0.9999},
                                                               {"max", 1.0}}) {
      if (!lat.contains(key) || !lat[key].is_number()) continue;
      s.x.push_back(std::max(num(lat, key), 1.0) / 1e6);
      s.y.push_back(q);
    }
  }
  c.series.push_back(std::move(s));
  std::string out = svg::line_chart(c);
  // The percentiles the JSON report gives, beside it.
  const json lat = run.value("io", json::object()).value("latency_ns", json::object());
  std::string rows;
  for (const auto& [key, label] :
       std::initializer_list<std::pair<const char*, const char*>>{{"p50", "p50"},
                                                                  {"p90", "p90"},
                                                                  {"p99", "p99"},
                                                                  {"p999", "p99.9"},
                                                                  {"p9999", "p99.99"},
                                                                  {"max", "max"}}) {
    if (!lat.contains(key)) continue;
    rows += fmt::format(
        "<tr><td>{}</td><td data-key=\"io.latency_ns.{}\" data-value=\"{}\">{:.3f} ms</td></tr>",
        label, key, escape(lat[key].dump()), num(lat, key) / 1e6);
  }
  if (!rows.empty()) {
    out += fmt::format(
        "<table class=\"percentiles\"><tr><th>read latency</th><th>submitted to completed</th>"
        "</tr>{}</table>",
        rows);
  }
  return out;
}

std::string stage_table(const json& run) {
  std::string out =
      "<table id=\"stage-table\"><tr><th>stage</th><th>threads</th><th>busy</th><th>starved</th>"
      "<th>blocked</th><th>CPU s</th><th>items</th></tr>";
  for (const auto& s : run.value("stages", json::array())) {
    const std::string name = str(s, "name");
    out += fmt::format(
        "<tr><td>{0}</td><td>{1}</td><td data-key=\"stages.{0}.busy_fraction\" "
        "data-value=\"{2}\">{3}</td><td>{4}</td><td>{5}</td><td>{6:.3f}</td><td>{7:.0f}</td></tr>",
        escape(name), num(s, "threads"), escape(s.value("busy_fraction", json(0)).dump()),
        percent(num(s, "busy_fraction")), percent(num(s, "starved_fraction")),
        percent(num(s, "blocked_fraction")), num(s, "cpu_seconds"), num(s, "items"));
  }
  out +=
      "</table><table id=\"queue-table\"><tr><th>queue</th><th>capacity</th><th>mean "
      "occupancy</th><th>max</th><th>producer blocked</th><th>consumer starved</th></tr>";
  for (const auto& q : run.value("queues", json::array())) {
    out += fmt::format(
        "<tr><td>{}</td><td>{:.0f}</td><td>{:.1f}</td><td>{:.0f}</td><td>{}</td><td>{}</td></tr>",
        escape(str(q, "name")), num(q, "capacity"), num(q, "mean_occupancy"),
        num(q, "max_occupancy"), percent(num(q, "producer_blocked_fraction")),
        percent(num(q, "consumer_starved_fraction")));
  }
  out += "</table>";
  return out;
}

std::string data_path_section(const json& run) {
  std::string out = "<h2>Data path</h2>";
  const json dp = run.value("data_path", json::object());
  std::size_t i = 0;
  for (const auto& p : run.value("data_paths", json::array())) {
    out += fmt::format(
        "<p><b data-key=\"data_paths.{}.path\" data-value=\"{}\">{}</b>: {} delivered, {} "
        "copied (copy amplification {:.4f}). {}</p>",
        i++, escape(p.value("path", json("")).dump()), escape(str(p, "path")),
        format_bytes(num(p, "bytes")), format_bytes(num(p, "copied_bytes")),
        num(p, "copy_amplification"), escape(str(p, "detail")));
  }
  if (!str(dp, "reason").empty())
    out += fmt::format("<p class=\"notes\">Why: {}</p>", escape(str(dp, "reason")));
  for (const auto& n : dp.value("notes", json::array())) {
    if (n.is_string())
      out += fmt::format("<p class=\"notes\">{}</p>", escape(n.get<std::string>()));
  }
  return out;
}

std::string diagnose_section(const json& d) {
  std::string out = "<h2>Diagnosis: controlled runs</h2>";
  std::string rows;
  double top = 0;
  for (const auto& r : d.value("controlled_runs", json::array()))
    top = std::max(top, num(r, "samples_per_second"));
  std::vector<svg::Bar> bars;
  for (const auto& r : d.value("controlled_runs", json::array())) {
    rows +=
        fmt::format("<tr><td>{}</td><td>{}</td><td>{:.0f}</td><td>{}</td><td>{:.2f}</td></tr>",
                    escape(str(r, "name")), escape(str(r, "what")), num(r, "samples_per_second"),
                    format_rate(num(r, "bytes_per_second")), num(r, "cpu_seconds"));
    bars.push_back({str(r, "name"),
                    {{"samples/s (of the fastest)", kBusy,
                      top > 0 ? num(r, "samples_per_second") / top : 0}}});
  }
  out +=
      "<table id=\"controlled-runs\"><tr><th>run</th><th>what</th><th>samples/s</th><th>"
      "bytes/s</th><th>CPU s</th></tr>" +
      rows + "</table>";
  if (!bars.empty())
    out +=
        svg::stacked_bars("controlled-runs", "Controlled runs (samples/s, of the fastest)", bars);
  out +=
      "<h2>What if</h2><table id=\"what-if\"><tr><th>change</th><th>predicted samples/s</th>"
      "<th>limit</th><th>achieved samples/s</th><th>error</th></tr>";
  svg::Series pred = series("what-ifs (predicted, achieved)", "#2f7ed8");
  pred.markers = true;
  double hi = 0;
  for (const auto& w : d.value("what_if", json::array())) {
    const bool verified = w.contains("achieved_samples_per_second");
    out += fmt::format(
        "<tr><td>{}</td><td data-key=\"what_if.predicted_samples_per_second\" data-value=\"{}\">"
        "{:.0f}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        escape(str(w, "what_if")), escape(w.value("predicted_samples_per_second", json(0)).dump()),
        num(w, "predicted_samples_per_second"), escape(str(w, "limit")),
        verified
            ? fmt::format("{:.0f}", num(w, "achieved_samples_per_second"))
            : escape(str(w, "not_realisable").empty() ? str(w, "verify_error")
                                                      : "not run: " + str(w, "not_realisable")),
        verified ? fmt::format("{:+.1f}%", num(w, "error") * 100) : std::string("-"));
    if (verified) {
      pred.x.push_back(num(w, "predicted_samples_per_second"));
      pred.y.push_back(num(w, "achieved_samples_per_second"));
      hi = std::max({hi, pred.x.back(), pred.y.back()});
    }
  }
  out += "</table>";
  if (!pred.x.empty()) {
    svg::LineChart c =
        chart("predicted-vs-achieved", "Predicted against achieved (verified what-ifs)",
              "predicted samples/s", "achieved samples/s");
    svg::Series diag_line = series("exact prediction", "#8a93a3");
    diag_line.x = {0, hi * 1.05};
    diag_line.y = {0, hi * 1.05};
    diag_line.dashed = true;
    c.series.push_back(std::move(diag_line));
    c.series.push_back(std::move(pred));
    c.y_max = hi * 1.05;
    out += svg::line_chart(c);
  }
  return out;
}

}  // namespace

Result<std::string> html_page(const HtmlPageInputs& in) {
  // The documents' names made UTF-8 (json_support.hpp): a data-value holds one's JSON text.
  const auto parse = [](const std::string& text, const char* what) -> Result<json> {
    if (text.empty()) return json::object();
    json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object()) {
      return fail(Error(Errc::kInvalidArgument,
                        fmt::format("the HTML page's {} is not a JSON object", what)));
    }
    detail::make_utf8(doc);
    return doc;
  };
  FEEDLINE_ASSIGN_OR_RETURN(const json run, parse(in.run_json, "run report"));
  std::optional<json> diagnose;
  if (!in.diagnose_json.empty()) {
    FEEDLINE_ASSIGN_OR_RETURN(diagnose, parse(in.diagnose_json, "diagnose report"));
  }
  const json* diag = diagnose ? &*diagnose : nullptr;
  std::string body;
  const std::string url = diag ? str(*diag, "url") : str(run, "url");
  body += fmt::format("<h1>{}</h1><div class=\"sub\">{}</div>", escape(in.command), escape(url));
  if (run.contains("error") && run["error"].is_string()) {
    body += fmt::format("<div class=\"error\" id=\"run-error\"><b>The run failed:</b> {}</div>",
                        escape(run["error"].get<std::string>()));
  } else if (run.value("interrupted", false)) {
    body +=
        "<div class=\"error\" id=\"run-error\"><b>Interrupted:</b> the report covers the run "
        "up to the stop.</div>";
  }
  body += verdict_section(run, diag);
  body += tiles_section(run);
  if (in.saved) {
    body +=
        "<h2>Over time</h2><p class=\"notes\" id=\"no-timeline\">Not in a saved report: the "
        "samples over time are taken while the run runs.</p>";
  } else {
    body += "<h2>Over time</h2><div class=\"plots\">" + timeline_plots(in.timeline) + "</div>";
  }
  body += "<h2>Stages and queues</h2><div class=\"plots\">" + stage_bars(run) + "</div>";
  body += stage_table(run);
  body +=
      "<h2>Storage reads</h2><div class=\"plots\">" + latency_plot(in.read_latency, run) + "</div>";
  body += data_path_section(run);
  if (diag) body += diagnose_section(*diag);
  body += fmt::format("<p class=\"notes\">The JSON report this page shows: <code>{}</code>.</p>",
                      escape(in.report_how));
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{} — {}</title>"
      "<meta name=\"viewport\" content=\"width=device-width\"><style>{}</style></head><body>"
      "<main>{}</main><script>{}</script></body></html>\n",
      escape(in.command), escape(url), kStyle, body, kCheckScript);
}

}  // namespace feedline::loader
