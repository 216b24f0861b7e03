#pragma once
// The CUDA back-end. The batch lives on the device in precision T (float or double); the estimator is a
// segmented reverse scan (gae_scan.h) rather than one thread per rollout, and the losses are one fused
// kernel with block reductions. Built when nvcc exists; otherwise every entry point throws crl::Error.
#include <memory>
#include <string>

#include "learners/learner.h"

namespace crl::learners::cuda {

// True when built with CUDA and cudaGetDeviceCount() reports a device; otherwise `why` says which is missing.
bool device_available(std::string* why);

template <typename T>
class DeviceLearner {
 public:
  DeviceLearner();
  ~DeviceLearner();
  DeviceLearner(const DeviceLearner&) = delete;
  DeviceLearner& operator=(const DeviceLearner&) = delete;

  // Copies the batch to the device (converted to T). Buffers are reused across uploads of equal or smaller
  // size.
  void upload(const Batch& batch);
  // Steps 1-5 of learner.h on the device; the results stay there.
  void compute_advantages(const LearnerOptions& options);
  // Replaces the device advantages and returns (e.g. computed by the CPU) for a losses-only call.
  void upload_advantages(const Advantages& advantages);
  // The global loss denominators, computed on the device from the uploaded masks.
  void compute_normalizer(const LearnerOptions& options);
  // Losses of tokens [range.begin, range.end), gradients kept on the device.
  LossResult compute_losses(const LearnerOptions& options, TokenRange range);
  // Waits for the device (for timing).
  void synchronize();
  // Copies the results back (token arrays as double). `gradients` may be null.
  void download(Advantages& advantages, Gradients* gradients) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crl::learners::cuda
