#include "learners/learner.h"

#include "engine/error.h"
#include "learners/cpu/cpu_learner.h"
#include "learners/cuda/cuda_learner.h"

namespace crl::learners {

LossResult& LossResult::operator+=(const LossResult& other) {
  policy_loss += other.policy_loss;
  kl += other.kl;
  actor_loss += other.actor_loss;
  value_loss += other.value_loss;
  clip_fraction += other.clip_fraction;
  value_clip_fraction += other.value_clip_fraction;
  return *this;
}

bool cuda_device_available(std::string* why) {
  return cuda::device_available(why);
}

Learner::Learner(LearnerOptions options, Backend backend) : options_(options), backend_(backend) {
  validate_options(options_, "learner options");
  if (backend_ == Backend::kCuda) {
    std::string why;
    if (!cuda::device_available(&why)) throw Error("learner", "backend", "cuda was asked for, but " + why);
  }
}

Advantages Learner::advantages(const Batch& batch) const {
  Advantages out;
  if (backend_ == Backend::kCpu) {
    cpu::compute_advantages(batch, options_, out);
  } else {
    cuda::DeviceLearner<double> device;
    device.upload(batch);
    device.compute_advantages(options_);
    device.download(out, nullptr);
  }
  return out;
}

LossNormalizer Learner::normalizer(const Batch& batch) const {
  // O(tokens) counting, identical in both back-ends; the CUDA losses compute their own copy on the device.
  return cpu::make_normalizer(batch, options_);
}

LossResult Learner::losses(const Batch& batch, const Advantages& advantages, const LossNormalizer& normalizer,
                           TokenRange range, Gradients* gradients) const {
  if (gradients && static_cast<int64_t>(gradients->logprobs.size()) != batch.num_tokens()) {
    gradients->resize(batch.num_tokens());
  }
  if (backend_ == Backend::kCpu) {
    return cpu::compute_losses(batch, advantages, normalizer, options_, range, gradients);
  }
  cuda::DeviceLearner<double> device;
  device.upload(batch);
  device.upload_advantages(advantages);
  device.compute_normalizer(options_);
  const LossResult result = device.compute_losses(options_, range);
  if (gradients) {
    Advantages ignored;
    Gradients all;
    device.download(ignored, &all);
    for (int64_t t = range.begin; t < range.end; ++t) {
      gradients->logprobs[t] = all.logprobs[t];
      gradients->values[t] = all.values[t];
    }
  }
  return result;
}

LossResult Learner::losses(const Batch& batch, const Advantages& advantages, Gradients* gradients) const {
  return losses(batch, advantages, normalizer(batch), TokenRange{0, batch.num_tokens()}, gradients);
}

LossResult Learner::step(const Batch& batch, Advantages& advantages, Gradients* gradients) const {
  if (backend_ == Backend::kCpu) {
    LossNormalizer normalizer;
    return cpu::compute_step(batch, options_, advantages, normalizer, gradients);
  }
  cuda::DeviceLearner<double> device;
  device.upload(batch);
  device.compute_advantages(options_);
  device.compute_normalizer(options_);
  const LossResult result = device.compute_losses(options_, TokenRange{0, batch.num_tokens()});
  device.download(advantages, gradients);
  return result;
}

std::vector<TokenRange> rollout_token_ranges(const Batch& b) {
  std::vector<TokenRange> out(static_cast<size_t>(b.num_rollouts()));
  for (int64_t r = 0; r < b.num_rollouts(); ++r) {
    out[r] = {b.segment_offsets[b.rollout_offsets[r]], b.segment_offsets[b.rollout_offsets[r + 1]]};
  }
  return out;
}

}  // namespace crl::learners
