#pragma once
// The neural policy (`neural`): ONE small pointer network (network.h) that acts and summarizes, over the
// synthetic suite's symbolic view (features.h), trained by the scenario runner with the CompactionRL learner.
//
// The network: a shared trunk (the candidate-row MLP and a shared readout) and four output heads, one answer
// head per task type (the question names the type) and one summary head, plus one value head. Masking the
// summary loss ("w/o sum.") therefore still changes what the summary policy does, through the shared
// weights that the answers train (network.h says why), as in the paper where one model does both.
//
// frozen_summary (the control arm): summary decisions are made by a FROZEN COPY of the network, taken at
// initialize() (or by freeze_summary(), e.g. after a pre-training stage), never updated; its summary tokens
// carry no actor loss (the learner's summary_loss_masked is forced on for them) and the live network trains
// on the answers only. So the frozen summarizer's behaviour never changes, whatever the shared trunk
// learns: the paper's "frozen" (a fixed summarizer). The live network's value head still evaluates the
// summary decisions (the critic sees every critic-mask token).
//
// act(), per request (a decision depends only on its own request and the parameters; Rng(request.stream)):
//  * execute, before the question is in the context: the forced action `next` (Decision.forced: the console
//    grammar, never trained, like the memory chain's forced `continue`);
//  * execute, once the question is in the context: [submit, val ...], the answer slots sampled one after the
//    other from the type's answer head (3 for an ordered plan, else 1). `submit` is fixed by the grammar:
//    its log-prob is 0 and it carries the first slot's value. A context with no record gets the forced answer
//    [submit, STOP], which the verifier rejects;
//  * summarize: memory-slot tokens sampled one after the other from the summary head until STOP or the
//    request's max_new_tokens. The engine writes the resume context from them (Env::symbolic_resume_body).
// Every sampled token carries its behaviour log-prob and its decision's value.
//
// train() (policies/trainable.h) is the clipped PPO update (spec 1.5): it rebuilds every trainable token's
// decision from the trajectory (the segment's prompt plus the response before it), fixes the batch's ONE
// global token denominator (Learner::normalizer), then runs learner.ppo_epochs passes; each pass shuffles the
// rollouts (a stream keyed by the seed and the optimizer's step count, so a resumed run shuffles alike) into
// learner.minibatches groups and, per group: one batched forward of its decisions, the learner's losses and
// gradients of its rollouts' tokens (behaviour log-probs from sampling time, so the ratio moves after the
// first step and the clip can bind), backward, one Adam step (actor pass: trunk and heads; critic pass: the
// value head). Since every token is weighted by the global denominator, the minibatch gradients of one pass
// at fixed parameters sum to the whole batch's gradient (tested). The measured ratio, clip fraction, KL and
// entropy go to TrainStep::stats. Everything runs on one thread in index order.
//
// backend: cuda runs train()'s (and imitate()'s) batched forward and backward on a CUDA device with the CUDA
// twin (cuda/network_cuda.h: the same network, math and gradient layout); the learner's losses, Adam and
// sampling (act(), one small forward per decision) stay on the CPU. Without a usable device (or in a build
// without nvcc) the constructor throws crl::Error naming the `backend` param. The device's float rounding
// differs from Eigen's, so a cuda run is reproducible on its device, not bit-identical to a cpu run.
#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "policies/neural/features.h"
#include "policies/neural/network.h"
#include "policies/neural/rule_summarizer.h"
#include "policies/policy.h"
#include "policies/trainable.h"

namespace crl::neural {

struct NeuralConfig {
  int hidden = 64;
  bool frozen_summary = false;
  learners::Backend backend = learners::Backend::kCpu;  // kCuda: training on the device (see above)
  // Issue 15 (hard suite): the feature view (default | raw, raw_features.h) and a fixed summarizer for the
  // `summary: rule | none` baselines (rule_summarizer.h; null: the network summarizes).
  std::string features = "default";
  std::shared_ptr<const RuleSummarizer> fixed_summary;
};

// The decisions behind the trainable tokens of a batch, rebuilt from trajectories: one DecisionBatch with
// the head of each group, and the batch token and the trajectory each decision answers.
struct TrainingDecisions {
  DecisionBatch batch;
  std::vector<int64_t> token;  // batch token index of each group
  std::vector<int> rollout;    // trajectory index of each group
  // Tokens whose value is a decision's without a log-prob of their own (`submit`): (token, group).
  struct Extra {
    int64_t token;
    int group;
  };
  std::vector<Extra> extra;
};

class NeuralPolicy final : public Policy, public Trainable {
 public:
  // Throws crl::Error when the target is not the symbolic view of the synthetic suite.
  NeuralPolicy(const PolicyTarget& target, NeuralConfig config);

  std::string name() const override { return "neural"; }
  void act(std::span<const Request* const> requests, std::span<Decision> decisions) const override;

  void initialize(uint64_t seed) override;
  void train(const TrainStep& step) override;
  double imitate(const std::vector<Trajectory>& demonstrations, double lr) override;
  std::string state_type() const override { return "neural"; }
  // "shared trunk, 4 heads, I inputs, H hidden" (the featurizer's inputs depend on the environment's
  // vocabulary).
  std::string shape() const override;
  void set_greedy(bool greedy) override { greedy_ = greedy; }
  void reset_optimizer() override;

  // The decisions behind the trainable tokens of `trajectories` (in batch token order).
  TrainingDecisions decisions(const std::vector<Trajectory>& trajectories) const;
  const Featurizer& featurizer() const { return featurizer_; }
  static constexpr int kHeads = 4;  // [answer early_fact, latest_update, ordered_plan, summary]
  static constexpr int kSummaryHead = 3;
  // The answer head of a context (its question's type; head 0 when the type is unknown).
  static int answer_head(const ParsedContext& context) {
    return context.type >= 0 && context.type < 3 ? context.type : 0;
  }
  Network& network() { return network_; }
  const Network& network() const { return network_; }
  // The network whose summary head makes the summary decisions: the frozen copy with frozen_summary.
  const Network& summary_network() const { return config_.frozen_summary ? frozen_ : network_; }
  // Takes the frozen copy from the current parameters (initialize() does it too).
  void freeze_summary() { frozen_ = network_; }
  const NeuralConfig& config() const { return config_; }

  // The actor (or critic) gradient of the decisions of the rollouts `rollouts` at the current parameters,
  // every token weighted by the global denominator of `step.batch` (what one minibatch step of train() uses,
  // without the step). Test hook for the global-denominator property.
  std::vector<float> gradient(const TrainStep& step, const std::vector<int>& rollouts) const;

 private:
  Decision decide(const Request& request) const;
  // The checkpointed state: the network's parameters and both Adam states, then the frozen copy's
  // parameters (floats, exact bits).
  void do_save(proto::checkpoint::PolicyState& out) const override;
  void do_load(const proto::checkpoint::PolicyState& state, const std::string& where) override;
  // The options the trainer's losses use: the step's, with summary tokens masked for a frozen summarizer.
  learners::LearnerOptions loss_options(const TrainStep& step) const;

  NeuralConfig config_;
  bool greedy_ = false;
  uint64_t seed_ = 0;
  Featurizer featurizer_;
  Network network_, frozen_;
  Adam actor_adam_, critic_adam_;
  Adam imitation_adam_;  // the warm start's own moments (not checkpointed: a warm start never resumes)
};

}  // namespace crl::neural
