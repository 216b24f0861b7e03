#pragma once
// A policy the scenario runner can train with the CompactionRL learner (scenarios/runner.h). The runner owns
// the loop: it collects a batch with the policy frozen, computes the learner's advantages and returns once
// (from the values recorded at sampling time), asks the learner's Schedule which updates run, and calls
// train() for each of them in order, on one thread. A Trainable updates only its own parameters.
#include <cstdint>
#include <vector>

#include "engine/trajectory.h"
#include "learners/batch.h"
#include "learners/learner.h"
#include "learners/schedule.h"

namespace crl {

struct TrainStep {
  const std::vector<Trajectory>* trajectories = nullptr;  // the batch, in index order
  const learners::Batch* batch = nullptr;                 // learners::make_batch(*trajectories)
  const learners::Advantages* targets = nullptr;          // learner.advantages(*batch)
  const learners::Learner* learner = nullptr;             // its losses and gradients (options, ablations)
  learners::UpdateKind kind = learners::UpdateKind::kActor;
  double actor_lr = 0.0;
  double critic_lr = 0.0;
};

class Trainable {
 public:
  virtual ~Trainable() = default;
  // (Re)initialises the parameters for a run with `seed` (same seed -> same parameters).
  virtual void initialize(uint64_t seed) = 0;
  // One update of the kind step.kind (critic: the value parameters; actor: the policy parameters).
  virtual void train(const TrainStep& step) = 0;
};

}  // namespace crl
