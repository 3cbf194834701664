// Backend counters by definition (counters.hpp), and QueueStats's access to them.
#include "feedline/storage/counters.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "feedline/core/units.hpp"
#include "feedline/storage/backend.hpp"

namespace feedline::storage {

const CounterDef* find_counter(std::string_view name) noexcept {
  const CounterDef* found = nullptr;
  for (const CounterDef* d : counters::kAll) {
    if (!d->family) {
      if (name == d->name) return d;
    } else if (name.size() > d->name.size() && name.starts_with(d->name) &&
               (found == nullptr || d->name.size() > found->name.size())) {
      found = d;
    }
  }
  return found;
}

std::optional<std::string> retry_reason(std::string_view name) {
  const CounterDef* d = find_counter(name);
  if (d == nullptr || d->role != CounterRole::kRetry) return std::nullopt;
  if (d->family) return std::string(name.substr(d->name.size()));
  return std::string(d->retry_reason);
}

std::string member_name(const CounterDef& family, std::string_view member) {
  std::string name;
  name.reserve(family.name.size() + member.size());
  name.append(family.name).append(member);
  return name;
}

std::string counter_text(std::string_view name, std::uint64_t value) {
  const CounterDef* d = find_counter(name);
  if (d != nullptr && d->unit == CounterUnit::kBytes)
    return fmt::format("{} {}", name, format_bytes(static_cast<double>(value)));
  return fmt::format("{} {}", name, value);
}

std::map<std::string, std::uint64_t, std::less<>> live_counters(const QueueStats& stats) {
  std::map<std::string, std::uint64_t, std::less<>> out = stats.counters;
  const bool by_reason = std::any_of(out.begin(), out.end(), [](const auto& c) {
    const CounterDef* d = find_counter(c.first);
    return d != nullptr && (d->role == CounterRole::kRetry || d->role == CounterRole::kRetryTotal);
  });
  if (stats.retries > 0 && !by_reason) out[std::string(counters::kIoRetries.name)] = stats.retries;
  return out;
}

std::uint64_t QueueStats::counter(const CounterDef& c) const noexcept {
  const auto it = counters.find(c.name);
  return it == counters.end() ? 0 : it->second;
}

std::uint64_t& QueueStats::count(const CounterDef& c) {
  if (auto it = counters.find(c.name); it != counters.end()) return it->second;
  return counters.emplace(std::string(c.name), 0).first->second;
}

std::uint64_t& QueueStats::count(const CounterDef& family, std::string_view member) {
  // Built on the stack: a member counted before (the common case) costs no allocation.
  std::array<char, 96> buf;
  const auto end = fmt::format_to_n(buf.data(), buf.size(), "{}{}", family.name, member);
  if (end.size <= buf.size()) {
    const std::string_view name(buf.data(), end.size);
    if (auto it = counters.find(name); it != counters.end()) return it->second;
  }
  return counters[member_name(family, member)];
}

Histogram& QueueStats::histogram(const CounterDef& h) {
  if (auto it = histograms.find(h.name); it != histograms.end()) return it->second;
  return histograms.emplace(std::string(h.name), Histogram{}).first->second;
}

const Histogram* QueueStats::find_histogram(const CounterDef& h) const noexcept {
  const auto it = histograms.find(h.name);
  return it == histograms.end() ? nullptr : &it->second;
}

void QueueStats::start(std::initializer_list<const CounterDef*> defs) {
  for (const CounterDef* d : defs) {
    if (d->family || d->live) continue;
    if (d->kind == CounterKind::kHistogram) {
      histogram(*d);
    } else {
      count(*d);
    }
  }
}

}  // namespace feedline::storage
