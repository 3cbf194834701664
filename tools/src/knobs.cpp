#include "knobs.hpp"

#include <fmt/format.h>

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

std::string knob_flag_text(const loader::KnobChange& k) {
  return fmt::format("{} {} -> {}", knob_flag(k.knob), loader::knob_value_text(k.knob, k.from),
                     loader::knob_value_text(k.knob, k.to));
}

std::string flag_suggestion(const loader::Verdict& v) {
  return loader::suggestion_text(v, knob_flag_text);
}

}  // namespace feedline::tools
