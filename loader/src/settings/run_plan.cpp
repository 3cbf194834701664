// A run's plan from its settings (run_plan.hpp): every check and derivation the front ends share,
// so that a Python keyword and a flag mean the same and fail the same way.
#include "feedline/loader/run_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "feedline/core/cpus.hpp"
#include "feedline/core/redact.hpp"
#include "feedline/core/units.hpp"
#include "feedline/loader/accelerators.hpp"
#include "feedline/loader/format.hpp"
#include "feedline/loader/image.hpp"
#include "feedline/storage/latency.hpp"
#include "feedline/transports/cuda.hpp"
#include "feedline/transports/file_engine.hpp"

namespace feedline::loader {
namespace {

// The settings table's bounds on ranks (settings.cpp): a launcher's variables are held to them.
constexpr std::uint64_t kMaxRanksInEnv = 1u << 20;

Error usage(std::string message) { return Error(Errc::kInvalidArgument, std::move(message)); }

// A variable of env, or none (an embedder may pass no lookup at all).
std::optional<std::string> lookup(const storage::EnvLookup& env, const char* name) {
  if (!env) return std::nullopt;
  return env(name);
}

Result<std::chrono::nanoseconds> duration_setting(const std::string& text, const char* name) {
  if (text.empty()) return std::chrono::nanoseconds{};
  auto r = parse_duration(text);
  if (!r) return fail(usage(fmt::format("{}: {}", name, r.error().message())));
  return *r;
}

// What a run with several emulated accelerators can do, and the sampler's settings.
Result<void> plan_sampler(const LoaderSettings& s, const storage::EnvLookup& env, RunPlan& p) {
  if (s.accelerators > 1 && s.stages_alone) {
    return fail(
        usage("{stages_alone} measures one pipeline's stages: run it without {accelerators} (each "
              "accelerator's pipeline is the same)"));
  }
  SamplerConfig& c = p.ctx.config.sampler;
  c.batch_size = s.batch_size;
  c.epochs = s.epochs;
  c.seed = s.seed;
  c.shuffle = s.shuffle;
  c.shard_shuffle = s.shard_shuffle;
  if (s.shard_shuffle > 0 && !s.shuffle)
    return fail(usage("{shard_shuffle} shuffles: it cannot go with {!shuffle}"));
  auto sh = resolve_sharding(s, env);
  if (!sh) return fail(sh.error());
  c.rank = sh->rank;
  c.world_size = sh->world;
  c.drop_last = s.drop_last;
  return {};
}

// The pipeline's sizes and the memory they may hold.
Result<void> plan_pipeline(const LoaderSettings& s, LoaderConfig& c) {
  c.io_depth = s.io_depth;
  c.decode_threads = s.decode_threads;
  c.storage_threads = s.storage_threads;
  c.decode_nice = s.decode_nice;
  c.prefetch_batches = s.prefetch;
  auto budget = parse_size(s.memory_budget);
  if (!budget) return fail(usage(fmt::format("{{memory_budget}}: {}", budget.error().message())));
  const std::uint64_t ram = physical_memory_bytes();
  if (*budget < (1u << 20)) return fail(usage("{memory_budget} must be at least 1 MiB"));
  if (*budget > ram) {
    return fail(usage(fmt::format("{{memory_budget}} {} is more than this machine's memory ({})",
                                  format_bytes(static_cast<double>(*budget)),
                                  format_bytes(static_cast<double>(ram)))));
  }
  c.memory_budget = *budget;
  if (!s.max_sample_size.empty()) {
    auto m = parse_size(s.max_sample_size);
    if (!m) return fail(usage(fmt::format("{{max_sample_size}}: {}", m.error().message())));
    if (*m == 0) return fail(usage("{max_sample_size} must be positive"));
    if (*m > c.memory_budget) {
      return fail(usage(fmt::format(
          "{{max_sample_size}} {} is more than {{memory_budget}} {}: no sample that large fits",
          format_bytes(static_cast<double>(*m)),
          format_bytes(static_cast<double>(c.memory_budget)))));
    }
    c.max_sample_bytes = *m;
  }
  auto decode_cost = duration_setting(s.decode_cost, "{decode_cost}");
  if (!decode_cost) return fail(decode_cost.error());
  c.diagnostics.decode_cost = *decode_cost;
  auto collate_cost = duration_setting(s.collate_cost, "{collate_cost}");
  if (!collate_cost) return fail(collate_cost.error());
  c.diagnostics.collate_cost = *collate_cost;
  if (s.on_error == "fail") {
    c.on_error = OnError::kFail;
  } else if (s.on_error == "skip") {
    c.on_error = OnError::kSkip;
  } else {
    return fail(
        usage(fmt::format("{{on_error}}: unknown policy '{}' (choose fail or skip)", s.on_error)));
  }
  c.diagnostics.accounting = s.accounting;
  return {};
}

// JPEG members decoded into images (image_size, crop, dct_scaling).
Result<void> plan_images(const LoaderSettings& s, RunPlan& p) {
  if (!s.image_size && s.crop.empty() && s.dct_scaling) return {};
  ImageConfig ic;
  ic.decode = true;
  ic.size = s.image_size.value_or(0);
  ic.crop = s.image_size ? Crop::kCenter : Crop::kNone;
  if (!s.crop.empty()) {
    auto crop = parse_crop(s.crop);
    if (!crop) return fail(usage(fmt::format("{{crop}}: {}", crop.error().what())));
    ic.crop = *crop;
  }
  ic.dct_scaling = s.dct_scaling;
  if (ic.crop != Crop::kNone && ic.size == 0) {
    return fail(
        usage(fmt::format("{{crop}} {} needs {{image_size}} (the output's side, e.g. 224); "
                          "{{crop}} none alone decodes each image at its own size",
                          s.crop)));
  }
  if (!jpeg_available()) {
    return fail(
        usage("{image_size}/{crop}: this feedline was built without JPEG decoding; rebuild with "
              "-DFEEDLINE_WITH_JPEG=ON (libjpeg62-turbo-dev, libexif-dev)"));
  }
  auto registry = image_decoders(ic);
  if (!registry)
    return fail(usage(fmt::format("{{image_size}}/{{crop}}: {}", registry.error().what())));
  LoaderConfig& c = p.ctx.config;
  c.decoders = std::make_shared<const DecoderRegistry>(std::move(*registry));
  p.ctx.image = c.decoders->find(".jpg")->describe();
  return {};
}

// The GPU the batches go to, and how reads reach it.
Result<void> plan_device(const LoaderSettings& s, LoaderConfig& c) {
  auto mode = parse_gpu_direct(s.gpu_direct);
  if (!mode) return fail(usage(fmt::format("{{gpu_direct}}: {}", mode.error().message())));
  c.gpu_direct = *mode;
  auto dev = transports::cuda::parse_device(s.device);
  if (!dev) {
    return fail(
        usage(fmt::format("{{device}}: {} ({})", dev.error().message(), dev.error().hint())));
  }
  c.device.device = *dev;
  c.device.streams = s.cuda_streams;
  if (*dev >= 0) c.device.cuda = transports::cuda::CudaRuntime::load();  // for the plan and run
  return {};
}

// The local engine, the network settings and the throttle.
Result<void> plan_storage(const LoaderSettings& s, std::string_view url,
                          const storage::EnvLookup& env, std::stop_token stop, RunPlan& p) {
  storage::BackendConfig& bc = p.backend;
  auto engine = transports::parse_engine(s.engine);
  if (!engine) return fail(usage(fmt::format("{{engine}}: {}", engine.error().message())));
  if (*engine == transports::EngineKind::kUring && !transports::uring_compiled_in()) {
    return fail(usage(
        "{engine} uring: this feedline was built without io_uring (liburing); use {engine} posix "
        "or auto"));
  }
  bc.file.engine = *engine;
  bc.file.direct = s.direct;
  bc.stop = stop;
  if (auto net = apply_net_settings(s.net, url, env, bc, p.notes, p.secrets); !net)
    return fail(net.error());
  if (s.throttle_bw.empty() && s.throttle_latency.empty() && s.throttle_seek.empty()) return {};
  storage::ThrottleConfig tc;
  if (!s.throttle_bw.empty()) {
    auto bw = parse_size(s.throttle_bw);
    if (!bw || *bw == 0) {
      return fail(usage(
          fmt::format("{{throttle_bw}}: {}", bw ? "must be positive" : bw.error().message())));
    }
    tc.bytes_per_second = static_cast<double>(*bw);
  }
  if (!s.throttle_latency.empty()) {  // 2ms, normal:MEAN:SD or lognormal:MEAN:SD
    auto latency = storage::LatencyDistribution::parse(s.throttle_latency);
    if (!latency)
      return fail(usage(fmt::format("{{throttle_latency}}: {}", latency.error().message())));
    tc.latency = *latency;
  }
  if (!s.throttle_seek.empty()) {
    auto seek = parse_duration(s.throttle_seek);
    if (!seek || seek->count() <= 0) {
      return fail(usage(fmt::format("{{throttle_seek}}: {}",
                                    seek ? "must be positive" : seek.error().message())));
    }
    tc.seek = *seek;
  }
  p.throttle = tc;
  return {};
}

}  // namespace

Result<Sharding> resolve_sharding(const LoaderSettings& s, const storage::EnvLookup& env) {
  struct Launcher {
    const char* rank;
    const char* world;
  };
  constexpr Launcher kLaunchers[] = {{"RANK", "WORLD_SIZE"},
                                     {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                     {"SLURM_PROCID", "SLURM_NTASKS"}};
  auto env_number = [&](const char* name, const std::string& v, std::uint64_t min,
                        std::uint64_t max) -> Result<unsigned> {
    auto n = parse_whole_number(v, min, max);
    if (!n) {
      return fail(
          usage(fmt::format("environment variable {}='{}': {}", name, v, n.error().message())));
    }
    return static_cast<unsigned>(*n);
  };
  Sharding sh;
  std::string rank_from = "{rank}", world_from = "{world_size}";
  if (s.rank) sh.rank = *s.rank;
  if (s.world_size) sh.world = *s.world_size;
  for (const Launcher& l : kLaunchers) {
    const std::optional<std::string> rank = lookup(env, l.rank), world = lookup(env, l.world);
    if (!rank && !world) continue;
    if (!s.rank) {
      if (!rank) {
        return fail(usage(
            fmt::format("{} is set but {} is not: set both, or give {{rank}}", l.world, l.rank)));
      }
      auto n = env_number(l.rank, *rank, 0, kMaxRanksInEnv - 1);
      if (!n) return fail(n.error());
      sh.rank = *n;
      rank_from = l.rank;
    }
    if (!s.world_size) {
      if (!world) {
        return fail(usage(fmt::format("{} is set but {} is not: set both, or give {{world_size}}",
                                      l.rank, l.world)));
      }
      auto n = env_number(l.world, *world, 1, kMaxRanksInEnv);
      if (!n) return fail(n.error());
      sh.world = *n;
      world_from = l.world;
    }
    break;
  }
  if (sh.rank >= sh.world) {
    return fail(
        usage(fmt::format("{} {} must be below {} {}", rank_from, sh.rank, world_from, sh.world)));
  }
  return sh;
}

Result<void> apply_net_settings(const NetSettings& o, std::string_view url,
                                const storage::EnvLookup& env, storage::BackendConfig& c,
                                std::vector<std::string>& notes,
                                std::vector<std::string>& secrets) {
  // Whatever the URL carries that is secret (a password, a signature) is never printed.
  for (std::string& secret : url_secrets(url)) secrets.push_back(std::move(secret));
  auto duration = [](const std::string& text,
                     const char* name) -> Result<std::chrono::milliseconds> {
    auto r = parse_duration(text);
    if (!r) return fail(usage(fmt::format("{}: {}", name, r.error().message())));
    if (r->count() <= 0) return fail(usage(fmt::format("{} must be positive", name)));
    return std::chrono::duration_cast<std::chrono::milliseconds>(*r);
  };
  auto part = parse_size(o.part_size);
  if (!part) return fail(usage(fmt::format("{{part_size}}: {}", part.error().message())));
  if (*part < 4096) return fail(usage("{part_size} must be at least 4 KiB"));
  if (o.max_attempts == 0) return fail(usage("{max_attempts} must be at least 1"));
  auto connect_timeout = duration(o.connect_timeout, "{connect_timeout}");
  if (!connect_timeout) return fail(connect_timeout.error());
  auto stall_timeout = duration(o.stall_timeout, "{stall_timeout}");
  if (!stall_timeout) return fail(stall_timeout.error());

  c.http.connections = o.connections;
  c.http.insecure = o.insecure;
  c.http.ca_bundle = o.ca_bundle;
  c.http.part_size = *part;
  c.http.loops = o.http_loops;
  c.http.max_attempts = o.max_attempts;
  c.http.connect_timeout = *connect_timeout;
  c.http.stall_timeout = *stall_timeout;
  if (o.insecure) notes.emplace_back("{insecure}: TLS certificates are NOT verified");

  c.nfs.connections = o.connections == 0 ? 1 : o.connections;
  c.nfs.max_attempts = o.max_attempts;
  c.nfs.timeout = c.http.connect_timeout;

  if (!url.starts_with("s3://") && !url.starts_with("S3://")) {
    if (!o.endpoint.empty() || !o.profile.empty() || !o.region.empty() || !o.sign_request) {
      return fail(usage("{endpoint}, {region}, {profile} and {!sign_request} are for s3:// URLs"));
    }
    return {};
  }
  const storage::EnvLookup read = [&env](const char* name) { return lookup(env, name); };
  auto aws = storage::load_aws_settings(read, o.profile);
  if (!aws) return fail(usage(aws.error().what()));
  if (!o.sign_request) {
    notes.emplace_back("{!sign_request}: S3 requests are not signed (public buckets only)");
  } else {
    c.s3.access_key_id = aws->access_key_id;
    c.s3.secret_access_key = aws->secret_access_key;
    c.s3.session_token = aws->session_token;
    secrets.push_back(aws->secret_access_key);
    secrets.push_back(aws->session_token);
  }
  if (!aws->region.empty()) c.s3.region = aws->region;
  if (!o.region.empty()) c.s3.region = o.region;
  c.s3.endpoint = o.endpoint.empty() ? aws->endpoint : o.endpoint;
  if (!c.s3.endpoint.empty() && !c.s3.endpoint.starts_with("http://") &&
      !c.s3.endpoint.starts_with("https://")) {
    return fail(
        usage(fmt::format("{}: the S3 endpoint must be an http:// or https:// URL, got '{}'",
                          o.endpoint.empty() ? "AWS_ENDPOINT_URL" : "{endpoint}", c.s3.endpoint)));
  }
  // Custom endpoints (MinIO, s3rver, Ceph) want the bucket in the path; AWS takes both.
  c.s3.path_style = !c.s3.endpoint.empty();
  return {};
}

Result<RunPlan> plan_run(const LoaderSettings& s, std::string_view url,
                         const storage::EnvLookup& env, std::stop_token stop) {
  RunPlan p;
  RunContext& ctx = p.ctx;
  ctx.url = redact_url(url);
  ctx.au_target = s.au_target.value_or(0);
  ctx.accelerators = s.accelerators;
  if (auto r = plan_sampler(s, env, p); !r) return fail(r.error());
  LoaderConfig& c = ctx.config;
  if (auto r = plan_pipeline(s, c); !r) return fail(r.error());
  if (auto r = plan_images(s, p); !r) return fail(r.error());
  c.stop = stop;
  if (auto r = plan_device(s, c); !r) return fail(r.error());
  if (!s.compute_time.empty()) {
    auto m = parse_compute_time(s.compute_time);
    if (!m) return fail(usage(fmt::format("{{compute_time}}: {}", m.error().message())));
    p.compute = *m;
    ctx.compute_time = s.compute_time;
  }
  if (s.format != "auto") {
    auto f = parse_format(s.format);
    if (!f) return fail(usage(f.error().what()));
    p.format = *f;
  }
  if (auto r = plan_storage(s, url, env, stop, p); !r) return fail(r.error());
  p.dataset.use_index = s.index;
  p.dataset.skip_bad_objects = c.on_error == OnError::kSkip;
  p.dataset.format = p.format.value_or(DatasetFormat::kAuto);
  p.dataset.stop = stop;
  return p;
}

Result<OpenedRun> open_run(RunPlan& plan, std::string_view url) {
  RunContext& ctx = plan.ctx;
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto resolved = registry.open(url, plan.backend);
  if (!resolved) return fail(resolved.error());
  OpenedRun run;
  run.backend = std::move(resolved->backend);
  if (plan.throttle) run.backend = storage::make_throttle(std::move(run.backend), *plan.throttle);
  auto dataset = open_dataset(*run.backend, resolved->key, plan.dataset);
  if (!dataset) return fail(dataset.error());
  run.dataset = std::move(*dataset);
  const Dataset& d = run.dataset;
  ctx.format = std::string(format_name(d.format));
  if (ctx.config.sampler.shard_shuffle > 0 && d.format.spec().one_sample_per_object) {
    run.notes.push_back(fmt::format(
        "{{shard_shuffle}} shuffles the shards of a tar or TFRecord dataset; in this {} dataset "
        "every file is a shard of one sample, so the order is as shuffled as without it (reads of "
        "neighbouring files do not coalesce)",
        format_name(d.format)));
  }
  ctx.dataset_samples = d.samples.size();
  ctx.dataset_bytes = d.total_bytes;
  ctx.listing_bytes = d.listing_bytes;
  ctx.dataset_unknown_sizes = static_cast<std::uint64_t>(
      std::count_if(d.samples.begin(), d.samples.end(),
                    [](const Sample& s) { return s.length == storage::kUnknownSize; }));
  ctx.host_memory_bytes = physical_memory_bytes();
  const auto parsed = storage::parse_url(url);
  ctx.potential_caching = parsed && parsed->scheme == "file" && !plan.backend.file.direct &&
                          d.total_bytes <= ctx.host_memory_bytes;
  return run;
}

}  // namespace feedline::loader
