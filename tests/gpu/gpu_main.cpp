// main() for the GPU tests: skip the whole binary (exit 77, ctest "Not Run") when there is no
// usable GPU, saying why; otherwise run the Catch2 session. Catch2's implementation is compiled
// here (CATCH_CONFIG_RUNNER), so this file is built without -Werror (GCC 12 reports false
// -Wmaybe-uninitialized inside <regex> that Catch2 uses).
#define CATCH_CONFIG_RUNNER
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "feedline/transports/cuda.hpp"

namespace cu = feedline::transports::cuda;

std::shared_ptr<const cu::CudaRuntime> g_cuda;

int main(int argc, char** argv) {
  g_cuda = cu::CudaRuntime::load();
  if (!g_cuda->available()) {
    fmt::print("skipped: no usable GPU: {}\n", g_cuda->reason());
    return 77;
  }
  fmt::print("GPU: {} ({} device(s), driver {})\n", g_cuda->devices().front().name,
             g_cuda->devices().size(), cu::version_string(g_cuda->driver_version()));
  return Catch::Session().run(argc, argv);
}
