#pragma once
// The neural policy's network on a CUDA device (cuBLAS GEMMs plus small kernels): the same forward and
// backward as Network::forward / Network::backward (network.h) for a SINGLE-HEAD network (one output head;
// a multi-head network or a batch with group heads is refused with a typed error, so the shared-trunk
// policy refuses backend: cuda), float, every reduction in a fixed order so
// repeated calls give the same bits. The CPU is the reference; tests/policies/neural_cuda_test.cpp compares
// them (skipped with a message where no device is present). In a build without nvcc the entry points report
// that CUDA was not built (network_cuda_stub.cpp).
#include <span>
#include <string>
#include <vector>

#include "policies/neural/network.h"

namespace crl::neural {

// True when this build has the CUDA network and a device is usable; `why` says why not.
bool network_cuda_available(std::string* why = nullptr);
// Throw crl::Error when no device is usable.
ForwardResult cuda_forward(const Network& network, const DecisionBatch& batch);
std::vector<float> cuda_backward(const Network& network, const DecisionBatch& batch,
                                 const ForwardResult& forward, std::span<const float> dlogp,
                                 std::span<const float> dvalue);

}  // namespace crl::neural
