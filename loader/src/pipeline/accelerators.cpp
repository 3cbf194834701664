// N emulated accelerators on one host (accelerators.hpp).
#include "feedline/loader/accelerators.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "feedline/core/cpus.hpp"
#include "feedline/core/time_limit.hpp"
#include "feedline/core/units.hpp"

namespace feedline::loader {
namespace {

// The host's CPU counts as saturated past this share of its cores busy with the pipeline's work.
constexpr double kHostCpuSaturated = 0.85;

// err, its message prefixed with which accelerator it came from.
Error on_accelerator(const Error& err, std::size_t i, unsigned rank, std::uint64_t world) {
  Error e(err.code(),
          fmt::format("accelerator {} (rank {} of {}): {}", i, rank, world, err.message()));
  if (!err.object().empty()) e.with_object(err.object());
  if (err.offset()) e.with_offset(*err.offset());
  if (!err.hint().empty()) e.with_hint(err.hint());
  if (err.sys_errno() != 0) e.with_sys_errno(err.sys_errno());
  if (err.http_status() != 0) e.with_http_status(err.http_status());
  return e;
}

// The host's accelerators meeting at an epoch: the last to arrive waits on the job's sync (the
// other hosts), then releases the rest. A failure there, or a stop, releases them all with it.
class HostBarrier final : public EpochSync {
 public:
  HostBarrier(unsigned n, EpochSync* job) : n_(n), job_(job) {}

  Result<void> arrive(std::uint32_t epoch, std::stop_token stop) override {
    std::unique_lock lock(mu_);
    if (failed_) return fail(*failed_);
    const std::uint64_t generation = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      Result<void> r;
      if (job_) {
        lock.unlock();
        r = job_->arrive(epoch, stop);
        lock.lock();
      }
      if (!r) failed_ = r.error();
      ++generation_;
      cv_.notify_all();
      return r;
    }
    cv_.wait(lock, stop, [&] { return generation_ != generation || failed_.has_value(); });
    if (failed_) return fail(*failed_);
    if (generation_ == generation) return fail(Errc::kCancelled, "stopped at an epoch barrier");
    return {};
  }

 private:
  const unsigned n_;
  EpochSync* const job_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  unsigned arrived_ = 0;
  std::uint64_t generation_ = 0;
  std::optional<Error> failed_;
};

double cpu_seconds_of(const PipelineReport& r) {
  double s = 0;
  for (const StageReport& st : r.stages) s += st.cpu_seconds;
  return s;
}

}  // namespace

AcceleratorSplit split_host(const LoaderConfig& host, unsigned n) {
  AcceleratorSplit s;
  s.accelerators = std::max(1u, n);
  s.cores = std::max(1u, host.cores > 0 ? host.cores : usable_cores());
  s.decode_threads = host.decode_threads;
  s.decode_threads_each = std::max(1u, host.decode_threads / s.accelerators);
  s.cores_each = std::max(1u, s.cores / s.accelerators);
  s.memory_budget = host.memory_budget;
  s.memory_budget_each = host.memory_budget / s.accelerators;
  return s;
}

Verdict host_verdict(const std::vector<PipelineReport>& accelerators, const AcceleratorSplit& split,
                     double wall_seconds) {
  Verdict v;
  std::map<StageId, std::size_t> votes;
  const PipelineReport* slowest = nullptr;
  double cpu = 0;
  for (const PipelineReport& r : accelerators) {
    cpu += cpu_seconds_of(r);
    if (!r.verdict.stage) continue;
    ++votes[*r.verdict.stage];
    if (!slowest || r.consumer.samples_per_second < slowest->consumer.samples_per_second)
      slowest = &r;
  }
  if (votes.empty() || slowest == nullptr) {
    v.evidence = "no accelerator delivered a batch: nothing to judge";
    return v;
  }
  // The stage most accelerators name; a tie goes to the slowest accelerator's.
  StageId stage = *slowest->verdict.stage;
  std::size_t most = votes[stage];
  for (const auto& [s, k] : votes) {
    if (k > most) {
      stage = s;
      most = k;
    }
  }
  v.stage = stage;
  const std::size_t n = accelerators.size();
  const double cpu_share =
      wall_seconds > 0 ? cpu / (wall_seconds * static_cast<double>(split.cores)) : 0;
  v.evidence = fmt::format("{} of {} accelerator(s) name {}", most, n, stage_name(stage));
  if (n > 1 && stage == StageId::kStorage) {
    std::uint64_t bytes = 0;
    for (const PipelineReport& r : accelerators) bytes += r.io.storage_bytes;
    v.evidence += fmt::format(
        ", the storage they share: {} read over all {} accelerators' queues",
        format_rate(wall_seconds > 0 ? static_cast<double>(bytes) / wall_seconds : 0), n);
  }
  v.evidence += fmt::format(
      "; the pipelines' stages used {:.2f} CPU-s in {:.2f} s, {:.0f}% of the host's {} core(s)",
      cpu, wall_seconds, cpu_share * 100, split.cores);
  const bool cpu_bound = cpu_share >= kHostCpuSaturated && stage != StageId::kConsumer;
  if (cpu_bound) v.evidence += ": the host's CPU, shared by every accelerator, is saturated";
  v.evidence += fmt::format("; the slowest accelerator ({:.0f} samples/s): {}",
                            slowest->consumer.samples_per_second, slowest->verdict.evidence);
  v.next = slowest->verdict.next;
  v.advice = slowest->verdict.advice;
  if (cpu_bound) {
    v.advice = fmt::format(
        "the host's cores are the limit, not one accelerator's settings: fewer accelerators on "
        "this host (or more hosts), more cores, or cheaper per-sample work; {}",
        v.advice);
  } else if (n > 1 && stage == StageId::kStorage) {
    v.advice = fmt::format(
        "every accelerator waits on the same storage: more accelerators on this host will not "
        "read faster; {}",
        v.advice);
  }
  return v;
}

std::uint64_t full_steps_per_epoch(std::uint64_t samples, std::uint32_t batch_size,
                                   std::uint64_t world_size, unsigned n) noexcept {
  const std::uint64_t ways = std::max<std::uint64_t>(1, world_size) * std::max(1u, n);
  return samples / ways / std::max<std::uint32_t>(1, batch_size);
}

unsigned most_accelerators_measurable(std::uint64_t samples, std::uint32_t batch_size,
                                      std::uint64_t world_size, std::uint64_t min_steps) noexcept {
  const std::uint64_t per = samples_needed(1, batch_size, world_size, min_steps);
  return static_cast<unsigned>(std::min<std::uint64_t>(samples / per, kMaxAccelerators));
}

std::uint64_t samples_needed(unsigned n, std::uint32_t batch_size, std::uint64_t world_size,
                             std::uint64_t min_steps) noexcept {
  return std::max<std::uint64_t>(1, min_steps) * std::max<std::uint32_t>(1, batch_size) *
         std::max<std::uint64_t>(1, world_size) * std::max(1u, n);
}

std::optional<unsigned> AcceleratorSearch::next() const noexcept {
  if (!failed_) {
    if (passed_ >= max_) return std::nullopt;
    return passed_ == 0 ? 1u : std::min(max_, passed_ * 2);
  }
  if (*failed_ <= passed_ + 1) return std::nullopt;
  return passed_ + (*failed_ - passed_) / 2;
}

void AcceleratorSearch::record(unsigned n, bool passed) noexcept {
  if (passed) {
    passed_ = std::max(passed_, n);
  } else if (!failed_ || n < *failed_) {
    failed_ = n;
  }
}

namespace {

Result<void> check_accelerators(const LoaderConfig& host, unsigned n, std::uint64_t world) {
  if (n < 1 || n > kMaxAccelerators) {
    return fail(Errc::kInvalidArgument,
                fmt::format("accelerators: {} is not in 1..{}", n, kMaxAccelerators));
  }
  if (host.sampler.world_size == 0 || world > (1u << 20)) {
    return fail(Errc::kInvalidArgument,
                fmt::format("accelerators: {} x world size {} is more ranks than a run may have", n,
                            host.sampler.world_size));
  }
  if (n > 1 && !host.sampler.resume.at_start()) {
    return fail(Error(Errc::kInvalidArgument,
                      "accelerators: a resume point is one loader's; several accelerators on one "
                      "host each start from the epoch's beginning")
                    .with_hint("resume with one accelerator, or from the start of an epoch"));
  }
  return {};
}

// One loader per accelerator, each a rank of its own with its share of the host (out.split);
// their ranks go to out.ranks.
Result<std::vector<std::unique_ptr<Loader>>> open_loaders(storage::Backend& backend,
                                                          const Dataset& dataset,
                                                          const LoaderConfig& host, unsigned n,
                                                          std::uint64_t world, std::stop_token all,
                                                          HostReport& out) {
  std::vector<std::unique_ptr<Loader>> loaders;
  loaders.reserve(n);
  for (unsigned i = 0; i < n; ++i) {
    LoaderConfig c = host;
    c.sampler.rank = host.sampler.rank * n + i;
    c.sampler.world_size = static_cast<unsigned>(world);
    c.decode_threads = out.split.decode_threads_each;
    c.memory_budget = out.split.memory_budget_each;
    c.cores = out.split.cores_each;
    c.loaders_sharing_backend = n;  // one connection pool for the host
    c.stop = all;
    out.ranks.push_back(c.sampler.rank);
    auto l = Loader::open(backend, dataset, std::move(c));
    if (!l) return fail(on_accelerator(l.error(), i, out.ranks.back(), world));
    loaders.push_back(std::move(*l));
  }
  return loaders;
}

// The host's figures from its accelerators' reports: totals, AU spread, the straggler.
void add_up_accelerators(HostReport& out, std::uint64_t world) {
  const std::size_t n = out.accelerators.size();
  double au_sum = 0;
  std::size_t au_count = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const PipelineReport& r = out.accelerators[i];
    out.samples += r.consumer.samples;
    out.bytes += r.consumer.bytes;
    out.batches += r.consumer.batches;
    out.digest += r.delivered.digest;
    out.digest_computed = out.digest_computed && r.delivered.digest_computed;
    out.skipped += r.delivered.skipped;
    out.sync_seconds = std::max(out.sync_seconds, r.consumer.sync_seconds);
    if (r.error && !out.error) out.error = on_accelerator(*r.error, i, out.ranks[i], world);
    if (r.consumer.au_steps > 0) {
      if (au_count == 0 || r.consumer.au < out.au_min) {
        out.au_min = r.consumer.au;
        out.au_min_accelerator = i;
      }
      out.au_max = au_count == 0 ? r.consumer.au : std::max(out.au_max, r.consumer.au);
      au_sum += r.consumer.au;
      ++au_count;
    }
  }
  out.au_measured = au_count > 0;
  out.au_mean = au_count > 0 ? au_sum / static_cast<double>(au_count) : 0;
  if (out.wall_seconds > 0) {
    out.samples_per_second = static_cast<double>(out.samples) / out.wall_seconds;
    out.bytes_per_second = static_cast<double>(out.bytes) / out.wall_seconds;
  }
  std::vector<double> rates;
  for (std::size_t i = 0; i < n; ++i) {
    const double r = out.accelerators[i].consumer.samples_per_second;
    rates.push_back(r);
    if (r < out.accelerators[out.straggler].consumer.samples_per_second) out.straggler = i;
  }
  std::sort(rates.begin(), rates.end());
  out.median_samples_per_second = n % 2 ? rates[n / 2] : (rates[n / 2 - 1] + rates[n / 2]) / 2;
  out.straggler_ratio = out.median_samples_per_second > 0
                            ? out.accelerators[out.straggler].consumer.samples_per_second /
                                  out.median_samples_per_second
                            : 1;
}

}  // namespace

Result<HostReport> run_accelerators(storage::Backend& backend, const Dataset& dataset,
                                    const LoaderConfig& host, unsigned n,
                                    const ComputeModel& compute, std::stop_token stop,
                                    std::atomic<std::uint64_t>* progress, EpochSync* sync,
                                    std::chrono::nanoseconds run_for) {
  const std::uint64_t world = std::uint64_t{host.sampler.world_size} * n;
  FEEDLINE_TRY(check_accelerators(host, n, world));
  HostReport out;
  out.split = split_host(host, n);
  if (out.split.memory_budget_each == 0) {
    return fail(Errc::kInvalidArgument,
                fmt::format("accelerators: a memory budget of {} bytes cannot be shared by {}",
                            host.memory_budget, n));
  }
  // One stop for every accelerator: the caller's, or the first one that fails.
  std::stop_source all;
  std::stop_callback relay(stop, [&all] { all.request_stop(); });
  FEEDLINE_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Loader>> loaders,
                            open_loaders(backend, dataset, host, n, world, all.get_token(), out));
  out.accelerators.resize(n);
  // The run's own time starts now that every loader is open.
  std::optional<TimeLimit> limit;
  std::optional<std::stop_callback<std::function<void()>>> expire;
  if (run_for.count() > 0) {
    limit.emplace(run_for, stop);
    expire.emplace(limit->token(), std::function<void()>([&all] { all.request_stop(); }));
  }
  HostBarrier barrier(n, sync);
  const auto t0 = std::chrono::steady_clock::now();
  {
    std::vector<std::jthread> consumers;
    consumers.reserve(n);
    for (unsigned i = 0; i < n; ++i) {
      consumers.emplace_back([&, i] {
        ComputeModel mine = compute;
        mine.seed = compute.seed + i;  // each accelerator's steps drawn on their own
        out.accelerators[i] =
            run_emulated(*loaders[i], mine, all.get_token(), progress, sync ? &barrier : nullptr);
        if (out.accelerators[i].error) all.request_stop();
      });
    }
  }
  out.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.interrupted = stop.stop_requested();
  add_up_accelerators(out, world);
  out.verdict = host_verdict(out.accelerators, out.split, out.wall_seconds);
  return out;
}

}  // namespace feedline::loader
