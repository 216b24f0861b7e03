// The CUDA back-end's entry points in a build without nvcc: every one reports that CUDA was not built, so
// asking for the kCuda back-end fails with a clear message instead of a link error.
#include "engine/error.h"
#include "learners/cuda/cuda_learner.h"

namespace crl::learners::cuda {

namespace {
[[noreturn]] void not_built() {
  throw Error("learner", "backend",
              "cuda was asked for, but this build has no CUDA back-end (built without nvcc)");
}
}  // namespace

bool device_available(std::string* why) {
  if (why) *why = "this build has no CUDA back-end (built without nvcc, or with -DCRL_CUDA=OFF)";
  return false;
}

template <typename T>
struct DeviceLearner<T>::Impl {};

template <typename T>
DeviceLearner<T>::DeviceLearner() {
  not_built();
}
template <typename T>
DeviceLearner<T>::~DeviceLearner() = default;
template <typename T>
void DeviceLearner<T>::upload(const Batch&) {
  not_built();
}
template <typename T>
void DeviceLearner<T>::compute_advantages(const LearnerOptions&) {
  not_built();
}
template <typename T>
void DeviceLearner<T>::upload_advantages(const Advantages&) {
  not_built();
}
template <typename T>
void DeviceLearner<T>::compute_normalizer(const LearnerOptions&) {
  not_built();
}
template <typename T>
LossResult DeviceLearner<T>::compute_losses(const LearnerOptions&, TokenRange) {
  not_built();
}
template <typename T>
void DeviceLearner<T>::synchronize() {
  not_built();
}
template <typename T>
void DeviceLearner<T>::download(Advantages&, Gradients*) const {
  not_built();
}

template class DeviceLearner<float>;
template class DeviceLearner<double>;

}  // namespace crl::learners::cuda
