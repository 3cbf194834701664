#include "knobs.hpp"

#include <fmt/format.h>

#include <vector>

namespace feedline::tools {

std::string_view knob_flag(loader::Knob k) noexcept {
  using loader::Knob;
  switch (k) {
    case Knob::kIoDepth:
      return "--io-depth";
    case Knob::kDecodeThreads:
      return "--decode-threads";
    case Knob::kPrefetchBatches:
      return "--prefetch";
    case Knob::kMemoryBudget:
      return "--memory-budget";
    case Knob::kBatchSize:
      return "--batch-size";
    case Knob::kShardShuffle:
      return "--shard-shuffle";
    case Knob::kCudaStreams:
      return "--cuda-streams";
    case Knob::kConnections:
      return "--connections";
    case Knob::kPartSize:
      return "--part-size";
    case Knob::kStorageThreads:
      return "--storage-threads";
  }
  return "?";
}

std::string suggestion_text(const loader::Verdict& v) {
  std::vector<std::string> knobs;
  for (const auto& k : v.next)
    knobs.push_back(fmt::format("{} {} -> {}", knob_flag(k.knob), k.from, k.to));
  if (knobs.empty()) return v.advice;
  const std::string turn = fmt::format("{}", fmt::join(knobs, ", or "));
  return v.advice.empty() ? turn : fmt::format("{}: {}", turn, v.advice);
}

}  // namespace feedline::tools
