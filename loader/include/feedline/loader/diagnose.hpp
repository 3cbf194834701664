// `feedline diagnose`'s measurements: DS-Analyzer's controlled runs on the user's own dataset and
// settings, each short and bounded, and the capacity model built from them (capacity.hpp).
//
// The runs, in order (each bounded by time, the baseline by `duration`, the others by a quarter
// of it, so that the whole takes under three baselines):
//  - baseline: the pipeline as configured, with its emulated accelerator: what it achieves, and
//    its own verdict;
//  - storage alone at the configured depth and at an eighth of it (one thread keeping the depth
//    full, nothing else): read latency by Little's law where the storage is not saturated, and
//    whether a deeper queue still helps (latency-bound) or the storage is saturated (its
//    bandwidth);
//  - decode alone and collate alone (stage_bench.hpp): each stage's CPU per sample;
//  - cached: the pipeline over a copy of the first objects staged in memory (mem://): decode,
//    collate and the consumer only, the ingestion ceiling;
//  - cold: the same storage read with O_DIRECT (local files read through the page cache only;
//    the caller opens it), so fetch time = cold - cached per sample.
// Storage ground truth for local files is sampled around the baseline and storage runs
// (/proc/diskstats: the device's utilisation and bytes; sysfs: rotational, queue depth,
// scheduler): a storage that limits with its device saturated needs faster storage, one whose
// device is idle needs more reads in flight.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "feedline/core/error.hpp"
#include "feedline/loader/capacity.hpp"
#include "feedline/loader/dataset.hpp"
#include "feedline/loader/emulate.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/loader/report.hpp"
#include "feedline/storage/backend.hpp"
#include "feedline/storage/device_stats.hpp"

namespace feedline::loader {

struct DiagnoseOptions {
  std::chrono::duration<double> duration{8.0};  // the baseline run
  // The same storage read with O_DIRECT, for the cold run (null: none; the baseline is cold
  // already, or the storage is not local).
  storage::Backend* cold = nullptr;
  // A local path of the dataset, for the device's counters (empty: no ground truth).
  std::string local_path;
  // A bandwidth the user capped the storage at (a throttle): known, not measured.
  double storage_bytes_per_second_cap = 0;
  // Staged in memory for the cached run at most this many bytes (and half the memory budget).
  std::uint64_t stage_bytes = std::uint64_t{256} << 20;
};

struct ControlledRun {
  std::string name;  // "baseline", "storage alone", "storage alone (low depth)", ...
  std::string what;  // one line: what it ran
  std::uint64_t samples = 0;
  double seconds = 0;
  double samples_per_second = 0;
  double bytes_per_second = 0;
  double cpu_seconds = 0;
  unsigned io_depth = 0;                     // the reads in flight it kept (storage runs)
  std::optional<storage::DiskDelta> device;  // the device during the run (local files)
};

struct GroundTruth {
  std::string device;  // "vda", "nvme0n1"
  std::optional<bool> rotational;
  std::string scheduler;     // "[mq-deadline] none": the one in use bracketed, as sysfs has it
  unsigned queue_depth = 0;  // nr_requests
  double baseline_utilisation = 0;
  std::uint64_t baseline_device_bytes = 0;  // bytes the device read during the baseline
  double baseline_queue_depth = 0;          // requests queued at the device, on average
  double baseline_read_await_ms = 0;        // a read's time at the device, on average
};

// What the storage itself said during the baseline, where it is a network service: time to first
// byte and the transfer (HTTP), round trips (NFS), connections, retries and errors by kind: the
// backend's counters and histograms (QueueStats), named as the backends name them.
struct NetworkTruth {
  std::map<std::string, std::uint64_t> counters;
  struct Latency {
    double mean_ms = 0, p50_ms = 0, p99_ms = 0;
    std::uint64_t count = 0;
  };
  std::map<std::string, Latency> histograms;  // "ttfb_ns", "transfer_ns", "rtt_ns", ...
};

struct Diagnosis {
  PipelineReport baseline;
  std::optional<NetworkTruth> network;  // a network storage's own figures (http, s3, nfs)
  std::vector<ControlledRun> runs;
  Measurements measurements;
  Settings as_run;  // the settings the baseline ran with, as the model sees them
  std::optional<GroundTruth> ground_truth;
  // DS-Analyzer: prep = 1 / cached rate; fetch = 1 / cold rate - prep (0 when not measured).
  double prep_seconds_per_sample = 0;
  double fetch_seconds_per_sample = 0;
  // The cores the host's other processes (and a hypervisor's neighbours) took while the runs
  // ran, on average: the figures, and the predictions made from them, are of what they left.
  // nullopt where the host's CPU time cannot be read.
  std::optional<double> other_processes_cores;
  std::vector<std::string> notes;  // what could not be measured, and why
};

// kInvalidArgument when the dataset is too small for a steady measurement (fewer than two batches
// of this rank): diagnose() checks it first; callers may ask before announcing the runs.
Result<void> check_diagnosable(const Dataset& dataset, const LoaderConfig& config);

// The controlled runs and the model's inputs. config: the user's (a single loader); compute:
// its emulated accelerator. kInvalidArgument when the dataset is too small for a steady
// measurement (fewer than two batches of this rank); kCancelled on config.stop.
Result<Diagnosis> diagnose(storage::Backend& backend, const Dataset& dataset,
                           const LoaderConfig& config, const ComputeModel& compute,
                           const DiagnoseOptions& options);

// The model's view of a config: its knobs, and the reads in flight its sizing allows (the
// read-ahead window and the memory budget, as the pipeline would size them on backend).
Settings settings_of(const storage::Backend& backend, const Dataset& dataset,
                     const LoaderConfig& config, const ComputeModel& compute, unsigned accelerators,
                     const Measurements& measured);

// A run's samples/s after its first batch (the pipeline filling up is left out, as AU leaves the
// first step out): short runs compared with each other (a what-if, a tuning step) then measure
// the settings, not their start. The whole run's rate where it had a single batch, or where its
// first batch took more than half of it (the window after it would be the buffered batches' burst).
double steady_samples_per_second(const ConsumerReport& c);

// config run with compute for `duration` (epochs repeat as needed), or to the end of its epochs
// if sooner: the baseline, the verification of a what-if, a tuning step.
PipelineReport timed_run(Loader& loader, const ComputeModel& compute,
                         std::chrono::duration<double> duration, std::stop_token stop);

}  // namespace feedline::loader
