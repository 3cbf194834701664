// A Prometheus endpoint for running loaders (`feedline run --metrics-port`, the Python binding's
// `metrics_port=`): GET /metrics serves what each attached loader has done so far
// (Loader::live()), in Prometheus's text format with its naming rules:
//
//   feedline_samples_total, feedline_batches_total, feedline_delivered_bytes_total
//   feedline_consumer_wait_seconds (histogram, per batch), feedline_compute_seconds_total
//   feedline_stage_{busy,starved,blocked}_seconds_total{stage}, feedline_stage_threads{stage}
//   feedline_queue_depth{queue}, feedline_queue_capacity{queue}
//   feedline_storage_read_seconds (histogram), feedline_storage_reads_total,
//   feedline_storage_read_errors_total, feedline_storage_bytes_total,
//   feedline_storage_retries_total{reason}, feedline_storage_reconnects_total,
//   feedline_storage_events_total{event} (the storage queues' other counters: HTTP requests,
//   statuses, connections opened)
//   feedline_memory_in_use_bytes, feedline_memory_budget_bytes, feedline_skipped_samples_total
//   feedline_run_seconds, feedline_running
//
// A scrape reads atomics (live.hpp): it never holds up the pipeline. Counters stay monotonic
// for the endpoint's lifetime: a loader that ends (one run of a series, --runs N) leaves its
// totals behind, to which the next loader with the same labels adds. Loaders attached with
// labels ({"accelerator", "3"}) are series of their own.
//
// The HTTP server is prometheus-cpp's (civetweb): a library Debian ships, with the exposition
// format, its escaping and content negotiation done and tested by its authors.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "feedline/core/error.hpp"
#include "feedline/loader/live.hpp"

namespace feedline::loader {

class MetricsEndpoint final : public LiveWatch {
 public:
  // Listens on `bind` (an IPv4 address: "127.0.0.1", "0.0.0.0") and `port` (0: a free port,
  // see port()).
  // A port in use, or an address not of this host, is kInvalidArgument naming it; a build
  // without prometheus-cpp kUnsupported.
  static Result<std::shared_ptr<MetricsEndpoint>> start(const std::string& bind,
                                                        std::uint16_t port);
  ~MetricsEndpoint() override;
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  std::uint16_t port() const noexcept;
  std::string url() const;  // http://BIND:PORT/metrics

  // Serves `source` with `labels` until detach(id); its last figures stay in the totals. A
  // loader does both itself (LoaderConfig::watchers).
  std::uint64_t attach(std::function<LiveFigures()> source, Labels labels) override;
  void detach(std::uint64_t id) noexcept override;

  class Impl;

 private:
  explicit MetricsEndpoint(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;  // shared with the server, which holds it weakly
};

}  // namespace feedline::loader
