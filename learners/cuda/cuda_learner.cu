// CUDA back-end of the learner (see cuda_learner.h): the device buffers of a batch and the order in which
// the kernels run. Six kernels for the advantages (advantage_kernels.cuh), whitening, the normalizer and one
// fused kernel for the losses (loss_kernels.cuh); every one has a CPU twin in cpu/cpu_learner.cpp, and
// tests/learners compare them. The kernels are headers of this one translation unit.
#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/cuda/cuda_check.h"
#include "engine/error.h"
#include "learners/cpu/cpu_learner.h"
#include "learners/cuda/advantage_kernels.cuh"
#include "learners/cuda/cuda_learner.h"
#include "learners/cuda/kernel_common.cuh"
#include "learners/cuda/loss_kernels.cuh"
#include "learners/gae_scan.h"

namespace crl::learners::cuda {

bool device_available(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why)
      *why = std::string("no CUDA device is usable: cudaGetDeviceCount failed: ") + cudaGetErrorString(err);
    return false;
  }
  if (count == 0) {
    if (why) *why = "no CUDA device is present (cudaGetDeviceCount = 0)";
    return false;
  }
  return true;
}

template <typename T>
struct DeviceLearner<T>::Impl {
  int64_t num_tokens = 0, num_segments = 0, num_rollouts = 0;
  bool has_old_lp = false, has_new_lp = false, has_ref_lp = false, has_new_v = false;
  DeviceBuffer<T> values, new_values, old_lp, new_lp, ref_lp, rewards, adv, ret, grad_lp, grad_v;
  DeviceBuffer<uint8_t> actor, critic, seg_kind;
  DeviceBuffer<int64_t> seg_offsets, roll_offsets, n_critic, n_actor, first_pos, last_pos, n_after;
  DeviceBuffer<int> token_segment;
  DeviceBuffer<T> seg_lambda, seg_gl, seg_factor, seg_ret_scale, seg_c0, seg_reward;
  DeviceBuffer<GaeMap<T>> chunk_maps;
  DeviceBuffer<GaeState<T>> chunk_in;
  DeviceBuffer<double> actor_scale, critic_scale, partials, sums, whiten_stats;
  bool stats_ready = false;

  void segment_stats() {
    if (stats_ready) return;
    n_critic.resize(num_segments);
    n_actor.resize(num_segments);
    first_pos.resize(num_segments);
    last_pos.resize(num_segments);
    if (num_segments > 0) {
      const int grid = static_cast<int>(std::min<int64_t>(num_segments, 65535));
      segment_stats_kernel<<<grid, kThreads>>>(seg_offsets.data, num_segments, actor.data, critic.data,
                                               n_critic.data, n_actor.data, first_pos.data, last_pos.data);
      CRL_CUDA_CHECK(cudaGetLastError());
    }
    stats_ready = true;
  }
};

template <typename T>
DeviceLearner<T>::DeviceLearner() : impl_(std::make_unique<Impl>()) {
  std::string why;
  if (!device_available(&why)) throw Error("learner", "backend", "cuda was asked for, but " + why);
}

template <typename T>
DeviceLearner<T>::~DeviceLearner() = default;

template <typename T>
void DeviceLearner<T>::upload(const Batch& batch) {
  Impl& m = *impl_;
  m.num_tokens = batch.num_tokens();
  m.num_segments = batch.num_segments();
  m.num_rollouts = batch.num_rollouts();
  upload_converted(m.values, batch.values);
  m.has_new_v = !batch.new_values.empty();
  if (m.has_new_v) upload_converted(m.new_values, batch.new_values);
  m.has_old_lp = !batch.old_logprobs.empty();
  if (m.has_old_lp) upload_converted(m.old_lp, batch.old_logprobs);
  m.has_new_lp = !batch.new_logprobs.empty();
  if (m.has_new_lp) upload_converted(m.new_lp, batch.new_logprobs);
  m.has_ref_lp = !batch.ref_logprobs.empty();
  if (m.has_ref_lp) upload_converted(m.ref_lp, batch.ref_logprobs);
  upload_converted(m.rewards, batch.rewards);
  m.actor.upload(batch.actor_mask.data(), batch.actor_mask.size());
  m.critic.upload(batch.critic_mask.data(), batch.critic_mask.size());
  std::vector<uint8_t> kinds(batch.segment_kind.size());
  for (size_t s = 0; s < kinds.size(); ++s) kinds[s] = static_cast<uint8_t>(batch.segment_kind[s]);
  m.seg_kind.upload(kinds.data(), kinds.size());
  m.seg_offsets.upload(batch.segment_offsets.data(), batch.segment_offsets.size());
  m.roll_offsets.upload(batch.rollout_offsets.data(), batch.rollout_offsets.size());
  m.token_segment.resize(m.num_tokens);
  if (m.num_tokens > 0) {
    token_segment_kernel<<<blocks_for(m.num_tokens, kThreads), kThreads>>>(
        m.seg_offsets.data, m.num_segments, m.num_tokens, m.token_segment.data);
    CRL_CUDA_CHECK(cudaGetLastError());
  }
  m.adv.resize(m.num_tokens);
  m.ret.resize(m.num_tokens);
  m.grad_lp.resize(m.num_tokens);
  m.grad_v.resize(m.num_tokens);
  m.stats_ready = false;
  m.actor_scale.size = 0;  // the normalizer belongs to the previous batch
}

template <typename T>
void DeviceLearner<T>::compute_advantages(const LearnerOptions& options) {
  Impl& m = *impl_;
  const KernelOptions ko = kernel_options(options);
  m.segment_stats();
  const int64_t S = m.num_segments;
  m.n_after.resize(S);
  m.seg_lambda.resize(S);
  m.seg_gl.resize(S);
  m.seg_factor.resize(S);
  m.seg_ret_scale.resize(S);
  m.seg_c0.resize(S);
  m.seg_reward.resize(S);
  if (m.num_rollouts > 0) {
    rollout_walk_kernel<T><<<blocks_for(m.num_rollouts, 128), 128>>>(
        ko, m.roll_offsets.data, m.num_rollouts, m.rewards.data, m.values.data, m.n_critic.data,
        m.seg_kind.data, m.first_pos.data, m.n_after.data, m.seg_lambda.data, m.seg_gl.data,
        m.seg_factor.data, m.seg_ret_scale.data, m.seg_c0.data, m.seg_reward.data);
    CRL_CUDA_CHECK(cudaGetLastError());
  }
  if (m.num_tokens == 0) return;
  const int64_t chunks = (m.num_tokens + kChunk - 1) / kChunk;
  m.chunk_maps.resize(chunks);
  m.chunk_in.resize(chunks);
  const T gamma = static_cast<T>(options.gamma);
  gae_reduce_kernel<T><<<static_cast<unsigned>(chunks), kThreads>>>(
      m.num_tokens, gamma, m.values.data, m.critic.data, m.token_segment.data, m.last_pos.data, m.seg_gl.data,
      m.seg_reward.data, m.seg_c0.data, m.chunk_maps.data);
  CRL_CUDA_CHECK(cudaGetLastError());
  chunk_suffix_kernel<T><<<1, kSuffixThreads>>>(m.chunk_maps.data, chunks, m.chunk_in.data);
  CRL_CUDA_CHECK(cudaGetLastError());
  const bool whiten = options.whiten_advantages;
  gae_apply_kernel<T><<<static_cast<unsigned>(chunks), kThreads>>>(
      m.num_tokens, gamma, m.values.data, m.critic.data, m.token_segment.data, m.last_pos.data, m.seg_gl.data,
      m.seg_reward.data, m.seg_c0.data, m.seg_factor.data, m.seg_ret_scale.data, m.chunk_in.data,
      options.positive_only && !whiten, m.adv.data, m.ret.data);
  CRL_CUDA_CHECK(cudaGetLastError());
  if (whiten) {
    // Two-pass mean and standard deviation over effective actor tokens, as on the CPU.
    m.partials.resize(static_cast<size_t>(kLossBlocks) * kSums);
    m.whiten_stats.resize(2);
    whiten_stats_kernel<T><<<kLossBlocks, kThreads>>>(ko, m.num_tokens, m.adv.data, m.actor.data,
                                                      m.seg_kind.data, m.token_segment.data, nullptr,
                                                      m.partials.data);
    sum_partials_kernel<<<1, 1>>>(m.partials.data, kLossBlocks, nullptr, 1, options.whiten_epsilon,
                                  m.whiten_stats.data);
    whiten_stats_kernel<T><<<kLossBlocks, kThreads>>>(ko, m.num_tokens, m.adv.data, m.actor.data,
                                                      m.seg_kind.data, m.token_segment.data,
                                                      m.whiten_stats.data, m.partials.data);
    sum_partials_kernel<<<1, 1>>>(m.partials.data, kLossBlocks, nullptr, 2, options.whiten_epsilon,
                                  m.whiten_stats.data);
    whiten_apply_kernel<T><<<blocks_for(m.num_tokens, kThreads), kThreads>>>(
        ko, m.num_tokens, m.actor.data, m.seg_kind.data, m.token_segment.data, m.seg_reward.data,
        m.whiten_stats.data, m.adv.data);
    CRL_CUDA_CHECK(cudaGetLastError());
  }
}

template <typename T>
void DeviceLearner<T>::upload_advantages(const Advantages& advantages) {
  Impl& m = *impl_;
  upload_converted(m.adv, advantages.advantages);
  upload_converted(m.ret, advantages.returns);
}

template <typename T>
void DeviceLearner<T>::compute_normalizer(const LearnerOptions& options) {
  Impl& m = *impl_;
  m.segment_stats();
  m.actor_scale.resize(m.num_segments);
  m.critic_scale.resize(m.num_segments);
  if (m.num_segments == 0) return;
  normalizer_kernel<<<1, kThreads>>>(kernel_options(options), options.token_level_normalization,
                                     m.num_segments, m.seg_kind.data, m.n_actor.data, m.n_critic.data,
                                     m.actor_scale.data, m.critic_scale.data);
  CRL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
LossResult DeviceLearner<T>::compute_losses(const LearnerOptions& options, TokenRange range) {
  Impl& m = *impl_;
  CRL_CHECK(range.begin >= 0 && range.begin <= range.end && range.end <= m.num_tokens,
            "token range outside the batch");
  CRL_CHECK(m.actor_scale.size == static_cast<size_t>(m.num_segments), "compute_normalizer() must run first");
  m.partials.resize(static_cast<size_t>(kLossBlocks) * kSums);
  m.sums.resize(kSums);
  const T* new_v = m.has_new_v ? m.new_values.data : m.values.data;
  loss_kernel<T><<<kLossBlocks, kThreads>>>(
      kernel_options(options), range.begin, range.end, m.adv.data, m.ret.data, m.values.data, new_v,
      m.has_old_lp ? m.old_lp.data : nullptr, m.has_new_lp ? m.new_lp.data : nullptr,
      m.has_ref_lp ? m.ref_lp.data : nullptr, m.actor.data, m.critic.data, m.seg_kind.data,
      m.token_segment.data, m.actor_scale.data, m.critic_scale.data, m.grad_lp.data, m.grad_v.data,
      m.partials.data);
  CRL_CUDA_CHECK(cudaGetLastError());
  sum_partials_kernel<<<1, 1>>>(m.partials.data, kLossBlocks, m.sums.data, 0, 0.0, nullptr);
  CRL_CUDA_CHECK(cudaGetLastError());
  double host[kSums];
  m.sums.download(host, kSums);
  LossResult r;
  r.policy_loss = host[0];
  r.kl = host[1];
  r.actor_loss = host[0] + options.kl_coef * host[1];
  r.value_loss = host[2];
  r.clip_fraction = host[3];
  r.value_clip_fraction = host[4];
  return r;
}

template <typename T>
void DeviceLearner<T>::synchronize() {
  CRL_CUDA_CHECK(cudaDeviceSynchronize());
}

template <typename T>
void DeviceLearner<T>::download(Advantages& out, Gradients* gradients) const {
  const Impl& m = *impl_;
  CRL_CUDA_CHECK(cudaDeviceSynchronize());
  download_converted(m.adv, out.advantages, m.num_tokens);
  download_converted(m.ret, out.returns, m.num_tokens);
  out.n_sampled.resize(m.num_segments);
  if (m.stats_ready) m.n_critic.download(out.n_sampled.data(), m.num_segments);
  if (m.n_after.size == static_cast<size_t>(m.num_segments)) {
    out.n_after.resize(m.num_segments);
    m.n_after.download(out.n_after.data(), m.num_segments);
    download_converted(m.seg_lambda, out.lambda, m.num_segments);
    download_converted(m.seg_factor, out.factor, m.num_segments);
  }
  if (gradients) {
    download_converted(m.grad_lp, gradients->logprobs, m.num_tokens);
    download_converted(m.grad_v, gradients->values, m.num_tokens);
  }
}

template class DeviceLearner<float>;
template class DeviceLearner<double>;

}  // namespace crl::learners::cuda
