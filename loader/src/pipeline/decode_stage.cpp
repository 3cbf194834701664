// The decode stage: decode threads take finished reads in completion order, cut the members out
// of each sample's bytes, decompress zstd members (into a sample buffer, or straight into the
// batch slot on the decode-in-place path), hash them, and hand them to collate. They never wait
// for memory (the reservation was made at admission; a zstd frame larger than estimated is
// force()d and reported, and one declaring more than a sample may take is a data error).
#include "stage_work.hpp"
#include "stages.hpp"

namespace feedline::loader::detail {

void DecodeStage::run(Worker& w) {
  const LoaderConfig& config = run_.config;
  Decompressor zstd;
  // Samples are taken and handed on in runs (at most kRun, and collate gets what is done once
  // kFlushBytes are decoded): one queue hand-off per run instead of one per sample.
  constexpr std::size_t kRun = 8;
  constexpr std::uint64_t kFlushBytes = 4ull << 20;
  std::vector<InFlightSample> in;
  std::vector<InFlightSample> out;
  in.reserve(kRun);
  out.reserve(kRun);
  bool running = true;
  while (running && w.pop_some(run_.reads, in, kRun)) {
    std::uint64_t pending_bytes = 0;
    for (InFlightSample& item : in) {
      if (!item.error && item.on_device) {
        describe_on_device(run_.dataset, item);  // nothing to decode, nothing the host can hash
      } else if (!item.error) {
        const std::uint64_t extra =
            decode_sample(run_.dataset, item, zstd, &run_.buffers, run_.sizing.decode_limit);
        if (extra) {  // a zstd frame larger than the reservation's estimate
          run_.budget.force(extra);
          item.reserved += extra;
        }
        spin_for(config.diagnostics.decode_cost, run_.stop_flag());
      }
      if (item.error) {
        if (config.on_error == OnError::kFail) {
          run_.fail(*item.error);
          running = false;
          break;
        }
        item.raw = AlignedBuffer();
        item.decoded = AlignedBuffer();
        item.members.clear();
      } else {
        w.count(1, item.decoded_bytes);
        pending_bytes += item.decoded_bytes;
      }
      out.push_back(std::move(item));
      if (pending_bytes >= kFlushBytes) {
        if (!w.push_all(run_.decoded, out)) running = false;
        pending_bytes = 0;
        if (!running) break;
      }
    }
    in.clear();
    if (running && !out.empty() && !w.push_all(run_.decoded, out)) running = false;
    out.clear();
  }
  // The last decoder out closes the queue behind it.
  if (++done_ == config.decode_threads) run_.decoded.close();
}

}  // namespace feedline::loader::detail
