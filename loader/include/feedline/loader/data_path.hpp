// The data path ("GPUDirect-style"): samples that need no decode are read straight into their
// final place, with no intermediate copy. With a GPU and cuFile that is device memory; without,
// the sample's slot in the pinned batch buffer (host-direct). plan_data_path() decides, before a
// run, from the dataset's layout, the device and what cuFile can do, and says why.
#pragma once

#include <string>
#include <string_view>

#include "feedline/core/error.hpp"
#include "feedline/loader/decoder.hpp"
#include "feedline/loader/report.hpp"

namespace feedline::storage {
class Backend;
}

namespace feedline::loader {

struct LoaderConfig;

// kAuto takes the direct path where the dataset allows and says why not otherwise; kOn makes
// "not possible" an error; kOff always reads into a sample buffer that collate copies into the
// batch (the bounce path).
enum class GpuDirect : std::uint8_t { kAuto, kOn, kOff };
std::string_view gpu_direct_name(GpuDirect g) noexcept;
Result<GpuDirect> parse_gpu_direct(std::string_view text);

struct DataPathPlan {
  DataPath path = DataPath::kBounce;
  std::string reason;  // why this path (and why not the direct one)
  DecodePlan decode;   // each member's decoders (LoaderConfig::decoders)
};

// `backend` is the dataset's storage (whether it can read into GPU memory). kInvalidArgument (with
// the reason) when gpu_direct is kOn and the direct path is impossible, kUnsupported when a
// device is asked for and there is no usable GPU.
Result<DataPathPlan> plan_data_path(const Dataset& dataset, const LoaderConfig& config,
                                    const storage::Backend& backend);

}  // namespace feedline::loader
