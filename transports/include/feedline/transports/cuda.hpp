// The CUDA runtime through a dlopen shim: feedline never links CUDA and never includes its headers.
//
// libcudart is looked up at run time (libcudart.so.13, .12, .11, then libcudart.so); its entry
// points fill a CudaApi table of plain function pointers. The few types the table needs are
// stand-ins with the real ABI (cudaError_t is an int, streams and events are opaque pointers,
// enum values copied from driver_types.h). A binary built on a machine with no CUDA so runs on a
// GPU machine and uses the GPU; on a machine with no GPU it says why and falls back.
//
// CudaRuntime is what the rest of feedline holds: it owns the table, probes the devices once at
// creation and keeps the reason when there is no usable GPU ("libcudart not found", "error 35:
// CUDA driver version is insufficient", "no CUDA device"). Any error at start-up means "no GPU".
// Tests build a CudaRuntime from a fake table (from_api) to exercise every fallback with no GPU.
//
// Thread-safety: a CudaRuntime is immutable after creation; its calls may be made from any
// thread (CUDA's runtime is thread-safe). Lifetime: the library stays loaded for the life of the
// process (unloading libcudart while CUDA contexts exist is unsafe), so a CudaApi's pointers stay
// valid after the runtime that loaded them is gone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "feedline/core/error.hpp"

namespace feedline::transports::cuda {

// Stand-ins for cuda_runtime_api.h (same ABI).
using cudaError = int;
using Stream = void*;  // cudaStream_t
using Event = void*;   // cudaEvent_t
inline constexpr cudaError kSuccess = 0;
inline constexpr cudaError kErrorInsufficientDriver = 35;
inline constexpr cudaError kErrorNoDevice = 100;
inline constexpr cudaError kErrorNotReady = 600;
inline constexpr int kMemcpyHostToHost = 0;
inline constexpr int kMemcpyHostToDevice = 1;
inline constexpr int kMemcpyDeviceToHost = 2;
inline constexpr unsigned kHostAllocPortable = 0x01;
inline constexpr unsigned kHostRegisterPortable = 0x01;
inline constexpr unsigned kStreamNonBlocking = 0x01;
inline constexpr unsigned kEventDisableTiming = 0x02;
inline constexpr int kDevAttrPciBusId = 33;
inline constexpr int kDevAttrPciDeviceId = 34;
inline constexpr int kDevAttrPciDomainId = 50;
inline constexpr int kDevAttrComputeCapabilityMajor = 75;
inline constexpr int kDevAttrComputeCapabilityMinor = 76;
// The buffer handed to cudaGetDeviceProperties: far larger than any cudaDeviceProp (about 1 KiB),
// whose first field is char name[256]. tests/abi checks both against the real header.
inline constexpr std::size_t kDevicePropBytes = 16384;

// The runtime entry points feedline uses. Every pointer is non-null in a table that load_api()
// returned; a fake table for tests may leave optional ones (marked) null.
struct CudaApi {
  cudaError (*GetDeviceCount)(int* count) = nullptr;
  cudaError (*DriverGetVersion)(int* version) = nullptr;
  cudaError (*RuntimeGetVersion)(int* version) = nullptr;
  // Optional: fills a cudaDeviceProp whose first field is `char name[256]`; feedline passes a
  // buffer far larger than the struct and reads only the name.
  cudaError (*GetDeviceProperties)(void* prop, int device) = nullptr;
  cudaError (*DeviceGetAttribute)(int* value, int attr, int device) = nullptr;
  cudaError (*SetDevice)(int device) = nullptr;
  cudaError (*MemGetInfo)(std::size_t* free, std::size_t* total) = nullptr;
  cudaError (*Malloc)(void** ptr, std::size_t size) = nullptr;
  cudaError (*Free)(void* ptr) = nullptr;
  cudaError (*HostAlloc)(void** ptr, std::size_t size, unsigned flags) = nullptr;
  cudaError (*FreeHost)(void* ptr) = nullptr;
  cudaError (*HostRegister)(void* ptr, std::size_t size, unsigned flags) = nullptr;
  cudaError (*HostUnregister)(void* ptr) = nullptr;
  cudaError (*StreamCreateWithFlags)(Stream* stream, unsigned flags) = nullptr;
  cudaError (*StreamDestroy)(Stream stream) = nullptr;
  cudaError (*StreamSynchronize)(Stream stream) = nullptr;
  cudaError (*Memcpy)(void* dst, const void* src, std::size_t n, int kind) = nullptr;
  cudaError (*MemcpyAsync)(void* dst, const void* src, std::size_t n, int kind,
                           Stream stream) = nullptr;
  cudaError (*EventCreateWithFlags)(Event* event, unsigned flags) = nullptr;
  cudaError (*EventDestroy)(Event event) = nullptr;
  cudaError (*EventRecord)(Event event, Stream stream) = nullptr;
  cudaError (*EventQuery)(Event event) = nullptr;
  cudaError (*EventSynchronize)(Event event) = nullptr;
  cudaError (*EventElapsedTime)(float* ms, Event start, Event end) = nullptr;
  const char* (*GetErrorString)(cudaError error) = nullptr;
};

// The sonames tried, in order.
const std::vector<std::string>& cudart_sonames();

struct LoadedApi {
  CudaApi api;
  std::string library;  // the soname that loaded
};
// dlopens libcudart and resolves every entry point. kUnsupported (with what was tried, or the
// missing symbol) when that fails; never links or includes CUDA.
Result<LoadedApi> load_api();

struct DeviceInfo {
  int index = 0;
  std::string name;  // "NVIDIA H100 80GB HBM3" ("?" when the properties call failed)
  int cc_major = 0;
  int cc_minor = 0;
  std::string pci_bus_id;          // "0000:17:00.0" ("" when unknown)
  std::uint64_t total_memory = 0;  // bytes (0 when unknown)
};

class CudaRuntime {
 public:
  // Loads libcudart and probes the devices. Never fails: with no library, no driver or no
  // device it returns a runtime with available() false and reason() saying why.
  static std::shared_ptr<const CudaRuntime> load();
  // The same probing over a table the caller made (tests: fake devices, failing calls).
  // `library` is what the report names as the loaded library.
  static std::shared_ptr<const CudaRuntime> from_api(const CudaApi& api,
                                                     std::string library = "fake");
  // A runtime that is unavailable for `reason` (the library could not be loaded).
  static std::shared_ptr<const CudaRuntime> unavailable(std::string reason);

  bool available() const noexcept { return available_; }          // at least one usable device
  const std::string& reason() const noexcept { return reason_; }  // why not, when not
  bool loaded() const noexcept { return loaded_; }  // the library loaded (even with no device)
  const std::string& library() const noexcept { return library_; }
  int driver_version() const noexcept { return driver_version_; }  // 12040 = 12.4; 0 = none
  int runtime_version() const noexcept { return runtime_version_; }
  const std::vector<DeviceInfo>& devices() const noexcept { return devices_; }
  const CudaApi& api() const noexcept { return api_; }

  // An Error for a failed call: "cudaMemcpyAsync: error 700 (an illegal memory access ...)".
  Error error(cudaError code, std::string_view call) const;
  // Checks a call's status.
  Result<void> check(cudaError code, std::string_view call) const {
    if (code == kSuccess) return {};
    return fail(error(code, call));
  }

 private:
  CudaRuntime() = default;
  void probe();

  CudaApi api_{};
  bool loaded_ = false;
  bool available_ = false;
  std::string reason_;
  std::string library_;
  int driver_version_ = 0;
  int runtime_version_ = 0;
  std::vector<DeviceInfo> devices_;
};

// cudaMemcpy host-to-device bandwidth on `device` in bytes per second (best of reps, after one
// warm-up copy), from pinned (cudaHostAlloc) or pageable (4 KiB-aligned, malloc'd) memory.
// The pinned figure is the calibration the device sink reports its copies against.
Result<double> h2d_bandwidth(const CudaRuntime& cuda, int device, std::uint64_t bytes, int reps,
                             bool pinned);

// "12.4" from 12040.
std::string version_string(int cuda_version);

// Parses "cuda:N" (or "cuda" = cuda:0); "cpu"/"host"/"" give -1. kInvalidArgument otherwise.
Result<int> parse_device(std::string_view text);

}  // namespace feedline::transports::cuda
