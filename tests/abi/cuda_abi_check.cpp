// Compile-time check: the CUDA runtime stand-ins feedline uses without CUDA headers (cuda.hpp)
// have the real header's values and signatures. Each CudaApi member must be the real function's
// pointer type with CUDA's types replaced by their stand-ins (cudaError_t and the enums by int,
// streams, events and cudaDeviceProp* by void*, and pointers to them accordingly).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <type_traits>

#include "feedline/transports/cuda.hpp"

namespace cu = feedline::transports::cuda;

namespace {

template <class T>
struct stand_in {
  using type = T;
};
template <>
struct stand_in<cudaError_t> {
  using type = cu::cudaError;
};
template <>
struct stand_in<cudaStream_t> {
  using type = cu::Stream;
};
template <>
struct stand_in<cudaEvent_t> {
  using type = cu::Event;
};
template <>
struct stand_in<cudaStream_t*> {
  using type = cu::Stream*;
};
template <>
struct stand_in<cudaEvent_t*> {
  using type = cu::Event*;
};
template <>
struct stand_in<cudaDeviceProp*> {
  using type = void*;
};
template <>
struct stand_in<cudaMemcpyKind> {
  using type = int;
};
template <>
struct stand_in<cudaDeviceAttr> {
  using type = int;
};

template <class F>
struct as_stand_in;
template <class R, class... A>
struct as_stand_in<R (*)(A...)> {
  using type = typename stand_in<R>::type (*)(typename stand_in<A>::type...);
};

#define FEEDLINE_SAME_SIGNATURE(member, real)                                                      \
  static_assert(std::is_same_v<decltype(cu::CudaApi::member), as_stand_in<decltype(&real)>::type>, \
                "CudaApi::" #member " does not match " #real " in cuda_runtime_api.h")

FEEDLINE_SAME_SIGNATURE(GetDeviceCount, cudaGetDeviceCount);
FEEDLINE_SAME_SIGNATURE(DriverGetVersion, cudaDriverGetVersion);
FEEDLINE_SAME_SIGNATURE(RuntimeGetVersion, cudaRuntimeGetVersion);
FEEDLINE_SAME_SIGNATURE(GetDeviceProperties, cudaGetDeviceProperties);
FEEDLINE_SAME_SIGNATURE(DeviceGetAttribute, cudaDeviceGetAttribute);
FEEDLINE_SAME_SIGNATURE(SetDevice, cudaSetDevice);
FEEDLINE_SAME_SIGNATURE(MemGetInfo, cudaMemGetInfo);
FEEDLINE_SAME_SIGNATURE(Malloc, cudaMalloc);
FEEDLINE_SAME_SIGNATURE(Free, cudaFree);
FEEDLINE_SAME_SIGNATURE(HostAlloc, cudaHostAlloc);
FEEDLINE_SAME_SIGNATURE(FreeHost, cudaFreeHost);
FEEDLINE_SAME_SIGNATURE(HostRegister, cudaHostRegister);
FEEDLINE_SAME_SIGNATURE(HostUnregister, cudaHostUnregister);
FEEDLINE_SAME_SIGNATURE(StreamCreateWithFlags, cudaStreamCreateWithFlags);
FEEDLINE_SAME_SIGNATURE(StreamDestroy, cudaStreamDestroy);
FEEDLINE_SAME_SIGNATURE(StreamSynchronize, cudaStreamSynchronize);
FEEDLINE_SAME_SIGNATURE(Memcpy, cudaMemcpy);
FEEDLINE_SAME_SIGNATURE(MemcpyAsync, cudaMemcpyAsync);
FEEDLINE_SAME_SIGNATURE(EventCreateWithFlags, cudaEventCreateWithFlags);
FEEDLINE_SAME_SIGNATURE(EventDestroy, cudaEventDestroy);
FEEDLINE_SAME_SIGNATURE(EventRecord, cudaEventRecord);
FEEDLINE_SAME_SIGNATURE(EventQuery, cudaEventQuery);
FEEDLINE_SAME_SIGNATURE(EventSynchronize, cudaEventSynchronize);
FEEDLINE_SAME_SIGNATURE(EventElapsedTime, cudaEventElapsedTime);
FEEDLINE_SAME_SIGNATURE(GetErrorString, cudaGetErrorString);

// The ABI of the stand-in types.
static_assert(sizeof(cudaError_t) == sizeof(cu::cudaError));
static_assert(sizeof(cudaMemcpyKind) == sizeof(int) && sizeof(cudaDeviceAttr) == sizeof(int));

// The values feedline passes or compares.
static_assert(cu::kSuccess == cudaSuccess);
static_assert(cu::kErrorInsufficientDriver == cudaErrorInsufficientDriver);
static_assert(cu::kErrorNoDevice == cudaErrorNoDevice);
static_assert(cu::kErrorNotReady == cudaErrorNotReady);
static_assert(cu::kMemcpyHostToHost == cudaMemcpyHostToHost);
static_assert(cu::kMemcpyHostToDevice == cudaMemcpyHostToDevice);
static_assert(cu::kMemcpyDeviceToHost == cudaMemcpyDeviceToHost);
static_assert(cu::kHostAllocPortable == cudaHostAllocPortable);
static_assert(cu::kHostRegisterPortable == cudaHostRegisterPortable);
static_assert(cu::kStreamNonBlocking == cudaStreamNonBlocking);
static_assert(cu::kEventDisableTiming == cudaEventDisableTiming);
static_assert(cu::kDevAttrPciBusId == cudaDevAttrPciBusId);
static_assert(cu::kDevAttrPciDeviceId == cudaDevAttrPciDeviceId);
static_assert(cu::kDevAttrPciDomainId == cudaDevAttrPciDomainId);
static_assert(cu::kDevAttrComputeCapabilityMajor == cudaDevAttrComputeCapabilityMajor);
static_assert(cu::kDevAttrComputeCapabilityMinor == cudaDevAttrComputeCapabilityMinor);

// CudaRuntime reads the device name from the start of the cudaDeviceProp it gets, into a buffer
// of kDevicePropBytes.
static_assert(offsetof(cudaDeviceProp, name) == 0 && sizeof(cudaDeviceProp::name) == 256);
static_assert(sizeof(cudaDeviceProp) <= cu::kDevicePropBytes);

}  // namespace
