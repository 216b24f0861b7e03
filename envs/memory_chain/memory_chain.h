#pragma once
// The 96-step memory chain (spec section 2).
//
// A fact f (one of `fact_arity` values, uniform) is shown at step 1; steps 2 .. length-1 show distractors
// drawn iid from the same values (so copying the recent tail never reveals f); the last step asks for f.
// At every step but the last the only sensible action is `continue` (the symbolic view's small policies
// take it as a forced, untrained action); the answer at the last step earns R = 1 if it equals f, else 0.
// The context is reset (a compaction is requested) after each reset point (default after steps 24, 48, 72),
// and only the newest tail_k steps survive besides the summary: the fact must pass through every summary.
//
// Views. Text: "step 7: noise 1", "step 1: FACT 1", "step 96: QUESTION ...", actions "continue" and
// "answer <v>". Symbolic: observations [STEP?] as (kind, value) symbol pairs; actions CONTINUE or a value
// symbol; a summary is one symbol: a value or EMPTY (the memory m' of the spec).
#include <string>
#include <vector>

#include "engine/budget.h"
#include "envs/env.h"

namespace crl {

// Symbol ids of the symbolic view. Values follow kValue0: kValue0 + v for v < fact_arity.
enum MemoryChainSymbol : TokenId {
  kMcSystem = 0,     // the system prompt
  kMcFact = 1,       // observation kind: the fact
  kMcNoise = 2,      // observation kind: a distractor
  kMcQuery = 3,      // observation kind: the question
  kMcContinue = 4,   // action
  kMcEmpty = 5,      // summary symbol: remember nothing
  kMcSummarize = 6,  // the summary instruction
  kMcResume = 7,     // opens the resume message
  kMcCut = 8,        // truncation marker
  kMcValue0 = 9,
};

struct MemoryChainConfig {
  int length = 96;
  std::vector<int> reset_points = {24, 48, 72};  // after these steps a compaction is requested
  int fact_arity = 2;
  bool distractors = true;  // false: distractor steps show a constant value 0
};

// A budget for the symbolic view: one-token actions and summaries, two-token observations (C 256, T_comp 16,
// per-turn and summary caps 4), so every compaction comes from the chain's reset points.
Budget memory_chain_symbolic_budget();

class MemoryChain final : public Env {
 public:
  explicit MemoryChain(MemoryChainConfig config);
  const EnvSpec& spec() const override { return spec_; }
  const MemoryChainConfig& config() const { return config_; }
  int fact() const { return fact_; }

  static EnvSpec make_spec(const MemoryChainConfig& config);
  static std::vector<ParamSpec> param_specs();
  static MemoryChainConfig config_from(const Params& params);

 protected:
  Start do_reset(const Task& task, Rng& rng) override;
  StepResult do_step(const Action& action) override;

 private:
  Observation observe(int step) const;
  MemoryChainConfig config_;
  EnvSpec spec_;
  int fact_ = 0;
  std::vector<int> values_;  // value shown at each step (index 0 = step 1)
  int step_ = 1;             // the step whose observation was shown last
};

}  // namespace crl
