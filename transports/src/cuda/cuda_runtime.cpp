// libcudart through dlopen (see cuda.hpp). No CUDA header is included: the table's stand-in
// types match the real ABI, and each entry point is resolved by name.
#include "feedline/transports/cuda.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "detail/dl.hpp"

namespace feedline::transports::cuda {

const std::vector<std::string>& cudart_sonames() {
  static const std::vector<std::string> names = {"libcudart.so.13", "libcudart.so.12",
                                                 "libcudart.so.11.0", "libcudart.so"};
  return names;
}

using detail::resolve;

Result<LoadedApi> load_api() {
  FEEDLINE_ASSIGN_OR_RETURN(
      detail::OpenedLibrary opened,
      detail::open_first(cudart_sonames(), "libcudart",
                         "install the CUDA runtime, or add its lib64 folder to LD_LIBRARY_PATH"));
  void* lib = opened.handle;
  const std::string& soname = opened.soname;
  // The library stays loaded for the life of the process (see cuda.hpp).
  LoadedApi out;
  out.library = soname;
  CudaApi& a = out.api;
  bool ok = true;
  const char* missing = nullptr;
  auto need = [&](const char* name, auto& fn) {
    if (!resolve(lib, name, fn) && ok) {
      ok = false;
      missing = name;
    }
  };
  need("cudaGetDeviceCount", a.GetDeviceCount);
  need("cudaDriverGetVersion", a.DriverGetVersion);
  need("cudaRuntimeGetVersion", a.RuntimeGetVersion);
  need("cudaDeviceGetAttribute", a.DeviceGetAttribute);
  need("cudaSetDevice", a.SetDevice);
  need("cudaMemGetInfo", a.MemGetInfo);
  need("cudaMalloc", a.Malloc);
  need("cudaFree", a.Free);
  need("cudaHostAlloc", a.HostAlloc);
  need("cudaFreeHost", a.FreeHost);
  need("cudaHostRegister", a.HostRegister);
  need("cudaHostUnregister", a.HostUnregister);
  need("cudaStreamCreateWithFlags", a.StreamCreateWithFlags);
  need("cudaStreamDestroy", a.StreamDestroy);
  need("cudaStreamSynchronize", a.StreamSynchronize);
  need("cudaMemcpy", a.Memcpy);
  need("cudaMemcpyAsync", a.MemcpyAsync);
  need("cudaEventCreateWithFlags", a.EventCreateWithFlags);
  need("cudaEventDestroy", a.EventDestroy);
  need("cudaEventRecord", a.EventRecord);
  need("cudaEventQuery", a.EventQuery);
  need("cudaEventSynchronize", a.EventSynchronize);
  need("cudaEventElapsedTime", a.EventElapsedTime);
  need("cudaGetErrorString", a.GetErrorString);
  if (!ok) {
    return fail(Errc::kUnsupported,
                fmt::format("{} has no symbol {} (too old a CUDA runtime?)", soname, missing));
  }
  // CUDA 12 renamed the properties call (the old name keeps an older struct layout); only the
  // name, the struct's first field, is read, so either works.
  if (!resolve(lib, "cudaGetDeviceProperties_v2", a.GetDeviceProperties)) {
    resolve(lib, "cudaGetDeviceProperties", a.GetDeviceProperties);
  }
  return out;
}

Result<double> h2d_bandwidth(const CudaRuntime& cuda, int device, std::uint64_t bytes, int reps,
                             bool pinned) {
  if (!cuda.available()) return fail(Errc::kUnsupported, "no GPU: " + cuda.reason());
  const CudaApi& a = cuda.api();
  FEEDLINE_TRY(cuda.check(a.SetDevice(device), "cudaSetDevice"));
  void* host = nullptr;
  std::unique_ptr<std::byte, void (*)(std::byte*)> pageable(nullptr,
                                                            [](std::byte* p) { std::free(p); });
  if (pinned) {
    FEEDLINE_TRY(cuda.check(a.HostAlloc(&host, bytes, kHostAllocPortable), "cudaHostAlloc"));
  } else {
    pageable.reset(static_cast<std::byte*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096)));
    if (!pageable)
      return fail(Errc::kResourceExhausted, "out of memory for the pageable H2D buffer");
    host = pageable.get();
  }
  std::memset(host, 1, bytes);
  void* dev = nullptr;
  if (const cudaError rc = a.Malloc(&dev, bytes); rc != kSuccess) {
    if (pinned) a.FreeHost(host);
    return fail(cuda.error(rc, "cudaMalloc"));
  }
  double best = 0;
  cudaError rc = kSuccess;
  for (int i = 0; i <= reps && rc == kSuccess; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    rc = a.Memcpy(dev, host, bytes, kMemcpyHostToDevice);
    const std::chrono::duration<double> s = std::chrono::steady_clock::now() - t0;
    if (i > 0 && s.count() > 0)
      best = std::max(best, static_cast<double>(bytes) / s.count());  // 0: warm-up
  }
  a.Free(dev);
  if (pinned) a.FreeHost(host);
  if (rc != kSuccess) return fail(cuda.error(rc, "cudaMemcpy"));
  return best;
}

std::string version_string(int v) {
  if (v <= 0) return "none";
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

Result<int> parse_device(std::string_view text) {
  if (text.empty() || text == "cpu" || text == "host" || text == "none") return -1;
  if (text == "cuda") return 0;
  if (text.starts_with("cuda:")) {
    const std::string_view n = text.substr(5);
    int v = -1;
    auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), v);
    if (ec == std::errc() && p == n.data() + n.size() && !n.empty() && v >= 0) return v;
  }
  return fail(Error(Errc::kInvalidArgument, fmt::format("unknown device '{}'", text))
                  .with_hint("use cuda:N (e.g. cuda:0) or cpu"));
}

std::shared_ptr<const CudaRuntime> CudaRuntime::load() {
  auto api = load_api();
  if (!api) return unavailable(api.error().message());
  return from_api(api->api, api->library);
}

std::shared_ptr<const CudaRuntime> CudaRuntime::unavailable(std::string reason) {
  std::shared_ptr<CudaRuntime> rt(new CudaRuntime());
  rt->reason_ = std::move(reason);
  return rt;
}

std::shared_ptr<const CudaRuntime> CudaRuntime::from_api(const CudaApi& api, std::string library) {
  std::shared_ptr<CudaRuntime> rt(new CudaRuntime());
  rt->api_ = api;
  rt->library_ = std::move(library);
  rt->loaded_ = true;
  rt->probe();
  return rt;
}

Error CudaRuntime::error(cudaError code, std::string_view call) const {
  const char* text = api_.GetErrorString ? api_.GetErrorString(code) : nullptr;
  std::string msg =
      fmt::format("{}: CUDA error {} ({})", call, code, text ? text : "no description");
  Error e(
      code == kErrorInsufficientDriver || code == kErrorNoDevice ? Errc::kUnsupported : Errc::kIo,
      std::move(msg));
  if (code == kErrorInsufficientDriver)
    e.with_hint("no NVIDIA driver, or one older than this CUDA runtime");
  return e;
}

void CudaRuntime::probe() {
  if (!api_.GetDeviceCount) {
    reason_ = "the CUDA table has no cudaGetDeviceCount";
    return;
  }
  if (api_.DriverGetVersion) api_.DriverGetVersion(&driver_version_);
  if (api_.RuntimeGetVersion) api_.RuntimeGetVersion(&runtime_version_);
  int count = 0;  // left unwritten by some failures (error 35): start at 0
  const cudaError rc = api_.GetDeviceCount(&count);
  if (rc != kSuccess) {
    reason_ = error(rc, "cudaGetDeviceCount").message();
    return;
  }
  if (count <= 0) {
    reason_ = "no CUDA device (cudaGetDeviceCount returned 0)";
    return;
  }
  for (int i = 0; i < count; ++i) {
    DeviceInfo d;
    d.index = i;
    d.name = "?";
    if (api_.GetDeviceProperties) {
      std::vector<char> prop(kDevicePropBytes, '\0');
      if (api_.GetDeviceProperties(prop.data(), i) == kSuccess)
        d.name.assign(prop.data(), strnlen(prop.data(), 256));
    }
    if (api_.DeviceGetAttribute) {
      api_.DeviceGetAttribute(&d.cc_major, kDevAttrComputeCapabilityMajor, i);
      api_.DeviceGetAttribute(&d.cc_minor, kDevAttrComputeCapabilityMinor, i);
      int dom = 0, bus = 0, dev = 0;
      if (api_.DeviceGetAttribute(&bus, kDevAttrPciBusId, i) == kSuccess &&
          api_.DeviceGetAttribute(&dev, kDevAttrPciDeviceId, i) == kSuccess) {
        api_.DeviceGetAttribute(&dom, kDevAttrPciDomainId, i);
        d.pci_bus_id = fmt::format("{:04x}:{:02x}:{:02x}.0", dom, bus, dev);
      }
    }
    if (api_.SetDevice && api_.MemGetInfo && api_.SetDevice(i) == kSuccess) {
      std::size_t free_b = 0, total = 0;
      if (api_.MemGetInfo(&free_b, &total) == kSuccess) d.total_memory = total;
    }
    devices_.push_back(std::move(d));
  }
  available_ = true;
}

}  // namespace feedline::transports::cuda
