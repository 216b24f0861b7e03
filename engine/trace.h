#pragma once
// A readable trace of a trajectory: its segments, where each compaction happened, which tokens are trainable
// (actor / critic), the summary text and the reward. Used by `crl inspect` and the demo of `crl run`.
#include <functional>
#include <span>
#include <string>

#include "engine/trajectory.h"

namespace crl {

using Decoder = std::function<std::string(std::span<const TokenId>)>;

struct TraceOptions {
  // Runs of tokens (consecutive tokens of one provenance) shown at the start and at the end of each
  // response; the middle is elided. 0 shows everything.
  int runs_shown = 6;
  int text_width = 96;  // characters of decoded text per run
};

std::string format_trace(const Trajectory& trajectory, const Decoder& decode,
                         const TraceOptions& options = {});

}  // namespace crl
