#include "feedline/storage/device_stats.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "feedline/core/clock.hpp"

namespace feedline::storage {

Result<DeviceMonitor> DeviceMonitor::for_path(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return fail(Error::from_errno(errno, "stat").with_object(path));
  const dev_t dev = S_ISBLK(st.st_mode) ? st.st_rdev : st.st_dev;
  if (major(dev) == 0) {
    return fail(Error(Errc::kNotFound,
                      "no block device behind this path (tmpfs, overlay or network filesystem)")
                    .with_object(path));
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path sys = fs::canonical(fmt::format("/sys/dev/block/{}:{}", major(dev), minor(dev)), ec);
  if (ec) {
    return fail(Error(Errc::kNotFound, fmt::format("no /sys/dev/block entry for device {}:{}",
                                                   major(dev), minor(dev)))
                    .with_object(path));
  }
  // A partition's directory sits inside its disk's; report the whole disk, like iostat's %util.
  if (fs::exists(sys / "partition", ec)) sys = sys.parent_path();
  return DeviceMonitor(sys.filename().string());
}

Result<DiskCounters> DeviceMonitor::sample() const {
  std::ifstream in("/proc/diskstats");
  if (!in) return fail(Error(Errc::kUnsupported, "cannot read /proc/diskstats"));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    unsigned maj = 0, min = 0;
    std::string name;
    ls >> maj >> min >> name;
    if (name != device_) continue;
    std::uint64_t f[11] = {};
    for (auto& v : f) ls >> v;
    // Fields after the name: reads, merged, sectors read, ms reading, writes, merged, sectors
    // written, ms writing, in flight, io_ticks (ms), weighted ms.
    return DiskCounters{f[0], f[2] * 512, f[9], now_ns(), f[10], f[3]};
  }
  return fail(Error(Errc::kNotFound, "device not in /proc/diskstats").with_object(device_));
}

DiskDelta DeviceMonitor::delta(const std::string& device, const DiskCounters& a,
                               const DiskCounters& b) {
  DiskDelta d;
  d.device = device;
  d.reads = b.reads - a.reads;
  d.read_bytes = b.read_bytes - a.read_bytes;
  const double wall_ms = static_cast<double>(b.when_ns - a.when_ns) / 1e6;
  d.utilisation =
      wall_ms > 0 ? std::min(1.0, static_cast<double>(b.io_ticks_ms - a.io_ticks_ms) / wall_ms) : 0;
  // iostat's avgqu-sz and r_await: the weighted time over the wall, the reads' time over them.
  d.mean_queue_depth =
      wall_ms > 0 ? static_cast<double>(b.weighted_ms - a.weighted_ms) / wall_ms : 0;
  d.read_await_ms =
      d.reads > 0 ? static_cast<double>(b.read_ms - a.read_ms) / static_cast<double>(d.reads) : 0;
  return d;
}

}  // namespace feedline::storage
