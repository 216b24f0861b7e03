#pragma once
// A policy the scenario runner can train with the CompactionRL learner (scenarios/runner.h). The runner owns
// the loop: it collects a batch with the policy frozen, computes the learner's advantages and returns once
// (from the values recorded at sampling time), asks the learner's Schedule which updates run, and calls
// train() for each of them in order (one call at a time; a trainer may spread one update over the runner's
// threads it is handed, with the same bits as one thread). A Trainable updates only its own parameters.
//
// Checkpoints (proto/checkpoint.proto, scenarios/checkpoint.h): save() writes the policy's whole learnable
// state (parameters and optimizer state) and load() restores it, so that after load() the policy's next
// actions and updates are bit-identical to those of the policy that was saved. The wrappers here write and
// check the type and shape; a state of another type or shape is refused with both named.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/trajectory.h"
#include "learners/batch.h"
#include "learners/learner.h"
#include "learners/schedule.h"
#include "learners/update_stats.h"
#include "proto/checkpoint.pb.h"

namespace crl {

class Runner;

struct TrainStep {
  const std::vector<Trajectory>* trajectories = nullptr;  // the batch, in index order
  const learners::Batch* batch = nullptr;                 // learners::make_batch(*trajectories)
  const learners::Advantages* targets = nullptr;          // learner.advantages(*batch)
  const learners::Learner* learner = nullptr;             // its losses and gradients (options, ablations)
  learners::UpdateKind kind = learners::UpdateKind::kActor;
  double actor_lr = 0.0;
  double critic_lr = 0.0;
  // Optional: where a trainer writes what the update did (PPO ratio, clip fraction, KL, entropy); null: not
  // measured. Trainers that do not measure leave it untouched.
  learners::UpdateStats* stats = nullptr;
  // Optional: worker threads a trainer may spread the update's independent parts over (the scenario
  // runner's pool, idle during train()); the result must be the same bits with or without it. Null: one
  // thread.
  const Runner* runner = nullptr;
};

class Trainable {
 public:
  virtual ~Trainable() = default;
  // (Re)initialises the parameters for a run with `seed` (same seed -> same parameters).
  virtual void initialize(uint64_t seed) = 0;
  // One update of the kind step.kind (critic: the value parameters; actor: the policy parameters).
  virtual void train(const TrainStep& step) = 0;

  // One supervised step on demonstrations (the scenario's warm start, proto WarmStartConfig): raise the
  // log-likelihood of the demonstrator's answer tokens with the policy's own optimizer settings at `lr`.
  // Returns the minibatch's mean negative log-likelihood before the step. A policy that cannot learn from
  // demonstrations throws crl::Error (the default; parse_scenario refuses such a setup first).
  virtual double imitate(const std::vector<Trajectory>& demonstrations, double lr);
  // Forgets the optimizer's state (Adam's moments and step count) and keeps the parameters: an RL stage that
  // starts from a trained base with a fresh optimizer (proto Setup.fresh_optimizer), as a trainer starts
  // RL from a published SFT checkpoint. A policy without optimizer state (plain SGD) has nothing to forget.
  virtual void reset_optimizer() {}
  // The registered policy name a state is saved under ("tabular", "neural").
  virtual std::string state_type() const = 0;
  // A readable description of the parameter shapes, e.g. "4 heads, 37 inputs, 64 hidden"; two states load
  // into each other exactly when type and shape are equal.
  virtual std::string shape() const = 0;
  // Greedy decoding (the most probable candidate, the first on ties) instead of sampling from the request's
  // stream; for evaluation (`crl eval`). Not part of the saved state; never call it while act() runs.
  virtual void set_greedy(bool greedy) = 0;

  // Writes type, shape and the state.
  void save(proto::checkpoint::PolicyState& out) const;
  // Restores a state written by save(). Throws crl::Error naming `where` (the file) when the type or shape
  // differs (both named) or the state is inconsistent; the policy is unchanged then.
  void load(const proto::checkpoint::PolicyState& state, const std::string& where);

 protected:
  virtual void do_save(proto::checkpoint::PolicyState& out) const = 0;
  // Called only when type and shape match; must still check the sizes it reads (a hand-made file).
  virtual void do_load(const proto::checkpoint::PolicyState& state, const std::string& where) = 0;
};

}  // namespace crl
