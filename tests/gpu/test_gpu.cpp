// GPU-only tests: the device sink on a real GPU (byte-exact device copies, H2D rate against the
// calibrated pinned peak) and pinned vs pageable copies. Skipped (exit 77, "Not Run" in ctest)
// where there is no usable GPU, with the reason printed.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstring>

#include "feedline/loader/loader.hpp"
#include "feedline/storage/registry.hpp"
#include "feedline/transports/cuda.hpp"

using namespace feedline;
using namespace feedline::loader;
namespace cu = feedline::transports::cuda;

// Set by main() (gpu_main.cpp) before any test runs; available().
extern std::shared_ptr<const cu::CudaRuntime> g_cuda;

namespace {

struct MemFiles {
  std::unique_ptr<storage::Backend> backend;
  Dataset dataset;
  MemFiles(std::size_t n, std::size_t size) {
    storage::Registry registry;
    storage::register_builtin_backends(registry);
    backend = std::move(registry.open("mem://g/", {})->backend);
    std::vector<std::byte> bytes(size);
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j < size; ++j) bytes[j] = static_cast<std::byte>((i * 131 + j * 7) & 0xff);
      REQUIRE(backend->write(fmt::format("g/{:06}.bin", i), bytes));
    }
    DatasetOptions o;
    o.format = DatasetFormat::kFiles;
    dataset = open_dataset(*backend, "g/", o).value();
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
  while (auto b = (*loader)->next()) {
    REQUIRE(b);
    if (!*b) break;
    const auto host = (*b)->data();
    REQUIRE((*b)->device_data() != nullptr);
    back.assign(host.size(), std::byte{0});
    REQUIRE(a.Memcpy(back.data(), (*b)->device_data(), host.size(), cu::kMemcpyDeviceToHost) == 0);
    CHECK(std::memcmp(back.data(), host.data(), host.size()) == 0);
    ++batches;
  }
  auto r = (*loader)->report();
  REQUIRE_FALSE(r.error);
  CHECK(batches == 16);
  CHECK(r.device.copies == 16);
  CHECK(r.device.host_memory.find("pinned") == 0);
  CHECK(r.data_paths.at(0).copied_bytes == r.device.h2d_bytes);  // direct staging: H2D is the only copy
  WARN(fmt::format("H2D {:.2f} GB/s of a {:.2f} GB/s pinned peak ({:.0f}%)", r.device.h2d_bytes_per_second / 1e9,
                   r.device.peak_bytes_per_second / 1e9,
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

