// libFuzzer target: the loader state a user's checkpoint hands back (Python's
// Loader(state=...)). The parse must never crash, every refusal must name the state and say why,
// and a state it accepts must survive a round trip through format_loader_state(). The sampler must
// then take or refuse its resume point (any world sizes, batch counts and number of earlier runs)
// without crashing, and what it delivers must be samples of the dataset, none twice in an epoch.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string_view>

#include "feedline/loader/sampler.hpp"
#include "feedline/loader/state.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace feedline;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto s = loader::parse_loader_state(text);
  if (!s) {
    const Error& e = s.error();
    if (e.code() != Errc::kInvalidArgument || e.object() != "state" ||
        !e.message().starts_with("state: ")) {
      __builtin_trap();
    }
    return 0;
  }
  if (s->resume.epoch > s->epochs || s->resume.progress.size() > loader::kLoaderStateMaxRuns)
    __builtin_trap();
  auto again = loader::parse_loader_state(loader::format_loader_state(*s));
  if (!again) __builtin_trap();
  // A url that is not UTF-8 is written with replacement characters: all else is kept.
  again->url = s->url;
  if (!(*again == *s)) __builtin_trap();

  // The sampler over a dataset of the state's size (kept small: the fuzzer explores the resume
  // arithmetic, not big permutations).
  if (s->num_samples > (1u << 12) || s->world_size > (1u << 12)) return 0;
  loader::SamplerConfig c;
  c.num_samples = s->num_samples;
  c.batch_size = s->batch_size;
  c.epochs = s->epochs;
  c.seed = s->seed;
  c.shuffle = s->shuffle;
  c.shard_shuffle = s->shard_shuffle % 8;
  if (c.shard_shuffle > 0) {
    for (std::uint32_t i = 0; i < c.num_samples; i += 7) c.shard_starts.push_back(i);
  }
  c.drop_last = s->drop_last;
  c.rank = s->rank;
  c.world_size = s->world_size;
  c.resume = s->resume;
  auto sampler = loader::Sampler::create(c);
  if (!sampler) {
    if (sampler.error().message().empty()) __builtin_trap();
    return 0;
  }
  std::set<std::uint32_t> seen;
  std::uint32_t epoch = c.resume.epoch;
  std::uint64_t delivered = 0;
  while (auto slot = sampler->next()) {
    if (slot->sample >= c.num_samples || slot->epoch < epoch || slot->epoch >= c.epochs)
      __builtin_trap();
    if (slot->epoch != epoch) {
      seen.clear();
      epoch = slot->epoch;
    }
    if (!seen.insert(slot->sample).second) __builtin_trap();
    if (++delivered > sampler->total_samples() || delivered > (1u << 16)) break;
  }
  if (delivered > sampler->total_samples()) __builtin_trap();
  // Where the run stands after its first batches is a point it accepts again.
  c.resume = sampler->resume_point_after(sampler->total_batches() / 2);
  if (!loader::Sampler::create(c)) __builtin_trap();
  return 0;
}
