#include "probe_cmd.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli_error.hpp"
#include "feedline/core/units.hpp"
#include "feedline/loader/codec.hpp"
#include "feedline/transports/cuda.hpp"
#include "feedline/transports/cufile.hpp"
#include "feedline/transports/system_probe.hpp"
#include "json_render.hpp"
#include "output.hpp"

namespace feedline::tools {
namespace {

namespace cu = transports::cuda;
namespace cf = transports::cufile;

struct ProbeOptions {
  std::string output = "text";
  bool h2d_bench = false;
  std::string device = "cuda:0";
  std::string h2d_size = "256MiB";
};

int probe(const ProbeOptions& o) {
  if (o.output != "text" && o.output != "json") {
    throw UsageError(fmt::format("--output: unknown format '{}' (choose text or json)", o.output));
  }
  const auto bench_device = value_or_usage(cu::parse_device(o.device));
  auto h2d_bytes = parse_size(o.h2d_size);
  if (!h2d_bytes || *h2d_bytes == 0)
    throw UsageError("--h2d-size: must be a positive size such as 256MiB");

  const auto cuda = cu::CudaRuntime::load();
  const auto cufile = cf::CufileRuntime::load();
  const auto uring = transports::probe_uring();
  const auto memlock = transports::memlock_limit();
  const std::string curl = transports::libcurl_version();
  const std::string nfs = transports::libnfs_version();
  const double memcpy_bw = transports::memcpy_bandwidth(64ull << 20, 5);

  using nlohmann::json;
  json devices = json::array();
  for (const auto& d : cuda->devices()) {
    devices.push_back({{"index", d.index},
                       {"name", d.name},
                       {"compute_capability", fmt::format("{}.{}", d.cc_major, d.cc_minor)},
                       {"pci_bus_id", d.pci_bus_id},
                       {"total_memory_bytes", d.total_memory}});
  }
  json doc = {
      {"gpu",
       {{"available", cuda->available()},
        {"reason", cuda->available() ? "" : cuda->reason()},
        {"library", cuda->library()},
        {"driver_version", cu::version_string(cuda->driver_version())},
        {"runtime_version", cu::version_string(cuda->runtime_version())},
        {"devices", devices}}},
      {"cufile",
       {{"available", cufile->available()},
        {"reason", cufile->reason()},
        {"library", cufile->library()},
        {"compat_mode", cufile->available() ? json(cufile->compat_mode()) : json(nullptr)},
        {"nvidia_fs", cf::nvidia_fs_loaded()},
        {"batch_api", cufile->batch_api()},
        {"version", cufile->version()}}},
      {"io_uring",
       {{"compiled_in", uring.compiled_in},
        {"available", uring.available},
        {"reason", uring.reason},
        {"kernel", uring.kernel},
        {"features", uring.features},
        {"setup_modes", uring.setup},
        {"read_fixed", uring.read_fixed}}},
      {"memlock",
       {{"unlimited", memlock.unlimited},
        {"soft_bytes", memlock.unlimited ? json(nullptr) : json(memlock.soft)},
        {"hard_bytes",
         memlock.unlimited || memlock.hard == 0 ? json(nullptr) : json(memlock.hard)}}},
      {"libraries",
       {{"libcurl", curl.empty() ? json(nullptr) : json(curl)},
        {"libnfs", nfs.empty() ? json(nullptr) : json(nfs)},
        {"zstd", loader::zstd_available()}}},
      {"memcpy", {{"bytes_per_second", memcpy_bw}, {"bytes", 64ull << 20}}},
  };
  std::optional<Error> h2d_error;
  if (o.h2d_bench) {
    auto pinned =
        cu::h2d_bandwidth(*cuda, bench_device < 0 ? 0 : bench_device, *h2d_bytes, 5, true);
    auto pageable =
        pinned ? cu::h2d_bandwidth(*cuda, bench_device < 0 ? 0 : bench_device, *h2d_bytes, 5, false)
               : Result<double>(0.0);
    if (!pinned || !pageable) {
      h2d_error = pinned ? pageable.error() : pinned.error();
      doc["h2d"] = {{"error", h2d_error->what()}};
    } else {
      doc["h2d"] = {{"device", bench_device < 0 ? 0 : bench_device},
                    {"bytes", *h2d_bytes},
                    {"pinned_bytes_per_second", *pinned},
                    {"pageable_bytes_per_second", *pageable},
                    {"pageable_over_pinned", *pinned > 0 ? *pageable / *pinned : 0}};
    }
  }

  if (o.output == "json") {
    out::print("{}\n", dump_json(doc, 2, Json::kAscii));
  } else {
    out::print("feedline probe\n");
    if (cuda->available()) {
      out::print("  gpu: {} device(s), driver {}, runtime {} ({})\n", cuda->devices().size(),
                 cu::version_string(cuda->driver_version()),
                 cu::version_string(cuda->runtime_version()), cuda->library());
      for (const auto& d : cuda->devices()) {
        out::print("    cuda:{}  {}  cc {}.{}  {}  {}\n", d.index, d.name, d.cc_major, d.cc_minor,
                   d.pci_bus_id, format_bytes(static_cast<double>(d.total_memory)));
      }
    } else {
      out::print("  gpu: none: {}\n", cuda->reason());
      if (cuda->loaded()) {
        out::print("    ({} loaded; driver {}, runtime {})\n", cuda->library(),
                   cu::version_string(cuda->driver_version()),
                   cu::version_string(cuda->runtime_version()));
      }
    }
    if (cufile->available()) {
      out::print("  cufile: {} ({}{}){}\n", cufile->library(),
                 cufile->compat_mode() ? "compatibility mode: " : "GPUDirect Storage",
                 cufile->compat_mode() ? cufile->reason() : "",
                 cufile->batch_api() ? ", batch API" : "");
    } else {
      out::print("  cufile: unavailable: {}\n", cufile->reason());
    }
    if (uring.available) {
      out::print("  io_uring: yes (kernel {}); read-fixed {}; setup modes: {}; features: {}\n",
                 uring.kernel, uring.read_fixed ? "yes" : "no", fmt::join(uring.setup, ", "),
                 fmt::join(uring.features, ", "));
    } else {
      out::print("  io_uring: no: {} (kernel {})\n", uring.reason, uring.kernel);
    }
    out::print("  memlock (registered buffers, mlock'd batches): {}\n",
               memlock.unlimited
                   ? std::string("unlimited")
                   : fmt::format("{} (hard {})", format_bytes(static_cast<double>(memlock.soft)),
                                 format_bytes(static_cast<double>(memlock.hard))));
    out::print("  libcurl: {}   libnfs: {}   zstd: {}\n", curl.empty() ? "not built" : curl,
               nfs.empty() ? "not built" : nfs, loader::zstd_available() ? "yes" : "not built");
    out::print("  memcpy: {} (one thread, 64 MiB, aligned)\n", format_rate(memcpy_bw));
    if (o.h2d_bench) {
      if (!h2d_error) {
        out::print("  h2d (cudaMemcpy, {}): pinned {}, pageable {} ({:.0f}% of pinned)\n",
                   format_bytes(static_cast<double>(*h2d_bytes)),
                   format_rate(doc["h2d"]["pinned_bytes_per_second"].get<double>()),
                   format_rate(doc["h2d"]["pageable_bytes_per_second"].get<double>()),
                   100 * doc["h2d"]["pageable_over_pinned"].get<double>());
      }
    }
  }
  if (h2d_error) {
    out::error(fmt::format("--h2d-bench: {}", h2d_error->what()));
    return kExitRuntime;
  }
  return kExitOk;
}

}  // namespace

void add_probe(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ProbeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "probe", "What this machine can do: io_uring, memlock, GPUs, cuFile, libraries");
  cmd->add_option("--output", o->output, "text or json")->capture_default_str();
  cmd->add_flag("--h2d-bench", o->h2d_bench,
                "Also measure pinned vs pageable host-to-device copies (needs a GPU)");
  cmd->add_option("--device", o->device, "GPU for --h2d-bench")->capture_default_str();
  cmd->add_option("--h2d-size", o->h2d_size, "Bytes per copy for --h2d-bench")
      ->capture_default_str();
  cmd->callback([o, &exit_code] { exit_code = probe(*o); });
}

}  // namespace feedline::tools
