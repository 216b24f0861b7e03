#pragma once
// Where the language model's passes run: the CPU (Eigen, the reference: LmModel::forward / backward and
// sample()) or the CUDA twin (policies/lm/cuda/lm_cuda.h). Sampling (`crl lm serve --backend`) and training
// (`crl lm train --backend`, the runner policy's `backend` parameter: SFT, copy drills and the PPO updates)
// choose with it. The twin computes the CPU's numbers to float rounding, not its bits: a run is the same
// bits run after run on one back-end, and the two back-ends' runs differ in the last bits (and, through
// sampling, may part later in a long run).
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "policies/lm/cpu/model.h"

namespace crl::lm {

enum class LmBackend { kCpu, kCuda };

// "cpu" or "cuda"; anything else is an Error naming `where` and `field`.
LmBackend parse_backend(std::string_view text, const std::string& where, const std::string& field);

// Throws an Error naming `where` and `field` with the reason when `backend` is kCuda and no device is usable
// (or the build has no CUDA), so that a run asks before its first step, not in the middle of it.
void require_backend(LmBackend backend, const std::string& where, const std::string& field);

// A training step's forward pass on `backend`. On the device the result has no per-layer activations
// (`layers` empty): pass it to backward_pass only.
ForwardResult forward_pass(LmBackend backend, const LmModel& model, const PackedBatch& batch);

// The gradient of sum_t dlogp[t] logp[t] + dvalue[t] value[t] (LmModel::backward) on `backend`. The device
// recomputes the forward there and does not read `forward`; the CPU needs the forward_pass result of the
// same batch.
std::vector<float> backward_pass(LmBackend backend, const LmModel& model, const PackedBatch& batch,
                                 const ForwardResult& forward, std::span<const float> dlogp,
                                 std::span<const float> dvalue);

}  // namespace crl::lm
