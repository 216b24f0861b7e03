#pragma once
// What a rollout asks of the inference server, call by call: the sizes the simulation needs, recorded from a
// real episode (scenarios/compaction_cost.cpp) or made up by a stub (bench/simulation_bench.cpp).
#include <cstdint>
#include <vector>

namespace crl::sim {

enum class CallKind : uint8_t {
  kExecute = 0,    // an agent turn
  kSummarize = 1,  // a summary request: blocks its episode until answered
};

struct SimCall {
  CallKind kind = CallKind::kExecute;
  int64_t prompt_tokens = 0;
  int64_t shared_prefix_tokens = 0;  // leading prompt tokens equal to the rollout's previous sequence
  int64_t output_tokens = 0;
  bool after_compaction = false;  // the first request of a rebuilt window (its prompt is re-prefilled)
  int64_t env_ns = 0;             // environment (tool) time after this call, before the next one
};

struct RolloutTrace {
  std::vector<SimCall> calls;
  double reward = 0.0;
  int compactions = 0;
  int turns = 0;  // execution calls

  // Tokens a learner processes for this rollout (spec 1.2): each execution segment's final sequence (the
  // window's last prompt + its answer) and each summary segment's prompt + summary.
  int64_t train_tokens() const {
    int64_t total = 0;
    for (size_t k = 0; k < calls.size(); ++k) {
      const bool ends_segment = calls[k].kind == CallKind::kSummarize || k + 1 == calls.size() ||
                                calls[k + 1].kind == CallKind::kSummarize;
      if (ends_segment) total += calls[k].prompt_tokens + calls[k].output_tokens;
    }
    return total;
  }
};

}  // namespace crl::sim
