#pragma once
// The zero-critic full-trajectory reference (spec 1.6), an independent check of the correction.
//
// With V = 0, stitch a rollout's sampled tokens (T in total) into one sequence with the reward R on the
// last one and run plain GAE over it: A_ref_t = sum_k (gamma lambda)^k delta_{t+k} = (gamma lambda)^{T-t} R.
// For segment s the reference uses the uniform lambda = lambda_s of that segment; in tokenwise mode the step
// into token u uses u's segment lambda. The corrected local advantages must equal it for every segment.
#include <vector>

#include "learners/batch.h"
#include "learners/options.h"

namespace crl::learners {

// Advantages (one per token; 0 on unsampled tokens) computed by the stitched recursion above with V = 0,
// ignoring the batch's values. O(segments x tokens) per rollout: a test oracle, not a fast path.
std::vector<double> zero_critic_reference(const Batch& batch, const LearnerOptions& options);

}  // namespace crl::learners
