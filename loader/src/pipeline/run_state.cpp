#include "run_state.hpp"

#include <algorithm>

#include "device_sink.hpp"

namespace feedline::loader::detail {

RunState::RunState(storage::Backend& backend_, const Dataset& dataset_, const LoaderConfig& config_,
                   const DataPathPlan& plan_, PoolSizing sizing_, std::shared_ptr<DeviceSink> sink_,
                   std::shared_ptr<const transports::cufile::CufileRuntime> cufile_)
    : backend(backend_),
      dataset(dataset_),
      config(config_),
      plan(plan_),
      sizing(std::move(sizing_)),
      sink(std::move(sink_)),
      cufile(std::move(cufile_)),
      copies(sink && !reads_into_device(plan.path)),
      budget(config.memory_budget),
      results(std::make_shared<ResultBytes>(&budget)),
      // Bytes of freed sample buffers kept for reuse (sizing's share of the budget).
      buffers(sizing.recycle),
      pool(std::make_shared<BatchPool>(std::max<std::size_t>(sizing.buffers, 1),
                                       config.diagnostics.accounting, sink)),
      reads("reads", std::max<std::size_t>(2 * config.io_depth, 64), config.diagnostics.accounting,
            std::max(1u, config.storage_threads), config.decode_threads),
      decoded("decoded", std::max<std::size_t>(2 * config.sampler.batch_size, 64),
              config.diagnostics.accounting, config.decode_threads, 1),
      batches("batches", std::max(1u, config.prefetch_batches), config.diagnostics.accounting),
      device_batches("device", std::max(1u, config.prefetch_batches),
                     config.diagnostics.accounting) {
  // A buffer handed back is what a storage thread waiting to lay out the next batch waits for.
  pool->on_give_back([this] { budget.notify_freed(); });
}

// The pool lives on in batches the caller still holds: they must not reach this run's budget.
RunState::~RunState() {
  pool->on_give_back(nullptr);
  results->detach();
}

void RunState::stop() {
  stop_.store(true);
  reads.close();
  decoded.close();
  pool->free().close();
  batches.close();
  device_batches.close();
}

void RunState::fail(Error e) {
  backend.show_object(e);  // "http://host/d/0.tar", not the key "/d/0.tar"
  if (TraceLane* lane = current_trace_lane()) lane->instant("error", "error", now_ns(), e.what());
  {
    std::lock_guard lock(mu_);
    if (!error_) error_ = std::move(e);
  }
  stop();
}

void RunState::fail_in_order(Error e) {
  backend.show_object(e);
  if (TraceLane* lane = current_trace_lane()) lane->instant("error", "error", now_ns(), e.what());
  {
    std::lock_guard lock(mu_);
    if (!error_) error_ = std::move(e);
  }
  stop_.store(true);
  reads.close();
  decoded.close();
  pool->free().close();
}

std::optional<Error> RunState::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

void RunState::skip(const Error& e) {
  ++skipped;
  std::lock_guard lock(mu_);
  if (skipped_examples_.size() < 10) {
    Error shown = e;
    backend.show_object(shown);
    skipped_examples_.push_back(shown.what());
  }
}

void RunState::note_path(std::string note) {
  std::lock_guard lock(mu_);
  path_notes_.push_back(std::move(note));
}

std::vector<std::string> RunState::skipped_examples() const {
  std::lock_guard lock(mu_);
  return skipped_examples_;
}

std::vector<std::string> RunState::path_notes() const {
  std::lock_guard lock(mu_);
  return path_notes_;
}

}  // namespace feedline::loader::detail
