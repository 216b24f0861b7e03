#pragma once
// The CPU reference back-end: plain C++ and Eigen in double. Every CUDA kernel is tested against it.
#include "learners/learner.h"

namespace crl::learners::cpu {

// Fills `out` (resized as needed; reusing it across calls avoids allocation) with steps 1-5 of learner.h.
void compute_advantages(const Batch& batch, const LearnerOptions& options, Advantages& out);
LossNormalizer make_normalizer(const Batch& batch, const LearnerOptions& options);
LossResult compute_losses(const Batch& batch, const Advantages& advantages, const LossNormalizer& normalizer,
                          const LearnerOptions& options, TokenRange range, Gradients* gradients);

// lambda_s for a segment with n sampled tokens under the options (shared with the CUDA back-end's host code).
double segment_lambda(const LearnerOptions& options, int64_t n_sampled);
// log(gamma * lambda), -inf when the product is 0.
double log_discount(double gamma, double lambda);

}  // namespace crl::learners::cpu
