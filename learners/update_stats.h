#pragma once
// What one policy update did to the policy, measured while it ran (spec 1.5): whether the PPO ratio moved
// away from 1 and whether the clip bound. A trainer fills it per update (policies/neural); the scenario
// runner averages it over the updates between two curve points (scenarios/runner.h CurvePoint::ppo).
//
// Every number is over the (epoch, minibatch) evaluations of the enabled actor tokens: each minibatch's
// forward happens just before its optimizer step, so the first minibatch of the first epoch always sees
// ratio 1 and later ones see how far the earlier steps moved the policy.
#include <algorithm>
#include <cmath>
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

// The running sums behind UpdateStats, shared by the trainers (policies/neural, policies/lm): one add_token()
// per enabled actor token evaluated, one add_entropy() per decision whose entropy is measured (a pointer
// network measures it per decision, a language model per token), then means().
struct UpdateStatSums {
  int64_t steps = 0, tokens = 0, entropy_terms = 0;
  double abs_ratio = 0.0, max_ratio = 0.0, clipped = 0.0, kl = 0.0, entropy = 0.0, policy = 0.0, value = 0.0;

  // One token with the log-ratio log(pi / pi_behaviour), its advantage and the clip epsilon.
  void add_token(double log_ratio, double advantage, double clip_epsilon) {
    const double rho = std::exp(log_ratio);
    ++tokens;
    abs_ratio += std::fabs(rho - 1.0);
    max_ratio = std::max(max_ratio, rho);
    clipped += (advantage > 0.0 && rho > 1.0 + clip_epsilon) || (advantage < 0.0 && rho < 1.0 - clip_epsilon);
    kl += (rho - 1.0) - log_ratio;
  }
  void add_entropy(double nats) {
    ++entropy_terms;
    entropy += nats;
  }
  UpdateStats means() const {
    UpdateStats s;
    const double n = tokens > 0 ? static_cast<double>(tokens) : 1.0;
    s.steps = steps;
    s.token_evals = tokens;
    s.mean_abs_ratio = abs_ratio / n;
    s.max_ratio = max_ratio;
    s.clip_fraction = clipped / n;
    s.approx_kl = kl / n;
    s.entropy = entropy_terms > 0 ? entropy / static_cast<double>(entropy_terms) : 0.0;
    s.policy_loss = policy;
    s.value_loss = value;
    return s;
  }
};

}  // namespace crl::learners
