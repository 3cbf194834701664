// Names of the report's enums (report.hpp), as reports and JSON documents spell them.
#include "feedline/loader/report.hpp"

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
      return "prefetch_batches";
    case Knob::kMemoryBudget:
      return "memory_budget";
    case Knob::kBatchSize:
      return "sampler.batch_size";
    case Knob::kShardShuffle:
      return "sampler.shard_shuffle";
    case Knob::kCudaStreams:
      return "device.streams";
    case Knob::kConnections:
      return "connections";
    case Knob::kPartSize:
      return "part_size";
    case Knob::kStorageThreads:
      return "storage_threads";
  }
  return "?";
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
