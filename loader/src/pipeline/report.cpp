// Names of the report's enums (report.hpp), as reports and JSON documents spell them.
#include "feedline/loader/report.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>

#include "feedline/core/units.hpp"

namespace feedline::loader {

std::string_view stage_name(StageId s) noexcept {
  switch (s) {
    case StageId::kStorage:
      return "storage";
    case StageId::kDecode:
      return "decode";
    case StageId::kCollate:
      return "collate";
    case StageId::kDevice:
      return "device";
    case StageId::kConsumer:
      return "consumer";
  }
  return "?";
}

std::string_view queue_name(QueueId q) noexcept {
  switch (q) {
    case QueueId::kReads:
      return "reads";
    case QueueId::kDecoded:
      return "decoded";
    case QueueId::kBatches:
      return "batches";
    case QueueId::kBatchPool:
      return "batch-pool";
    case QueueId::kDevice:
      return "device";
  }
  return "?";
}

std::string_view data_path_name(DataPath p) noexcept {
  switch (p) {
    case DataPath::kHostDirect:
      return "host-direct";
    case DataPath::kDecodeInPlace:
      return "decode-in-place";
    case DataPath::kBounce:
    case DataPath::kPinnedDirect:
      return "bounce";
    case DataPath::kGpuDirect:
      return "gpu-direct";
    case DataPath::kCufileCompat:
      return "cufile-compat";
  }
  return "?";
}

bool reads_into_slot(DataPath p) noexcept {
  return p == DataPath::kHostDirect || p == DataPath::kPinnedDirect || reads_into_device(p);
}

bool reads_into_device(DataPath p) noexcept {
  return p == DataPath::kGpuDirect || p == DataPath::kCufileCompat;
}

std::string_view input_bound_name(InputBound b) noexcept {
  switch (b) {
    case InputBound::kNo:
      return "no";
    case InputBound::kModerate:
      return "moderate";
    case InputBound::kHigh:
      return "high";
  }
  return "?";
}

std::string_view knob_name(Knob k) noexcept {
  switch (k) {
    case Knob::kIoDepth:
      return "io_depth";
    case Knob::kDecodeThreads:
      return "decode_threads";
    case Knob::kPrefetchBatches:
      return "prefetch";
    case Knob::kMemoryBudget:
      return "memory_budget";
    case Knob::kBatchSize:
      return "batch_size";
    case Knob::kShardShuffle:
      return "shard_shuffle";
    case Knob::kCudaStreams:
      return "cuda_streams";
    case Knob::kConnections:
      return "connections";
    case Knob::kPartSize:
      return "part_size";
    case Knob::kStorageThreads:
      return "storage_threads";
  }
  return "?";
}

std::optional<Knob> knob_from_name(std::string_view name) noexcept {
  static constexpr std::array kAll = {
      Knob::kIoDepth,   Knob::kDecodeThreads, Knob::kPrefetchBatches, Knob::kMemoryBudget,
      Knob::kBatchSize, Knob::kShardShuffle,  Knob::kCudaStreams,     Knob::kConnections,
      Knob::kPartSize,  Knob::kStorageThreads};
  for (const Knob k : kAll) {
    if (knob_name(k) == name) return k;
  }
  return std::nullopt;
}

std::string knob_value_text(Knob k, std::uint64_t value) {
  if (k == Knob::kMemoryBudget || k == Knob::kPartSize)
    return format_bytes(static_cast<double>(value));
  return fmt::format("{}", value);
}

std::string knob_change_text(const KnobChange& k) {
  return fmt::format("{}={} -> {}", knob_name(k.knob), knob_value_text(k.knob, k.from),
                     knob_value_text(k.knob, k.to));
}

std::string suggestion_text(const Verdict& v, const KnobText& spell) {
  std::vector<std::string> knobs;
  for (const KnobChange& k : v.next) knobs.push_back(spell(k));
  if (knobs.empty()) return v.advice;
  const std::string turn = fmt::format("{}", fmt::join(knobs, ", or "));
  return v.advice.empty() ? turn : fmt::format("{}: {}", turn, v.advice);
}

const StageReport* PipelineReport::stage(StageId id) const noexcept {
  for (const auto& s : stages) {
    if (s.stage == id) return &s;
  }
  return nullptr;
}

const QueueReport* PipelineReport::queue(QueueId id) const noexcept {
  for (const auto& q : queues) {
    if (q.queue == id) return &q;
  }
  return nullptr;
}

}  // namespace feedline::loader
