// Storage ground truth for local files: the block device behind a path and its counters from
// /proc/diskstats, so a report can say how busy the device was (iostat's %util) and how many bytes
// really came from it (a warm page cache shows ~0).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "feedline/core/error.hpp"

namespace feedline::storage {

struct DiskCounters {
  std::uint64_t reads = 0;        // reads completed
  std::uint64_t read_bytes = 0;   // sectors read x 512
  std::uint64_t io_ticks_ms = 0;  // time the device had I/O in flight
  std::uint64_t when_ns = 0;      // monotonic time of the sample
  std::uint64_t weighted_ms = 0;  // time requests spent in the device's queue, summed over them
  std::uint64_t read_ms = 0;      // time reads took, summed over them
};

struct DiskDelta {
  std::string device;
  std::uint64_t reads = 0;
  std::uint64_t read_bytes = 0;
  double utilisation = 0;  // io_ticks / wall time, 0..1
  // Requests in the device's queue on average (iostat's avgqu-sz): a saturated device has its
  // queue full; a busy but shallow one was not asked for more.
  double mean_queue_depth = 0;
  double read_await_ms = 0;  // a read's time at the device, on average (iostat's r_await)
};

class DeviceMonitor {
 public:
  // Finds the whole disk behind path (a file on it, or the block device itself). kNotFound when
  // there is none (tmpfs, overlay, network filesystems): the report then says "unknown".
  static Result<DeviceMonitor> for_path(const std::string& path);
  // Reads the counters now.
  Result<DiskCounters> sample() const;
  static DiskDelta delta(const std::string& device, const DiskCounters& a, const DiskCounters& b);
  const std::string& device() const noexcept { return device_; }

 private:
  explicit DeviceMonitor(std::string device) : device_(std::move(device)) {}
  std::string device_;  // name in /proc/diskstats, e.g. "vda", "nvme0n1"
};

}  // namespace feedline::storage
