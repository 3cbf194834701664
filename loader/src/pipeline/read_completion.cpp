// A storage thread's completed reads, into samples (read_completion.hpp).
#include "read_completion.hpp"

#include <fmt/format.h>

#include "unknown_size.hpp"

namespace feedline::loader::detail {

CompletionHandler::CompletionHandler(RunState& run, StoragePath& path, ReadSlots& slots,
                                     const HandleCache& handles)
    : run_(run),
      path_(path),
      slots_(slots),
      handles_(handles),
      decoders_(run.plan.decode, run.config.sampler.seed) {}

PollTally CompletionHandler::finish(std::vector<InFlightSample>& finished) {
  PollTally tally;
  for (ReadSlot* slot : slots_.completed()) {
    InFlightSample s = std::move(slot->sample);
    slots_.count_out(slot->op);
    finish_read(slot->op, s, tally);
    slots_.give_back(slot);  // its op stays as it is until the slot's next read
    if (s.error) {
      run_.budget.release(s.reserved);
      s.reserved = 0;
      s.raw = AlignedBuffer();  // on to collate, which meets its error in delivery order
    }
    finished.push_back(std::move(s));
  }
  return tally;
}

void CompletionHandler::finish_read(const storage::ReadOp& op, InFlightSample& s,
                                    PollTally& tally) {
  const Dataset& dataset = run_.dataset;
  const Sample& smp = dataset.samples[s.slot.sample];
  // The bytes of the sample's own range that arrived (an aligned read's head and tail left out).
  const std::uint64_t got = op.result
                                ? std::min(*op.result > s.raw_head ? *op.result - s.raw_head : 0,
                                           size_unknown(smp) ? *op.result : smp.length)
                                : 0;
  if (!op.result) {
    s.error = handles_.explain(op.result.error());
    return;
  }
  if (got < expected_length(smp, op)) {
    s.error = Error(Errc::kCorrupt,
                    fmt::format("object ends after {} of the sample's {} bytes (truncated?)", got,
                                smp.length))
                  .with_object(dataset.objects[smp.object].key)
                  .with_offset(smp.offset + got);
    return;
  }
  if (size_unknown(smp)) {
    finish_unknown_size(run_, smp, *op.result, s);
    path_.saw_unknown(*op.result, s.spilled);
  }
  s.raw_len = got;
  ++tally.samples;
  tally.bytes += got;
  tally.device_bytes += *op.result;  // from the device: an aligned read's head and tail included
  if (path_.digests_inline()) {
    decode_sample(dataset, s, decoders_, &run_.buffers, run_.sizing.decode_limit);
    if (!s.error) ++tally.digested;
  }
}

bool CompletionHandler::hand_on(Worker& w, std::vector<InFlightSample>& finished) {
  if (finished.empty()) return true;
  const bool open = path_.digests_inline()
                        ? w.push_all(run_.decoded, finished, collate_awaits(run_))
                        : w.push_all(run_.reads, finished);
  finished.clear();
  return open;
}

}  // namespace feedline::loader::detail
