#pragma once
// Advantages and critic targets of a batch of trajectories, for the scenario runner.
//
// TEMPORARY SHIM: the CompactionRL estimator belongs to the learner (branch `learner`, learners/learner.h).
// Until it lands on this branch, this file holds a small spec-exact version (spec 1.4) so that the scenarios
// can train; it is to be replaced by learners::make_batch + learners::Learner::advantages, keeping this
// interface. Token order is the learner batch's: trajectories, then segments, then response tokens.
//
// Per segment s of a rollout with reward R, over its n_s sampled positions (actor mask 1; the others are
// skipped, not zero-filled):
//   lambda_s = 1 - 1/(alpha max(n_s, 1)) (adaptive) or the fixed lambda;
//   delta_i = r_i + gamma V_{i+1} - V_i with r = R only at the last sampled token and V = 0 after it;
//   A_loc_i = delta_i + gamma lambda_s A_loc_{i+1};
//   A_hat = (gamma lambda_s)^N_after(s) A_loc (factor 1 without the correction), in log space;
//   G = A_loc + V (local target) or A_hat + V (corrected); unsampled tokens: A = 0, G = V.
#include <cstdint>
#include <vector>

#include "engine/trajectory.h"

namespace crl::scenarios {

struct AdvantageOptions {
  double gamma = 1.0;
  bool adaptive_lambda = false;
  double lambda = 1.0;        // when !adaptive_lambda
  double lambda_alpha = 1.5;  // when adaptive_lambda
  bool correction = true;
  bool corrected_target = false;  // critic target A_hat + V instead of A_loc + V
};

struct TokenTargets {
  std::vector<double> advantages;  // per response token, in batch order
  std::vector<double> returns;
  std::vector<double> factor;  // per segment (batch order): the correction factor applied to A_loc
};

TokenTargets compute_advantages(const std::vector<Trajectory>& trajectories, const AdvantageOptions& options);

}  // namespace crl::scenarios
