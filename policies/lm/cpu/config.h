#pragma once
// Sizes of the language-model policy and where each tensor lives in its one flat parameter buffer.
//
// All parameters are one contiguous float vector (the optimizer, checkpoints and the CUDA twin see one
// buffer); ParamLayout gives the offset of every tensor. Matrices are row-major [in x out] so that a layer
// is Y = X W with X row-major (tokens x in). Layout, in this order:
//   tok_emb  [vocab x d]          token embeddings, also the output projection (tied: logits = h tok_emb^T)
//   pos_emb  [max_positions x d]  learned absolute positions (kept but unused, gradient 0, with rope)
//   per block b = 0..layers-1:
//     norm1  [d]                  RMSNorm gain before attention
//     wqkv   [d x 3d]             columns [q | k | v], head h owns columns h*head_dim.. of each part
//     wo     [d x d]              attention output projection
//     norm2  [d]                  RMSNorm gain before the MLP
//     w1     [d x d_ff]           MLP up projection (GELU, exact erf form)
//     w2     [d_ff x d]           MLP down projection
//   norm_f   [d]                  final RMSNorm gain
//   value_w  [d]                  value head on the final normed hidden state (zero at initialisation)
//   value_b  [1]
// No linear layer has a bias (as in LLaMA); only the value head does.
#include <cstdint>
#include <stdexcept>
#include <string>

namespace crl::lm {

struct LmConfig {
  int vocab = 512;
  int d_model = 128;
  int heads = 4;
  int layers = 4;
  int d_ff = 512;
  int max_positions = 512;
  float norm_eps = 1e-5f;
  // false (default): the value head reads the final hidden state without passing gradient into the trunk
  // (the actor owns the trunk, so the critic's and the actor's updates touch disjoint parameters, as in
  // policies/neural). true: dL/dvalue flows into every parameter (a shared trunk).
  bool value_grad_to_trunk = false;
  // false (default): learned absolute positions (pos_emb added to the token embedding). true: rotary
  // positions (RoPE, Su et al. 2021; GPT-NeoX's pairing of dimension i with i + head_dim/2 in each head,
  // base 10000) on every head's queries and keys, and no absolute positions: attention then depends on
  // relative offsets only, which is what copying a fact (an induction-style "find the token after X")
  // needs, and what a small model with learned positions failed to learn in our runs (policies/lm/README.md).
  bool rope = false;

  int head_dim() const { return d_model / heads; }
  // Throws std::invalid_argument naming the field when a size is out of range.
  void validate() const {
    auto need = [](bool ok, const std::string& what) {
      if (!ok) throw std::invalid_argument("lm config: " + what);
    };
    need(vocab >= 2, "vocab must be >= 2, got " + std::to_string(vocab));
    need(d_model >= 1, "d_model must be >= 1, got " + std::to_string(d_model));
    need(heads >= 1 && d_model % heads == 0, "heads must divide d_model, got heads " + std::to_string(heads) +
                                                 " d_model " + std::to_string(d_model));
    need(layers >= 0, "layers must be >= 0, got " + std::to_string(layers));
    need(d_ff >= 1, "d_ff must be >= 1, got " + std::to_string(d_ff));
    need(max_positions >= 1, "max_positions must be >= 1, got " + std::to_string(max_positions));
    need(norm_eps > 0.0f, "norm_eps must be > 0");
    need(!rope || (d_model / heads) % 2 == 0,
         "rope needs an even head_dim (d_model / heads), got " + std::to_string(d_model / heads));
  }
};

struct BlockLayout {
  int64_t norm1, wqkv, wo, norm2, w1, w2;
};

class ParamLayout {
 public:
  explicit ParamLayout(const LmConfig& c) : c_(c) {
    const int64_t d = c.d_model, ff = c.d_ff;
    tok_emb_ = 0;
    pos_emb_ = tok_emb_ + int64_t{c.vocab} * d;
    int64_t at = pos_emb_ + int64_t{c.max_positions} * d;
    block_begin_ = at;
    block_size_ = d + d * 3 * d + d * d + d + d * ff + ff * d;
    at += block_size_ * c.layers;
    norm_f_ = at;
    value_w_ = norm_f_ + d;
    value_b_ = value_w_ + d;
    size_ = value_b_ + 1;
  }
  int64_t tok_emb() const { return tok_emb_; }
  int64_t pos_emb() const { return pos_emb_; }
  BlockLayout block(int b) const {
    const int64_t d = c_.d_model, ff = c_.d_ff;
    BlockLayout l{};
    l.norm1 = block_begin_ + block_size_ * b;
    l.wqkv = l.norm1 + d;
    l.wo = l.wqkv + d * 3 * d;
    l.norm2 = l.wo + d * d;
    l.w1 = l.norm2 + d;
    l.w2 = l.w1 + d * ff;
    return l;
  }
  int64_t norm_f() const { return norm_f_; }
  int64_t value_w() const { return value_w_; }
  int64_t value_b() const { return value_b_; }
  int64_t size() const { return size_; }
  // [value_w, size) is the critic's part; everything before it the actor's.
  int64_t actor_size() const { return value_w_; }

 private:
  LmConfig c_;
  int64_t tok_emb_ = 0, pos_emb_ = 0, block_begin_ = 0, block_size_ = 0, norm_f_ = 0, value_w_ = 0,
          value_b_ = 0, size_ = 0;
};

}  // namespace crl::lm
