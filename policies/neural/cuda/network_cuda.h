#pragma once
// The neural policy's shared-trunk network on a CUDA device (cuBLAS SGEMMs plus small kernels): the same
// forward and backward as Network::forward / Network::backward (network.h), float32, for any number of
// policy heads, batched over a DecisionBatch (every group scored by its own head, uneven group sizes):
//   forward:  Z = X W1 + b1, H = relu(Z); s_r = H_r . w_k + b_k (k = the head of r's group); per group the
//             softmax, the chosen row's log-prob and the entropy; the pooled mean of H and the value.
//   backward: the gradient of sum_g (dlogp_g logp_g + dvalue_g v_g) in Network's flat layout (W1, b1, the
//             heads' w and b, wv, bv); the value head passes no gradient into the trunk.
// Every reduction runs in a fixed order (no atomics), so repeated calls give the same bits; the bits differ
// from the CPU's by float rounding only. The CPU (Network) is the reference:
// tests/policies/neural_cuda_test.cpp compares them (skipped with a message where no device is present;
// scripts/gpu_check.sh makes a skip a failure), and tests/policies/neural_cuda_emulation.sh runs that
// comparison (and, with --policy, the policy's backend: cuda test) with the kernels compiled as host code
// against an emulated runtime. In a build without nvcc the entry points report that
// CUDA was not built (network_cuda_stub.cpp).
//
// Errors: a malformed batch fails the CPU's CRL_CHECKs (batch_check.h, on the host before any launch, in
// every build); no usable device (or a build without CUDA) throws crl::Error with field "backend" ("cuda was
// asked for, but ...").
#include <span>
#include <string>
#include <vector>

#include "policies/neural/network.h"

namespace crl::neural {

// True when this build has the CUDA network and a device is usable; `why` says why not.
bool network_cuda_available(std::string* why = nullptr);
// Network::forward on the device (every field of ForwardResult filled).
ForwardResult cuda_forward(const Network& network, const DecisionBatch& batch);
// Network::backward on the device. `forward` is the host result of cuda_forward or Network::forward for
// the same batch and parameters (its hidden, probs and pooled are uploaded; nothing stays on the device).
std::vector<float> cuda_backward(const Network& network, const DecisionBatch& batch,
                                 const ForwardResult& forward, std::span<const float> dlogp,
                                 std::span<const float> dvalue);

}  // namespace crl::neural
