// Which data path a run takes (loader.hpp: plan_data_path). Decided once, before the run, from
// the dataset's layout, the device and what cuFile can do; the reason is kept for the report.
#include <fmt/format.h>

#include "feedline/loader/data_path.hpp"

#include "feedline/loader/dataset.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/storage/backend.hpp"
#include "feedline/transports/cuda.hpp"
#include "feedline/transports/cufile.hpp"
#include "unknown_size.hpp"

namespace feedline::loader {

std::string_view gpu_direct_name(GpuDirect g) noexcept {
  switch (g) {
    case GpuDirect::kAuto:
      return "auto";
    case GpuDirect::kOn:
      return "on";
    case GpuDirect::kOff:
      return "off";
  }
  return "?";
}

Result<GpuDirect> parse_gpu_direct(std::string_view text) {
  if (text == "auto") return GpuDirect::kAuto;
  if (text == "on") return GpuDirect::kOn;
  if (text == "off") return GpuDirect::kOff;
  return fail(Error(Errc::kInvalidArgument, fmt::format("unknown mode '{}'", text))
                  .with_hint("choose auto, on or off"));
}

namespace {

// Why the dataset's samples cannot be read straight into their batch slot ("" when they can):
// a sample must be one stored member, not compressed, covering the sample's whole byte range.
// Samples of unknown size may: their slots take a learned size (unknown_size.hpp).
std::string why_not_direct(const Dataset& d, const DecodePlan& decode) {
  for (const Sample& s : d.samples) {
    const auto members = d.members_of(s);
    if (members.size() != 1) {
      return fmt::format("samples have several members (e.g. '{}' has {}): collate must pack them",
                         s.key, members.size());
    }
    const Member& m = members.front();
    if (m.check == MemberCheck::kTfRecordCrc) {
      return fmt::format(
          "samples are TFRecord records (e.g. '{}') whose CRC32C the host checks: each is read "
          "with its framing into a sample buffer",
          m.name);
    }
    if (m.check == MemberCheck::kTarHeader) {
      return fmt::format(
          "samples are tar members listed by their shard's index (e.g. '{}'): each is read with "
          "its header, which the host compares with the index, into a sample buffer",
          m.name);
    }
    if (decode.decodes(s.first_member)) {
      const DecodePlan::Chain& c = decode.chain_of(s.first_member);
      return c.name == "zstd"
                 ? fmt::format("samples are zstd-compressed (e.g. '{}'): they need decoding",
                               m.name)
                 : fmt::format("samples need decoding ({}, e.g. '{}')", c.name, m.name);
    }
    if (s.length != storage::kUnknownSize && (m.offset != 0 || m.size != s.length)) {
      return fmt::format("sample '{}' does not cover its byte range exactly", s.key);
    }
  }
  return {};
}

// True when every member's decoded size is known before reading (the index gives zstd
// members', a decoder of fixed-size output its own): decode can then write each sample into a
// slot laid out in advance.
bool decoded_sizes_known(const Dataset& d, const DecodePlan& decode) {
  for (std::size_t i = 0; i < d.members.size(); ++i) {
    if (d.members[i].size == storage::kUnknownSize) return false;
    if (!decode.known_size(i, d.members[i])) return false;
  }
  return !d.samples.empty();
}

// The fallback when reads cannot land in their slot: decode in place where sizes are known.
void plan_decode(DataPathPlan& plan, const Dataset& d, GpuDirect mode) {
  if (mode == GpuDirect::kOff || !decoded_sizes_known(d, plan.decode)) return;
  plan.path = DataPath::kDecodeInPlace;
  plan.reason +=
      "; decode threads write each sample straight into its batch slot (decoded sizes known "
      "before reading: uncompressed members, zstd sizes from the index, images of a fixed size)";
}

}  // namespace

Result<DataPathPlan> plan_data_path(const Dataset& dataset, const LoaderConfig& config,
                                    const storage::Backend& backend) {
  DataPathPlan plan;
  plan.decode = config.decoders ? DecodePlan(dataset, *config.decoders)
                                : DecodePlan(dataset, default_decoders());
  const std::string why_not = why_not_direct(dataset, plan.decode);
  const GpuDirect mode = config.gpu_direct;
  if (config.device.device >= 0) {
    auto cuda = config.device.cuda ? config.device.cuda : transports::cuda::CudaRuntime::load();
    if (!cuda->available()) {
      return fail(Error(Errc::kUnsupported, fmt::format("{{device=cuda:{}}}: no usable GPU: {}",
                                                        config.device.device, cuda->reason()))
                      .with_hint("leave {device} out to keep batches in host memory"));
    }
    if (static_cast<std::size_t>(config.device.device) >= cuda->devices().size()) {
      return fail(Error(Errc::kInvalidArgument,
                        fmt::format("{{device=cuda:{}}}: this machine has {} CUDA device(s)",
                                    config.device.device, cuda->devices().size()))
                      .with_hint(fmt::format("use cuda:0 .. cuda:{}", cuda->devices().size() - 1)));
    }
    auto cufile =
        config.device.cufile ? config.device.cufile : transports::cufile::CufileRuntime::load();
    std::string gpu_why;
    if (!why_not.empty()) {
      gpu_why = why_not;
    } else if (const Sample* u = detail::first_unknown_size(dataset)) {
      gpu_why = fmt::format(
          "the size of sample '{}' is not known before it is read (the server has no listing of "
          "its objects): its slot in GPU memory cannot be laid out",
          u->key);
    } else if (!backend.caps().device_reads) {
      gpu_why = fmt::format("{}:// storage cannot read into GPU memory (cuFile reads local files)",
                            backend.scheme());
    } else if (!cufile->available()) {
      gpu_why = "cuFile unavailable: " + cufile->reason();
    } else if (cufile->compat_mode()) {
      gpu_why = "cuFile is in compatibility mode (" + cufile->reason() + ")";
      if (mode == GpuDirect::kOn) {
        // Asked for cuFile: it runs, and the report says libcufile copies through host memory.
        plan.path = DataPath::kCufileCompat;
        plan.reason = "{gpu_direct=on}: cuFile reads into GPU memory, but in " + gpu_why +
                      ": libcufile stages each byte through its own host buffers";
        return plan;
      }
    } else if (mode != GpuDirect::kOff) {
      plan.path = DataPath::kGpuDirect;
      plan.reason = fmt::format(
          "samples need no decode and cuFile has the nvidia-fs driver ({}): reads go from "
          "storage straight into their slot in GPU memory",
          cufile->library());
      return plan;
    }
    if (mode == GpuDirect::kOn) {
      return fail(Error(Errc::kInvalidArgument,
                        "{gpu_direct=on}: reads cannot go straight to GPU memory: " + gpu_why)
                      .with_hint("use {gpu_direct=auto} to stage through pinned host buffers"));
    }
    const bool into_slot = mode == GpuDirect::kAuto && why_not.empty();
    plan.path = into_slot ? DataPath::kPinnedDirect : DataPath::kBounce;
    plan.reason =
        mode == GpuDirect::kOff
            ? "{gpu_direct=off}: pinned host batches, then H2D copies"
            : fmt::format("bounce through pinned host batches, then H2D: {}{}", gpu_why,
                          into_slot ? " (reads still land in their pinned batch slot)" : "");
    if (!into_slot) plan_decode(plan, dataset, mode);
    return plan;
  }
  if (mode == GpuDirect::kOff) {
    plan.path = DataPath::kBounce;
    plan.reason =
        "{gpu_direct=off}: reads go to sample buffers, collate copies them into the batch";
    return plan;
  }
  if (why_not.empty()) {
    plan.path = DataPath::kHostDirect;
    plan.reason =
        "samples need no decode: reads land straight in their pinned batch slot (no GPU asked for)";
    return plan;
  }
  if (mode == GpuDirect::kOn) {
    return fail(Error(Errc::kInvalidArgument,
                      "{gpu_direct=on}: the direct path is not possible: " + why_not)
                    .with_hint("use {gpu_direct=auto} (falls back to the bounce path) or an "
                               "uncompressed files dataset"));
  }
  plan.path = DataPath::kBounce;
  plan.reason = "direct path not possible: " + why_not;
  plan_decode(plan, dataset, mode);
  return plan;
}

}  // namespace feedline::loader
