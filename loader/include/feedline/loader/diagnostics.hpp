// Knobs for diagnosis and tests, apart from the settings a training job tunes: costs planted in
// a stage to make it the bottleneck (and watch the verdict name it), and the switch that turns
// stall accounting off to measure what it costs.
#pragma once

#include <chrono>

namespace feedline::loader {

struct Diagnostics {
  std::chrono::nanoseconds decode_cost{0};   // extra CPU work per sample in decode
  std::chrono::nanoseconds collate_cost{0};  // extra CPU work per batch in collate
  bool accounting = true;                    // stall accounting (off only to measure its cost)
};

}  // namespace feedline::loader
