// The GPU path with no GPU: the CUDA/cuFile shims' fallback logic over fake API tables, the data
// path plan, the direct path's zero-copy claim (copy counter and batch contents byte for byte,
// from memory and from O_DIRECT files), and the device sink over a fake CUDA whose "device
// memory" is host memory (so every H2D copy can be checked), including an error mid-copy.
#include <fmt/format.h>
#include <xxhash.h>
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "feedline/loader/codec.hpp"
#include "feedline/loader/gen.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/storage/device_reads.hpp"
#include "feedline/storage/registry.hpp"
#include "feedline/transports/cuda.hpp"
#include "feedline/transports/cufile.hpp"
#include "test_support.hpp"

using namespace feedline;
using namespace feedline::loader;
namespace cu = feedline::transports::cuda;
namespace cf = feedline::transports::cufile;

namespace {

// ---- a fake CUDA runtime: one or more "devices" whose memory is host memory -----------------

struct FakeCuda {
  int device_count = 1;
  int count_error = 0;         // cudaGetDeviceCount's status (35: no driver)
  int fail_memcpy_at = -1;     // the Nth cudaMemcpyAsync (0-based) fails with error 700
  int fail_host_register = 0;  // cudaHostRegister's status
  int copy_ms = 0;             // each copy "takes" this long (cudaEventSynchronize sleeps)
  int memcpy_async_calls = 0;
  std::uint64_t async_bytes = 0;
  int registered = 0;
  int unregistered = 0;
  int mallocs = 0;
  int frees = 0;
  std::size_t malloc_limit = 0;  // cudaMalloc of more bytes fails with error 2 (0: no limit)
};
FakeCuda g_fake;
std::mutex g_events_mu;
std::map<void*, double> g_event_time;  // ms on the host clock when each fake event was recorded

cu::CudaApi fake_api() {
  cu::CudaApi a;
  a.GetDeviceCount = [](int* n) {
    if (g_fake.count_error) return g_fake.count_error;  // leaves *n unwritten, as the real one does
    *n = g_fake.device_count;
    return 0;
  };
  a.DriverGetVersion = [](int* v) {
    *v = g_fake.count_error ? 0 : 12040;
    return 0;
  };
  a.RuntimeGetVersion = [](int* v) {
    *v = 12040;
    return 0;
  };
  a.GetDeviceProperties = [](void* p, int d) {
    std::snprintf(static_cast<char*>(p), 256, "Fake GPU %d", d);
    return 0;
  };
  a.DeviceGetAttribute = [](int* v, int attr, int) {
    *v = attr == cu::kDevAttrComputeCapabilityMajor ? 9 : attr == cu::kDevAttrPciBusId ? 0x17 : 0;
    return 0;
  };
  a.SetDevice = [](int d) { return d < g_fake.device_count ? 0 : 101; };
  a.MemGetInfo = [](std::size_t* f, std::size_t* t) {
    *f = *t = std::size_t{80} << 30;
    return 0;
  };
  a.Malloc = [](void** p, std::size_t n) {
    if (g_fake.malloc_limit && n > g_fake.malloc_limit) return 2;  // cudaErrorMemoryAllocation
    *p = std::aligned_alloc(4096, (n + 4095) / 4096 * 4096);
    ++g_fake.mallocs;
    return *p ? 0 : 2;
  };
  a.Free = [](void* p) {
    std::free(p);
    ++g_fake.frees;
    return 0;
  };
  a.HostAlloc = [](void** p, std::size_t n, unsigned) {
    *p = std::aligned_alloc(4096, (n + 4095) / 4096 * 4096);
    return *p ? 0 : 2;
  };
  a.FreeHost = [](void* p) {
    std::free(p);
    return 0;
  };
  a.HostRegister = [](void*, std::size_t, unsigned) {
    if (g_fake.fail_host_register) return g_fake.fail_host_register;
    ++g_fake.registered;
    return 0;
  };
  a.HostUnregister = [](void*) {
    ++g_fake.unregistered;
    return 0;
  };
  a.StreamCreateWithFlags = [](cu::Stream* s, unsigned) {
    *s = reinterpret_cast<cu::Stream>(std::uintptr_t{0x1000});
    return 0;
  };
  a.StreamDestroy = [](cu::Stream) { return 0; };
  a.StreamSynchronize = [](cu::Stream) { return 0; };
  a.Memcpy = [](void* d, const void* s, std::size_t n, int) {
    std::memcpy(d, s, n);
    return 0;
  };
  a.MemcpyAsync = [](void* d, const void* s, std::size_t n, int kind, cu::Stream) {
    if (g_fake.memcpy_async_calls++ == g_fake.fail_memcpy_at) return 700;
    if (kind != cu::kMemcpyHostToDevice) return 21;
    std::memcpy(d, s, n);
    g_fake.async_bytes += n;
    return 0;
  };
  // Events are distinct; recording one stamps the host clock (copies are synchronous here, so an
  // end event recorded after the memcpy times it).
  a.EventCreateWithFlags = [](cu::Event* e, unsigned) {
    std::lock_guard lock(g_events_mu);
    *e = reinterpret_cast<cu::Event>(std::uintptr_t{0x2000} + 16 * g_event_time.size());
    g_event_time[*e] = 0;
    return 0;
  };
  a.EventDestroy = [](cu::Event) { return 0; };
  a.EventRecord = [](cu::Event e, cu::Stream) {
    std::lock_guard lock(g_events_mu);
    g_event_time[e] = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
    return 0;
  };
  a.EventQuery = [](cu::Event) { return 0; };
  a.EventSynchronize = [](cu::Event) {
    if (g_fake.copy_ms) std::this_thread::sleep_for(std::chrono::milliseconds(g_fake.copy_ms));
    return 0;
  };
  a.EventElapsedTime = [](float* ms, cu::Event from, cu::Event to) {
    std::lock_guard lock(g_events_mu);
    *ms = static_cast<float>(g_event_time[to] - g_event_time[from]);
    return 0;
  };
  a.GetErrorString = [](int e) -> const char* {
    return e == 35    ? "CUDA driver version is insufficient for CUDA runtime version"
           : e == 700 ? "an illegal memory access was encountered"
                      : "fake error";
  };
  return a;
}

cf::CufileApi fake_cufile(int open_error) {
  static int s_open_error = 0;
  s_open_error = open_error;
  cf::CufileApi a;
  a.DriverOpen = [] { return cf::CUfileError{s_open_error, 0}; };
  a.DriverClose = [] { return cf::CUfileError{}; };
  return a;
}

// ---- a fake cuFile whose reads pread into the fake CUDA's "device memory" (host memory) --------

struct FakeCufile {
  std::mutex mu;
  std::map<void*, int> handles;  // handle -> our own plain descriptor of the registered file
  std::map<const void*, std::size_t> buffers;  // cuFileBufRegister'd regions
  int next_handle = 1;
  int handles_registered = 0;
  int handles_deregistered = 0;
  int buffers_registered = 0;
  int buffers_deregistered = 0;
  int reads = 0;
  int fail_read_at = -1;               // the Nth cuFileRead (0-based) returns -5011
  int reads_outside_buffers = 0;       // reads whose base is not a registered region
  int descriptors_without_direct = 0;  // files registered without O_DIRECT
  // The batch API: each batch's finished events, waiting for cuFileBatchIOGetStatus.
  struct Batch {
    unsigned capacity = 0;
    unsigned outstanding = 0;
    std::deque<cf::CUfileIOEvents> done;
  };
  std::map<void*, std::unique_ptr<Batch>> batches;
  int batch_setups = 0;
  int batch_destroys = 0;
  int batch_submits = 0;
  int bad_params = 0;         // a submission with the wrong mode/opcode, or over capacity
  int fail_setup = 0;         // cuFileBatchIOSetUp's error
  std::size_t short_cap = 0;  // batch reads return at most this many bytes (0: all)
};
FakeCufile g_cufile;

void reset_cufile() {
  std::lock_guard lock(g_cufile.mu);
  for (const auto& [h, fd] : g_cufile.handles) ::close(fd);
  g_cufile.handles.clear();
  g_cufile.buffers.clear();
  g_cufile.next_handle = 1;
  g_cufile.handles_registered = g_cufile.handles_deregistered = 0;
  g_cufile.buffers_registered = g_cufile.buffers_deregistered = 0;
  g_cufile.reads = 0;
  g_cufile.fail_read_at = -1;
  g_cufile.reads_outside_buffers = g_cufile.descriptors_without_direct = 0;
  g_cufile.batches.clear();
  g_cufile.batch_setups = g_cufile.batch_destroys = g_cufile.batch_submits = g_cufile.bad_params =
      0;
  g_cufile.fail_setup = 0;
  g_cufile.short_cap = 0;
}

// Checks a read's destination the way cuFile would see it (under g_cufile.mu).
void check_destination(const void* base, std::size_t n, off_t base_off) {
  auto b = g_cufile.buffers.find(base);
  if (b == g_cufile.buffers.end() || static_cast<std::size_t>(base_off) + n > b->second) {
    ++g_cufile.reads_outside_buffers;
  }
}

cf::CufileApi fake_gds(bool batch_api = false) {
  cf::CufileApi a;
  a.DriverOpen = [] { return cf::CUfileError{}; };
  a.DriverClose = [] { return cf::CUfileError{}; };
  a.HandleRegister = [](cf::Handle* fh, cf::CUfileDescr* d) {
    std::lock_guard lock(g_cufile.mu);
    if ((::fcntl(d->handle.fd, F_GETFL) & O_DIRECT) == 0) ++g_cufile.descriptors_without_direct;
    const int plain =
        ::open(fmt::format("/proc/self/fd/{}", d->handle.fd).c_str(), O_RDONLY | O_CLOEXEC);
    if (plain < 0) return cf::CUfileError{5030, 0};
    *fh = reinterpret_cast<cf::Handle>(static_cast<std::uintptr_t>(g_cufile.next_handle++));
    g_cufile.handles[*fh] = plain;
    ++g_cufile.handles_registered;
    return cf::CUfileError{};
  };
  a.HandleDeregister = [](cf::Handle fh) {
    std::lock_guard lock(g_cufile.mu);
    ::close(g_cufile.handles.at(fh));
    g_cufile.handles.erase(fh);
    ++g_cufile.handles_deregistered;
  };
  a.BufRegister = [](const void* base, std::size_t n, int) {
    std::lock_guard lock(g_cufile.mu);
    g_cufile.buffers[base] = n;
    ++g_cufile.buffers_registered;
    return cf::CUfileError{};
  };
  a.BufDeregister = [](const void* base) {
    std::lock_guard lock(g_cufile.mu);
    g_cufile.buffers.erase(base);
    ++g_cufile.buffers_deregistered;
    return cf::CUfileError{};
  };
  a.Read = [](cf::Handle fh, void* base, std::size_t n, off_t off, off_t base_off) -> ssize_t {
    int fd = -1;
    {
      std::lock_guard lock(g_cufile.mu);
      if (g_cufile.reads++ == g_cufile.fail_read_at) return -5011;
      check_destination(base, n, base_off);
      fd = g_cufile.handles.at(fh);
    }
    return ::pread(fd, static_cast<std::byte*>(base) + base_off, n, off);
  };
  if (!batch_api) return a;
  // The batch API: reads are done at submission; their events wait for GetStatus.
  a.BatchIOSetUp = [](cf::BatchHandle* h, unsigned nr) {
    std::lock_guard lock(g_cufile.mu);
    if (g_cufile.fail_setup) return cf::CUfileError{g_cufile.fail_setup, 0};
    auto b = std::make_unique<FakeCufile::Batch>();
    b->capacity = nr;
    *h = b.get();
    g_cufile.batches[*h] = std::move(b);
    ++g_cufile.batch_setups;
    return cf::CUfileError{};
  };
  a.BatchIOSubmit = [](cf::BatchHandle h, unsigned n, cf::CUfileIOParams* params, unsigned) {
    std::lock_guard lock(g_cufile.mu);
    auto& b = *g_cufile.batches.at(h);
    ++g_cufile.batch_submits;
    if (b.outstanding + n > b.capacity) {
      ++g_cufile.bad_params;
      return cf::CUfileError{5022, 0};
    }
    for (unsigned i = 0; i < n; ++i) {
      const cf::CUfileIOParams& p = params[i];
      if (p.mode != cf::kBatchMode || p.opcode != cf::kOpRead) ++g_cufile.bad_params;
      ++b.outstanding;
      if (g_cufile.reads++ == g_cufile.fail_read_at) {
        b.done.push_back({p.cookie, cf::kStatusFailed, static_cast<std::size_t>(-5011)});
        continue;
      }
      check_destination(p.batch.devPtr_base, p.batch.size, p.batch.devPtr_offset);
      std::size_t size = p.batch.size;
      if (g_cufile.short_cap) size = std::min(size, g_cufile.short_cap);
      const ssize_t got =
          ::pread(g_cufile.handles.at(p.fh),
                  static_cast<std::byte*>(p.batch.devPtr_base) + p.batch.devPtr_offset, size,
                  p.batch.file_offset);
      b.done.push_back({p.cookie, got < 0 ? cf::kStatusFailed : cf::kStatusComplete,
                        static_cast<std::size_t>(got)});
    }
    return cf::CUfileError{};
  };
  a.BatchIOGetStatus = [](cf::BatchHandle h, unsigned, unsigned* nr, cf::CUfileIOEvents* ev,
                          timespec*) {
    std::lock_guard lock(g_cufile.mu);
    auto& b = *g_cufile.batches.at(h);
    unsigned k = 0;
    while (k < *nr && !b.done.empty()) {
      ev[k++] = b.done.front();
      b.done.pop_front();
      --b.outstanding;
    }
    *nr = k;
    return cf::CUfileError{};
  };
  a.BatchIODestroy = [](cf::BatchHandle h) {
    std::lock_guard lock(g_cufile.mu);
    g_cufile.batches.erase(h);
    ++g_cufile.batch_destroys;
  };
  return a;
}

// A files-format dataset: n raw samples (uncompressed), sizes varying so slots differ.
struct Files {
  std::unique_ptr<storage::Backend> backend;
  Dataset dataset;
  std::map<std::string, std::vector<std::byte>> bytes_by_key;
  std::uint64_t digest_sum = 0;

  Files(std::string url, std::string root, std::size_t n, std::size_t size, bool direct = false) {
    storage::Registry registry;
    storage::register_builtin_backends(registry);
    storage::BackendConfig bc;
    bc.file.direct = direct;
    backend = std::move(registry.open(url, bc)->backend);
    for (std::size_t i = 0; i < n; ++i) {
      const std::string key = fmt::format("{}{:06}.bin", root, i);
      auto bytes = testing::pattern_bytes(size + (i % 5) * 1000 + i % 3, i + 11);
      REQUIRE(backend->write(key, bytes));
      digest_sum += XXH3_64bits(bytes.data(), bytes.size());
      bytes_by_key[fmt::format("{:06}", i)] = std::move(bytes);
    }
    DatasetOptions o;
    o.format = DatasetFormat::kFiles;
    auto d = open_dataset(*backend, root, o);
    REQUIRE(d);
    dataset = std::move(*d);
  }
};

LoaderConfig config(std::uint32_t batch, std::uint32_t epochs) {
  LoaderConfig c;
  c.sampler.batch_size = batch;
  c.sampler.epochs = epochs;
  c.sampler.seed = 3;
  c.memory_budget = 64 << 20;
  c.io_depth = 16;
  c.decode_threads = 2;
  return c;
}

struct RunResult {
  PipelineReport report;
  std::uint64_t samples = 0;
  std::uint64_t mismatches = 0;         // samples whose batch bytes differ from what was written
  std::uint64_t device_mismatches = 0;  // device copies that differ from the host batch
  std::uint64_t unaligned_slots = 0;
  std::uint64_t device_only_batches = 0;  // read straight into GPU memory (no host bytes)
  std::optional<Error> error;
};

// Opens a loader over the dataset and hands every batch to on_batch; the first error (opening,
// or a batch that failed) and the report come back.
template <class OnBatch>
void for_each_batch(storage::Backend& backend, const Dataset& dataset, const LoaderConfig& c,
                    std::optional<Error>& error, PipelineReport& report, OnBatch&& on_batch) {
  auto loader = Loader::open(backend, dataset, c);
  if (!loader) {
    error = loader.error();
    return;
  }
  for (;;) {
    auto b = (*loader)->next();
    if (!b) {
      error = b.error();
      break;
    }
    if (b->end()) break;
    on_batch(*b);
  }
  report = (*loader)->report();
}

RunResult run_and_check(Files& f, const LoaderConfig& c) {
  RunResult out;
  for_each_batch(*f.backend, f.dataset, c, out.error, out.report, [&](const Batch& batch) {
    const ConstBytes data = batch.data();
    // Read straight into (fake) GPU memory: the host batch is empty and the device copy is all.
    const bool device_only = data.empty() && batch.extent() > 0;
    if (device_only) ++out.device_only_batches;
    const auto* base =
        device_only ? static_cast<const std::byte*>(batch.device_data()) : data.data();
    for (const auto& s : batch.samples()) {
      ++out.samples;
      const auto& want = f.bytes_by_key.at(std::string(s.key));
      const auto m = batch.members_of(s);
      if (!base || m.size() != 1 || m[0].size != want.size() ||
          std::memcmp(base + m[0].offset, want.data(), want.size()) != 0) {
        ++out.mismatches;
      }
      if (s.offset % 4096 != 0) ++out.unaligned_slots;
    }
    if (device_only) {
      // checked above, through device_data()
    } else if (c.device.device >= 0) {
      const void* dev = batch.device_data();
      if (!dev || std::memcmp(dev, data.data(), data.size()) != 0) ++out.device_mismatches;
    } else if (batch.device_data()) {
      ++out.device_mismatches;
    }
  });
  if (!out.error && out.report.error) out.error = out.report.error;
  return out;
}

}  // namespace

TEST_CASE("cuda shim: any start-up error means no GPU, with the reason kept", "[gpu][shim]") {
  g_fake = FakeCuda{};
  g_fake.count_error = cu::kErrorInsufficientDriver;
  auto rt = cu::CudaRuntime::from_api(fake_api());
  CHECK_FALSE(rt->available());
  CHECK(rt->loaded());
  CHECK(rt->reason().find("35") != std::string::npos);
  CHECK(rt->reason().find("insufficient") != std::string::npos);
  CHECK(rt->devices().empty());

  g_fake = FakeCuda{};
  g_fake.device_count = 0;
  rt = cu::CudaRuntime::from_api(fake_api());
  CHECK_FALSE(rt->available());
  CHECK(rt->reason().find("no CUDA device") != std::string::npos);

  g_fake = FakeCuda{};
  g_fake.device_count = 2;
  rt = cu::CudaRuntime::from_api(fake_api());
  REQUIRE(rt->available());
  REQUIRE(rt->devices().size() == 2);
  CHECK(rt->devices()[1].name == "Fake GPU 1");
  CHECK(rt->devices()[0].cc_major == 9);
  CHECK(rt->devices()[0].pci_bus_id == "0000:17:00.0");
  CHECK(rt->devices()[0].total_memory == std::uint64_t{80} << 30);
  CHECK(cu::version_string(rt->driver_version()) == "12.4");

  auto none = cu::CudaRuntime::unavailable("libcudart not found");
  CHECK_FALSE(none->available());
  CHECK_FALSE(none->loaded());
}

TEST_CASE("cuda shim: the real library on this machine loads or says why not", "[gpu][shim]") {
  // Where a libcudart is installed, it has every entry point the shim needs (a missing one would
  // read as "no GPU" on a machine that has one).
  auto api = cu::load_api();
  if (!api) {
    INFO(api.error().message());
    CHECK(api.error().message().find("has no symbol") == std::string::npos);
  }
  auto rt = cu::CudaRuntime::load();  // never throws or crashes, GPU or not
  if (!rt->available()) {
    CHECK_FALSE(rt->reason().empty());
  } else {
    CHECK_FALSE(rt->devices().empty());
  }
}

TEST_CASE("cuda shim: device names parse", "[gpu][shim]") {
  CHECK(cu::parse_device("cuda:0").value() == 0);
  CHECK(cu::parse_device("cuda:12").value() == 12);
  CHECK(cu::parse_device("cuda").value() == 0);
  CHECK(cu::parse_device("cpu").value() == -1);
  CHECK(cu::parse_device("").value() == -1);
  CHECK_FALSE(cu::parse_device("foo"));
  CHECK_FALSE(cu::parse_device("cuda:"));
  CHECK_FALSE(cu::parse_device("cuda:-1"));
  CHECK_FALSE(cu::parse_device("cuda:1x"));
}

TEST_CASE("cufile shim: missing, driver refused, compat mode, full GDS", "[gpu][shim]") {
  auto missing = cf::CufileRuntime::unavailable("libcufile not found");
  CHECK_FALSE(missing->available());

  auto refused = cf::CufileRuntime::from_api(fake_cufile(5001), "fake", true);
  CHECK_FALSE(refused->available());
  CHECK(refused->reason().find("5001") != std::string::npos);

  auto compat = cf::CufileRuntime::from_api(fake_cufile(0), "fake", false);
  CHECK(compat->available());
  CHECK(compat->compat_mode());
  CHECK(compat->reason().find("compatibility") != std::string::npos);
  CHECK_FALSE(compat->batch_api());

  auto gds = cf::CufileRuntime::from_api(fake_cufile(0), "fake", true);
  CHECK(gds->available());
  CHECK_FALSE(gds->compat_mode());
}

TEST_CASE("data path plan: host-direct where samples need no decode, bounce otherwise",
          "[gpu][plan]") {
  Files f("mem://p/", "p/", 8, 5000);
  LoaderConfig c = config(4, 1);
  c.gpu_direct = GpuDirect::kAuto;
  auto plan = plan_data_path(f.dataset, c, *f.backend).value();
  CHECK(data_path_name(plan.path) == "host-direct");
  CHECK(reads_into_slot(plan.path));

  c.gpu_direct = GpuDirect::kOff;
  plan = plan_data_path(f.dataset, c, *f.backend).value();
  CHECK(data_path_name(plan.path) == "bounce");
  CHECK_FALSE(reads_into_slot(plan.path));

  // Two members per sample (a tar-like layout): auto falls back and says why; on refuses.
  Dataset two = f.dataset;
  two.members.push_back(two.members.front());
  two.samples.front().member_count = 2;
  two.samples.front().first_member = static_cast<std::uint32_t>(two.members.size() - 2);
  c.gpu_direct = GpuDirect::kAuto;
  plan = plan_data_path(two, c, *f.backend).value();
  CHECK(data_path_name(plan.path) ==
        "decode-in-place");  // every decoded size is known: decode writes into the slot
  CHECK(plan.path == DataPath::kDecodeInPlace);
  CHECK_FALSE(reads_into_slot(plan.path));
  CHECK(plan.reason.find("several members") != std::string::npos);
  c.gpu_direct = GpuDirect::kOff;
  plan = plan_data_path(two, c, *f.backend).value();
  CHECK(data_path_name(plan.path) == "bounce");
  CHECK(plan.path != DataPath::kDecodeInPlace);
  c.gpu_direct = GpuDirect::kOn;
  auto refused = plan_data_path(two, c, *f.backend);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::kInvalidArgument);

  Dataset zst = f.dataset;
  zst.members.front().name += ".zst";    // a zstd member to the default decoders
  zst.members.front().decoded_size = 0;  // unknown, as without an index
  c.gpu_direct = GpuDirect::kAuto;
  plan = plan_data_path(zst, c, *f.backend).value();
  CHECK(plan.reason.find("zstd") != std::string::npos);
  CHECK(data_path_name(plan.path) ==
        "bounce");  // a zstd member of unknown decoded size (no index): no slot layout
  zst.members.front().decoded_size = 12345;
  plan = plan_data_path(zst, c, *f.backend).value();
  CHECK(data_path_name(plan.path) == "decode-in-place");
}

namespace {
// Every batch of a run, as (sample key -> member name -> bytes), plus the report.
struct Delivered {
  std::map<std::string, std::map<std::string, std::vector<std::byte>>> samples;
  PipelineReport report;
  std::optional<Error> error;
};
Delivered deliver_all(storage::Backend& backend, const Dataset& dataset, const LoaderConfig& c) {
  Delivered out;
  for_each_batch(backend, dataset, c, out.error, out.report, [&](const Batch& batch) {
    const ConstBytes data = batch.data();
    for (const auto& s : batch.samples()) {
      for (const auto& m : batch.members_of(s)) {
        out.samples[std::string(s.key)][std::string(m.name)].assign(
            data.data() + m.offset, data.data() + m.offset + m.size);
      }
    }
  });
  return out;
}
}  // namespace

TEST_CASE("decode in place: zstd tar samples decoded straight into their batch slot",
          "[gpu][decode]") {
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto backend = std::move(registry.open("mem://z/", {})->backend);
  GenConfig g;
  g.format = DatasetFormat::kTar;
  g.samples = 300;
  g.samples_per_shard = 64;
  g.sample_size = SizeDistribution::parse("normal:20000:6000").value();
  // zstd members where this build has zstd; otherwise stored members, which decode copies in.
  g.compress = CompressionSpec::parse(zstd_available() ? "zstd:3" : "none").value();
  g.compressibility = 0.5;
  const GenSummary written = generate_dataset(*backend, "z", g).value();
  DatasetOptions o;
  o.format = DatasetFormat::kTar;
  const Dataset dataset = open_dataset(*backend, "z", o).value();
  REQUIRE(dataset.indexed);

  LoaderConfig c = config(16, 1);
  c.gpu_direct = GpuDirect::kAuto;
  const Delivered in_place = deliver_all(*backend, dataset, c);
  c.gpu_direct = GpuDirect::kOff;
  const Delivered bounce = deliver_all(*backend, dataset, c);
  REQUIRE_FALSE(in_place.error);
  REQUIRE_FALSE(bounce.error);
  CHECK(in_place.report.delivered.digest ==
        written.digest);  // gen's own digest: independent of the loader
  CHECK(bounce.report.delivered.digest == written.digest);
  CHECK(in_place.samples.size() == 300);
  CHECK(in_place.samples == bounce.samples);  // every member's bytes, under every key
  const auto& p = in_place.report.data_path;
  CHECK(data_path_name(p.path) == "decode-in-place");
  CHECK(p.copied_bytes > 0);
  CHECK(bounce.report.data_path.copy_amplification >= 1.0);
  if (!zstd_available()) {
    CHECK(p.copy_amplification == 1.0);  // every member stored: decode copies each in once
    return;
  }
  // Only the stored .cls labels are copied; the bounce path copies everything at least once.
  CHECK(p.copy_amplification < 0.01);

  // A stale index (a member's decoded size off by one) fails the run naming the shard and what
  // to do; --on-error skip skips just that sample.
  Dataset stale = dataset;
  for (auto& m : stale.members) {
    if (m.name.ends_with(".zst")) {
      ++m.decoded_size;
      break;
    }
  }
  c.gpu_direct = GpuDirect::kAuto;
  const Delivered bad = deliver_all(*backend, stale, c);
  REQUIRE(bad.error);
  CHECK(bad.error->message().find("index says") != std::string::npos);
  CHECK(bad.error->object().find(backend->display_name("z/")) == 0);  // mem://z/...
  CHECK(bad.error->hint().find(".idx") != std::string::npos);
  c.on_error = OnError::kSkip;
  const Delivered skipped = deliver_all(*backend, stale, c);
  REQUIRE_FALSE(skipped.error);
  CHECK(skipped.report.delivered.skipped == 1);
  CHECK(skipped.samples.size() == 299);
}

TEST_CASE("data path plan with a device: no GPU, no cuFile, compat mode, --gpu-direct on",
          "[gpu][plan]") {
  Files f("mem://q/", "q/", 8, 5000);
  LoaderConfig c = config(4, 1);
  c.gpu_direct = GpuDirect::kAuto;
  c.device.device = 0;

  g_fake = FakeCuda{};
  g_fake.count_error = cu::kErrorInsufficientDriver;
  c.device.cuda = cu::CudaRuntime::from_api(fake_api());
  c.device.cufile = cf::CufileRuntime::unavailable("libcufile not found");
  auto nogpu = plan_data_path(f.dataset, c, *f.backend);
  REQUIRE_FALSE(nogpu);
  CHECK(nogpu.error().code() == Errc::kUnsupported);
  CHECK(nogpu.error().message().find("35") != std::string::npos);

  g_fake = FakeCuda{};
  c.device.cuda = cu::CudaRuntime::from_api(fake_api());
  c.device.device = 3;
  auto nodev = plan_data_path(f.dataset, c, *f.backend);
  REQUIRE_FALSE(nodev);
  CHECK(nodev.error().code() == Errc::kInvalidArgument);
  c.device.device = 0;

  // Memory storage cannot read into GPU memory, whatever cuFile can do.
  c.device.cufile = cf::CufileRuntime::from_api(fake_gds(), "fake", true);
  auto plan = plan_data_path(f.dataset, c, *f.backend).value();
  CHECK(data_path_name(plan.path) == "bounce");
  CHECK(reads_into_slot(plan.path));  // staged straight into the pinned batch slot
  CHECK_FALSE(reads_into_device(plan.path));
  CHECK(plan.reason.find("mem:// storage cannot read into GPU memory") != std::string::npos);

  // Local files: it depends on cuFile.
  const auto dir = testing::scratch_dir("plan-files");
  Files local(dir.string(), dir.string() + "/", 8, 5000);
  c.device.cufile = cf::CufileRuntime::unavailable("libcufile not found");
  plan = plan_data_path(local.dataset, c, *local.backend).value();
  CHECK(data_path_name(plan.path) == "bounce");
  CHECK(plan.reason.find("cuFile unavailable") != std::string::npos);

  c.device.cufile = cf::CufileRuntime::from_api(fake_cufile(0), "fake", false);
  plan = plan_data_path(local.dataset, c, *local.backend).value();
  CHECK(data_path_name(plan.path) == "bounce");
  CHECK(plan.reason.find("compatibility mode") != std::string::npos);

  // --gpu-direct on with cuFile in compatibility mode: cuFile runs, and says it copies.
  c.gpu_direct = GpuDirect::kOn;
  plan = plan_data_path(local.dataset, c, *local.backend).value();
  CHECK(data_path_name(plan.path) == "cufile-compat");
  CHECK(reads_into_device(plan.path));

  c.device.cufile = cf::CufileRuntime::from_api(fake_gds(), "fake", true);
  for (const GpuDirect mode : {GpuDirect::kAuto, GpuDirect::kOn}) {
    c.gpu_direct = mode;
    plan = plan_data_path(local.dataset, c, *local.backend).value();
    CHECK(data_path_name(plan.path) == "gpu-direct");
    CHECK(reads_into_slot(plan.path));
    CHECK(reads_into_device(plan.path));
  }
  c.gpu_direct = GpuDirect::kOff;
  plan = plan_data_path(local.dataset, c, *local.backend).value();
  CHECK(data_path_name(plan.path) == "bounce");
  CHECK_FALSE(reads_into_device(plan.path));

  // Not possible and asked for: refused, with the reason.
  c.gpu_direct = GpuDirect::kOn;
  c.device.cufile = cf::CufileRuntime::unavailable("libcufile not found");
  auto on = plan_data_path(local.dataset, c, *local.backend);
  std::filesystem::remove_all(dir);
  REQUIRE_FALSE(on);
  CHECK(on.error().message().find("{gpu_direct=on}") != std::string::npos);
  CHECK(on.error().message().find("libcufile not found") != std::string::npos);
}

TEST_CASE("gpu-direct: cuFile reads land in their slots in GPU memory, nothing copied",
          "[gpu][cufile]") {
  const bool batch_api = GENERATE(false, true);
  INFO("cuFile batch API: " << batch_api);
  const auto dir = testing::scratch_dir("gpu-direct");
  Files f(dir.string(), dir.string() + "/", 150, 9000);
  g_fake = FakeCuda{};
  reset_cufile();
  LoaderConfig c = config(16, 2);
  c.gpu_direct = GpuDirect::kAuto;
  c.device.device = 0;
  c.device.cuda = cu::CudaRuntime::from_api(fake_api());
  c.device.cufile = cf::CufileRuntime::from_api(fake_gds(batch_api), "fake", true);
  RunResult r = run_and_check(f, c);
  std::filesystem::remove_all(dir);
  REQUIRE_FALSE(r.error);
  CHECK(r.samples == 300);
  CHECK(r.mismatches == 0);  // every sample's bytes, read back from its slot in "GPU memory"
  CHECK(r.device_only_batches == r.report.consumer.batches);
  CHECK(r.unaligned_slots == 0);
  const auto& p = r.report.data_path;
  CHECK(data_path_name(p.path) == "gpu-direct");
  CHECK(p.bytes == r.report.consumer.bytes);
  CHECK(p.copied_bytes == 0);
  CHECK(p.copy_amplification == 0.0);
  // No host copy of any kind: no H2D copy, no device stage, nothing the host could hash.
  CHECK(g_fake.memcpy_async_calls == 0);
  CHECK(r.report.device.enabled);
  CHECK(r.report.device.h2d_bytes == 0);
  CHECK(r.report.device.host_memory.find("not used") == 0);
  for (const auto& s : r.report.stages) CHECK(s.stage != StageId::kDevice);
  CHECK_FALSE(r.report.delivered.digest_computed);
  // cuFile saw every sample read, into registered buffers, through O_DIRECT descriptors; every
  // registration was undone and every device buffer freed.
  CHECK(g_cufile.reads >= 300);
  CHECK(g_cufile.reads_outside_buffers == 0);
  CHECK(g_cufile.descriptors_without_direct == 0);
  CHECK(g_cufile.buffers_registered == static_cast<int>(r.report.io.batch_buffers));
  CHECK(g_cufile.buffers_deregistered == g_cufile.buffers_registered);
  CHECK(g_cufile.handles_registered >= 150);
  CHECK(g_cufile.handles_deregistered == g_cufile.handles_registered);
  CHECK(g_fake.frees == g_fake.mallocs);
  // The batch API where the library has it: reads submitted in batches, every batch destroyed.
  std::string notes;
  for (const auto& n : r.report.data_path.notes) notes += n + "\n";
  INFO(notes);
  CHECK((notes.find("batch-api") != std::string::npos) == batch_api);
  CHECK((g_cufile.batch_submits > 0) == batch_api);
  CHECK(g_cufile.bad_params == 0);
  CHECK(g_cufile.batch_destroys == g_cufile.batch_setups);
}

TEST_CASE("gpu-direct, batch API: short reads are finished, a failed set-up falls back to threads",
          "[gpu][cufile]") {
  const auto dir = testing::scratch_dir("gpu-batch");
  Files f(dir.string(), dir.string() + "/", 50, 9000);
  g_fake = FakeCuda{};
  reset_cufile();
  g_cufile.short_cap = 4096;  // every batch read returns at most one page: the rest goes in again
  LoaderConfig c = config(8, 1);
  c.gpu_direct = GpuDirect::kAuto;
  c.device.device = 0;
  c.device.cuda = cu::CudaRuntime::from_api(fake_api());
  c.device.cufile = cf::CufileRuntime::from_api(fake_gds(true), "fake", true);
  RunResult r = run_and_check(f, c);
  REQUIRE_FALSE(r.error);
  CHECK(r.samples == 50);
  CHECK(r.mismatches == 0);
  CHECK(r.report.io.stats.retries > 0);  // the continuations are counted like short-read resubmits
  CHECK(g_cufile.reads > 100);

  reset_cufile();
  g_cufile.fail_setup = 5039;  // e.g. CU_FILE_INTERNAL_BATCH_SETUP_ERROR
  RunResult fb = run_and_check(f, c);
  std::filesystem::remove_all(dir);
  REQUIRE_FALSE(fb.error);
  CHECK(fb.samples == 50);
  CHECK(fb.mismatches == 0);
  std::string notes;
  for (const auto& n : fb.report.data_path.notes) notes += n + "\n";
  INFO(notes);
  CHECK(notes.find("cuFileBatchIOSetUp") != std::string::npos);
  CHECK(notes.find("threads=") != std::string::npos);
  CHECK(g_cufile.batch_submits == 0);
}

TEST_CASE("cufile-compat: --gpu-direct on runs cuFile in compatibility mode and counts its copy",
          "[gpu][cufile]") {
  const auto dir = testing::scratch_dir("cufile-compat");
  Files f(dir.string(), dir.string() + "/", 40, 5000);
  g_fake = FakeCuda{};
  reset_cufile();
  LoaderConfig c = config(8, 1);
  c.gpu_direct = GpuDirect::kOn;
  c.device.device = 0;
  c.device.cuda = cu::CudaRuntime::from_api(fake_api());
  c.device.cufile = cf::CufileRuntime::from_api(fake_gds(), "fake", false);
  RunResult r = run_and_check(f, c);
  std::filesystem::remove_all(dir);
  REQUIRE_FALSE(r.error);
  CHECK(r.samples == 40);
  CHECK(r.mismatches == 0);
  const auto& p = r.report.data_path;
  CHECK(data_path_name(p.path) == "cufile-compat");
  CHECK(p.copy_amplification == 1.0);
  CHECK(r.report.data_path.reason.find("compatibility mode") != std::string::npos);
}

TEST_CASE("gpu-direct: a cuFile read error mid-run ends the run naming the object, no hang",
          "[gpu][cufile]") {
  const bool batch_api = GENERATE(false, true);
  INFO("cuFile batch API: " << batch_api);
  const auto dir = testing::scratch_dir("cufile-error");
  Files f(dir.string(), dir.string() + "/", 60, 4000);
  g_fake = FakeCuda{};
  reset_cufile();
  g_cufile.fail_read_at = 7;
  LoaderConfig c = config(8, 1);
  c.gpu_direct = GpuDirect::kAuto;
  c.device.device = 0;
  c.device.cuda = cu::CudaRuntime::from_api(fake_api());
  c.device.cufile = cf::CufileRuntime::from_api(fake_gds(batch_api), "fake", true);
  RunResult r = run_and_check(f, c);
  REQUIRE(r.error);
  CHECK(r.error->message().find("cuFile error 5011") != std::string::npos);
  CHECK(r.error->object().find(dir.string()) == 0);
  CHECK(r.samples < 60);
  CHECK(g_cufile.handles_deregistered == g_cufile.handles_registered);
  CHECK(g_cufile.buffers_deregistered == g_cufile.buffers_registered);

  // With --on-error skip the failed sample is skipped and counted; the rest arrive intact.
  g_cufile.fail_read_at = g_cufile.reads + 3;
  c.on_error = OnError::kSkip;
  RunResult s = run_and_check(f, c);
  std::filesystem::remove_all(dir);
  REQUIRE_FALSE(s.error);
  CHECK(s.report.delivered.skipped == 1);
  CHECK(s.samples == 59);
  CHECK(s.mismatches == 0);
}

TEST_CASE(
    "gpu-direct: batch buffers too large for GPU memory are refused at open, with what to lower",
    "[gpu][cufile]") {
  const auto dir = testing::scratch_dir("gpu-oom");
  Files f(dir.string(), dir.string() + "/", 16, 9000);
  g_fake = FakeCuda{};
  g_fake.malloc_limit = 64 << 10;  // a "GPU" with room for 64 KiB per buffer
  reset_cufile();
  LoaderConfig c = config(16, 1);
  c.gpu_direct = GpuDirect::kAuto;
  c.device.device = 0;
  c.device.cuda = cu::CudaRuntime::from_api(fake_api());
  c.device.cufile = cf::CufileRuntime::from_api(fake_gds(), "fake", true);
  auto l = Loader::open(*f.backend, f.dataset, c);
  std::filesystem::remove_all(dir);
  REQUIRE_FALSE(l);
  CHECK(l.error().message().find("cudaMalloc") != std::string::npos);
  CHECK(l.error().hint().find("{batch_size}") != std::string::npos);
  CHECK(g_fake.frees == g_fake.mallocs);
}

TEST_CASE("storage: only local files offer reads into GPU memory", "[gpu][cufile]") {
  Files m("mem://n/", "n/", 1, 100);
  CHECK_FALSE(m.backend->caps().device_reads);
  storage::QueueOptions device;
  device.memory = storage::QueueMemory::kDevice;
  device.device_reads =
      storage::make_device_reads(cf::CufileRuntime::from_api(fake_gds(), "fake", true));
  auto q = m.backend->make_queue(device);
  REQUIRE_FALSE(q);
  CHECK(q.error().code() == Errc::kUnsupported);
  CHECK(q.error().message().find("mem://") != std::string::npos);

  const auto dir = testing::scratch_dir("device-queue");
  Files f(dir.string(), dir.string() + "/", 1, 100);
  CHECK(f.backend->caps().device_reads);
  device.device_reads =
      storage::make_device_reads(cf::CufileRuntime::unavailable("libcufile not found"));
  auto none = f.backend->make_queue(device);
  std::filesystem::remove_all(dir);
  REQUIRE_FALSE(none);
  CHECK(none.error().message().find("libcufile not found") != std::string::npos);
}

TEST_CASE("direct path: batches hold the exact bytes, nothing copied (memory backend)",
          "[gpu][direct]") {
  Files f("mem://d/", "d/", 150, 9000);
  LoaderConfig c = config(16, 2);
  c.gpu_direct = GpuDirect::kAuto;
  RunResult r = run_and_check(f, c);
  REQUIRE_FALSE(r.error);
  CHECK(r.samples == 300);
  CHECK(r.mismatches == 0);
  CHECK(r.unaligned_slots == 0);
  CHECK(r.report.delivered.digest == 2 * f.digest_sum);
  CHECK(data_path_name(r.report.data_path.path) == "host-direct");
  CHECK(r.report.data_path.copied_bytes == 0);
  CHECK(r.report.data_path.copy_amplification == 0.0);
  CHECK(r.report.data_path.bytes == r.report.consumer.bytes);

  // The bounce path delivers the same bytes and says what it copied.
  c.gpu_direct = GpuDirect::kOff;
  RunResult b = run_and_check(f, c);
  REQUIRE_FALSE(b.error);
  CHECK(b.mismatches == 0);
  CHECK(b.report.delivered.digest == r.report.delivered.digest);
  CHECK(data_path_name(b.report.data_path.path) == "bounce");
  CHECK(b.report.data_path.copy_amplification >= 1.0);
}

TEST_CASE("direct path: O_DIRECT files land in their slots with no bounce copy", "[gpu][direct]") {
  const auto dir = testing::scratch_dir("direct-path");
  Files f(dir.string(), dir.string() + "/", 60, 20000, /*direct=*/true);
  LoaderConfig c = config(8, 1);
  c.gpu_direct = GpuDirect::kOn;
  RunResult r = run_and_check(f, c);
  std::filesystem::remove_all(dir);
  REQUIRE_FALSE(r.error);
  CHECK(r.samples == 60);
  CHECK(r.mismatches == 0);
  CHECK(r.report.io.stats.bounced_bytes == 0);
  CHECK(data_path_name(r.report.data_path.path) == "host-direct");
  CHECK(r.report.data_path.copy_amplification == 0.0);
  CHECK(r.report.delivered.digest == f.digest_sum);
}

TEST_CASE("direct path: small budget, batches that outgrow their buffers, several epochs",
          "[gpu][direct]") {
  Files f("mem://g/", "g/", 97, 30000);
  LoaderConfig c = config(32, 3);
  c.memory_budget = 12 << 20;  // too small to size every buffer for the worst batch
  c.prefetch_batches = 1;
  c.gpu_direct = GpuDirect::kAuto;
  RunResult r = run_and_check(f, c);
  REQUIRE_FALSE(r.error);
  CHECK(r.samples == 3 * 97);
  CHECK(r.mismatches == 0);
  CHECK(r.report.delivered.digest == 3 * f.digest_sum);
  CHECK(r.report.data_path.copy_amplification == 0.0);
}

TEST_CASE("device sink over a fake GPU: every batch copied, pinned, in order", "[gpu][device]") {
  Files f("mem://s/", "s/", 120, 7000);
  for (const GpuDirect mode : {GpuDirect::kAuto, GpuDirect::kOff}) {
    g_fake = FakeCuda{};
    LoaderConfig c = config(16, 2);
    c.gpu_direct = mode;
    c.device.device = 0;
    c.device.streams = 3;
    c.device.calibrate = mode == GpuDirect::kAuto;
    c.device.cuda = cu::CudaRuntime::from_api(fake_api());
    c.device.cufile = cf::CufileRuntime::unavailable("libcufile not found");
    RunResult r = run_and_check(f, c);
    REQUIRE_FALSE(r.error);
    CHECK(r.samples == 240);
    CHECK(r.mismatches == 0);
    CHECK(r.device_mismatches == 0);
    CHECK(r.report.delivered.digest == 2 * f.digest_sum);
    const DeviceReport& d = r.report.device;
    CHECK(d.enabled);
    CHECK(d.name == "Fake GPU 0");
    CHECK(d.copies == r.report.consumer.batches);
    CHECK(d.h2d_bytes == g_fake.async_bytes);
    CHECK(d.h2d_bytes_per_second > 0);
    CHECK(d.host_memory.find("pinned") == 0);
    CHECK((mode == GpuDirect::kAuto) == (d.peak_bytes_per_second > 0));
    CHECK(g_fake.registered > 0);
    CHECK(g_fake.unregistered == g_fake.registered);  // every pinned buffer unpinned at the end
    CHECK(g_fake.frees == g_fake.mallocs);            // and every device buffer freed
    const auto& p = r.report.data_path;
    CHECK(data_path_name(p.path) == "bounce");
    // Direct staging: the H2D copy is the only copy. Collate copies add at least one more.
    if (mode == GpuDirect::kAuto) {
      CHECK(p.copied_bytes == d.h2d_bytes);
    } else {
      CHECK(p.copy_amplification >= 1.0);
      CHECK(p.copied_bytes > d.h2d_bytes);
    }
    bool has_device_stage = false;
    for (const auto& s : r.report.stages)
      has_device_stage = has_device_stage || s.stage == StageId::kDevice;
    CHECK(has_device_stage);
  }
}

TEST_CASE("device sink: an error mid-copy ends the run with the CUDA error, no hang",
          "[gpu][device]") {
  Files f("mem://e/", "e/", 100, 4000);
  g_fake = FakeCuda{};
  g_fake.fail_memcpy_at = 2;
  LoaderConfig c = config(10, 1);
  c.gpu_direct = GpuDirect::kAuto;
  c.device.device = 0;
  c.device.calibrate = false;
  c.device.cuda = cu::CudaRuntime::from_api(fake_api());
  c.device.cufile = cf::CufileRuntime::unavailable("none");
  RunResult r = run_and_check(f, c);
  REQUIRE(r.error);
  CHECK(r.error->message().find("cudaMemcpyAsync") != std::string::npos);
  CHECK(r.error->message().find("700") != std::string::npos);
  CHECK(r.samples <= 20);
  CHECK(g_fake.unregistered == g_fake.registered);
}

TEST_CASE("device sink: pinning refused leaves pageable copies that still work", "[gpu][device]") {
  Files f("mem://h/", "h/", 40, 3000);
  g_fake = FakeCuda{};
  g_fake.fail_host_register = 2;  // cudaErrorMemoryAllocation
  LoaderConfig c = config(8, 1);
  c.device.device = 0;
  c.device.calibrate = false;
  c.device.cuda = cu::CudaRuntime::from_api(fake_api());
  c.device.cufile = cf::CufileRuntime::unavailable("none");
  RunResult r = run_and_check(f, c);
  REQUIRE_FALSE(r.error);
  CHECK(r.device_mismatches == 0);
  CHECK(r.report.device.host_memory.find("pageable") == 0);
  CHECK(r.report.device.host_memory.find("cudaHostRegister") != std::string::npos);
}

TEST_CASE("device sink: a device that does not exist is refused at open", "[gpu][device]") {
  Files f("mem://x/", "x/", 4, 1000);
  g_fake = FakeCuda{};
  LoaderConfig c = config(2, 1);
  c.device.device = 7;
  c.device.cuda = cu::CudaRuntime::from_api(fake_api());
  c.device.cufile = cf::CufileRuntime::unavailable("none");
  auto l = Loader::open(*f.backend, f.dataset, c);
  REQUIRE_FALSE(l);
  CHECK(l.error().message().find("cuda:7") != std::string::npos);
}

TEST_CASE("device sink: slow copies are named as the bottleneck", "[gpu][device]") {
  Files f("mem://v/", "v/", 64, 2000);
  g_fake = FakeCuda{};
  g_fake.copy_ms = 50;  // a PCIe link far slower than the memory backend
  LoaderConfig c = config(8, 1);
  c.device.device = 0;
  c.device.streams = 1;
  c.device.calibrate = false;
  c.device.cuda = cu::CudaRuntime::from_api(fake_api());
  c.device.cufile = cf::CufileRuntime::unavailable("none");
  RunResult r = run_and_check(f, c);
  REQUIRE_FALSE(r.error);
  INFO(fmt::format("waited {:.3f} s (first batch {:.3f} s), on copies {:.3f} s; verdict {}: {}",
                   r.report.consumer.wait_seconds, r.report.consumer.first_batch_seconds,
                   r.report.device.consumer_wait_on_copy_seconds,
                   r.report.verdict.stage ? stage_name(*r.report.verdict.stage) : "none",
                   r.report.verdict.evidence));
  CHECK(r.report.device.consumer_wait_on_copy_seconds > 0.1);
  CHECK(r.report.verdict.stage == StageId::kDevice);
  REQUIRE_FALSE(r.report.verdict.next.empty());
  CHECK(r.report.verdict.next.front().knob == Knob::kCudaStreams);
  CHECK(r.report.verdict.next.front().from == 1);
}
