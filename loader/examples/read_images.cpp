// The image path from C++: JPEG samples decoded and cut to random-resized crops of 224 x 224 x 3,
// the way torchvision's ImageNet recipe feeds a ResNet, then the stall report.
//
//   feedline gen /tmp/images --format tar --samples 2000 --samples-per-shard 500 --image
//   jpeg:400x350 feedline_image_example /tmp/images
#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "feedline/loader/dataset.hpp"
#include "feedline/loader/image.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/storage/registry.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DATASET_DIR\n", argv[0]);
    return 2;
  }
  using namespace feedline;
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto where = registry.open(argv[1], {});
  if (!where) return std::fprintf(stderr, "%s\n", where.error().what().c_str()), 1;
  auto dataset = loader::open_dataset(*where->backend, where->key, {});
  if (!dataset) return std::fprintf(stderr, "%s\n", dataset.error().what().c_str()), 1;

  // What the decode threads make of each ".jpg" member: a random-resized crop, 224 x 224 x 3.
  loader::ImageConfig image;
  image.decode = true;
  image.size = 224;
  image.crop = loader::Crop::kRandomResized;
  auto decoders = loader::image_decoders(image);  // zstd, and JPEG with these settings
  if (!decoders) return std::fprintf(stderr, "%s\n", decoders.error().what().c_str()), 1;

  loader::LoaderConfig config;
  config.sampler.batch_size = 64;
  config.sampler.seed = 1;
  config.decoders = std::make_shared<const loader::DecoderRegistry>(std::move(*decoders));
  auto loader = loader::Loader::open(*where->backend, *dataset, config);
  if (!loader) return std::fprintf(stderr, "%s\n", loader.error().what().c_str()), 1;

  std::uint64_t images = 0, other = 0;
  for (;;) {
    auto batch = (*loader)->next();
    if (!batch) return std::fprintf(stderr, "%s\n", batch.error().what().c_str()), 1;
    if (batch->end()) break;
    for (const loader::BatchSample& s : batch->samples()) {
      for (const loader::BatchMember& m : batch->members_of(s)) {
        // A decoded image: m.shape is {224, 224, 3}; its HWC bytes at batch->data()[m.offset].
        if (m.shape == loader::ImageShape{224, 224, 3}) {
          ++images;
        } else {
          ++other;  // the ".cls" labels, as stored
        }
      }
    }
  }
  const loader::PipelineReport r = (*loader)->report();
  fmt::print("{} images of 224x224x3 and {} other members, {:.0f} samples/s\n", images, other,
             r.consumer.samples_per_second);
  fmt::print("bottleneck: {} — {}\n",
             r.verdict.stage ? loader::stage_name(*r.verdict.stage) : "none", r.verdict.advice);
  fmt::print("digest {}\n", r.delivered.digest);
  return 0;
}
