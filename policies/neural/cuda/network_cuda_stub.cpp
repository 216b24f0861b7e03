// The CUDA network's entry points in a build without nvcc: asking for them fails with a clear message.
#include "engine/error.h"
#include "policies/neural/cuda/batch_check.h"
#include "policies/neural/cuda/network_cuda.h"

namespace crl::neural {

namespace {
constexpr const char* kWhy = "this build has no CUDA back-end (built without nvcc, or with -DCRL_CUDA=OFF)";
[[noreturn]] void not_built() {
  throw Error("policy \"neural\"", "backend",
              std::string("cuda was asked for, but ") + kWhy + "; use backend: cpu");
}
}  // namespace

bool network_cuda_available(std::string* why) {
  if (why) *why = kWhy;
  return false;
}
// The batch checks first, as in a CUDA build.
ForwardResult cuda_forward(const Network& net, const DecisionBatch& b) {
  check_batch(net, b);
  not_built();
}
std::vector<float> cuda_backward(const Network& net, const DecisionBatch& b, const ForwardResult& f,
                                 std::span<const float> dlogp, std::span<const float> dvalue) {
  check_backward(net, b, f, dlogp, dvalue);
  not_built();
}

}  // namespace crl::neural
