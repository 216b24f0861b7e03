// The CUDA network's entry points in a build without nvcc: asking for them fails with a clear message.
#include "engine/error.h"
#include "policies/neural/cuda/network_cuda.h"

namespace crl::neural {

namespace {
[[noreturn]] void not_built() {
  throw Error("policy \"neural\"", "backend",
              "cuda was asked for, but this build has no CUDA back-end (built without nvcc)");
}
}  // namespace

bool network_cuda_available(std::string* why) {
  if (why) *why = "this build has no CUDA back-end (built without nvcc, or with -DCRL_CUDA=OFF)";
  return false;
}
ForwardResult cuda_forward(const Network&, const DecisionBatch&) {
  not_built();
}
std::vector<float> cuda_backward(const Network&, const DecisionBatch&, const ForwardResult&,
                                 std::span<const float>, std::span<const float>) {
  not_built();
}

}  // namespace crl::neural
