#pragma once
// The reverse GAE sweep of one segment (learner.h steps 3-5). The state it carries lets a caller sweep a
// segment in pieces, from the last piece to the first, with the same result.
#include <cstdint>
#include <vector>

#include "learners/batch.h"
#include "learners/options.h"

namespace crl::learners::cpu {

// Everything the token sweep of one segment needs, fixed before any token is visited.
struct SegmentSweep {
  double gamma = 1.0;
  double gl = 1.0;         // gamma * lambda_s
  double reward = 0.0;     // the rollout's shared reward, at the last sampled token
  double factor = 1.0;     // (gamma lambda_s)^N_after(s), or 1 without the correction
  double ret_scale = 1.0;  // factor for the corrected critic target, else 1
  double corr0 = 0.0;      // stitched target: gamma V(first sampled of s+1) - R, else 0
};

// The state carried backwards along a segment.
struct SweepState {
  bool started = false;  // the last sampled token has been seen
  double a = 0.0;        // A_loc at the newest sampled position seen
  double next_v = 0.0;   // V at that position
  double corr = 0.0;     // the stitched correction at that position
};

// Tokens [lo, hi) of one segment, newest first; writes adv_out[t - lo] and ret_out[t - lo]. Unsampled
// positions are skipped (advantage 0, return V) and do not break the recurrence:
//   last sampled token: a = R - V (bootstrap 0), corr = corr0;
//   earlier ones:       a = (gamma V_next - V) + gamma lambda a,  corr *= gamma lambda;
//   advantage = factor a,  return = ret_scale a + corr + V (covers the three critic targets).
inline void gae_sweep(const double* values, const uint8_t* critic, int64_t lo, int64_t hi,
                      const SegmentSweep& p, SweepState& st, double* adv_out, double* ret_out) {
  for (int64_t t = hi - 1; t >= lo; --t) {
    const double v = values[t];
    if (!critic[t]) {
      adv_out[t - lo] = 0.0;
      ret_out[t - lo] = v;
      continue;
    }
    if (st.started) {
      st.a = (p.gamma * st.next_v - v) + p.gl * st.a;
      st.corr *= p.gl;
    } else {
      st.a = p.reward - v;
      st.corr = p.corr0;
      st.started = true;
    }
    st.next_v = v;
    adv_out[t - lo] = p.factor * st.a;
    ret_out[t - lo] = p.ret_scale * st.a + st.corr + v;
  }
}

}  // namespace crl::learners::cpu
