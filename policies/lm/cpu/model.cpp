#include "policies/lm/cpu/model.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "engine/heap.h"
#include "engine/rng.h"

namespace crl::lm {
namespace {

// One N(0, 1) draw by Box-Muller (two uniforms; 1 - u keeps the logarithm finite).
float normal(Rng& rng) {
  const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

// Backward of y = RMSNorm(x; g) for every row: adds dgain and writes dx (= r z - x r^3 (x.z) / d, z = dy g).
void rmsnorm_backward(const RowMatrix& x, const std::vector<float>& inv, const ConstVecMap& gain,
                      const RowMatrix& dy, VecMap dgain, RowMatrix& dx) {
  const float d = static_cast<float>(x.cols());
  dx.resize(x.rows(), x.cols());
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    const float r = inv[t];
    dgain += dy.row(t).cwiseProduct(x.row(t)) * r;
    const RowVector z = dy.row(t).cwiseProduct(gain);
    const float xz = x.row(t).dot(z);
    dx.row(t) = z * r - x.row(t) * (r * r * r * xz / d);
  }
}

void rmsnorm_forward(const RowMatrix& x, const ConstVecMap& gain, float eps, RowMatrix& y,
                     std::vector<float>& inv) {
  y.resize(x.rows(), x.cols());
  inv.resize(x.rows());
  for (Eigen::Index t = 0; t < x.rows(); ++t) inv[t] = rmsnorm_row(x.row(t), gain, eps, y.row(t));
}

}  // namespace

void PackedBatch::add_sequence(std::span<const int32_t> seq) {
  for (size_t i = 0; i < seq.size(); ++i) {
    tokens.push_back(seq[i]);
    targets.push_back(i + 1 < seq.size() ? seq[i + 1] : -1);
  }
  offsets.push_back(static_cast<int>(tokens.size()));
}

LmModel::LmModel(const LmConfig& config) : config_(config), layout_((config.validate(), config)) {
  if (config_.rope) rope_ = RopeTable(config_.head_dim(), config_.max_positions);
  keep_freed_memory();
  params_.assign(layout_.size(), 0.0f);
}

void LmModel::initialize(uint64_t seed, uint32_t tag) {
  const int d = config_.d_model, ff = config_.d_ff;
  uint64_t tensor = 0;
  auto fill_normal = [&](int64_t offset, int64_t n, float stddev) {
    Rng rng(StreamKey{seed, tensor++, tag, StreamRole::kLearner, 0});
    for (int64_t i = 0; i < n; ++i) params_[offset + i] = stddev * normal(rng);
  };
  auto fill_const = [&](int64_t offset, int64_t n, float value) {
    ++tensor;
    for (int64_t i = 0; i < n; ++i) params_[offset + i] = value;
  };
  // Embeddings (tied with the output) N(0, 0.02^2); every linear layer N(0, 1 / (3 fan_in)), the variance
  // of PyTorch's nn.Linear default (uniform +-1/sqrt(fan_in)). Why not GPT-2's 0.02 everywhere: that value
  // is tuned for d_model 768 (about 0.55/sqrt(d)); at d_model 64 it leaves attention logits and MLP
  // outputs ~4x too small, and the model stalled on copy drills at held-out loss ~1.2 (accuracy 0.82 after
  // 4,000 steps) where this scale reaches 0.06 (accuracy 0.99) by step 2,000 (policies/lm/README.md).
  const float std_emb = 0.02f;
  const float std_d = 1.0f / std::sqrt(3.0f * static_cast<float>(d));
  const float std_ff = 1.0f / std::sqrt(3.0f * static_cast<float>(ff));
  fill_normal(layout_.tok_emb(), int64_t{config_.vocab} * d, std_emb);
  fill_normal(layout_.pos_emb(), int64_t{config_.max_positions} * d, std_emb);
  for (int b = 0; b < config_.layers; ++b) {
    const BlockLayout l = layout_.block(b);
    fill_const(l.norm1, d, 1.0f);
    fill_normal(l.wqkv, int64_t{d} * 3 * d, std_d);
    fill_normal(l.wo, int64_t{d} * d, std_d);
    fill_const(l.norm2, d, 1.0f);
    fill_normal(l.w1, int64_t{d} * ff, std_d);
    fill_normal(l.w2, int64_t{ff} * d, std_ff);
  }
  fill_const(layout_.norm_f(), d, 1.0f);
  fill_const(layout_.value_w(), d, 0.0f);
  fill_const(layout_.value_b(), 1, 0.0f);
}

void LmModel::check(const PackedBatch& b) const {
  auto fail = [](const std::string& what) { throw std::invalid_argument("lm batch: " + what); };
  if (b.offsets.empty() || b.offsets.front() != 0 || b.offsets.back() != b.size())
    fail("offsets must run from 0 to the token count " + std::to_string(b.size()));
  if (b.targets.size() != b.tokens.size())
    fail("targets has " + std::to_string(b.targets.size()) + " entries, tokens " + std::to_string(b.size()));
  for (int s = 0; s < b.sequences(); ++s) {
    const int n = b.offsets[s + 1] - b.offsets[s];
    if (n < 0 || n > config_.max_positions)
      fail("sequence " + std::to_string(s) + " has length " + std::to_string(n) + ", expected 0.." +
           std::to_string(config_.max_positions));
  }
  for (int t = 0; t < b.size(); ++t) {
    if (b.tokens[t] < 0 || b.tokens[t] >= config_.vocab)
      fail("token " + std::to_string(t) + " is " + std::to_string(b.tokens[t]) + ", expected 0.." +
           std::to_string(config_.vocab - 1));
    if (b.targets[t] < -1 || b.targets[t] >= config_.vocab)
      fail("target " + std::to_string(t) + " is " + std::to_string(b.targets[t]) + ", expected -1.." +
           std::to_string(config_.vocab - 1));
  }
}

ForwardResult LmModel::forward(const PackedBatch& batch) const {
  check(batch);
  const int T = batch.size(), d = config_.d_model, H = config_.heads, hd = config_.head_dim(),
            ff = config_.d_ff;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const ConstRowMap tok = matrix(layout_.tok_emb(), config_.vocab, d);
  const ConstRowMap pos = matrix(layout_.pos_emb(), config_.max_positions, d);
  ForwardResult f;
  RowMatrix x(T, d);
  for (int s = 0; s < batch.sequences(); ++s) {
    for (int t = batch.offsets[s]; t < batch.offsets[s + 1]; ++t)
      x.row(t) = config_.rope ? RowVector(tok.row(batch.tokens[t]))
                              : RowVector(tok.row(batch.tokens[t]) + pos.row(t - batch.offsets[s]));
  }
  f.layers.resize(config_.layers);
  for (int b = 0; b < config_.layers; ++b) {
    const BlockLayout l = layout_.block(b);
    LayerCache& c = f.layers[b];
    c.x_in = x;
    rmsnorm_forward(c.x_in, vector(l.norm1, d), config_.norm_eps, c.a, c.inv1);
    c.qkv.noalias() = c.a * matrix(l.wqkv, d, 3 * d);
    if (config_.rope) {  // the cache keeps the rotated queries and keys (what attention used)
      for (int s = 0; s < batch.sequences(); ++s) {
        for (int t = batch.offsets[s]; t < batch.offsets[s + 1]; ++t) {
          for (int h = 0; h < 2 * H; ++h) rope_.rotate(&c.qkv(t, h * hd), t - batch.offsets[s]);
        }
      }
    }
    c.attn.resize(T, d);
    c.probs.resize(static_cast<size_t>(batch.sequences()) * H);
    for (int s = 0; s < batch.sequences(); ++s) {
      const int begin = batch.offsets[s], n = batch.offsets[s + 1] - begin;
      for (int h = 0; h < H; ++h) {
        RowMatrix& p = c.probs[static_cast<size_t>(s) * H + h];
        if (n == 0) continue;
        p.noalias() = c.qkv.block(begin, h * hd, n, hd) * c.qkv.block(begin, d + h * hd, n, hd).transpose();
        for (int i = 0; i < n; ++i) {
          auto row = p.row(i).head(i + 1);
          row *= scale;
          const float m = row.maxCoeff();
          row = (row.array() - m).exp().matrix();
          row /= row.sum();
          p.row(i).tail(n - i - 1).setZero();
        }
        c.attn.block(begin, h * hd, n, hd).noalias() = p * c.qkv.block(begin, 2 * d + h * hd, n, hd);
      }
    }
    c.x_mid = c.x_in;
    c.x_mid.noalias() += c.attn * matrix(l.wo, d, d);
    rmsnorm_forward(c.x_mid, vector(l.norm2, d), config_.norm_eps, c.m, c.inv2);
    c.u.noalias() = c.m * matrix(l.w1, d, ff);
    c.g = c.u.unaryExpr([](float v) { return gelu(v); });
    x = c.x_mid;
    x.noalias() += c.g * matrix(l.w2, ff, d);
  }
  f.x_final = std::move(x);
  rmsnorm_forward(f.x_final, vector(layout_.norm_f(), d), config_.norm_eps, f.hidden, f.inv_f);
  f.logits.noalias() = f.hidden * tok.transpose();
  f.lse.resize(T);
  f.logp.resize(T);
  f.values.resize(T);
  const ConstVecMap vw = vector(layout_.value_w(), d);
  const float vb = params_[layout_.value_b()];
  for (int t = 0; t < T; ++t) {
    f.lse[t] = log_sum_exp(f.logits.row(t));
    f.logp[t] = batch.targets[t] >= 0 ? f.logits(t, batch.targets[t]) - f.lse[t] : 0.0f;
    f.values[t] = f.hidden.row(t).dot(vw) + vb;
  }
  return f;
}

void check_backward_sizes(const PackedBatch& batch, std::span<const float> dlogp,
                          std::span<const float> dvalue) {
  const int T = batch.size();
  if (static_cast<int>(dlogp.size()) != T || static_cast<int>(dvalue.size()) != T)
    throw std::invalid_argument("lm backward: dlogp and dvalue need " + std::to_string(T) + " entries, got " +
                                std::to_string(dlogp.size()) + " and " + std::to_string(dvalue.size()));
}

std::vector<float> LmModel::backward(const PackedBatch& batch, const ForwardResult& f,
                                     std::span<const float> dlogp, std::span<const float> dvalue) const {
  const int T = batch.size(), d = config_.d_model, H = config_.heads, hd = config_.head_dim(),
            ff = config_.d_ff;
  check_backward_sizes(batch, dlogp, dvalue);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> grad(layout_.size(), 0.0f);
  auto gmat = [&](int64_t offset, int rows, int cols) { return RowMap(grad.data() + offset, rows, cols); };
  auto gvec = [&](int64_t offset, int n) { return VecMap(grad.data() + offset, n); };
  const ConstRowMap tok = matrix(layout_.tok_emb(), config_.vocab, d);

  // Head: dlogits = dlogp (onehot - softmax); logits = h E^T; value = h . w + b.
  RowMatrix dlogits(T, config_.vocab);
  for (int t = 0; t < T; ++t) {
    if (batch.targets[t] < 0 || dlogp[t] == 0.0f) {
      dlogits.row(t).setZero();
      continue;
    }
    dlogits.row(t) = (f.logits.row(t).array() - f.lse[t]).exp().matrix() * -dlogp[t];
    dlogits(t, batch.targets[t]) += dlogp[t];
  }
  gmat(layout_.tok_emb(), config_.vocab, d).noalias() += dlogits.transpose() * f.hidden;
  RowMatrix dh = dlogits * tok;
  const ConstVecMap vw = vector(layout_.value_w(), d);
  VecMap dvw = gvec(layout_.value_w(), d);
  for (int t = 0; t < T; ++t) {
    dvw += f.hidden.row(t) * dvalue[t];
    grad[layout_.value_b()] += dvalue[t];
    if (config_.value_grad_to_trunk) dh.row(t) += vw * dvalue[t];
  }
  RowMatrix dx;
  rmsnorm_backward(f.x_final, f.inv_f, vector(layout_.norm_f(), d), dh, gvec(layout_.norm_f(), d), dx);

  RowMatrix tmp, dattn, dqkv(T, 3 * d), dp, ds;
  for (int b = config_.layers - 1; b >= 0; --b) {
    const BlockLayout l = layout_.block(b);
    const LayerCache& c = f.layers[b];
    // MLP: x_out = x_mid + GELU(m W1) W2.
    gmat(l.w2, ff, d).noalias() += c.g.transpose() * dx;
    RowMatrix du = dx * matrix(l.w2, ff, d).transpose();
    du.array() *= c.u.unaryExpr([](float v) { return gelu_grad(v); }).array();
    gmat(l.w1, d, ff).noalias() += c.m.transpose() * du;
    const RowMatrix dm = du * matrix(l.w1, d, ff).transpose();
    rmsnorm_backward(c.x_mid, c.inv2, vector(l.norm2, d), dm, gvec(l.norm2, d), tmp);
    dx += tmp;  // dx is now dL/dx_mid
    // Attention: x_mid = x_in + attn Wo.
    gmat(l.wo, d, d).noalias() += c.attn.transpose() * dx;
    dattn.noalias() = dx * matrix(l.wo, d, d).transpose();
    for (int s = 0; s < batch.sequences(); ++s) {
      const int begin = batch.offsets[s], n = batch.offsets[s + 1] - begin;
      if (n == 0) continue;
      for (int h = 0; h < H; ++h) {
        const RowMatrix& p = c.probs[static_cast<size_t>(s) * H + h];
        const auto q = c.qkv.block(begin, h * hd, n, hd);
        const auto k = c.qkv.block(begin, d + h * hd, n, hd);
        const auto v = c.qkv.block(begin, 2 * d + h * hd, n, hd);
        const auto dout = dattn.block(begin, h * hd, n, hd);
        dqkv.block(begin, 2 * d + h * hd, n, hd).noalias() = p.transpose() * dout;
        dp.noalias() = dout * v.transpose();
        // Softmax backward: ds = p (dp - rowsum(dp p)), then the 1/sqrt(head_dim) scale.
        ds = p.cwiseProduct(dp);
        const Eigen::VectorXf rowsum = ds.rowwise().sum();
        ds -= p.cwiseProduct(rowsum.replicate(1, n));
        ds *= scale;
        dqkv.block(begin, h * hd, n, hd).noalias() = ds * k;
        dqkv.block(begin, d + h * hd, n, hd).noalias() = ds.transpose() * q;
      }
    }
    if (config_.rope) {  // back through the rotation: its transpose
      for (int s = 0; s < batch.sequences(); ++s) {
        for (int t = batch.offsets[s]; t < batch.offsets[s + 1]; ++t) {
          for (int h = 0; h < 2 * H; ++h) rope_.rotate(&dqkv(t, h * hd), t - batch.offsets[s], true);
        }
      }
    }
    gmat(l.wqkv, d, 3 * d).noalias() += c.a.transpose() * dqkv;
    const RowMatrix da = dqkv * matrix(l.wqkv, d, 3 * d).transpose();
    rmsnorm_backward(c.x_in, c.inv1, vector(l.norm1, d), da, gvec(l.norm1, d), tmp);
    dx += tmp;
  }
  RowMap dtok = gmat(layout_.tok_emb(), config_.vocab, d);
  RowMap dpos = gmat(layout_.pos_emb(), config_.max_positions, d);
  for (int s = 0; s < batch.sequences(); ++s) {
    for (int t = batch.offsets[s]; t < batch.offsets[s + 1]; ++t) {
      dtok.row(batch.tokens[t]) += dx.row(t);
      if (!config_.rope) dpos.row(t - batch.offsets[s]) += dx.row(t);
    }
  }
  return grad;
}

float sft_loss(const PackedBatch& batch, const ForwardResult& f, std::span<const float> mask,
               std::vector<float>& dlogp) {
  const int T = batch.size();
  if (static_cast<int>(mask.size()) != T)
    throw std::invalid_argument("sft_loss: mask needs " + std::to_string(T) + " entries, got " +
                                std::to_string(mask.size()));
  dlogp.assign(T, 0.0f);
  double count = 0.0, total = 0.0;
  for (int t = 0; t < T; ++t) {
    if (mask[t] != 0.0f && batch.targets[t] >= 0) {
      count += 1.0;
      total -= f.logp[t];
    }
  }
  if (count == 0.0) return 0.0f;
  for (int t = 0; t < T; ++t)
    if (mask[t] != 0.0f && batch.targets[t] >= 0) dlogp[t] = static_cast<float>(-1.0 / count);
  return static_cast<float>(total / count);
}

}  // namespace crl::lm
