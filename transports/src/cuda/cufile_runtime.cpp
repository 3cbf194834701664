// libcufile through dlopen (see cufile.hpp). No cufile.h is included.
#include "feedline/transports/cufile.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <unistd.h>

#include "detail/dl.hpp"

namespace feedline::transports::cufile {

const std::vector<std::string>& cufile_sonames() {
  static const std::vector<std::string> names = {"libcufile.so.0", "libcufile.so"};
  return names;
}

using detail::resolve;

bool nvidia_fs_loaded() { return ::access("/proc/driver/nvidia-fs/version", F_OK) == 0; }

Result<LoadedCufile> load_cufile_api() {
  FEEDLINE_ASSIGN_OR_RETURN(detail::OpenedLibrary opened,
                            detail::open_first(cufile_sonames(), "libcufile"));
  void* lib = opened.handle;
  const std::string& soname = opened.soname;
  LoadedCufile out;
  out.library = soname;
  CufileApi& a = out.api;
  const char* missing = nullptr;
  auto need = [&](const char* name, auto& fn) {
    if (!resolve(lib, name, fn) && !missing) missing = name;
  };
  need("cuFileDriverOpen", a.DriverOpen);
  need("cuFileDriverClose", a.DriverClose);
  need("cuFileHandleRegister", a.HandleRegister);
  need("cuFileHandleDeregister", a.HandleDeregister);
  need("cuFileBufRegister", a.BufRegister);
  need("cuFileBufDeregister", a.BufDeregister);
  need("cuFileRead", a.Read);
  if (missing) return fail(Errc::kUnsupported, fmt::format("{} has no symbol {}", soname, missing));
  resolve(lib, "cuFileBatchIOSetUp", a.BatchIOSetUp);
  resolve(lib, "cuFileBatchIOSubmit", a.BatchIOSubmit);
  resolve(lib, "cuFileBatchIOGetStatus", a.BatchIOGetStatus);
  resolve(lib, "cuFileBatchIOCancel", a.BatchIOCancel);
  resolve(lib, "cuFileBatchIODestroy", a.BatchIODestroy);
  resolve(lib, "cuFileGetVersion", a.GetVersion);
  return out;
}

std::shared_ptr<const CufileRuntime> CufileRuntime::load() {
  auto api = load_cufile_api();
  if (!api) return unavailable(api.error().message());
  return from_api(api->api, api->library, nvidia_fs_loaded());
}

std::shared_ptr<const CufileRuntime> CufileRuntime::unavailable(std::string reason) {
  std::shared_ptr<CufileRuntime> rt(new CufileRuntime());
  rt->reason_ = std::move(reason);
  return rt;
}

std::shared_ptr<const CufileRuntime> CufileRuntime::from_api(const CufileApi& api,
                                                             std::string library,
                                                             bool nvidia_fs_present) {
  std::shared_ptr<CufileRuntime> rt(new CufileRuntime());
  rt->api_ = api;
  rt->library_ = std::move(library);
  rt->batch_api_ =
      api.BatchIOSetUp && api.BatchIOSubmit && api.BatchIOGetStatus && api.BatchIODestroy;
  if (api.GetVersion) api.GetVersion(&rt->version_);
  if (!api.DriverOpen) {
    rt->reason_ = "the cuFile table has no cuFileDriverOpen";
    return rt;
  }
  const CUfileError e = api.DriverOpen();
  if (e.err != kSuccess) {
    rt->reason_ = rt->error(e, "cuFileDriverOpen").message();
    return rt;
  }
  rt->available_ = true;
  rt->compat_mode_ = !nvidia_fs_present;
  if (rt->compat_mode_) {
    rt->reason_ =
        "nvidia-fs kernel driver not loaded: cuFile would run in compatibility mode (POSIX reads "
        "through host bounce buffers)";
  }
  return rt;
}

Error CufileRuntime::error(CUfileError e, std::string_view call) const {
  return Error(Errc::kIo, fmt::format("{}: cuFile error {} (CUresult {})", call, e.err, e.cu_err));
}

}  // namespace feedline::transports::cufile
