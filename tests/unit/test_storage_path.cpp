// The storage stage's data-path strategies (loader/src/pipeline/storage_path.hpp), one per
// DataPath: how a sample fills its slot (what decode and collate then do with it), what admission
// reserves for it, the size of its slot, where its read lands, and whether the storage threads
// take its digest. The stage used to decide each of these with a flag and a branch of its own;
// this is the table they add up to.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>

#include "feedline/loader/decoder.hpp"
#include "mem_dataset.hpp"
#include "pipeline/run_state.hpp"
#include "pipeline/stage_work.hpp"
#include "pipeline/storage_path.hpp"

namespace feedline::loader {
namespace {

using detail::SlotPlace;
using Fill = SlotPlace::Fill;

// A run over 8 files of mem:// (one sample per object, nothing to decode) on `path`.
struct PathRun {
  testing::MemDataset mem{8, 4096};
  LoaderConfig config;
  std::unique_ptr<detail::RunState> run;

  std::unique_ptr<detail::StoragePath> make(DataPath path) {
    DataPathPlan plan;
    plan.path = path;
    plan.decode = DecodePlan(mem.dataset, default_decoders());
    detail::PoolSizing sizing;
    sizing.buffers = 2;
    sizing.window = 16;
    sizing.recycle = 1 << 20;
    run = std::make_unique<detail::RunState>(*mem.backend, mem.dataset, config, plan, sizing,
                                             nullptr, nullptr);
    return detail::StoragePath::make(*run);
  }
};

}  // namespace

TEST_CASE("storage path: each data path's strategy fills, reserves and digests as it should",
          "[pipeline][storage-path]") {
  struct Row {
    DataPath path;
    Fill fill;
    bool reserves;  // the sample's footprint (else its slot in the pool's buffer holds it)
    bool digests;   // the storage threads take the digest (files with nothing to decode)
  };
  const Row rows[] = {
      {DataPath::kHostDirect, Fill::kRead, false, true},
      {DataPath::kPinnedDirect, Fill::kRead, false, true},
      {DataPath::kGpuDirect, Fill::kReadDevice, false, false},
      {DataPath::kCufileCompat, Fill::kReadDevice, false, false},
      {DataPath::kDecodeInPlace, Fill::kDecode, true, false},
      {DataPath::kBounce, Fill::kNone, true, true},
  };
  for (const Row& r : rows) {
    INFO("path " << data_path_name(r.path) << " (" << static_cast<int>(r.path) << ")");
    PathRun t;
    auto p = t.make(r.path);
    CHECK(p->fill() == r.fill);
    CHECK(p->lays_out_batches() == (r.fill != Fill::kNone));
    CHECK(p->reads_into_device() == reads_into_device(r.path));
    CHECK(p->reservation(12345) == (r.reserves ? 12345u : 0u));
    CHECK(p->digests_inline() == r.digests);
  }
}

TEST_CASE("storage path: a transform or a planted decode cost keeps the decode stage",
          "[pipeline][storage-path]") {
  for (const DataPath path : {DataPath::kHostDirect, DataPath::kBounce}) {
    INFO("path " << data_path_name(path));
    PathRun cost;
    cost.config.diagnostics.decode_cost = std::chrono::microseconds(1);
    CHECK_FALSE(cost.make(path)->digests_inline());
    PathRun plain;
    CHECK(plain.make(path)->digests_inline());
  }
}

TEST_CASE("storage path: slots are sized by what lands in them", "[pipeline][storage-path]") {
  PathRun t;
  const Sample& x = t.mem.dataset.samples[3];  // 4096 + 300 bytes
  REQUIRE(x.length == 4396);
  // Host direct: the stored bytes in a 4 KiB-aligned slot (O_DIRECT DMA lands there).
  CHECK(t.make(DataPath::kHostDirect)->slot_bytes(x, 0) == 8192);
  // Device: the same, in the GPU twin.
  CHECK(t.make(DataPath::kGpuDirect)->slot_bytes(x, 0) == 8192);
  // Decode in place: the decoded members, each on a cache line (stored here: nothing decodes).
  CHECK(t.make(DataPath::kDecodeInPlace)->slot_bytes(x, 0) == 4416);
}

TEST_CASE("storage path: a read lands in its slot, or in a sample buffer of its own",
          "[pipeline][storage-path]") {
  PathRun t;
  auto buffer = detail::BatchBuffer::allocate(1 << 16, false);
  REQUIRE(buffer);
  const Sample& x = t.mem.dataset.samples[2];  // 4096 + 200 bytes
  SECTION("host direct: the slot laid out at admission, no buffer of the sample's own") {
    auto p = t.make(DataPath::kHostDirect);
    detail::InFlightSample s;
    s.place = {.fill = p->fill(), .buffer = buffer->get(), .offset = 8192};
    detail::ReadRange range{x.offset, x.length};
    auto dst = p->destination(s, x, range);
    REQUIRE(dst);
    CHECK(dst->data() == (*buffer)->data() + 8192);
    CHECK(dst->size() == 8192);
    CHECK(s.raw.size() == 0);
    CHECK(s.bytes() == (*buffer)->data() + 8192);
  }
  SECTION("bounce: a sample buffer holding the range; collate copies it in later") {
    auto p = t.make(DataPath::kBounce);
    detail::InFlightSample s;
    detail::ReadRange range{x.offset, x.length};
    auto dst = p->destination(s, x, range);
    REQUIRE(dst);
    CHECK(dst->data() == s.raw.data());
    CHECK(s.raw.size() >= x.length);
    CHECK(range.length == x.length);  // mem:// reads any range: no aligned cover
    CHECK(s.raw_head == 0);
    CHECK_FALSE(s.laid_out());
  }
}

}  // namespace feedline::loader
