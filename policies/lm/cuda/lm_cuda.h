#pragma once
// The language model's training pass on a CUDA device: the same forward and backward as LmModel::forward /
// LmModel::backward (policies/lm/cpu/model.h), float32, on the same flat parameter buffer (config.h's
// ParamLayout). cuBLAS does the matrix products (full float, no TF32); own kernels do RMSNorm (forward and
// backward), rotary positions (the CPU's own tables), causal attention per sequence and head (softmax with
// max subtraction; a query only reads keys of its own packed sequence), exact GELU, log-softmax with the
// target gather, the value head and the embedding scatter. Every reduction runs in a fixed order, so repeated
// calls give the same bits. The CPU is the reference; tests/policies/lm/lm_cuda_test.cpp compares them
// (skipped with a message where no device is present; scripts/gpu_check.sh makes a skip a failure). In a
// build without nvcc the entry points report that CUDA was not built (lm_cuda_stub.cpp).
//
// Errors: a malformed batch throws the CPU's std::invalid_argument (the same check, run first, device or
// not); no usable device throws crl::Error ("no CUDA device: ..."); a build without CUDA throws crl::Error
// ("built without CUDA").
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "policies/lm/cpu/model.h"
#include "policies/lm/cpu/sampler.h"

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

// sample() (policies/lm/cpu/sampler.h) with the network on the device: the parameters and each request's
// KV cache stay there, every round (a prompt position, then each sampled token) runs the live requests'
// rows through the network together (cuBLAS products of `rows` rows, kv_store and decode_attention in
// lm_kernels.cuh), and the logits come back to the host, which picks the tokens exactly as sample() does
// (the same random draws, stops and log-probs; sampler.cpp sample_with). Log-probs equal the CPU's to float
// rounding, so sampled tokens agree except where a draw falls within that rounding of a boundary. The same
// requests give the same bits; a row's bits may depend on how many rows share its products (cuBLAS picks
// kernels by shape). Errors: the CPU's parameter checks (std::invalid_argument), then no device
// (crl::Error), in that order on every machine.
std::vector<SampleResult> cuda_sample(const LmModel& model, std::span<const SampleRequest> requests,
                                      const SamplingParams& params, const SampleObserver& observer = {});

// The device decoder itself (for tests and callers that drive their own rounds): `slots` empty sequences.
std::unique_ptr<TokenDecoder> cuda_decoder(const LmModel& model, int slots);

}  // namespace crl::lm
