// A user's per-sample transform (a parse, an augmentation), run on the decode threads once a
// sample is decoded and hashed, so it runs in parallel with IO, decode and the training step. Its
// result travels with the sample into its batch (Batch::results()).
//
// The report tells the transform's time apart from feedline's own decode (TransformReport), and
// of it the time the transform waited for a lock before it could run: Python's GIL for a Python
// function, which decode threads contend for with the training loop and with each other.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "feedline/core/bytes.hpp"
#include "feedline/core/error.hpp"

namespace feedline::loader {

struct TransformMember {
  std::string_view name;  // as Batch::members() names it
  ConstBytes bytes;       // decoded; valid during the call only
};

struct TransformInput {
  std::string_view key;
  std::uint32_t sample = 0;  // index into Dataset::samples
  std::uint32_t epoch = 0;
  std::span<const TransformMember> members;
};

// What a call reports besides its result.
struct TransformCall {
  // Of the call's time, how long it waited for a lock before it could do its work (Python's GIL).
  std::chrono::nanoseconds lock_wait{0};
  // The bytes the result holds (an array's, a tensor's): counted in the memory budget until the
  // last Batch holding the result dies. The pipeline reads ahead only as far as the budget
  // holds results as large as the largest so far; the batch being filled always goes on.
  std::uint64_t result_bytes = 0;
};

// Whatever the transform made of the sample (null: nothing); the last Batch holding it frees it.
using TransformResult = std::shared_ptr<const void>;

class SampleTransform {
 public:
  virtual ~SampleTransform() = default;
  // Called from several decode threads at once. An error fails the sample: the run ends with it
  // (on_error = kFail), or the sample is skipped and counted (kSkip). The pipeline adds the
  // sample's key, object and offset to the error. After stop() the decode threads make no
  // further call; one under way is waited for by the Loader's destruction and by report(), not
  // by stop() or snapshot().
  virtual Result<TransformResult> apply(const TransformInput& in, TransformCall& call) = 0;
};

}  // namespace feedline::loader
