#pragma once
// The neural policy (`neural`): two small pointer networks (network.h), one per role, over the synthetic
// suite's symbolic view (features.h), trained by the scenario runner with the CompactionRL learner.
//
// Networks ("heads"): one answer network per task type (the question names the type; separate parameters,
// so what answers one type never bends another's answers) and one summary network (the type is one of its
// inputs, when the context holds the task).
//
// act(), per request (a decision depends only on its own request and the parameters; Rng(request.stream)):
//  * execute, before the question is in the context: the forced action `next` (Decision.forced: the console
//    grammar, never trained, like the memory chain's forced `continue`);
//  * execute, once the question is in the context: [submit, val ...], the answer slots sampled one after the
//    other from the type's answer network (3 for an ordered plan, else 1). `submit` is fixed by the grammar:
//    its log-prob is 0 and it carries the first slot's value. A context with no record gets the forced answer
//    [submit, STOP], which the verifier rejects;
//  * summarize: memory-slot tokens sampled one after the other from the summary network until STOP or the
//    request's max_new_tokens. The engine writes the resume context from them (Env::symbolic_resume_body).
// Every sampled token carries its behaviour log-prob and its decision's value.
//
// train() (policies/trainable.h) rebuilds every trainable token's decision from the trajectory (the segment's
// prompt plus the response before it), recomputes the log-probs and values with one batched forward per
// network (Eigen; the CUDA back-end when asked and present), asks the learner for the losses' gradients with
// respect to them (learners::Learner::losses: token-normalized clipped PPO and value loss, ablations
// included; with backend = cuda the network and the learner's losses both run on the device), backpropagates,
// and takes one Adam step on the actor parameters (actor pass) or the value head
// (critic pass). Frozen-summary mode never updates the summary network's actor parameters, so the summary
// policy stays at its uniform initialisation.
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
  learners::Backend backend = learners::Backend::kCpu;  // where train() runs forward and backward
  // Issue 15 (hard suite): the feature view (default | raw, raw_features.h) and a fixed summarizer for the
  // `summary: rule | none` baselines (rule_summarizer.h; null: the network summarizes).
  std::string features = "default";
  std::shared_ptr<const RuleSummarizer> fixed_summary;
};

// One batch of decisions of one head, rebuilt from trajectories, with the token each decision answers.
struct RoleDecisions {
  DecisionBatch batch;
  std::vector<int64_t> token;  // batch token index of each group
};
struct TrainingDecisions {
  std::array<RoleDecisions, 4> heads;  // [answer early_fact, latest_update, ordered_plan, summary]
  // Tokens whose value is a decision's without a log-prob of their own (`submit`): (token, head, group).
  struct Extra {
    int64_t token;
    int head;
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
  std::string state_type() const override { return "neural"; }
  // "4 heads, I inputs, H hidden" (the featurizer's inputs depend on the environment's vocabulary).
  std::string shape() const override;
  void set_greedy(bool greedy) override { greedy_ = greedy; }

  // The decisions behind the trainable tokens of `trajectories` (in batch token order).
  TrainingDecisions decisions(const std::vector<Trajectory>& trajectories) const;
  const Featurizer& featurizer() const { return featurizer_; }
  static constexpr int kHeads = 4;
  static constexpr int kSummaryHead = 3;
  // The answer head of a context (its question's type; head 0 when the type is unknown).
  static int answer_head(const ParsedContext& context) {
    return context.type >= 0 && context.type < 3 ? context.type : 0;
  }
  Network& network(int head) { return networks_[head]; }
  const Network& network(int head) const { return networks_[head]; }
  const NeuralConfig& config() const { return config_; }

 private:
  Decision decide(const Request& request) const;
  // The checkpointed state: every head's parameters and both Adam states (floats, exact bits).
  void do_save(proto::checkpoint::PolicyState& out) const override;
  void do_load(const proto::checkpoint::PolicyState& state, const std::string& where) override;

  NeuralConfig config_;
  bool greedy_ = false;
  Featurizer featurizer_;
  std::array<Network, kHeads> networks_;
  std::array<Adam, kHeads> actor_adam_, critic_adam_;
};

}  // namespace crl::neural
