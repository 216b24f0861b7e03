#pragma once
// Supervised fine-tuning of the language model on demonstrations given as the engine's trajectories: each
// segment becomes one sequence (its prompt ids + response ids, exactly the context the policy saw) whose
// loss covers the tokens the actor mask marks (the demonstrator's actions and summaries, not the
// environment's observations or copied text). cli/lm_train.cpp builds the trajectories from the synthetic
// suite's oracle (text view, the episode's own compaction rebuilds with the oracle's summaries).
#include <cstdint>
#include <vector>

#include "engine/trajectory.h"
#include "policies/lm/checkpoint.h"

namespace crl::lm {

struct SftExample {
  std::vector<int32_t> tokens;  // prompt + response
  std::vector<float> mask;      // mask[t] = 1: tokens[t + 1] is trained (target of position t)
  std::vector<int> spans;       // start positions (in tokens) of each maximal run of trained tokens
};

// One example per segment with at least one trained token; segments longer than max_positions are skipped
// (counted in *skipped when given).
std::vector<SftExample> sft_examples(const std::vector<Trajectory>& trajectories, int max_positions,
                                     int* skipped = nullptr);

struct SftOptions {
  int steps = 100;
  int batch = 4;      // examples per step
  double lr = 3e-3;   // Adam, actor part only
  uint64_t seed = 0;  // minibatch order (Rng StreamKey{seed, step, 0, kLearner, 0})
};

// Runs the steps; returns the mean masked cross-entropy of each step's minibatch (before its update).
std::vector<float> train_sft(LmModel& model, LmOptimizer& optimizer, const std::vector<SftExample>& examples,
                             const SftOptions& options);

struct SftEval {
  double loss = 0;            // mean masked cross-entropy over all trained tokens
  double token_accuracy = 0;  // greedy next token == demonstrated token
  double span_exact =
      0;  // fraction of trained spans (actions, summaries) whose every token is greedy-correct
  int64_t tokens = 0, spans = 0;
};
// Teacher-forced evaluation (one forward per example).
SftEval evaluate_sft(const LmModel& model, const std::vector<SftExample>& examples);

}  // namespace crl::lm
