// The run's trace (trace.hpp): lanes, the event budget, interned names.
#include "feedline/loader/trace.hpp"

#include <algorithm>

#include "feedline/core/clock.hpp"

namespace feedline::loader {

TraceLog::TraceLog(TraceOptions options) : options_(options), origin_ns_(now_ns()) {}

TraceLane& TraceLog::lane(std::string name, std::string process) {
  std::lock_guard lock(mu_);
  const auto tid = static_cast<std::uint32_t>(lanes_.size() + 1);
  lanes_.push_back(std::make_unique<TraceLane>(*this, tid, std::move(name), std::move(process)));
  return *lanes_.back();
}

const char* TraceLog::intern(std::string_view text) {
  std::lock_guard lock(mu_);
  auto it = interned_.find(std::string(text));
  if (it != interned_.end()) return it->second;
  names_.emplace_back(text);
  const char* p = names_.back().c_str();
  interned_.emplace(names_.back(), p);
  return p;
}

template <typename F>
std::uint64_t TraceLog::sum(F field) const {
  std::lock_guard lock(mu_);
  std::uint64_t n = 0;
  for (const auto& l : lanes_) n += field(*l);
  return n;
}
std::uint64_t TraceLog::kept() const {
  return sum([](const TraceLane& l) { return l.kept_; });
}
std::uint64_t TraceLog::dropped() const {
  return sum([](const TraceLane& l) { return l.dropped_; });
}
std::uint64_t TraceLog::detail_seen() const {
  return sum([](const TraceLane& l) { return l.detail_seen_; });
}
std::uint64_t TraceLog::detail_sampled_out() const {
  return sum([](const TraceLane& l) { return l.detail_skipped_; });
}

std::vector<const TraceLane*> TraceLog::lanes() const {
  std::lock_guard lock(mu_);
  std::vector<const TraceLane*> out;
  for (const auto& l : lanes_) out.push_back(l.get());
  return out;
}

bool TraceLane::admit(bool detail, std::uint64_t t_ns) noexcept {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  const TraceOptions& o = log_.options_;
  if (detail) {
    ++detail_seen_;
    if (detail_budget_ == 0 && !detail_sampled_) {
      const std::uint64_t n = log_.detail_reserved_.fetch_add(TraceLog::kChunk, kRelaxed);
      if (n < o.detail_events) {
        detail_budget_ = std::min(TraceLog::kChunk, o.detail_events - n);
      } else {
        detail_sampled_ = true;
      }
    }
    if (detail_budget_ > 0) {
      --detail_budget_;
    } else {
      // Past the cap, whole windows of time: every thread keeps the same ones, so a window kept
      // shows the whole pipeline at that moment.
      const std::uint64_t window = (t_ns > log_.origin_ns_ ? t_ns - log_.origin_ns_ : 0) /
                                   std::max<std::uint64_t>(1, o.detail_window_ns);
      if (window % std::max<std::uint64_t>(1, o.detail_stride) != 0) {
        ++detail_skipped_;
        return false;
      }
    }
  }
  if (budget_ == 0 && !full_) {
    const std::uint64_t n = log_.reserved_.fetch_add(TraceLog::kChunk, kRelaxed);
    if (n < o.max_events) {
      budget_ = std::min(TraceLog::kChunk, o.max_events - n);
    } else {
      full_ = true;
    }
  }
  if (budget_ == 0) {
    ++dropped_;
    return false;
  }
  --budget_;
  return true;
}

void TraceLane::keep(const TraceEvent& e) noexcept {
  try {
    events_.push_back(e);
    ++kept_;
  } catch (...) {  // out of memory: the trace is what it is, the run goes on
    ++dropped_;
  }
}

void TraceLane::span(const char* category, const char* name, std::uint64_t begin_ns,
                     std::uint64_t end_ns, double value, bool detail) noexcept {
  if (!admit(detail, begin_ns)) return;
  keep(TraceEvent{TraceEventType::kSpan, category, name, begin_ns,
                  end_ns < begin_ns ? begin_ns : end_ns, value, nullptr});
}

void TraceLane::async_span(const char* category, const char* name, std::uint64_t begin_ns,
                           std::uint64_t end_ns, double value, bool detail) noexcept {
  if (!admit(detail, begin_ns)) return;
  keep(TraceEvent{TraceEventType::kAsync, category, name, begin_ns,
                  end_ns < begin_ns ? begin_ns : end_ns, value, nullptr});
}

void TraceLane::counter(const char* name, std::uint64_t t_ns, double value, bool force) noexcept {
  if (!force) {
    try {
      auto [it, fresh] = last_counter_ns_.try_emplace(name, t_ns);
      if (!fresh && t_ns - it->second < 1'000'000) return;
      it->second = t_ns;
    } catch (...) {
      return;
    }
  }
  if (!admit(false, t_ns)) return;
  keep(TraceEvent{TraceEventType::kCounter, "counter", name, t_ns, t_ns, value, nullptr});
}

const char* TraceLane::intern(std::string_view text) { return log_.intern(text); }

void TraceLane::instant(const char* category, const char* name, std::uint64_t t_ns,
                        std::string_view message) {
  if (!admit(false, t_ns)) return;
  keep(TraceEvent{TraceEventType::kInstant, category, name, t_ns, t_ns, -1,
                  message.empty() ? nullptr : log_.intern(message)});
}

namespace {
thread_local TraceLane* t_lane = nullptr;
}  // namespace

TraceLane* current_trace_lane() noexcept { return t_lane; }
void set_current_trace_lane(TraceLane* lane) noexcept { t_lane = lane; }

}  // namespace feedline::loader
