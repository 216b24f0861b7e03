#pragma once
// The language model's training pass on a CUDA device: the same forward and backward as LmModel::forward /
// LmModel::backward (policies/lm/cpu/model.h), float32, on the same flat parameter buffer (config.h's
// ParamLayout). cuBLAS does the matrix products (full float, no TF32); own kernels do RMSNorm (forward and
// backward), causal attention per sequence and head (softmax with max subtraction; a query only reads keys of
// its own packed sequence), exact GELU, log-softmax with the target gather, the value head and the
// embedding scatter. Every reduction runs in a fixed order, so repeated calls give the same bits. The CPU is
// the reference; tests/policies/lm/lm_cuda_test.cpp compares them (skipped with a message where no device is
// present; scripts/gpu_check.sh makes a skip a failure). In a build without nvcc the entry points report
// that CUDA was not built (lm_cuda_stub.cpp).
//
// Errors: a malformed batch throws the CPU's std::invalid_argument (the same check, run first, device or
// not); no usable device throws crl::Error ("no CUDA device: ..."); a build without CUDA throws crl::Error
// ("built without CUDA").
#include <span>
#include <string>
#include <vector>

#include "policies/lm/cpu/model.h"

namespace crl::lm {

// True when this build has the CUDA twin and a device is usable; `why` says why not.
bool lm_cuda_available(std::string* why = nullptr);

// forward() on the device. Fills logits, lse, logp, values, hidden, x_final and inv_f; `layers` stays empty
// (the per-layer activations live on the device only), so the result cannot be passed to
// LmModel::backward: use cuda_backward.
ForwardResult cuda_forward(const LmModel& model, const PackedBatch& batch);

// backward() on the device: the gradient of sum_t dlogp[t] logp[t] + dvalue[t] value[t] for every parameter
// (ParamLayout order). It recomputes the forward on the device (activations are not kept between calls),
// i.e. one extra forward per step; a device-resident session is left for later.
std::vector<float> cuda_backward(const LmModel& model, const PackedBatch& batch, std::span<const float> dlogp,
                                 std::span<const float> dvalue);

}  // namespace crl::lm
