#pragma once
// The update schedule (spec 1.5, 1.8) as pure logic: given how many batches were trained before and the
// batch itself, which updates run on it, in order. No state besides the options, so it is trivially testable
// and resumable from a checkpoint's counter.
//
//   batches [0, warmup):   critic only (the paper's 50 critic pre-training steps, one critic update each);
//   afterwards:            critic_per_actor critic updates, then one actor update (paper 2:1: critic,
//                          critic, actor);
//   actor gate (opt-in):   the actor update is skipped unless some rollout's raw reward > gate_threshold
//                          (the critic still trains);
//   positive-only (opt-in): reported to the learner, which zeroes actor advantages of rollouts with
//                          reward <= 0 (LearnerOptions::positive_only).
#include <cstdint>
#include <vector>

#include "learners/batch.h"

namespace crl::learners {

enum class UpdateKind { kCritic, kActor };

struct ScheduleOptions {
  int64_t warmup_batches = 50;
  int critic_per_actor = 2;
  bool actor_gate = false;
  double gate_threshold = 0.0;  // the repro's Phase 10 variant uses 0.999
  bool positive_only = false;
};

class Schedule {
 public:
  // Throws crl::Error for a negative warm-up or critic_per_actor < 0.
  explicit Schedule(ScheduleOptions options);
  // The updates to run on the batch that comes after `batches_done` earlier batches.
  std::vector<UpdateKind> updates(int64_t batches_done, const Batch& batch) const;
  // Whether the actor gate lets an actor update run on this batch (always true when the gate is off).
  bool actor_gate_open(const Batch& batch) const;
  const ScheduleOptions& options() const { return options_; }

 private:
  ScheduleOptions options_;
};

}  // namespace crl::learners
