// The settings table (feedline/loader/settings.hpp): each knob's name, type, range, unit and help,
// and where its value lives. Defaults are LoaderSettings' own.
#include "feedline/loader/settings.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <optional>
#include <system_error>
#include <utility>

#include "feedline/core/text.hpp"
#include "feedline/core/units.hpp"
#include "feedline/loader/accelerators.hpp"
#include "feedline/loader/image.hpp"
#include "feedline/loader/loader.hpp"

namespace feedline::loader {
namespace {

// The field a setting reads and writes: +[] makes the lambda the plain function pointer the
// SettingField variant holds, of the field's own type.
#define FEEDLINE_FIELD(member)       \
  +[](LoaderSettings & s) -> auto& { \
    return s.member;                 \
  }

constexpr std::array<std::string_view, 2> kOnError{"fail", "skip"};
constexpr std::array<std::string_view, 3> kEngines{"uring", "posix", "auto"};
constexpr std::array<std::string_view, 3> kCrops{"random-resized", "center", "none"};
constexpr std::array<std::string_view, 3> kGpuDirect{"auto", "on", "off"};

// Bounds on what a user may ask for beyond the loader's own (loader.hpp): past them a value would
// only allocate per-epoch or per-rank state, or run for ever, not read faster.
constexpr double kMaxEpochs = 1u << 20;
constexpr double kMaxRanks = 1u << 20;
constexpr double kMaxSeed = 18446744073709551616.0;  // 2^64: count_bounds() makes it 2^64 - 1

using enum SettingType;
constexpr SettingScope kCli = SettingScope::kCommandLine;

const Setting kSettings[] = {
    // --- sampler
    {"batch_size",
     kCount,
     "sampler",
     "samples",
     "Samples per batch",
     1,
     kMaxBatchSize,
     {},
     {},
     FEEDLINE_FIELD(batch_size)},
    {"epochs",
     kCount,
     "sampler",
     "passes",
     "Passes over the dataset",
     1,
     kMaxEpochs,
     {},
     {},
     FEEDLINE_FIELD(epochs)},
    {"seed", kCount, "sampler", "", "Shuffle seed", 0, kMaxSeed, {}, {}, FEEDLINE_FIELD(seed)},
    {"shuffle",
     kFlag,
     "sampler",
     "",
     "Shuffle the samples each epoch (off: read in storage order)",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(shuffle)},
    {"shard_shuffle",
     kCount,
     "sampler",
     "shards",
     "Shuffle shards, not samples: K shards open at a time, runs of {batch_size}/K consecutive "
     "samples from a random one (reads of a run coalesce over HTTP; 0 = shuffle samples)",
     0,
     65536,
     {},
     {},
     FEEDLINE_FIELD(shard_shuffle)},
    {"rank",
     kCount,
     "sampler",
     "",
     "This process's rank (default: RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID)",
     0,
     kMaxRanks - 1,
     {},
     {},
     FEEDLINE_FIELD(rank)},
    {"world_size",
     kCount,
     "sampler",
     "ranks",
     "Number of ranks (default: WORLD_SIZE, OMPI_COMM_WORLD_SIZE or SLURM_NTASKS)",
     1,
     kMaxRanks,
     {},
     {},
     FEEDLINE_FIELD(world_size)},
    {"drop_last",
     kFlag,
     "sampler",
     "",
     "Drop each epoch's last partial batch",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(drop_last)},
    // --- dataset
    {"format",
     kText,
     "dataset",
     "",
     "files, tar, tfrecord, npz, npy, or auto (from the objects' extensions)",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(format)},
    {"index",
     kFlag,
     "dataset",
     "",
     "Use tar and TFRecord indexes (off: scan the shards' and files' headers)",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(index)},
    {"on_error",
     kChoice,
     "dataset",
     "",
     "fail, or skip bad samples and count them",
     0,
     0,
     std::span(kOnError),
     {},
     FEEDLINE_FIELD(on_error)},
    {"max_sample_size",
     kSize,
     "dataset",
     "bytes",
     "Largest sample accepted, stored or decoded (default: what the memory budget holds); larger "
     "ones, and zstd frames declaring more, are data errors",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(max_sample_size)},
    // --- pipeline
    {"io_depth",
     kCount,
     "pipeline",
     "reads",
     "Reads in flight at most",
     1,
     kMaxIoDepth,
     {},
     {},
     FEEDLINE_FIELD(io_depth)},
    {"storage_threads",
     kCount,
     "pipeline",
     "threads",
     "Storage threads, each with its own I/O queue and a share of {io_depth} (0: auto: one per "
     "core, at most 4, for local page-cache reads and HTTP objects of one sample each; one "
     "otherwise)",
     0,
     kMaxStorageThreads,
     {},
     {},
     FEEDLINE_FIELD(storage_threads)},
    {"decode_threads",
     kCount,
     "pipeline",
     "threads",
     "Decode worker threads",
     1,
     kMaxDecodeThreads,
     {},
     {},
     FEEDLINE_FIELD(decode_threads)},
    {"decode_nice",
     kCount,
     "pipeline",
     "",
     "Nice increment for the decode threads (0-19): CPU-bound decode yields to the short "
     "storage/collate/consumer hand-offs on busy cores; 0 keeps them at the process's priority",
     0,
     19,
     {},
     {},
     FEEDLINE_FIELD(decode_nice)},
    {"prefetch",
     kCount,
     "pipeline",
     "batches",
     "Finished batches queued ahead of the consumer (over a network the batch pool also grows, "
     "within half the memory budget, until storage may read 16 x {io_depth} samples ahead)",
     0,
     kMaxPrefetchBatches,
     {},
     {},
     FEEDLINE_FIELD(prefetch)},
    {"memory_budget",
     kSize,
     "pipeline",
     "bytes",
     "Bytes the pipeline may hold in buffers",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(memory_budget)},
    {"accounting",
     kFlag,
     "pipeline",
     "",
     "Stall accounting (off: to measure its overhead)",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(accounting)},
    // --- storage
    {"engine",
     kChoice,
     "storage",
     "",
     "Local I/O engine: uring, posix or auto",
     0,
     0,
     std::span(kEngines),
     {},
     FEEDLINE_FIELD(engine)},
    {"direct",
     kFlag,
     "storage",
     "",
     "O_DIRECT reads of local files",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(direct)},
    {"throttle_bw",
     kSize,
     "storage",
     "bytes/s",
     "Cap storage bandwidth (bytes per second, e.g. 50MiB)",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(throttle_bw)},
    {"throttle_latency",
     kText,
     "storage",
     "",
     "Add latency to every read: 2ms, normal:2ms:500us or lognormal:2ms:1ms",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(throttle_latency)},
    {"throttle_seek",
     kDuration,
     "storage",
     "",
     "Add latency to every read that does not go on from where the previous one ended (a "
     "rotational disk's seek): 8ms",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(throttle_seek)},
    // --- network
    {"connections",
     kCount,
     "network",
     "connections",
     "Connections per job (HTTP: concurrent keep-alive connections, 0 = one per request in "
     "flight; NFS: TCP connections to the server, like nconnect)",
     0,
     4096,
     {},
     {},
     FEEDLINE_FIELD(net.connections)},
    {"endpoint",
     kText,
     "network",
     "",
     "S3 endpoint URL (overrides AWS_ENDPOINT_URL), e.g. http://127.0.0.1:9000",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(net.endpoint)},
    {"region",
     kText,
     "network",
     "",
     "S3 region (overrides AWS_REGION / AWS_DEFAULT_REGION)",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(net.region)},
    {"profile",
     kText,
     "network",
     "",
     "AWS profile in ~/.aws/credentials and ~/.aws/config (overrides AWS_PROFILE)",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(net.profile)},
    {"sign_request",
     kFlag,
     "network",
     "",
     "Sign S3 requests (off: unsigned, for public buckets, even where credentials are "
     "configured, as aws --no-sign-request)",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(net.sign_request)},
    {"insecure",
     kFlag,
     "network",
     "",
     "Do not verify TLS certificates (says so in the report)",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(net.insecure)},
    {"ca_bundle",
     kPath,
     "network",
     "",
     "CA certificates file for TLS verification",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(net.ca_bundle)},
    {"part_size",
     kSize,
     "network",
     "bytes",
     "Large reads are split into parallel range requests of this size",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(net.part_size)},
    {"http_loops",
     kCount,
     "network",
     "threads",
     "HTTP event-loop threads per job that share parts of 1 MiB and more, so that receiving "
     "large objects uses more than one core (0 = one per core, at most 4; 1 = a single loop)",
     0,
     64,
     {},
     {},
     FEEDLINE_FIELD(net.http_loops)},
    {"max_attempts",
     kCount,
     "network",
     "attempts",
     "Attempts per request, the first included (retries back off with jitter)",
     1,
     100,
     {},
     {},
     FEEDLINE_FIELD(net.max_attempts)},
    {"connect_timeout",
     kDuration,
     "network",
     "",
     "Give up connecting after this long",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(net.connect_timeout)},
    {"stall_timeout",
     kDuration,
     "network",
     "",
     "Fail an attempt that receives no byte for this long",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(net.stall_timeout)},
    // --- decode
    {"image_size",
     kCount,
     "decode",
     "pixels",
     "Decode JPEG members (.jpg, .jpeg) into SIZE x SIZE x 3 RGB images (HWC uint8), cropped by "
     "{crop}",
     1,
     kMaxImageSize,
     {},
     {},
     FEEDLINE_FIELD(image_size)},
    {"crop",
     kChoice,
     "decode",
     "",
     "With {image_size}: random-resized (torchvision's RandomResizedCrop), center (the central "
     "87.5% square, as Resize(256) + CenterCrop(224)) or none (the whole image, squashed); {crop} "
     "none alone: each image at its own size",
     0,
     0,
     std::span(kCrops),
     {},
     FEEDLINE_FIELD(crop)},
    {"dct_scaling",
     kFlag,
     "decode",
     "",
     "Decode JPEGs at the DCT scale M/8 the crop allows (off: at full size before the resize, "
     "Pillow's pixels, more CPU)",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(dct_scaling)},
    {"decode_cost",
     kDuration,
     "decode",
     "",
     "Extra CPU time per sample in decode (plants a decode bottleneck)",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(decode_cost)},
    {"collate_cost",
     kDuration,
     "decode",
     "",
     "Extra CPU time per batch in collate",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(collate_cost)},
    // --- device
    {"device",
     kText,
     "device",
     "",
     "Copy each batch to this GPU (cuda:N) with overlapped async copies",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(device)},
    {"gpu_direct",
     kChoice,
     "device",
     "",
     "Direct path for samples that need no decode: auto, on (an error when impossible) or off",
     0,
     0,
     std::span(kGpuDirect),
     {},
     FEEDLINE_FIELD(gpu_direct)},
    {"cuda_streams",
     kCount,
     "device",
     "streams",
     "Host-to-device copies in flight (one per stream)",
     1,
     64,
     {},
     {},
     FEEDLINE_FIELD(cuda_streams)},
    // --- observability
    {"metrics_port",
     kCount,
     "observability",
     "",
     "Serve Prometheus metrics at http://ADDR:PORT/metrics while the run goes on (0: any free "
     "port, said on stderr)",
     0,
     65535,
     {},
     {},
     FEEDLINE_FIELD(metrics_port)},
    {"metrics_bind",
     kText,
     "observability",
     "",
     "The IPv4 address {metrics_port} listens on (0.0.0.0: every interface)",
     0,
     0,
     {},
     {},
     FEEDLINE_FIELD(metrics_bind)},
    // --- emulation: the command line's runs
    {"accelerators",
     kCount,
     "emulation",
     "accelerators",
     "Emulated accelerators on this host, as MLPerf Storage's ranks: each its own shard, "
     "batches and compute; {decode_threads} and {memory_budget} are the host's, shared out between "
     "them",
     1,
     kMaxAccelerators,
     {},
     kCli,
     FEEDLINE_FIELD(accelerators)},
    {"runs",
     kCount,
     "emulation",
     "runs",
     "MLPerf Storage's repeated runs: a warm-up, then N runs of the same settings; the report is "
     "the last one's, with each run's samples/s and whether they agree within 5%",
     1,
     100,
     {},
     kCli,
     FEEDLINE_FIELD(runs)},
    {"compute_time",
     kText,
     "emulation",
     "",
     "Emulated accelerator time per batch: 50ms or normal:50ms:5ms",
     0,
     0,
     {},
     kCli,
     FEEDLINE_FIELD(compute_time)},
    {"au_target",
     kNumber,
     "emulation",
     "",
     "Minimum accelerator utilisation (0..1] the run must reach, as in MLPerf Storage",
     0,
     1,
     {},
     kCli,
     FEEDLINE_FIELD(au_target)},
    {"stages_alone",
     kFlag,
     "emulation",
     "",
     "After the run, measure storage, decode and collate each alone and report the pipeline's "
     "efficiency",
     0,
     0,
     {},
     kCli,
     FEEDLINE_FIELD(stages_alone)},
    {"stages_alone_samples",
     kCount,
     "emulation",
     "samples",
     "Samples for {stages_alone}",
     1,
     1u << 26,
     {},
     kCli,
     FEEDLINE_FIELD(stages_alone_samples)},
};

#undef FEEDLINE_FIELD

Result<void> bad(std::string message) { return fail(Errc::kInvalidArgument, std::move(message)); }

Result<bool> parse_flag(std::string_view text) {
  const std::string t = ascii_lower(text);
  if (t == "true" || t == "1" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "0" || t == "no" || t == "off") return false;
  return fail(Errc::kInvalidArgument,
              fmt::format("'{}' is not true or false (a flag: true, false, 1, 0)", text));
}

// The checks of a value's text by its type (a count's and a number's range; a size's and a
// duration's units; a choice's names); what each field then holds.
Result<void> check_text(const Setting& w, std::string_view text) {
  if (text.empty()) return bad("the value is empty: give one, or leave the setting out");
  switch (w.type) {
    case kFlag:
      if (auto f = parse_flag(text); !f) return std::unexpected(f.error());
      return {};
    case kCount:
      if (auto n = parse_whole_number(text, count_bounds(w).first, count_bounds(w).second); !n) {
        return std::unexpected(n.error());
      }
      return {};
    case kNumber:
      if (auto n = parse_number_in(text, w.min, w.max, false); !n)
        return std::unexpected(n.error());
      return {};
    case kSize:
      if (auto n = parse_size(text); !n) return bad(n.error().message());
      return {};
    case kDuration:
      if (auto d = parse_duration(text); !d) return bad(d.error().message());
      return {};
    case kChoice:
      for (std::string_view c : w.choices) {
        if (text == c) return {};
      }
      return bad(fmt::format("'{}' is not one of {}", text, setting_range(w)));
    case kPath: {
      const std::string path(text);
      std::error_code ec;
      if (std::filesystem::is_directory(path, ec))
        return bad(fmt::format("{} is a directory", path));
      if (::access(path.c_str(), R_OK) != 0)
        return bad(fmt::format("cannot read {}: {}", path, std::generic_category().message(errno)));
      return {};
    }
    case kText:
      return {};
  }
  return {};
}

std::string number_text(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    return fmt::format("{}", static_cast<long long>(v));
  return fmt::format("{}", v);
}

}  // namespace

std::span<const Setting> settings() noexcept { return kSettings; }

const Setting* find_setting(std::string_view name) noexcept {
  for (const Setting& s : kSettings) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

Result<void> set_setting(LoaderSettings& s, const Setting& which, std::string_view text) {
  return std::visit(
      [&](auto field) -> Result<void> {
        auto& v = field(s);
        using T = std::remove_cvref_t<decltype(v)>;
        constexpr bool optional = requires { v.reset(); };
        if (auto ok = check_text(which, text); !ok) return ok;
        if constexpr (std::is_same_v<T, bool>) {
          v = *parse_flag(text);
        } else if constexpr (std::is_same_v<T, std::string>) {
          v = std::string(text);
        } else if constexpr (std::is_same_v<T, std::optional<double>>) {
          v = *parse_number_in(text, which.min, which.max, false);
        } else {
          const auto [lo, hi] = count_bounds(which);
          const std::uint64_t n = *parse_whole_number(text, lo, hi);
          if constexpr (optional) {
            v = static_cast<typename T::value_type>(n);
          } else {
            v = static_cast<T>(n);
          }
        }
        return {};
      },
      which.field);
}

std::string setting_text(const LoaderSettings& s, const Setting& which) {
  // The field is read only: the table's accessors take a non-const settings object.
  auto& settings = const_cast<LoaderSettings&>(s);
  return std::visit(
      [&](auto field) -> std::string {
        const auto& v = field(settings);
        using T = std::remove_cvref_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::string>) {
          return v;
        } else if constexpr (std::is_same_v<T, std::optional<double>>) {
          return v ? number_text(*v) : std::string();
        } else if constexpr (requires { v.has_value(); }) {
          return v ? fmt::format("{}", *v) : std::string();
        } else {
          return fmt::format("{}", v);
        }
      },
      which.field);
}

std::string setting_default(const Setting& which) {
  static const LoaderSettings defaults;
  return setting_text(defaults, which);
}

std::pair<std::uint64_t, std::uint64_t> count_bounds(const Setting& which) noexcept {
  constexpr double kTwoTo64 = 18446744073709551616.0;
  const std::uint64_t hi =
      which.max >= kTwoTo64 ? ~std::uint64_t{0} : static_cast<std::uint64_t>(which.max);
  return {static_cast<std::uint64_t>(which.min), hi};
}

std::string setting_range(const Setting& which) {
  switch (which.type) {
    case kCount:
      return fmt::format("{}..{}", count_bounds(which).first, count_bounds(which).second);
    case kNumber:
      return fmt::format("({}..{}]", number_text(which.min), number_text(which.max));
    case kChoice: {
      std::string out;
      for (std::string_view c : which.choices)
        out += fmt::format("{}{}", out.empty() ? "" : ", ", c);
      return out;
    }
    default:
      return {};
  }
}

std::string setting_name(std::string_view name, SettingVocabulary vocabulary, bool off) {
  std::string dashed(name);
  for (char& c : dashed) {
    if (c == '_') c = '-';
  }
  switch (vocabulary) {
    case SettingVocabulary::kCommandLine:
      return off ? "--no-" + dashed : "--" + dashed;
    case SettingVocabulary::kConfigFile:
      return off ? dashed + " = false" : dashed;
    case SettingVocabulary::kPython:
      return off ? std::string(name) + "=False" : std::string(name);
  }
  return std::string(name);
}

namespace {

// " 64", " = \"off\"", "=\"off\"": what follows a setting's name (not a flag's) when a message
// gives it a value.
std::string setting_value_text(const Setting& w, std::string_view value,
                               SettingVocabulary vocabulary) {
  const bool bare = w.type == SettingType::kCount || w.type == SettingType::kNumber;
  switch (vocabulary) {
    case SettingVocabulary::kCommandLine:
      return fmt::format(" {}", value);
    case SettingVocabulary::kConfigFile:
      return bare ? fmt::format(" = {}", value) : fmt::format(" = \"{}\"", value);
    case SettingVocabulary::kPython:
      return bare ? fmt::format("={}", value) : fmt::format("=\"{}\"", value);
  }
  return std::string(value);
}

}  // namespace

std::string render_setting_names(std::string_view message, SettingVocabulary vocabulary) {
  std::string out;
  out.reserve(message.size() + 16);
  std::size_t i = 0;
  while (i < message.size()) {
    const std::size_t open = message.find('{', i);
    if (open == std::string_view::npos) break;
    const std::size_t close = message.find('}', open);
    if (close == std::string_view::npos) break;
    std::string_view inside = message.substr(open + 1, close - open - 1);
    const bool off = inside.starts_with('!');
    if (off) inside.remove_prefix(1);
    // {name=value}: the setting given a value, as the front end would write it.
    std::optional<std::string_view> value;
    if (const std::size_t eq = inside.find('='); !off && eq != std::string_view::npos) {
      value = inside.substr(eq + 1);
      inside = inside.substr(0, eq);
    }
    out.append(message.substr(i, open - i));
    if (const Setting* w = find_setting(inside)) {
      if (value && w->type == SettingType::kFlag) {
        // A flag given a value is the flag or its opposite ({shuffle=false} is {!shuffle}).
        out += setting_name(inside, vocabulary, *value == "false");
        if (vocabulary == SettingVocabulary::kPython && *value != "false") out += "=True";
        if (vocabulary == SettingVocabulary::kConfigFile && *value != "false") out += " = true";
      } else {
        out += setting_name(inside, vocabulary, off);
        if (value) out += setting_value_text(*w, *value, vocabulary);
      }
    } else {
      out.append(message.substr(open, close - open + 1));
    }
    i = close + 1;
  }
  out.append(message.substr(i));
  return out;
}

}  // namespace feedline::loader
