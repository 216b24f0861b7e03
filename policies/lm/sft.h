#pragma once
// Supervised fine-tuning of the language model on demonstrations given as the engine's trajectories: each
// segment becomes one sequence (its prompt ids + response ids, exactly the context the policy saw) whose
// loss covers the tokens the actor mask marks (the demonstrator's actions and summaries, not the
// environment's observations or copied text). cli/lm_train.cpp builds the trajectories from the synthetic
// suite's oracle (text view, the episode's own compaction rebuilds with the oracle's summaries).
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/tokenizer.h"
#include "engine/trajectory.h"
#include "envs/codec.h"
#include "policies/lm/backend.h"
#include "policies/lm/checkpoint.h"

namespace crl::lm {

struct SftExample {
  std::vector<int32_t> tokens;  // prompt + response
  // mask[t] > 0: tokens[t + 1] (the target of position t) is trained with weight mask[t] (1 unless
  // weight_spans changed it); 0: not trained.
  std::vector<float> mask;
  std::vector<int> spans;  // start positions (in tokens) of each maximal run of trained tokens
  // What each span is, for the evaluation's breakdown: an action, a summary (summary segments), or the
  // episode's final action (the last span of a trajectory's last segment: the oracle's `submit`).
  enum SpanKind : uint8_t { kAction = 0, kSummary = 1, kFinal = 2 };
  std::vector<uint8_t> span_kinds;  // one per span
};

// One example per segment with at least one trained token; segments longer than max_positions are skipped
// (counted in *skipped when given).
std::vector<SftExample> sft_examples(const std::vector<Trajectory>& trajectories, int max_positions,
                                     int* skipped = nullptr);

// Sets the weight of every token of the summary spans and of the final-action spans (SftExample::SpanKind);
// actions keep theirs. Why: a few value tokens per segment (the copied codes) are what decides an episode,
// among many template tokens the model learns first; weighting them moves the gradient onto them.
// Throws crl::Error naming `where` when a weight is not finite and > 0.
void weight_spans(std::vector<SftExample>& examples, float summary_weight, float final_weight,
                  const std::string& where);

// Short examples for the answer that follows a reasoning block (envs/codec.h Reasoning; `crl lm train
// --answer-window N`): for each example whose final span holds one (the answer starts after the token at
// which the decoded span first contains `reasoning.close`), an example of at most `window` tokens before
// the final span, the span, trained only on the answer. Why: the answer copies a value from the notes a few
// tokens back, which is one trained position per episode in a segment of a thousand tokens: a small model
// saw too few to learn it (the constant answer of the closed loop). The notes themselves copy from further
// back than the window, so they are not trained here (that would teach inventing values). Weights are the
// answer tokens' own. No reasoning (or a final span without its close): no window.
std::vector<SftExample> answer_windows(const std::vector<SftExample>& examples, int window,
                                       const Tokenizer& tokenizer, const Reasoning& reasoning);

// answer_windows of `shortest`, 2x, 4x, ... tokens below `limit` (the model's positions): the same answer
// among more and more of the context, so that what is learned on short windows holds among the distractors of
// a whole segment. `crl lm train --answer-window` and the policy's sft_answer_window.
std::vector<SftExample> answer_window_ladder(const std::vector<SftExample>& examples, int shortest, int limit,
                                             const Tokenizer& tokenizer, const Reasoning& reasoning);

// Refuses answer-window settings that cannot work, naming `where` and the field: a negative window or batch,
// windows without a reasoning block (no notes to answer from), a batch without windows. `window_field` and
// `batch_field` are the caller's names (the command's --answer-window, the policy's sft_answer_window).
void check_answer_windows(int window, int batch, bool reasoning, const std::string& where,
                          const std::string& window_field, const std::string& batch_field);

struct SftOptions {
  int steps = 100;
  int batch = 4;      // examples per step
  double lr = 3e-3;   // Adam, actor part only: the peak rate
  uint64_t seed = 0;  // minibatch order (Rng StreamKey{seed, step, 0, kLearner, 0})
  // Schedule: linear warm-up from lr/warmup to lr over the first `warmup` steps, then constant (cosine
  // false) or a cosine decay to lr * min_lr_ratio at the last step (cosine true). warmup 0 and cosine false
  // is the constant rate.
  int warmup = 0;
  bool cosine = false;
  double min_lr_ratio = 0.1;
  // Each step's minibatch is cut into two halves (examples [0, batch/2) and the rest) whose forward and
  // backward passes are independent and whose gradients are added in that order; threads 2 runs the second
  // half on its own thread. The result is the same bits for 1 and 2 threads.
  int threads = 1;
  // Where each half's forward and backward run (backend.h; the CPU by default).
  LmBackend backend = LmBackend::kCpu;
  // Weight of every other token's next-token loss (observations, templates, copied text) beside the
  // trained tokens' 1: an auxiliary language-modelling loss on the context (0: the policy's tokens only).
  // The step's loss is then the weighted mean.
  double observation_weight = 0.0;
  // A second pool drawn from on every step: `extra_batch` of its examples join the `batch` of `examples`
  // in each minibatch (e.g. answer windows: a few dozen tokens each, many per step at little cost). Null
  // or extra_batch 0: none.
  const std::vector<SftExample>* extra = nullptr;
  int extra_batch = 0;
  // Called after each step with the number of steps done (e.g. to evaluate); may be empty.
  std::function<void(int)> after_step;
};

// The learning rate of step `step` (0-based) under the options' schedule.
double sft_learning_rate(const SftOptions& options, int step);

// Runs the steps; returns the weighted mean cross-entropy of each step's minibatch (before its update):
// sum of weight x -log p over the trained tokens / sum of their weights (one denominator per minibatch).
std::vector<float> train_sft(LmModel& model, LmOptimizer& optimizer, const std::vector<SftExample>& examples,
                             const SftOptions& options);

struct SftEval {
  double loss = 0;            // mean masked cross-entropy over all trained tokens
  double token_accuracy = 0;  // greedy next token == demonstrated token
  double span_exact =
      0;  // fraction of trained spans (actions, summaries) whose every token is greedy-correct
  int64_t tokens = 0, spans = 0;
  // The same per span kind (SftExample::SpanKind): actions, summaries, final actions.
  double kind_token_accuracy[3] = {0, 0, 0};
  double kind_span_exact[3] = {0, 0, 0};
  int64_t kind_tokens[3] = {0, 0, 0}, kind_spans[3] = {0, 0, 0};
};
// Teacher-forced evaluation (one forward per example).
SftEval evaluate_sft(const LmModel& model, const std::vector<SftExample>& examples);

}  // namespace crl::lm
