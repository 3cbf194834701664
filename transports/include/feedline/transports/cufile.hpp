// cuFile (GPUDirect Storage) through a dlopen shim, like cuda.hpp: never linked, no cufile.h.
//
// libcufile.so.0 (then libcufile.so) is loaded at run time and its entry points fill a
// CufileApi table. The stand-in types follow cufile.h's layouts: CUfileError_t is two ints
// ({CUfileOpError err; CUresult cu_err;}), CUfileDescr_t is {int type; union {int fd; void*
// handle;}; const void* fs_ops;}, CUfileHandle_t an opaque pointer.
//
// CufileRuntime says whether cuFile can be used and how: `available()` (library loaded and
// cuFileDriverOpen succeeded) and `compat_mode()` (no nvidia-fs kernel driver, so cuFile would
// run its POSIX compatibility path: reads go through host bounce buffers inside libcufile, not
// DMA from storage to GPU memory). KvikIO's AUTO mode makes the same call.
//
// Thread-safety and lifetime as CudaRuntime: immutable after creation, the library stays loaded.
// The driver is opened once when available and never closed (closing it while handles are
// registered is undefined).
#pragma once

#include <sys/types.h>
#include <time.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "feedline/core/error.hpp"
#include "feedline/transports/file_engine.hpp"

namespace feedline::transports::cufile {

// Stand-ins for cufile.h.
struct CUfileError {
  int err = 0;     // CUfileOpError: 0 = CU_FILE_SUCCESS, 5000+ = cuFile errors
  int cu_err = 0;  // CUresult of the driver API
};
inline constexpr int kSuccess = 0;
inline constexpr int kHandleTypeOpaqueFd = 1;  // CU_FILE_HANDLE_TYPE_OPAQUE_FD
struct CUfileDescr {
  int type = kHandleTypeOpaqueFd;
  union {
    int fd;
    void* handle;
  } handle{};
  const void* fs_ops = nullptr;
};
using Handle = void*;  // CUfileHandle_t

// The batch API's types (cuFile 1.6+), same layouts as cufile.h: CUfileIOParams_t is
// {CUfileBatchMode_t mode; union {struct {devPtr_base, file_offset, devPtr_offset, size} batch;} u;
// CUfileHandle_t fh; CUfileOpcode_t opcode; void* cookie;}, CUfileIOEvents_t {cookie, status, ret}.
using BatchHandle = void*;            // CUfileBatchHandle_t
inline constexpr int kBatchMode = 1;  // CUFILE_BATCH
inline constexpr int kOpRead = 0;     // CUFILE_READ
// CUfileStatus_t
inline constexpr int kStatusWaiting = 0x01;
inline constexpr int kStatusPending = 0x02;
inline constexpr int kStatusInvalid = 0x04;
inline constexpr int kStatusCanceled = 0x08;
inline constexpr int kStatusComplete = 0x10;
inline constexpr int kStatusTimeout = 0x20;
inline constexpr int kStatusFailed = 0x40;
struct CUfileIOParams {
  int mode = kBatchMode;
  struct {
    void* devPtr_base = nullptr;
    off_t file_offset = 0;
    off_t devPtr_offset = 0;
    std::size_t size = 0;
  } batch;
  Handle fh = nullptr;
  int opcode = kOpRead;
  void* cookie = nullptr;
};
struct CUfileIOEvents {
  void* cookie = nullptr;
  int status = 0;
  std::size_t ret = 0;  // bytes done, or a negative error
};
static_assert(sizeof(CUfileIOParams) == 64 && sizeof(CUfileIOEvents) == 24,
              "cufile.h's layouts (LP64)");

struct CufileApi {
  CUfileError (*DriverOpen)() = nullptr;
  CUfileError (*DriverClose)() = nullptr;
  CUfileError (*HandleRegister)(Handle* fh, CUfileDescr* descr) = nullptr;
  void (*HandleDeregister)(Handle fh) = nullptr;
  CUfileError (*BufRegister)(const void* base, std::size_t length, int flags) = nullptr;
  CUfileError (*BufDeregister)(const void* base) = nullptr;
  ssize_t (*Read)(Handle fh, void* base, std::size_t size, off_t file_offset,
                  off_t base_offset) = nullptr;
  // Optional (cuFile 1.6+ / CUDA 12.2+): the batch API (used where all but Cancel are there, with
  // the nvidia-fs driver) and the version query.
  CUfileError (*BatchIOSetUp)(BatchHandle* batch, unsigned nr) = nullptr;
  CUfileError (*BatchIOSubmit)(BatchHandle batch, unsigned nr, CUfileIOParams* params,
                               unsigned flags) = nullptr;
  CUfileError (*BatchIOGetStatus)(BatchHandle batch, unsigned min_nr, unsigned* nr,
                                  CUfileIOEvents* events, struct timespec* timeout) = nullptr;
  CUfileError (*BatchIOCancel)(BatchHandle batch) = nullptr;
  void (*BatchIODestroy)(BatchHandle batch) = nullptr;
  CUfileError (*GetVersion)(int* version) = nullptr;
};

const std::vector<std::string>& cufile_sonames();

struct LoadedCufile {
  CufileApi api;
  std::string library;
};
Result<LoadedCufile> load_cufile_api();

class CufileRuntime {
 public:
  // Loads libcufile, opens the driver and decides compat mode. Never fails: available() false
  // with reason() otherwise. `nvidia_fs_present` overrides the check of /proc/driver/nvidia-fs
  // (for tests).
  static std::shared_ptr<const CufileRuntime> load();
  static std::shared_ptr<const CufileRuntime> from_api(const CufileApi& api, std::string library,
                                                       bool nvidia_fs_present);
  static std::shared_ptr<const CufileRuntime> unavailable(std::string reason);

  bool available() const noexcept { return available_; }
  const std::string& reason() const noexcept { return reason_; }
  // cuFile would use its POSIX compatibility path (no nvidia-fs): no DMA to the GPU.
  bool compat_mode() const noexcept { return compat_mode_; }
  bool batch_api() const noexcept { return batch_api_; }
  int version() const noexcept { return version_; }  // 0 when unknown
  const std::string& library() const noexcept { return library_; }
  const CufileApi& api() const noexcept { return api_; }

  Error error(CUfileError e, std::string_view call) const;

 private:
  CufileRuntime() = default;
  CufileApi api_{};
  bool available_ = false;
  bool compat_mode_ = false;
  bool batch_api_ = false;
  int version_ = 0;
  std::string reason_;
  std::string library_;
};

// True when the nvidia-fs kernel driver (GPUDirect Storage's DMA path) is loaded.
bool nvidia_fs_loaded();

// A FileEngine whose reads land in GPU memory: FileRead::dst is a device address (cudaMalloc'd),
// never touched by the host. With the batch API and the nvidia-fs driver, reads go to cuFile in
// batches (cuFileBatchIOSubmit, at most 16 per batch handle, handles reused once all their reads
// are back) and are reaped with cuFileBatchIOGetStatus on the caller's thread: no threads of our
// own. Otherwise (compatibility mode, an older libcufile, or a batch set-up that fails) cuFileRead,
// which is synchronous, runs on a pool of `options.depth` threads (at most 64), as KvikIO's thread
// pool does. info() says which ("batch-api" or "threads=N"). Each file is reopened with O_DIRECT
// (through /proc/self/fd; GDS needs it; a filesystem that refuses it gets a plain descriptor, which
// cuFile serves in compatibility mode) and registered once (cuFileHandleRegister), cached by device
// and inode while reads of it are in flight and after, up to a bound; register_buffers() registers
// device regions with cuFileBufRegister (reads into them then skip cuFile's per-call pinning; call
// it before any read). Errors: a cuFile failure is EIO with FileRead::engine_error set to its code.
// kUnsupported when the runtime is not available.
Result<std::unique_ptr<FileEngine>> make_cufile_engine(std::shared_ptr<const CufileRuntime> runtime,
                                                       const EngineOptions& options);

}  // namespace feedline::transports::cufile
