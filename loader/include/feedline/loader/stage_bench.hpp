// Controlled runs for diagnosis (DS-Analyzer's method): each stage measured alone, so that a
// pipeline's end-to-end rate can be set against the slowest stage's own rate.
//
//  - storage alone: every sample's byte range read at the pipeline's IO depth, nothing else;
//  - decode alone: the pipeline's decode (tar members, zstd, digest, decode cost) on samples
//    already in memory, with the pipeline's decode threads;
//  - collate alone: the pipeline's batch copy of decoded samples, one thread.
//
// Samples are taken in the run's epoch-0 order (seeded shuffle, this rank's shard), at most
// max_samples; decode and collate alone use those of them that fit in the memory budget. Each
// stage's CPU is measured too, for the ceiling the machine's cores put on all of them together.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "feedline/core/error.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/loader/report.hpp"

namespace feedline::loader {

struct StageAlone {
  StageId stage = StageId::kStorage;  // kStorage, kDecode or kCollate
  std::uint64_t samples = 0;
  std::uint64_t bytes = 0;
  double seconds = 0;
  double samples_per_second = 0;
  double cpu_seconds = 0;  // the whole process's CPU (user + system) while it ran
};

struct StagesAlone {
  std::vector<StageAlone> stages;
  std::optional<StageId> slowest;  // none when no stage ran
  double slowest_samples_per_second = 0;
  // When every stage needs CPU, running them together cannot beat cores / (CPU per sample of
  // all stages added up), however well they overlap: the rate the stages' own CPU costs allow
  // on the `cores` this process may use. On a small machine this, not the slowest stage alone,
  // is the end-to-end ceiling. 0 if unknown.
  double cpu_per_sample_us = 0;
  unsigned cores = 0;
  double cpu_ceiling_samples_per_second = 0;
};

Result<StagesAlone> measure_stages_alone(storage::Backend& backend, const Dataset& dataset,
                                         const LoaderConfig& config, std::uint64_t max_samples);

// Storage alone, as measure_stages_alone() measures it (config.io_depth reads in flight from one
// thread, nothing else), at most max_samples and, when max_time is set, no read issued past it
// (those in flight finish and count): what diagnose needs at several depths.
Result<StageAlone> measure_storage_alone(storage::Backend& backend, const Dataset& dataset,
                                         const LoaderConfig& config, std::uint64_t max_samples,
                                         std::chrono::nanoseconds max_time = {});

}  // namespace feedline::loader
