#include "policies/lm/backend.h"

#include "engine/error.h"
#include "policies/lm/cuda/lm_cuda.h"

namespace crl::lm {

LmBackend parse_backend(std::string_view text, const std::string& where, const std::string& field) {
  if (text == "cpu") return LmBackend::kCpu;
  if (text == "cuda") return LmBackend::kCuda;
  throw Error(where, field, "expected cpu or cuda, got " + quote(text));
}

void require_backend(LmBackend backend, const std::string& where, const std::string& field) {
  if (backend != LmBackend::kCuda) return;
  std::string why;
  if (!lm_cuda_available(&why)) throw Error(where, field, "cuda: no CUDA device: " + why);
}

ForwardResult forward_pass(LmBackend backend, const LmModel& model, const PackedBatch& batch) {
  return backend == LmBackend::kCuda ? cuda_forward(model, batch) : model.forward(batch);
}

std::vector<float> backward_pass(LmBackend backend, const LmModel& model, const PackedBatch& batch,
                                 const ForwardResult& forward, std::span<const float> dlogp,
                                 std::span<const float> dvalue) {
  return backend == LmBackend::kCuda ? cuda_backward(model, batch, dlogp, dvalue)
                                     : model.backward(batch, forward, dlogp, dvalue);
}

}  // namespace crl::lm
