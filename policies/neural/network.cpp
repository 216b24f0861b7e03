#include "policies/neural/network.h"

#include <cmath>

#include "engine/error.h"
#include "engine/rng.h"

namespace crl::neural {

namespace {
using ColMap = Eigen::Map<const Eigen::MatrixXf>;
using VecMap = Eigen::Map<const Eigen::VectorXf>;
using RowVecMap = Eigen::Map<const Eigen::RowVectorXf>;
}  // namespace

Network::Network(NetworkShape shape) : shape_(shape), params_(static_cast<size_t>(shape.size()), 0.0f) {
  CRL_CHECK(shape.inputs > 0 && shape.hidden > 0 && shape.heads > 0,
            "network shape " << shape.inputs << "x" << shape.hidden << "x" << shape.heads);
}

void Network::initialize(uint64_t seed, uint32_t tag) {
  std::fill(params_.begin(), params_.end(), 0.0f);
  // He-style scale for a relu layer; uniform in [-a, a] has variance a^2 / 3.
  const float scale = std::sqrt(6.0f / static_cast<float>(shape_.inputs));
  Rng rng(StreamKey{seed, 0, tag, StreamRole::kLearner, 0});
  for (int64_t i = 0; i < shape_.b1(); ++i) params_[i] = (2.0f * rng.uniform_float() - 1.0f) * scale;
  // The heads' weights: small (kHeadInitScale of a unit-variance readout), from the same stream after W1.
  const float head_scale = kHeadInitScale * std::sqrt(3.0f / static_cast<float>(shape_.hidden));
  for (int64_t i = shape_.w(0); i < shape_.b(0); ++i)
    params_[i] = (2.0f * rng.uniform_float() - 1.0f) * head_scale;
}

ForwardResult Network::forward(const DecisionBatch& batch) const {
  const NetworkShape& s = shape_;
  CRL_CHECK(batch.x.cols() == s.inputs,
            "rows of " << batch.x.cols() << " features, network has " << s.inputs);
  CRL_CHECK(
      static_cast<int>(batch.offsets.size()) == batch.groups() + 1 && batch.offsets.back() == batch.x.rows(),
      "group offsets do not cover the rows");
  CRL_CHECK(batch.head.empty() || static_cast<int>(batch.head.size()) == batch.groups(), "group heads");
  const float* p = params_.data();
  const ColMap w1(p + s.w1(), s.inputs, s.hidden);
  const RowVecMap b1(p + s.b1(), s.hidden);
  const VecMap wv(p + s.wv(), s.hidden);
  ForwardResult f;
  f.hidden.noalias() = batch.x * w1;
  f.hidden.rowwise() += b1;
  f.hidden = f.hidden.cwiseMax(0.0f);
  const int rows = static_cast<int>(batch.x.rows()), groups = batch.groups();
  const Eigen::MatrixXf all = f.hidden * ColMap(p + s.w(0), s.hidden, s.heads);  // rows x heads
  f.scores.resize(rows);
  f.probs.resize(rows);
  f.logp.resize(groups);
  f.entropy.resize(groups);
  f.values.resize(groups);
  f.pooled.resize(groups, s.hidden);
  for (int g = 0; g < groups; ++g) {
    const int begin = batch.offsets[g], end = batch.offsets[g + 1], k = batch.head_of(g);
    CRL_CHECK(end > begin && batch.chosen[g] >= 0 && batch.chosen[g] < end - begin, "group " << g);
    CRL_CHECK(k >= 0 && k < s.heads, "group " << g << ": head " << k << " of " << s.heads);
    for (int r = begin; r < end; ++r) f.scores[r] = all(r, k) + p[s.b(k)];
    float max_score = -INFINITY;
    for (int r = begin; r < end; ++r) max_score = std::max(max_score, f.scores[r]);
    float total = 0.0f;
    for (int r = begin; r < end; ++r) total += std::exp(f.scores[r] - max_score);
    const float log_total = std::log(total) + max_score;
    float expected_score = 0.0f;
    for (int r = begin; r < end; ++r) {
      f.probs[r] = std::exp(f.scores[r] - log_total);
      expected_score += f.probs[r] * f.scores[r];
    }
    f.logp[g] = f.scores[begin + batch.chosen[g]] - log_total;
    f.entropy[g] = std::max(0.0f, log_total - expected_score);  // -sum p log p
    f.pooled.row(g) =
        f.hidden.middleRows(begin, end - begin).colwise().sum() / static_cast<float>(end - begin);
    f.values[g] = f.pooled.row(g).dot(wv.transpose()) + p[s.bv()];
  }
  return f;
}

std::vector<float> Network::backward(const DecisionBatch& batch, const ForwardResult& f,
                                     std::span<const float> dlogp, std::span<const float> dvalue) const {
  const NetworkShape& s = shape_;
  const int rows = static_cast<int>(batch.x.rows()), groups = batch.groups();
  CRL_CHECK(static_cast<int>(dlogp.size()) == groups && static_cast<int>(dvalue.size()) == groups,
            "gradient sizes");
  std::vector<float> grad(static_cast<size_t>(s.size()), 0.0f);
  const float* p = params_.data();
  // d logp_g / d s_r = 1[r = c_g] - p_r inside group g, placed in the column of g's head (rows x heads).
  Eigen::MatrixXf ds = Eigen::MatrixXf::Zero(rows, s.heads);
  for (int g = 0; g < groups; ++g) {
    const int k = batch.head_of(g);
    for (int r = batch.offsets[g]; r < batch.offsets[g + 1]; ++r) {
      ds(r, k) = dlogp[g] * ((r - batch.offsets[g] == batch.chosen[g] ? 1.0f : 0.0f) - f.probs[r]);
    }
  }
  // s_r = H_r . w_k + b_k: w_k and b_k collect their head's rows; the trunk collects every row.
  Eigen::Map<Eigen::MatrixXf>(grad.data() + s.w(0), s.hidden, s.heads).noalias() = f.hidden.transpose() * ds;
  Eigen::Map<Eigen::RowVectorXf>(grad.data() + s.b(0), s.heads) = ds.colwise().sum();
  RowMatrix dh = ds * ColMap(p + s.w(0), s.hidden, s.heads).transpose();
  dh = (f.hidden.array() > 0.0f).select(dh, 0.0f);
  Eigen::Map<Eigen::MatrixXf>(grad.data() + s.w1(), s.inputs, s.hidden).noalias() = batch.x.transpose() * dh;
  Eigen::Map<Eigen::RowVectorXf>(grad.data() + s.b1(), s.hidden) = dh.colwise().sum();
  const Eigen::Map<const Eigen::VectorXf> dv(dvalue.data(), groups);
  Eigen::Map<Eigen::VectorXf>(grad.data() + s.wv(), s.hidden).noalias() = f.pooled.transpose() * dv;
  grad[s.bv()] = dv.sum();
  return grad;
}

void Network::score(const RowMatrix& rows, int head, std::vector<double>& scores, float& value) const {
  const NetworkShape& s = shape_;
  CRL_CHECK(head >= 0 && head < s.heads, "head " << head << " of " << s.heads);
  const float* p = params_.data();
  const ColMap w1(p + s.w1(), s.inputs, s.hidden);
  const RowVecMap b1(p + s.b1(), s.hidden);
  const VecMap wk(p + s.w(head), s.hidden);
  const VecMap wv(p + s.wv(), s.hidden);
  RowMatrix h = rows * w1;
  h.rowwise() += b1;
  h = h.cwiseMax(0.0f);
  const Eigen::VectorXf out = h * wk;
  scores.resize(rows.rows());
  for (Eigen::Index r = 0; r < rows.rows(); ++r) scores[r] = static_cast<double>(out[r] + p[s.b(head)]);
  const Eigen::RowVectorXf pooled = h.colwise().sum() / static_cast<float>(rows.rows());
  value = pooled.dot(wv.transpose()) + p[s.bv()];
}

Adam::Adam(int64_t begin, int64_t end, double beta1, double beta2, double epsilon)
    : begin_(begin), end_(end), beta1_(beta1), beta2_(beta2), epsilon_(epsilon) {
  reset();
}

void Adam::reset() {
  m_.assign(static_cast<size_t>(end_ - begin_), 0.0f);
  v_.assign(static_cast<size_t>(end_ - begin_), 0.0f);
  t_ = 0;
}

void Adam::step(std::vector<float>& params, std::span<const float> gradients, double lr) {
  ++t_;
  const double c1 = 1.0 - std::pow(beta1_, static_cast<double>(t_));
  const double c2 = 1.0 - std::pow(beta2_, static_cast<double>(t_));
  const float step = static_cast<float>(lr * std::sqrt(c2) / c1);
  const float b1 = static_cast<float>(beta1_), b2 = static_cast<float>(beta2_);
  const float eps = static_cast<float>(epsilon_ * std::sqrt(c2));
  for (int64_t i = begin_; i < end_; ++i) {
    const float g = gradients[i];
    float& m = m_[i - begin_];
    float& v = v_[i - begin_];
    m = b1 * m + (1.0f - b1) * g;
    v = b2 * v + (1.0f - b2) * g * g;
    params[i] -= step * m / (std::sqrt(v) + eps);
  }
}

}  // namespace crl::neural
