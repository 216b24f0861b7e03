#pragma once
// The runner policy `lm` (issue 17): the small language model (cpu/model.h) acting on the TEXT view of an
// environment through the Policy interface and trained by the scenario runner with the CompactionRL learner
// (policies/trainable.h), like `tabular` and `neural`, but writing its actions AND its summaries as text
// tokens of the codec's tokenizer.
//
// act(), per request (a decision depends only on its own request and the parameters):
//   the prompt ids (the exact context the engine rendered) go through a KV cache, then tokens are sampled
//   one by one from Rng(request.stream) (temperature, top_p; greedy under set_greedy) until the template's
//   end of turn (<|im_end|>, included) or request.max_new_tokens. Every token carries the model's own
//   log-prob (temperature 1, no top-p: what train() recomputes, so the PPO ratio starts at 1 when
//   temperature is 1) and the value head's value at the position that predicted it. The engine records
//   ids, log-probs, values and masks exactly as for the LLM path (sampled tokens: actor and critic mask 1;
//   prompts, observations, copied summaries and tails: 0).
//   A per-episode prefix cache keeps the KV cache of the last context of each (seed, task, sample) stream,
//   so a turn feeds only the tokens appended since the previous turn; cached rows are the rows a fresh pass
//   computes (each row alone, sampler.h), so hits change no bit, only the time. Cleared whenever the
//   parameters change.
//
// frozen_summary (the control arm, as policies/neural): summaries are sampled from a FROZEN COPY taken at
// initialize() (after SFT), never updated; their tokens carry no actor loss (summary_loss_masked is forced
// on for this policy) and their values come from the live model's value head, which keeps learning them.
//
// SFT first (parameters sft_*, documented in the registration): initialize(seed) initialises the model from
// the seed, runs the copy drills when drill_steps > 0 (copy_drills.h: a base that can copy), and, when
// sft_steps > 0, runs SFT (sft.h) on oracle demonstrations rendered by the engine's own
// episodes (demonstrations.h) in the SAME environment parameters, codec and budget as the run's training
// episodes (tasks 0 .. sft_tasks-1 of its split), then resets Adam for RL. A policy param rather than a
// scenario stage because it is what this policy's "base model" is, and because the scenario's
// `pretrain` stage trains with the RL learner, not with demonstrations (and `warm_start` imitates answers
// only, for the neural policy; this SFT also imitates the oracle's summaries). SFT is a pure function of
// (sizes, SFT options, seed, codec, environment parameters, budget); the result is memoised in the process
// under that key, so arms that share it (every arm of synthetic_tinylm but the full-context one) pay for it
// once per seed. Needs PolicyTarget::budget (the runner gives it).
//
// train() (token-level clipped PPO through learners::Learner, spec 1.5): the batch's ONE global denominator
// (Learner::normalizer), learner.ppo_epochs passes over learner.minibatches shuffled groups of whole
// rollouts (the shuffle keyed by the seed and the optimizer's step count, as policies/neural); per group,
// each segment with a trainable token is one sequence (prompt + response, the context it was sampled in)
// through forward(); new log-probs and values fill the batch, the learner's losses and per-token gradients
// of that segment's tokens (its range; weights from the global normalizer, so any split gives the batch's
// gradient) drive backward(); one Adam step per group (actor pass: the trunk [0, value_w); critic pass: the
// value head, whose gradient is computed from the forward's hidden states directly). Segments longer than
// max_positions are an error naming both.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "policies/lm/backend.h"
#include "policies/lm/checkpoint.h"
#include "policies/lm/copy_drills.h"
#include "policies/lm/cpu/sampler.h"
#include "policies/policy.h"
#include "policies/trainable.h"

namespace crl::lm {

struct LmPolicyConfig {
  LmConfig model;  // model.vocab: the codec's tokenizer's size
  float temperature = 1.0f;
  float top_p = 1.0f;
  bool frozen_summary = false;
  int sft_steps = 0;  // 0: no SFT (the model starts from its initialisation)
  int sft_tasks = 64;
  int sft_batch = 8;
  double sft_lr = 3e-3;
  int sft_warmup = 0;       // linear warm-up steps of the SFT rate (sft.h SftOptions)
  bool sft_cosine = false;  // cosine decay of the SFT rate to a tenth at the last step
  int sft_threads = 1;      // 2: each SFT step's two halves on two threads (same bits, sft.h)
  // Where the training passes run (drills, SFT, PPO updates); episodes sample on the CPU either way.
  LmBackend backend = LmBackend::kCpu;
  // Short demonstrations added to the SFT set (demonstrations.h short_demonstration_budget); 0: none.
  int64_t sft_short_capacity = 0, sft_short_reserve = 0;
  // Copy drills before SFT (copy_drills.h; drills.steps 0: none), drawn from the tokens of drill_alphabet
  // ("" : the whole vocabulary). Part of the base model: memoised with the SFT.
  CopyDrillStage drills;
  std::string drill_alphabet;
  // SFT loss weights of the summaries' and the final answer's tokens (weight_spans; actions 1).
  float sft_summary_weight = 1.0f, sft_final_weight = 1.0f;
  // Answer windows (sft.h answer_window_ladder; needs the setup's reasoning block): the shortest window
  // (0: none) and how many are drawn per step beside sft_batch (0: pooled with the segments).
  int sft_answer_window = 0, sft_answer_batch = 0;
};

class LmPolicy final : public Policy, public Trainable {
 public:
  // Throws crl::Error naming the parameter: not the text view, sizes out of range, max_positions below the
  // budget's capacity (when the target has a budget).
  LmPolicy(const PolicyTarget& target, LmPolicyConfig config);

  std::string name() const override { return "lm"; }
  void act(std::span<const Request* const> requests, std::span<Decision> decisions) const override;

  void initialize(uint64_t seed) override;
  void train(const TrainStep& step) override;
  std::string state_type() const override { return kLmPolicyType; }
  std::string shape() const override { return lm_shape(config_.model); }
  void set_greedy(bool greedy) override { greedy_ = greedy; }
  void reset_optimizer() override { optimizer_ = LmOptimizer(model_.layout()); }

  const LmModel& model() const { return model_; }
  LmModel& model() { return model_; }  // tests; call clear_cache() after changing parameters
  const LmModel& summary_model() const { return config_.frozen_summary ? frozen_ : model_; }
  const LmPolicyConfig& config() const { return config_; }
  // The mean SFT loss of the first and the last step of the last initialize() (NaN without SFT).
  float sft_first_loss() const { return sft_first_; }
  float sft_last_loss() const { return sft_last_; }
  void clear_cache() const;

 private:
  struct CacheSlot {
    std::vector<int32_t> tokens;  // what the cache has seen
    std::unique_ptr<KvCache> cache;
  };
  using CacheKey = std::tuple<uint64_t, uint64_t, uint32_t, int>;  // seed, task, sample, model (0 live)

  Decision decide(const Request& request) const;
  // The cached slot of `key` when its tokens are a prefix of `prompt` (else a fresh one), fed up to the
  // prompt's end.
  CacheSlot open(const CacheKey& key, const LmModel& model, const std::vector<int32_t>& prompt) const;
  void keep(const CacheKey& key, CacheSlot slot) const;
  void build_base_model(uint64_t seed);  // drills, then SFT (memoised)
  void run_sft(uint64_t seed, LmOptimizer& optimizer);
  void do_save(proto::checkpoint::PolicyState& out) const override;
  void do_load(const proto::checkpoint::PolicyState& state, const std::string& where) override;

  LmPolicyConfig config_;
  std::shared_ptr<const Codec> codec_;
  std::map<std::string, std::string> env_params_;
  bool has_budget_ = false;
  Budget budget_;
  int32_t end_of_turn_ = 0;
  bool greedy_ = false;
  uint64_t seed_ = 0;
  LmModel model_, frozen_;
  LmOptimizer optimizer_;
  float sft_first_ = 0.0f, sft_last_ = 0.0f;
  mutable std::mutex cache_mutex_;
  mutable std::map<CacheKey, CacheSlot> cache_;
};

}  // namespace crl::lm
