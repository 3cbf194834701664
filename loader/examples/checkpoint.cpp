// Checkpoint and resume, as a training job does across a restart: a run saves where it stands
// after some batches to a file (with its model's checkpoint) and ends; a new process opens a
// Loader from that file and delivers exactly the rest, every sample of every epoch once over the
// two runs. The state is the document Python's Loader.state_dict() writes (state.hpp): either
// side may save it, either may resume from it.
//
//   feedline gen /tmp/ds --format tar --samples 2000 --sample-size 64KiB
//   feedline_checkpoint_example /tmp/ds /tmp/state.json 20   # 20 batches, then the state
//   feedline_checkpoint_example /tmp/ds /tmp/state.json      # the rest, from the state
#include <fmt/format.h>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "feedline/loader/dataset.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/loader/state.hpp"
#include "feedline/storage/registry.hpp"

namespace {

int fail(const std::string& what) {
  std::fprintf(stderr, "%s\n", what.c_str());
  return 1;
}

// The checkpoint file: written aside, then renamed into place, so that a crash while it is
// written leaves the last one whole.
bool save(const std::string& path, const std::string& text) {
  const std::string part = path + ".part";
  {
    std::ofstream out(part, std::ios::binary | std::ios::trunc);
    if (!(out << text << '\n') || !out.flush()) return false;
  }
  std::error_code ec;
  std::filesystem::rename(part, path, ec);
  return !ec;
}

std::optional<std::string> read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return std::nullopt;
  std::string text;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  const bool ok = !std::ferror(f);
  std::fclose(f);
  return ok ? std::optional(std::move(text)) : std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr,
                 "usage: %s DATASET_DIR STATE_FILE [BATCHES]\n"
                 "  with BATCHES: a fresh run that saves its state after that many batches\n"
                 "  without: the rest of that run, resumed from STATE_FILE\n",
                 argv[0]);
    return 2;
  }
  using namespace feedline;
  const std::string url = argv[1], state_file = argv[2];
  std::optional<std::uint64_t> save_after;
  if (argc == 4) {
    const std::string_view n = argv[3];
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), v);
    if (ec != std::errc() || end != n.data() + n.size() || v == 0) {
      std::fprintf(stderr, "BATCHES must be a count of at least 1, not '%s'\n", argv[3]);
      return 2;
    }
    save_after = v;
  }

  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto where = registry.open(url, {});
  if (!where) return fail(where.error().what());
  auto dataset = loader::open_dataset(*where->backend, where->key, {});
  if (!dataset) return fail(dataset.error().what());

  // The settings that fix the order must be the same in both runs (the state says so if not).
  loader::LoaderConfig config;
  config.sampler.batch_size = 32;
  config.sampler.epochs = 2;
  config.sampler.seed = 1;
  config.memory_budget = 256 << 20;

  if (!save_after) {
    // Resuming: the state must be for these settings and this dataset (its listing's
    // fingerprint); then the sampler starts where the saved run stood.
    const std::optional<std::string> text = read_file(state_file);
    if (!text) return fail(fmt::format("cannot read {}", state_file));
    auto state = loader::parse_loader_state(*text);
    if (!state) return fail(state.error().message());
    if (auto ok = loader::resume_from(*state, *dataset, url, config.sampler); !ok)
      return fail(ok.error().message());
    fmt::print("resuming in epoch {} after {} earlier run(s)\n", state->resume.epoch,
               state->resume.progress.size());
  }

  auto loader = loader::Loader::open(*where->backend, *dataset, config);
  if (!loader) return fail(loader.error().what());
  std::uint64_t samples = 0, batches = 0, digest = 0;
  for (;;) {
    auto batch = (*loader)->next();
    if (!batch) return fail(batch.error().what());
    if (batch->end()) break;
    samples += batch->samples().size();
    digest += batch->digest();  // mod 2^64: the runs' digests add up to the whole one
    ++batches;
    if (save_after && batches == *save_after) {
      // Where the run stands after the batches next() handed out (not those read ahead).
      const loader::LoaderState s =
          loader::loader_state(url, *dataset, config.sampler, (*loader)->resume_point());
      if (!save(state_file, loader::format_loader_state(s)))
        return fail(fmt::format("cannot write {}", state_file));
      fmt::print("saved the state after {} batches: epoch {}\n", batches, s.resume.epoch);
      break;  // the job ends here (a restart, a preemption)
    }
  }
  fmt::print("{}: {} samples in {} batches, digest {}\n", save_after ? "first run" : "resumed",
             samples, batches, digest);
  return 0;
}
