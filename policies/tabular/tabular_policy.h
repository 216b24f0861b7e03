#pragma once
// The tabular actor-critic of the memory chain (spec sections 2 and 3).
//
// State. The only thing a small policy can carry across a reset is the memory symbol m: the value after the
// newest FACT or RESUME symbol of its prompt (the fact of step 1, or the summary copied into the resume
// message), or EMPTY when that is not a value or there is none. Every table is keyed by m:
//   execute:   softmax logits over the answer values V0 .. V(arity-1)   pi_E(a | m)
//   summarize: softmax logits over V0 .. V(arity-1), EMPTY             pi_S(m' | m)
//   critic:    V(role, m), one value per role and memory symbol
// All start at zero (uniform policies, zero critic: the zero-reward replay audit of spec 1.5 holds).
//
// act() reads the request's prompt symbols only. An execution request whose prompt does not end with the
// QUERY symbol gets the forced CONTINUE action (Decision.forced, never trained); otherwise it samples the
// answer, and a summary request samples m', each with a categorical draw from the logits. Exploration
// per_visit (default) draws from Rng(request.stream); per_episode replaces the stream's ordinal (the turn or
// compaction index) by the memory state, so one episode makes one choice per (role, m) however often it
// visits m. Each sampled token carries its log-probability (the marginal pi(a | m) either way) and the
// critic value V(role, m).
//
// Learning happens between batches, never inside act(): the scenario runner computes the learner's
// advantages and returns for a batch of trajectories and then calls train() (policies/trainable.h), which
// calls actor_step() (then entropy_step()) / critic_step() for each trainable token in index order (plain
// SGD on the logits and values). With per_episode exploration the actor pass takes one step per distinct
// (role, m, choice) of each trajectory, with the mean advantage of its visits, because the episode's
// log-likelihood counts that choice once. Why per_episode exists: with a fresh draw at each of 11 summaries
// the learning signal at the uniform start is an order-11 saddle and two of three seeds collapse to a wrong
// map (measured numbers in policies/tabular/README.md). In frozen-summary mode the summary logits never
// change, so pi_S stays uniform (the control arm of spec 2); the critic still learns. The checkpointed state
// is the four tables (doubles, exact bits).
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/trajectory.h"
#include "policies/policy.h"
#include "policies/trainable.h"

namespace crl {

// How a decision draws its random number (see the header comment and policies/tabular/README.md).
enum class TabularExploration {
  kPerVisit,    // a fresh draw at every decision (stream ordinal = the engine's turn or compaction index)
  kPerEpisode,  // one draw per (episode, role, memory state): every visit to a state repeats its choice
};

struct TabularConfig {
  bool frozen_summary = false;
  TabularExploration exploration = TabularExploration::kPerVisit;
  double entropy = 0.0;  // entropy bonus coefficient beta (>= 0) of every actor update
};

// The table cell behind one trainable token: which role decided, in which memory state, and what it chose
// (an action index: value v, or `arity` for EMPTY in the summary role).
struct TabularCell {
  Role role = Role::kExecute;
  int memory = 0;  // 0 .. arity-1 for a value, arity for EMPTY
  int action = 0;
};

class TabularPolicy final : public Policy, public Trainable {
 public:
  // Throws crl::Error when `target` is not a symbolic view of an environment with the memory-chain
  // vocabulary (FACT, RESUME, QUERY, CONTINUE, EMPTY, V0, V1, ...).
  TabularPolicy(const PolicyTarget& target, TabularConfig config);

  std::string name() const override { return "tabular"; }
  void act(std::span<const Request* const> requests, std::span<Decision> decisions) const override;

  // Trainable: the tables start at zero whatever the seed; each pass is plain SGD over the batch's trainable
  // tokens in index order (trajectories, segments, positions), on the learner's advantages (actor) or
  // returns (critic).
  void initialize(uint64_t seed) override;
  void train(const TrainStep& step) override;
  std::string state_type() const override { return "tabular"; }
  std::string shape() const override;
  void set_greedy(bool greedy) override { greedy_ = greedy; }

  // The cell of the sampled token at `position` of `segment`'s response (its context is the segment's prompt
  // plus the response before it). Throws crl::Error if that token is not a decision of this policy.
  TabularCell cell(const Segment& segment, size_t position) const;

  // One SGD step on -A log pi(action | memory): logits += lr * A * (onehot(action) - pi). A no-op for the
  // summary role in frozen-summary mode.
  void actor_step(const TabularCell& cell, double advantage, double lr);
  // One SGD step on -beta H(pi(. | memory)) with beta = config().entropy: logits += lr * beta * dH/dlogits,
  // dH/dlogit_j = -pi_j (log pi_j + H). A no-op when beta is 0 and for the summary role in frozen-summary
  // mode.
  void entropy_step(const TabularCell& cell, double lr);
  // One SGD step on (V - G)^2 / 2: V += lr * (G - V).
  void critic_step(const TabularCell& cell, double target, double lr);

  int arity() const { return arity_; }
  int memory_states() const { return arity_ + 1; }
  int actions(Role role) const { return role == Role::kExecute ? arity_ : arity_ + 1; }
  const TabularConfig& config() const { return config_; }
  // Current probabilities pi(. | memory) and value V(role, memory), for tests and reports.
  std::vector<double> probabilities(Role role, int memory) const;
  double value(Role role, int memory) const { return values_[role_index(role)][memory]; }
  // The token an action index stands for, and the readable name of a memory state ("V1", "EMPTY").
  TokenId action_token(Role role, int action) const;
  std::string memory_name(int memory) const;

 private:
  static int role_index(Role role) { return role == Role::kExecute ? 0 : 1; }
  // The memory symbol of a context given as consecutive pieces (scanned newest first).
  int memory_of(std::span<const std::span<const TokenId>> pieces) const;
  double* logits(Role role, int memory) { return &logits_[role_index(role)][memory * actions(role)]; }
  const double* logits(Role role, int memory) const {
    return &logits_[role_index(role)][memory * actions(role)];
  }
  Decision sample(Role role, int memory, const StreamKey& stream) const;
  void do_save(proto::checkpoint::PolicyState& out) const override;
  void do_load(const proto::checkpoint::PolicyState& state, const std::string& where) override;

  TabularConfig config_;
  bool greedy_ = false;
  int arity_ = 2;
  TokenId fact_ = 0, resume_ = 0, query_ = 0, continue_ = 0, empty_ = 0, value0_ = 0;
  std::vector<double> logits_[2];  // [role][memory * actions + action]
  std::vector<double> values_[2];  // [role][memory]
};

}  // namespace crl
