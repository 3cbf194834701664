// The smallest complete user of feedline::Loader: open a dataset, pull batches, use the bytes,
// print where the pipeline stalled.
//
//   feedline gen /tmp/ds --format tar --samples 2000 --sample-size 64KiB --compress zstd
//   feedline_example /tmp/ds
#include <fmt/format.h>

#include <cstdio>

#include "feedline/loader/dataset.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/storage/registry.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DATASET_DIR\n", argv[0]);
    return 2;
  }
  using namespace feedline;

  // 1. Storage: any URL the registry knows (a path, file://, mem://; later s3://, nfs://).
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto where = registry.open(argv[1], {});
  if (!where) return std::fprintf(stderr, "%s\n", where.error().what().c_str()), 1;

  // 2. The dataset: tar shards (WebDataset style) or one sample per file, whichever is there.
  loader::DatasetOptions dopt;  // format kAuto
  auto dataset = loader::open_dataset(*where->backend, where->key, dopt);
  if (!dataset) return std::fprintf(stderr, "%s\n", dataset.error().what().c_str()), 1;

  // 3. The loader: batches of 32, two epochs, shuffled with seed 1, 256 MiB of buffers at most.
  loader::LoaderConfig config;
  config.sampler.batch_size = 32;
  config.sampler.epochs = 2;
  config.sampler.seed = 1;
  config.memory_budget = 256 << 20;
  auto loader = loader::Loader::open(*where->backend, *dataset, config);
  if (!loader) return std::fprintf(stderr, "%s\n", loader.error().what().c_str()), 1;

  // 4. The training loop: each Batch holds its samples packed in one 4 KiB-aligned buffer.
  std::uint64_t samples = 0, checksum = 0;
  for (;;) {
    auto batch = (*loader)->next();  // [[nodiscard]] Result<Batch>: the error must be looked at
    if (!batch) return std::fprintf(stderr, "%s\n", batch.error().what().c_str()), 1;
    if (batch->end()) break;  // after the last epoch
    for (const loader::BatchSample& s : batch->samples()) {
      for (const loader::BatchMember& m : batch->members_of(s)) {
        // m.name is e.g. "000123.bin" or "000123.cls"; the bytes are decoded (zstd undone).
        if (m.size != 0) checksum += static_cast<std::uint64_t>(batch->data()[m.offset]);
      }
      ++samples;
    }
  }  // a Batch returns its buffer to the pool when it goes out of scope (it may outlive the Loader)

  // 5. Where it stalled, and what to change (knobs by LoaderConfig's names).
  const loader::PipelineReport r = (*loader)->report();
  fmt::print("{} samples in {} batches, {:.0f} samples/s; consumer waited {:.0f}% of the run\n",
             samples, r.consumer.batches, r.consumer.samples_per_second,
             r.consumer.wait_fraction * 100);
  fmt::print("bottleneck: {} — {}\n",
             r.verdict.stage ? loader::stage_name(*r.verdict.stage) : "none", r.verdict.advice);
  for (const loader::KnobChange& k : r.verdict.next) {
    fmt::print("  try {} = {} (now {})\n", loader::knob_name(k.knob),
               loader::knob_value_text(k.knob, k.to), loader::knob_value_text(k.knob, k.from));
  }
  fmt::print("digest {} (checksum {})\n", r.delivered.digest, checksum);
  return 0;
}
