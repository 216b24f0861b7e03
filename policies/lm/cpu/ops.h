#pragma once
// Row-wise pieces shared by the training pass (model.cpp) and the sampler (sampler.cpp), so both compute a
// token's activations with the same arithmetic: RMSNorm, exact GELU, log-sum-exp.
#include <Eigen/Core>
#include <cmath>

namespace crl::lm {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowVector = Eigen::Matrix<float, 1, Eigen::Dynamic>;
using ConstRowMap = Eigen::Map<const RowMatrix>;
using RowMap = Eigen::Map<RowMatrix>;
using ConstVecMap = Eigen::Map<const RowVector>;
using VecMap = Eigen::Map<RowVector>;

// RMSNorm (Zhang & Sennrich 2019): y = x * g / sqrt(mean(x^2) + eps). Returns the inverse rms (kept for the
// backward pass). Chosen over LayerNorm: one statistic, no bias, a shorter backward, and what current small
// decoders (LLaMA, Qwen) use.
template <typename In, typename Out>
inline float rmsnorm_row(const Eigen::MatrixBase<In>& x, const ConstVecMap& gain, float eps,
                         Eigen::MatrixBase<Out> const& y_const) {
  auto& y = const_cast<Eigen::MatrixBase<Out>&>(y_const);
  const float inv = 1.0f / std::sqrt(x.squaredNorm() / static_cast<float>(x.size()) + eps);
  y = x.cwiseProduct(gain) * inv;
  return inv;
}

// GELU, exact form x * Phi(x) (PyTorch's default), and its derivative Phi(x) + x phi(x).
inline float gelu(float x) {
  return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
}
inline float gelu_grad(float x) {
  return 0.5f * (1.0f + std::erf(x * 0.70710678118654752f)) +
         x * 0.39894228040143268f * std::exp(-0.5f * x * x);
}

// Rotary positions: rotates each pair (v[i], v[i + half]) of one head's vector (head_dim = 2 half) by the
// angle position * 10000^(-i / half); inverse = true rotates back (the transpose, for the backward pass).
// Angles in double, so the training pass and the sampler rotate with the same bits.
inline void rope_rotate(float* v, int head_dim, int position, bool inverse = false) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double angle = position * std::pow(10000.0, -static_cast<double>(i) / half);
    const float c = static_cast<float>(std::cos(angle));
    const float s = static_cast<float>(inverse ? -std::sin(angle) : std::sin(angle));
    const float a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = a * s + b * c;
  }
}

// log(sum exp(row)), stable for any finite row.
template <typename Row>
inline float log_sum_exp(const Eigen::MatrixBase<Row>& row) {
  const float m = row.maxCoeff();
  return m + std::log((row.array() - m).exp().sum());
}

}  // namespace crl::lm
