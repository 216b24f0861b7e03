#pragma once
// The CPU reference back-end: plain C++ and Eigen in double. Every CUDA kernel is tested against it.
#include <string_view>
#include <vector>

#include "learners/learner.h"

namespace crl::learners::cpu {

// The kernels exist compiled for several instruction sets; the widest the CPU runs is used. All give the
// same bits (tested); the overloads taking an Isa are for those tests and benchmarks.
enum class Isa { kGeneric, kAvx2, kAvx512 };
std::vector<Isa> supported_isas();  // those this CPU runs, narrowest first
std::string_view isa_name(Isa isa);

// Fills `out` (resized as needed; reusing it across calls avoids allocation) with steps 1-5 of learner.h.
void compute_advantages(const Batch& batch, const LearnerOptions& options, Advantages& out);
void compute_advantages(const Batch& batch, const LearnerOptions& options, Advantages& out, Isa isa);
LossNormalizer make_normalizer(const Batch& batch, const LearnerOptions& options);
LossResult compute_losses(const Batch& batch, const Advantages& advantages, const LossNormalizer& normalizer,
                          const LearnerOptions& options, TokenRange range, Gradients* gradients);
LossResult compute_losses(const Batch& batch, const Advantages& advantages, const LossNormalizer& normalizer,
                          const LearnerOptions& options, TokenRange range, Gradients* gradients, Isa isa);
// compute_advantages, make_normalizer and compute_losses over the whole batch in one pass over the tokens
// (Learner::step): the same bits as the three calls. `gradients` (resized to the batch) may be null.
LossResult compute_step(const Batch& batch, const LearnerOptions& options, Advantages& out,
                        LossNormalizer& normalizer, Gradients* gradients);
LossResult compute_step(const Batch& batch, const LearnerOptions& options, Advantages& out,
                        LossNormalizer& normalizer, Gradients* gradients, Isa isa);

// lambda_s for a segment with n sampled tokens under the options (shared with the CUDA back-end's host code).
double segment_lambda(const LearnerOptions& options, int64_t n_sampled);
// log(gamma * lambda), -inf when the product is 0.
double log_discount(double gamma, double lambda);

}  // namespace crl::learners::cpu
