#pragma once
// Row-wise pieces shared by the training pass (model.cpp) and the sampler (sampler.cpp), so both compute a
// token's activations with the same arithmetic: RMSNorm, exact GELU, log-sum-exp.
#include <Eigen/Core>
#include <cmath>
#include <vector>

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

// Rotary positions: the angle of pair i (of head_dim / 2) at a position is position * 10000^(-i / half),
// computed in double, so the training pass and the sampler rotate with the same bits.
inline double rope_angle(int position, int i, int half) {
  return position * std::pow(10000.0, -static_cast<double>(i) / half);
}

// Rotates each pair (v[i], v[i + half]) of one head's vector (head_dim = 2 half) by its angle at `position`;
// inverse = true rotates back (the transpose, for the backward pass).
inline void rope_rotate(float* v, int head_dim, int position, bool inverse = false) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double angle = rope_angle(position, i, half);
    const float c = static_cast<float>(std::cos(angle));
    const float s = static_cast<float>(inverse ? -std::sin(angle) : std::sin(angle));
    const float a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = a * s + b * c;
  }
}

// rope_rotate with the cosines and sines of positions 0 .. positions - 1 computed once (the pow, sin and
// cos per pair and token were about 40% of an RL probe's CPU at d_model 32; bench/RESULTS.md): the same
// floats, so the same bits as rope_rotate.
class RopeTable {
 public:
  RopeTable() = default;
  RopeTable(int head_dim, int positions) : half_(head_dim / 2) {
    cos_.resize(static_cast<size_t>(positions) * half_);
    sin_.resize(cos_.size());
    for (int p = 0; p < positions; ++p) {
      for (int i = 0; i < half_; ++i) {
        const double angle = rope_angle(p, i, half_);
        cos_[static_cast<size_t>(p) * half_ + i] = static_cast<float>(std::cos(angle));
        sin_[static_cast<size_t>(p) * half_ + i] = static_cast<float>(std::sin(angle));
      }
    }
  }
  // position must be below the table's positions (the model's max_positions; its callers check that).
  void rotate(float* v, int position, bool inverse = false) const {
    const float* cs = cos_.data() + static_cast<size_t>(position) * half_;
    const float* sn = sin_.data() + static_cast<size_t>(position) * half_;
    for (int i = 0; i < half_; ++i) {
      const float c = cs[i], s = inverse ? -sn[i] : sn[i];
      const float a = v[i], b = v[i + half_];
      v[i] = a * c - b * s;
      v[i + half_] = a * s + b * c;
    }
  }

  // The tables themselves ([position x half], row-major), for the CUDA twin, which rotates with these floats.
  int half() const { return half_; }
  const std::vector<float>& cosines() const { return cos_; }
  const std::vector<float>& sines() const { return sin_; }

 private:
  int half_ = 0;
  std::vector<float> cos_, sin_;  // [position x half]
};

// log(sum exp(row)), stable for any finite row.
template <typename Row>
inline float log_sum_exp(const Eigen::MatrixBase<Row>& row) {
  const float m = row.maxCoeff();
  return m + std::log((row.array() - m).exp().sum());
}

}  // namespace crl::lm
