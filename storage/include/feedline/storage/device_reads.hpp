// Reads into GPU memory: the context a kDevice queue needs (QueueOptions::memory/device_reads).
//
// The storage interface (backend.hpp) knows it only as an opaque DeviceReads: a backend that
// offers BackendCaps::device_reads (local files) looks inside; every other backend refuses a
// kDevice queue. For local files the context is the cuFile runtime, loaded by the caller
// (transports::cufile::CufileRuntime::load(), or a fake in tests):
//
//   storage::QueueOptions qo;
//   qo.memory = storage::QueueMemory::kDevice;
//   qo.device_reads = storage::make_device_reads(cufile);
//   auto queue = backend.make_queue(qo);
#pragma once

#include <memory>

#include "feedline/storage/backend.hpp"

namespace feedline::transports::cufile {
class CufileRuntime;  // transports/cufile.hpp
}

namespace feedline::storage {

class DeviceReads {
 public:
  explicit DeviceReads(std::shared_ptr<const transports::cufile::CufileRuntime> cufile)
      : cufile_(std::move(cufile)) {}
  // May be null (a context made without one: a kDevice queue then fails to start).
  const std::shared_ptr<const transports::cufile::CufileRuntime>& cufile() const noexcept {
    return cufile_;
  }

 private:
  std::shared_ptr<const transports::cufile::CufileRuntime> cufile_;
};

inline std::shared_ptr<const DeviceReads> make_device_reads(
    std::shared_ptr<const transports::cufile::CufileRuntime> cufile) {
  return std::make_shared<const DeviceReads>(std::move(cufile));
}

}  // namespace feedline::storage
