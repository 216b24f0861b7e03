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
#include <string>
#include <vector>

#include "policies/lm/sft.h"

namespace crl::lm {

struct CopyDrillOptions {
  int examples = 4096;  // drills generated (train_sft samples its minibatches from them)
  int min_half = 8, max_half = 32;
  int lead = 8;
  uint64_t seed = 0;
};

// Throws crl::Error naming `where` and the field when an option is out of range (vocab < 2, examples < 1,
// 2 <= min_half <= max_half, lead >= 0, or a drill longer than max_positions).
std::vector<SftExample> copy_drill_examples(int vocab, int max_positions, const CopyDrillOptions& options,
                                            const std::string& where);

}  // namespace crl::lm
