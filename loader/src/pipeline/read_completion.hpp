// What a storage thread does with the reads one poll of its queue completed (internal): each
// becomes its sample, or the sample's error (a failed read, explained where it ran out of
// descriptors; a truncated object; an object of unknown size larger than allowed), in completion
// order, and its read slot is free again. Where the data path says so (nothing to decode), the
// thread takes each sample's digest here, while its bytes are fresh, and hands it straight to
// collate: a trip through the decode threads cost a hand-off and a cold read of the bytes on
// another core (64 KiB files: XXH3 took ~10 us there, ~7 us here). What the poll came to goes
// to the thread's PollObserver (poll_observer.hpp) as a PollTally.
#pragma once

#include <cstdint>
#include <vector>

#include "read_issuer.hpp"
#include "stage_work.hpp"
#include "storage_path.hpp"

namespace feedline::loader::detail {

// One poll's completions, counted.
struct PollTally {
  std::uint64_t samples = 0;       // reads that brought their sample's bytes
  std::uint64_t bytes = 0;         // ... the samples' own bytes
  std::uint64_t device_bytes = 0;  // ... as read (an aligned read's head and tail included)
  std::uint64_t digested = 0;      // samples whose digest this thread took
};

class CompletionHandler {
 public:
  CompletionHandler(RunState& run, StoragePath& path, ReadSlots& slots, const HandleCache& handles);
  // The reads of slots.completed(), each into `finished` (appended) as its sample.
  PollTally finish(std::vector<InFlightSample>& finished);
  // One hand-off for everything a poll completed (not one wake-up per sample): to collate where
  // this thread took the digests, else to decode. False when the run is over.
  bool hand_on(Worker& w, std::vector<InFlightSample>& finished);

 private:
  void finish_read(const storage::ReadOp& op, InFlightSample& s, PollTally& tally);

  RunState& run_;
  StoragePath& path_;
  ReadSlots& slots_;
  const HandleCache& handles_;
  // The path that digests inline has no members to decode: only their digest, through
  // decode_sample.
  ThreadDecoders decoders_;
};

}  // namespace feedline::loader::detail
