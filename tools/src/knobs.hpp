// The verdict's knobs as the CLI spells them: the one place where a loader::Knob (a config
// field) becomes a flag.
#pragma once

#include <string>
#include <string_view>

#include "feedline/loader/report.hpp"

namespace feedline::tools {

// "--io-depth", "--decode-threads", "--prefetch", ...
std::string_view knob_flag(loader::Knob k) noexcept;

// One change in flags: "--io-depth 64 -> 128", "--memory-budget 1 GiB -> 2 GiB".
std::string knob_flag_text(const loader::KnobChange& k);

// The verdict's advice in flags: "--decode-threads 2 -> 4: decode is CPU-bound ..." (the advice
// alone when there is no knob to turn).
std::string flag_suggestion(const loader::Verdict& v);

}  // namespace feedline::tools
