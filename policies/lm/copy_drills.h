#pragma once
// Copy drills: a warm-up that teaches a small model content-addressed copying before its SFT.
//
// Why: the synthetic suite's answers are values read earlier in the episode (or in a summary), so a policy
// must attend to "the token after the one that matches" — an induction head. Teacher-forced SFT on oracle
// demonstrations never formed one at d_model 32-64 within 6,000 steps (scenarios/README.md,
// synthetic_tinylm), because a few answer tokens per 1,300-token episode are too weak a signal. Runs of
// random tokens followed by themselves make copying the only way to lower the loss: with d_model 64, 2
// layers, batch 16 and Adam 1e-3, PyTorch's twin of this model learns it (loss 6.6 -> 0.06, next-token
// accuracy 0.99 on the repeats) between steps 1,000 and 2,500 (scenarios/README.md, "Probed 2026-12-02,
// third session"). Large language models acquire the same ability in pretraining; this is that stage.
//
// A drill: `lead` random tokens, then a run of `half` random tokens (half uniform in [min_half,
// max_half]), then the same run again. Only the repeat is trained, from its second token on (the first is
// not predictable); tokens are uniform over [0, vocab). Deterministic: drill i draws from
// Rng(StreamKey{seed, i, 0, kLearner, 1}).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/tokenizer.h"
#include "policies/lm/sft.h"

namespace crl::lm {

struct CopyDrillOptions {
  int examples = 4096;  // drills generated (train_sft samples its minibatches from them)
  int min_half = 8, max_half = 32;
  int lead = 8;
  uint64_t seed = 0;
  // The tokens drills are drawn from; empty: all of [0, vocab). A small alphabet (the tokenizer's digits)
  // makes one token of context ambiguous, so that copying must match several previous tokens, as copying
  // a 4-digit code does.
  std::vector<int32_t> alphabet;
  // > 0: each drill first draws this many distinct tokens of the alphabet (or of the vocabulary) and then
  // its run from them only, so that one token of context is ambiguous (copying must match several previous
  // tokens, as "code=" before a value needs) while the circuit still sees every token of the vocabulary.
  int alphabet_size = 0;
  // The fraction of drills that are lookups instead of repeats (0: none, 1: all). A lookup drill is a small
  // table written as entries, then questions that name an entry and are answered with its value. Each
  // drill draws its own distinct tokens: 3 kinds, 3 keys, a separator and a question marker; an entry is
  // [0-3 filler tokens] kind key separator value (a value of 1-2 tokens) and a pair written twice holds its
  // latest value, so neither the kind nor the key alone names an entry and the copy must match the three
  // tokens before the value: the synthetic suite's `| FACT code=9815 |` among `| NOTE code=4410 |` records,
  // copied into a summary's `record 1 FACT code=` (repeat drills never need more than one token of
  // context: their tokens are distinct). Questions (up to 4, each a distinct pair): marker kind key
  // separator value, the value trained. Lookup drill i draws from Rng(StreamKey{seed, i, 0, kLearner, 2}).
  double lookup_fraction = 0.0;
  // Lookups in the final answer's shape: a question is `marker kind key [0-3 filler] answer` (kind and key
  // in an order drawn per drill) and the answer marker, a token of its own, predicts the value. Why: the
  // suite's final `submit <code>` has no copy cue before the value (a summary's `code=` does: the token
  // before the value matches the record's), so the value must be found from the question's words; a base
  // trained on the separator-ended shape answered a constant per task type in closed loop
  // (scenarios/README.md, synthetic_tinylm). One more distinct token per drill.
  bool lookup_answer_shape = false;
  // Up to this many random tokens (uniform in [0, max_gap]) between a run and its repeat, and between a
  // lookup's table and its questions: a summary copies a value written hundreds of tokens earlier, and
  // copying learned over a few dozen tokens did not reach that far (scenarios/README.md).
  int max_gap = 0;
  int lookup_min_entries = 4, lookup_max_entries = 12;
};

// Throws crl::Error naming `where` and the field when an option is out of range (vocab < 2, examples < 1,
// 2 <= min_half <= max_half, lead >= 0, a drill longer than max_positions, an alphabet token outside the
// vocabulary, alphabet_size above the tokens there are to draw from, lookup_fraction outside [0, 1],
// 1 <= lookup_min_entries <= lookup_max_entries, fewer than 12 (13 in the answer shape) tokens to draw a
// lookup drill's from).
std::vector<SftExample> copy_drill_examples(int vocab, int max_positions, const CopyDrillOptions& options,
                                            const std::string& where);

// The distinct ids of `text` under `tokenizer`, in order of first appearance (a drill alphabet: "0123456789"
// gives the tokenizer's digits).
std::vector<int32_t> drill_alphabet(const Tokenizer& tokenizer, std::string_view text);

// The drill stage as `crl lm train --copy-drill-*` and the policy's drill_* parameters run it: `steps` Adam
// steps of `batch` drills, a linear warm-up then a constant rate, every drill fresh (steps x batch drills
// from `seed`), minibatches from seed + 1 (so that a later SFT's stream is the same with or without the
// drills), two halves per step as SFT (the same bits on 1 or 2 threads).
struct CopyDrillStage {
  int steps = 0;  // short repeat drills: no gap, no lookups (forms the induction heads); 0: none
  // Then this many steps of long drills: drills.max_gap and drills.lookup_fraction apply (0: none), from
  // seed + 3 (minibatches seed + 4). Why two stages: from scratch, lookups keep the repeat drills from
  // forming the induction heads they need (d_model 32: held-out loss 6.70 after 3,000 steps with half of
  // them lookups, 0.14 with repeats only), and the copying short drills teach does not reach the hundreds
  // of tokens a summary copies across (accuracy 0.99 at gap 0, 0.34 at gaps up to 100, 0.07 up to 600; the
  // same model after 500 steps of gaps up to 700: 0.94; scenarios/README.md).
  int long_steps = 0;
  int batch = 16;
  double lr = 1e-3;
  int warmup = 200;
  CopyDrillOptions drills;  // examples 0: steps x batch
  // Drills added to the SFT set that follows (0: none): without them SFT erases the copying the stage
  // built (held-out drill accuracy 0.99 -> 0.05 after 1,500 SFT steps at d_model 32; with 2,400 among
  // 7,200 segments it stays at 0.97; scenarios/README.md).
  int mix = 0;
};

// The stage's `mix` drills for the SFT set: other drills than the stage's (seed + 2), long drills' options
// (gaps and lookups) when the stage has long steps, else short repeats.
std::vector<SftExample> copy_drill_mix(int vocab, int max_positions, const CopyDrillStage& stage,
                                       uint64_t seed, const std::string& where);

// Throws crl::Error naming `where` and the field when the stage is out of range. Returns each step's loss
// (both stages'). after_step gets the step counted over both stages; `backend` is where the passes run.
std::vector<float> train_copy_drills(LmModel& model, LmOptimizer& optimizer, const CopyDrillStage& stage,
                                     uint64_t seed, int threads, const std::string& where,
                                     const std::function<void(int)>& after_step = {},
                                     LmBackend backend = LmBackend::kCpu);

}  // namespace crl::lm
