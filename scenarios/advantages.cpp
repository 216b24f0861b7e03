// TEMPORARY SHIM until learners/learner.h lands (see advantages.h).
#include "scenarios/advantages.h"

#include <cmath>

namespace crl::scenarios {

TokenTargets compute_advantages(const std::vector<Trajectory>& trajectories, const AdvantageOptions& o) {
  TokenTargets out;
  for (const Trajectory& t : trajectories) {
    for (const Segment& seg : t.segments) {
      const size_t begin = out.advantages.size();
      const size_t n = seg.response_ids.size();
      out.advantages.resize(begin + n, 0.0);
      out.returns.resize(begin + n, 0.0);
      const double lambda =
          o.adaptive_lambda
              ? 1.0 - 1.0 / (o.lambda_alpha * static_cast<double>(std::max<int64_t>(seg.n_sampled, 1)))
              : o.lambda;
      const double gl = o.gamma * lambda;
      // (gamma lambda)^N in log space; a zero base gives 0 for N > 0 and 1 for N = 0.
      double factor = 1.0;
      if (o.correction && seg.n_after > 0) {
        factor = gl > 0.0 ? std::exp(static_cast<double>(seg.n_after) * std::log(gl)) : 0.0;
      }
      out.factor.push_back(factor);
      // Backwards over the sampled positions only.
      double next_advantage = 0.0, next_value = 0.0;
      bool last = true;
      for (size_t i = n; i-- > 0;) {
        const double v = seg.values[i];
        if (!seg.actor_mask[i]) {
          out.returns[begin + i] = v;
          continue;
        }
        const double delta = last ? t.reward - v : o.gamma * next_value - v;
        const double local = delta + (last ? 0.0 : gl * next_advantage);
        last = false;
        next_advantage = local;
        next_value = v;
        out.advantages[begin + i] = factor * local;
        out.returns[begin + i] = (o.corrected_target ? factor * local : local) + v;
      }
    }
  }
  return out;
}

}  // namespace crl::scenarios
