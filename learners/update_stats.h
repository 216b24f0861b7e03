#pragma once
// What one policy update did to the policy, measured while it ran (spec 1.5): whether the PPO ratio moved
// away from 1 and whether the clip bound. A trainer fills it per update (policies/neural); the scenario
// runner averages it over the updates between two curve points (scenarios/runner.h CurvePoint::ppo).
//
// Every number is over the (epoch, minibatch) evaluations of the enabled actor tokens: each minibatch's
// forward happens just before its optimizer step, so the first minibatch of the first epoch always sees
// ratio 1 and later ones see how far the earlier steps moved the policy.
#include <cstdint>

namespace crl::learners {

struct UpdateStats {
  int64_t steps = 0;            // optimizer steps (epochs x minibatches)
  int64_t token_evals = 0;      // enabled actor tokens evaluated, summed over the steps
  double mean_abs_ratio = 0.0;  // mean |rho - 1|, rho = exp(logp - logp_behaviour)
  double max_ratio = 0.0;       // max rho (0 when no token)
  double clip_fraction =
      0.0;                 // share of evaluations whose clip binds (the min takes the clipped branch,
                           // so the token's gradient is 0): (A > 0, rho > 1 + eps) or (A < 0, rho < 1 - eps)
  double approx_kl = 0.0;  // mean of (rho - 1) - log rho, the k3 estimate of KL(behaviour || current)
  double entropy = 0.0;    // mean entropy (nats) of the current policy's actor decisions
  double policy_loss = 0.0;  // the batch's clipped surrogate at the first epoch (global denominator)
  double value_loss = 0.0;   // the batch's value loss at the first epoch
};

}  // namespace crl::learners
