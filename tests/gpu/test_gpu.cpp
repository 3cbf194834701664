// GPU-only tests: the device sink on a real GPU (byte-exact device copies, H2D rate against the
// calibrated pinned peak), pinned vs pageable copies, and cuFile reads straight into GPU memory
// (where libcufile is installed). Skipped (exit 77, "Not Run" in ctest)
// where there is no usable GPU, with the reason printed.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "feedline/loader/loader.hpp"
#include "feedline/storage/registry.hpp"
#include "feedline/transports/cuda.hpp"
#include "feedline/transports/cufile.hpp"

using namespace feedline;
using namespace feedline::loader;
namespace cu = feedline::transports::cuda;
namespace cf = feedline::transports::cufile;

// Set by main() (gpu_main.cpp) before any test runs; available().
extern std::shared_ptr<const cu::CudaRuntime> g_cuda;

namespace {

std::byte pattern(std::size_t sample, std::size_t at) {
  return static_cast<std::byte>((sample * 131 + at * 7) & 0xff);
}

// n files of `size` bytes, in memory ("mem://g/") or under a local directory.
struct MemFiles {
  std::unique_ptr<storage::Backend> backend;
  Dataset dataset;
  MemFiles(std::size_t n, std::size_t size, const std::string& dir = "") {
    storage::Registry registry;
    storage::register_builtin_backends(registry);
    const std::string root = dir.empty() ? "g/" : dir + "/";
    backend = std::move(registry.open(dir.empty() ? "mem://g/" : dir, {})->backend);
    std::vector<std::byte> bytes(size);
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j < size; ++j) bytes[j] = pattern(i, j);
      REQUIRE(backend->write(fmt::format("{}{:06}.bin", root, i), bytes));
    }
    DatasetOptions o;
    o.format = DatasetFormat::kFiles;
    dataset = open_dataset(*backend, root, o).value();
  }
};
}  // namespace

TEST_CASE("gpu: every batch reaches device memory byte for byte", "[gpu]") {
  MemFiles f(512, 256 << 10);
  LoaderConfig c;
  c.sampler.batch_size = 64;  // 16 MiB batches
  c.sampler.epochs = 2;
  c.memory_budget = 1ull << 30;
  c.gpu_direct = GpuDirect::kAuto;
  c.device.device = 0;
  c.device.streams = 4;
  c.device.cuda = g_cuda;
  auto loader = Loader::open(*f.backend, f.dataset, c);
  REQUIRE(loader);
  const cu::CudaApi& a = g_cuda->api();
  std::vector<std::byte> back;
  std::uint64_t batches = 0;
  for (;;) {
    auto b = (*loader)->next();
    REQUIRE(b);
    if (b->end()) break;
    const auto host = b->data();
    REQUIRE(b->device_data() != nullptr);
    back.assign(host.size(), std::byte{0});
    REQUIRE(a.Memcpy(back.data(), b->device_data(), host.size(), cu::kMemcpyDeviceToHost) == 0);
    CHECK(std::memcmp(back.data(), host.data(), host.size()) == 0);
    ++batches;
  }
  auto r = (*loader)->report();
  REQUIRE_FALSE(r.error);
  CHECK(batches == 16);
  CHECK(r.device.copies == 16);
  CHECK(r.device.host_memory.find("pinned") == 0);
  CHECK(r.data_path.copied_bytes == r.device.h2d_bytes);  // direct staging: H2D is the only copy
  WARN(fmt::format("H2D {:.2f} GB/s of a {:.2f} GB/s pinned peak ({:.0f}%)",
                   r.device.h2d_bytes_per_second / 1e9, r.device.peak_bytes_per_second / 1e9,
                   100 * r.device.h2d_bytes_per_second / r.device.peak_bytes_per_second));
  // The target: copies from the pinned pool reach 90% of the calibrated peak.
  CHECK(r.device.h2d_bytes_per_second >= 0.9 * r.device.peak_bytes_per_second);
}

TEST_CASE("gpu: pinned copies beat pageable ones", "[gpu]") {
  const auto pinned = cu::h2d_bandwidth(*g_cuda, 0, 256ull << 20, 5, true);
  const auto pageable = cu::h2d_bandwidth(*g_cuda, 0, 256ull << 20, 5, false);
  REQUIRE(pinned);
  REQUIRE(pageable);
  WARN(fmt::format("pinned {:.2f} GB/s, pageable {:.2f} GB/s", *pinned / 1e9, *pageable / 1e9));
  CHECK(*pinned > 0);
  CHECK(*pinned >= *pageable * 0.95);
}

TEST_CASE("gpu: cuFile reads land in GPU memory byte for byte", "[gpu][cufile]") {
  auto cufile = cf::CufileRuntime::load();
  if (!cufile->available()) {
    WARN("skipped: " << cufile->reason());
    return;
  }
  // A real disk, not /tmp (often tmpfs, which has no O_DIRECT).
  const auto dir = std::filesystem::current_path() / fmt::format("gpu-cufile-{}", ::getpid());
  std::filesystem::create_directories(dir);
  const std::size_t n = 256;
  const std::size_t size = (192 << 10) + 1000;  // not a multiple of 4 KiB: cuFile handles the tail
  MemFiles f(n, size, dir.string());
  LoaderConfig c;
  c.sampler.batch_size = 32;
  c.sampler.epochs = 1;
  c.memory_budget = 1ull << 30;
  c.gpu_direct = GpuDirect::kOn;  // cuFile, in compatibility mode if that is all there is
  c.device.device = 0;
  c.device.cuda = g_cuda;
  c.device.cufile = cufile;
  auto loader = Loader::open(*f.backend, f.dataset, c);
  REQUIRE(loader);
  const cu::CudaApi& a = g_cuda->api();
  std::vector<std::byte> back;
  std::uint64_t samples = 0;
  std::uint64_t wrong = 0;
  for (;;) {
    auto b = (*loader)->next();
    REQUIRE(b);
    if (b->end()) break;
    const Batch& batch = *b;
    CHECK(batch.data().empty());  // nothing in host memory
    REQUIRE(batch.device_data() != nullptr);
    back.assign(batch.extent(), std::byte{0});
    REQUIRE(a.Memcpy(back.data(), batch.device_data(), back.size(), cu::kMemcpyDeviceToHost) == 0);
    for (const auto& s : batch.samples()) {
      ++samples;
      for (std::size_t j = 0; j < s.size; ++j) {
        if (back[s.offset + j] != pattern(s.sample, j)) {
          ++wrong;
          break;
        }
      }
    }
  }
  auto r = (*loader)->report();
  std::filesystem::remove_all(dir);
  REQUIRE_FALSE(r.error);
  CHECK(samples == n);
  CHECK(wrong == 0);
  const auto& p = r.data_path;
  WARN(fmt::format("{}: {:.2f} GB/s, copy amplification {}; {}", data_path_name(p.path),
                   r.consumer.bytes_per_second / 1e9, p.copy_amplification, p.reason));
  CHECK(p.path == (cufile->compat_mode() ? DataPath::kCufileCompat : DataPath::kGpuDirect));
  CHECK(r.device.h2d_bytes == 0);
}
