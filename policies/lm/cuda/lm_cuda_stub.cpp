// The language model's CUDA entry points in a build without nvcc: asking for them fails with a clear message
// (after the same batch validation as the CPU, so a malformed batch reads the same on every build).
#include "engine/error.h"
#include "policies/lm/cuda/batch_check.h"
#include "policies/lm/cuda/lm_cuda.h"

namespace crl::lm {

namespace {
[[noreturn]] void not_built() {
  throw Error("policy \"lm\"", "backend",
              "cuda was asked for, but this build has no CUDA back-end (built without CUDA: no nvcc, or "
              "-DCRL_CUDA=OFF)");
}
}  // namespace

bool lm_cuda_available(std::string* why) {
  if (why) *why = "this build has no CUDA back-end (built without CUDA: no nvcc, or -DCRL_CUDA=OFF)";
  return false;
}
ForwardResult cuda_forward(const LmModel& model, const PackedBatch& batch) {
  cuda_detail::check_batch_like_cpu(model, batch);
  not_built();
}
std::vector<float> cuda_backward(const LmModel& model, const PackedBatch& batch, std::span<const float> dlogp,
                                 std::span<const float> dvalue) {
  cuda_detail::check_batch_like_cpu(model, batch);
  check_backward_sizes(batch, dlogp, dvalue);
  not_built();
}

std::vector<SampleResult> cuda_sample(const LmModel& model, std::span<const SampleRequest> requests,
                                      const SamplingParams& params, const SampleObserver&) {
  cuda_detail::check_sample_like_cpu(model, requests, params);
  not_built();
}
std::unique_ptr<TokenDecoder> cuda_decoder(const LmModel&, int slots) {
  cuda_detail::check_decoder_slots(slots);
  not_built();
}

}  // namespace crl::lm
