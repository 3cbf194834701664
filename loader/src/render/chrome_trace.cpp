#include "feedline/loader/chrome_trace.hpp"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "../json/json_support.hpp"
#include "feedline/core/text.hpp"

namespace feedline::loader {
namespace {

// A JSON string literal (quoted, escaped; bytes that are not UTF-8 as \xHH, json_render.hpp).
std::string json_string(std::string_view s) { return nlohmann::json(utf8_text(s)).dump(); }

// What a span's or instant's value is, by its category.
const char* value_name(std::string_view category) {
  if (category == "io" || category == "decode") return "bytes";
  if (category == "collate" || category == "consumer") return "samples";
  return "value";
}

using Sink = std::function<void(std::string_view)>;

// Events out in pieces of about a MiB; names escaped once each.
class Writer {
 public:
  explicit Writer(const Sink& sink) : sink_(sink) {}
  void raw(std::string_view text) { buf_ += text; }
  // One element of traceEvents.
  template <typename... Args>
  void event(fmt::format_string<Args...> f, Args&&... args) {
    if (!first_) buf_ += ",\n";
    first_ = false;
    fmt::format_to(std::back_inserter(buf_), f, std::forward<Args>(args)...);
    if (buf_.size() >= (std::size_t{1} << 20)) flush();
  }
  void flush() {
    if (!buf_.empty()) sink_(buf_);
    buf_.clear();
  }
  const std::string& name(const char* p) {
    auto it = names_.find(p);
    if (it == names_.end()) it = names_.emplace(p, json_string(p)).first;
    return it->second;
  }

 private:
  const Sink& sink_;
  std::string buf_;
  bool first_ = true;
  std::unordered_map<const char*, std::string> names_;
};

// Microseconds from the trace's origin, to the nanosecond.
struct Micros {
  std::uint64_t origin;
  double operator()(std::uint64_t t) const {
    return t > origin ? static_cast<double>(t - origin) / 1e3 : 0.0;
  }
};

std::string value_arg(const TraceEvent& e) {
  if (e.value < 0) return {};
  return fmt::format(",\"args\":{{\"{}\":{}}}", value_name(e.category), e.value);
}

}  // namespace

TraceOptions trace_options_for(std::uint64_t max_events) {
  TraceOptions options;
  options.max_events = max_events;
  options.detail_events = max_events / 5;
  return options;
}

Result<void> write_chrome_trace(const TraceLog& log, std::string_view about, const Sink& sink,
                                const Redact& redact) {
  nlohmann::json other = nlohmann::json::parse(about, nullptr, /*allow_exceptions=*/false);
  if (!other.is_object()) {
    return fail(Error(Errc::kInvalidArgument, "the trace's \"about\" must be a JSON object"));
  }
  const auto shown = [&](std::string_view text) {
    return redact ? redact(text) : std::string(text);
  };
  Writer w(sink);
  const TraceOptions& opt = log.options();
  other["clock"] = "microseconds from the start of the trace, one monotonic clock for all threads";
  other["events_kept"] = log.kept();
  other["events_dropped"] = log.dropped();
  other["max_events"] = opt.max_events;
  other["detail_spans_seen"] = log.detail_seen();
  other["detail_spans_in_full"] = opt.detail_events;
  other["detail_stride"] = opt.detail_stride;
  other["detail_window_ms"] = static_cast<double>(opt.detail_window_ns) / 1e6;
  other["detail_spans_sampled_out"] = log.detail_sampled_out();
  other["complete"] = log.dropped() == 0 && log.detail_sampled_out() == 0;
  if (log.detail_sampled_out() > 0) {
    other["sampling"] = fmt::format(
        "per-read, per-sample and state spans: the first {} kept, then those in one {} ms window "
        "in {} ({} left out)",
        opt.detail_events, opt.detail_window_ns / 1'000'000, opt.detail_stride,
        log.detail_sampled_out());
  }
  if (log.dropped() > 0) {
    other["truncated"] =
        fmt::format("the trace holds at most {} events: {} later ones were left out",
                    opt.max_events, log.dropped());
  }
  w.raw("{\"displayTimeUnit\":\"ms\",\"otherData\":");
  w.raw(shown(detail::dump_utf8(other)));
  w.raw(",\"traceEvents\":[\n");

  const Micros us{log.origin_ns()};
  const std::vector<const TraceLane*> lanes = log.lanes();
  std::uint32_t next_tid = 1;
  for (const TraceLane* l : lanes) next_tid = std::max(next_tid, l->tid() + 1);
  std::vector<std::string> processes;
  std::uint64_t async_id = 0;
  for (const TraceLane* lane : lanes) {
    auto p = std::find(processes.begin(), processes.end(), lane->process());
    const auto pid = static_cast<std::size_t>(p - processes.begin()) + 1;
    if (p == processes.end()) {
      processes.push_back(lane->process());
      w.event(R"({{"ph":"M","name":"process_name","pid":{},"args":{{"name":{}}}}})", pid,
              json_string(lane->process()));
      w.event(R"({{"ph":"M","name":"process_sort_index","pid":{},"args":{{"sort_index":{}}}}})",
              pid, pid);
    }
    auto name_track = [&](std::uint32_t tid, const std::string& name) {
      w.event(R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":{}}}}})", pid,
              tid, json_string(name));
      w.event(
          R"({{"ph":"M","name":"thread_sort_index","pid":{},"tid":{},"args":{{"sort_index":{}}}}})",
          pid, tid, tid);
    };
    name_track(lane->tid(), lane->name());

    // Spans on the thread's tracks: sorted, each on the first track where it nests.
    const auto& events = lane->events();
    std::vector<const TraceEvent*> spans;
    for (const TraceEvent& e : events) {
      if (e.type == TraceEventType::kSpan) spans.push_back(&e);
    }
    std::stable_sort(spans.begin(), spans.end(), [](const TraceEvent* a, const TraceEvent* b) {
      return a->begin_ns != b->begin_ns ? a->begin_ns < b->begin_ns : a->end_ns > b->end_ns;
    });
    struct Track {
      std::uint32_t tid;
      std::vector<std::uint64_t> open;  // ends of the spans open at this point, innermost last
    };
    std::vector<Track> tracks{{lane->tid(), {}}};
    for (const TraceEvent* e : spans) {
      Track* at = nullptr;
      for (Track& t : tracks) {
        while (!t.open.empty() && t.open.back() <= e->begin_ns) t.open.pop_back();
        if (t.open.empty() || e->end_ns <= t.open.back()) {
          at = &t;
          break;
        }
      }
      if (at == nullptr) {
        tracks.push_back({next_tid++, {}});
        at = &tracks.back();
        name_track(at->tid, fmt::format("{} ({})", lane->name(), tracks.size()));
      }
      at->open.push_back(e->end_ns);
      w.event(R"({{"ph":"X","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f},"cat":{},"name":{}{}}})",
              pid, at->tid, us(e->begin_ns), us(e->end_ns) - us(e->begin_ns), w.name(e->category),
              w.name(e->name), value_arg(*e));
    }

    for (const TraceEvent& e : events) {
      switch (e.type) {
        case TraceEventType::kSpan:
          break;
        case TraceEventType::kAsync: {
          const std::uint64_t id = ++async_id;
          w.event(R"({{"ph":"b","pid":{},"tid":{},"ts":{:.3f},"cat":{},"name":{},"id":{}{}}})", pid,
                  lane->tid(), us(e.begin_ns), w.name(e.category), w.name(e.name), id,
                  value_arg(e));
          w.event(R"({{"ph":"e","pid":{},"tid":{},"ts":{:.3f},"cat":{},"name":{},"id":{}}})", pid,
                  lane->tid(), us(e.end_ns), w.name(e.category), w.name(e.name), id);
          break;
        }
        case TraceEventType::kCounter:
          w.event(R"({{"ph":"C","pid":{},"ts":{:.3f},"name":{},"args":{{"value":{}}}}})", pid,
                  us(e.begin_ns), w.name(e.name), e.value);
          break;
        case TraceEventType::kInstant:
          w.event(
              R"({{"ph":"i","s":"t","pid":{},"tid":{},"ts":{:.3f},"cat":{},"name":{},"args":{{"message":{}}}}})",
              pid, lane->tid(), us(e.begin_ns), w.name(e.category), w.name(e.name),
              json_string(e.detail ? shown(e.detail) : std::string()));
          break;
      }
    }
  }
  w.raw("\n]}\n");
  w.flush();
  return {};
}

}  // namespace feedline::loader
