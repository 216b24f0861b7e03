#pragma once
// The language-model policy's network: a decoder-only transformer with a value head, CPU reference (Eigen,
// float32). Shapes and the parameter layout: config.h. The CUDA twin (later, policies/lm/cuda/) runs the same
// functions on the same flat buffer.
//
// Forward over a packed batch (sequences concatenated, no padding; sequence s is tokens[offsets[s],
// offsets[s+1]) and its positions restart at 0):
//   x = tok_emb[token] + pos_emb[position]
//   per block: x += Attn(RMSNorm(x; norm1)) Wo ; x += GELU(RMSNorm(x; norm2) W1) W2
//     Attn: per head, softmax(Q K^T / sqrt(head_dim)) V, causal within its sequence only
//   h = RMSNorm(x; norm_f);  logits = h tok_emb^T;  value = h . value_w + value_b
//   logp[t] = log softmax(logits[t])[targets[t]]   (targets[t] < 0: no target, logp 0, no gradient)
// backward() returns the gradient of  L = sum_t dlogp[t] logp[t] + dvalue[t] value[t]  for every parameter,
// so any token-level loss (the CompactionRL learner's PPO loss, or SFT cross-entropy, see sft_loss) drives it
// through its per-token derivatives. Activations come from the ForwardResult that forward() cached.
//
// Initialisation (deterministic, DESIGN.md rule 5): tensor i of the layout (in layout order) is drawn from
// Rng(StreamKey{seed, i, tag, kLearner, 0}): embeddings and input projections N(0, 0.02^2), output
// projections (wo, w2) N(0, (0.02 / sqrt(2 layers))^2) as in GPT-2, norm gains 1, the value head 0.
#include <cstdint>
#include <span>
#include <vector>

#include "policies/lm/cpu/config.h"
#include "policies/lm/cpu/ops.h"

namespace crl::lm {

// Sequences packed end to end. offsets has sequences + 1 entries, from 0 to tokens.size().
struct PackedBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> targets;  // the next token whose log-prob is wanted, or -1 (same size as tokens)
  std::vector<int> offsets{0};
  int sequences() const { return static_cast<int>(offsets.size()) - 1; }
  int size() const { return static_cast<int>(tokens.size()); }
  // Appends a sequence whose targets are its own next tokens (the last token has none).
  void add_sequence(std::span<const int32_t> seq);
};

// backward()'s check that dlogp and dvalue have an entry per token of `batch` (std::invalid_argument "lm
// backward: ..."); the CUDA twin and its stub make the same one, so a bad call reads the same on every build.
void check_backward_sizes(const PackedBatch& batch, std::span<const float> dlogp,
                          std::span<const float> dvalue);

struct LayerCache {
  RowMatrix x_in;                // residual stream entering the block (T x d)
  RowMatrix a;                   // RMSNorm(x_in)
  std::vector<float> inv1;       // its inverse rms per token
  RowMatrix qkv;                 // (T x 3d)
  std::vector<RowMatrix> probs;  // attention probabilities, [sequence * heads + head] (n x n)
  RowMatrix attn;                // concatenated head outputs (T x d)
  RowMatrix x_mid;               // x_in + attn Wo
  RowMatrix m;                   // RMSNorm(x_mid)
  std::vector<float> inv2;
  RowMatrix u;  // m W1 (T x d_ff)
  RowMatrix g;  // GELU(u)
};

struct ForwardResult {
  std::vector<LayerCache> layers;
  RowMatrix x_final;  // residual stream after the last block
  std::vector<float> inv_f;
  RowMatrix hidden;           // RMSNorm(x_final) (T x d)
  RowMatrix logits;           // (T x vocab)
  std::vector<float> lse;     // log-sum-exp of each logits row
  std::vector<float> logp;    // (T)
  std::vector<float> values;  // (T)
};

class LmModel {
 public:
  LmModel() : LmModel(LmConfig{}) {}
  explicit LmModel(const LmConfig& config);  // validates; parameters zero until initialize()

  const LmConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  std::vector<float>& parameters() { return params_; }
  const std::vector<float>& parameters() const { return params_; }
  int64_t size() const { return layout_.size(); }

  void initialize(uint64_t seed, uint32_t tag = 0);

  // Throws std::invalid_argument on a malformed batch (offsets, token or target ids, lengths >
  // max_positions).
  ForwardResult forward(const PackedBatch& batch) const;
  std::vector<float> backward(const PackedBatch& batch, const ForwardResult& forward,
                              std::span<const float> dlogp, std::span<const float> dvalue) const;

  // Views of one tensor in the flat buffer.
  ConstRowMap matrix(int64_t offset, int rows, int cols) const {
    return ConstRowMap(params_.data() + offset, rows, cols);
  }
  ConstVecMap vector(int64_t offset, int n) const { return ConstVecMap(params_.data() + offset, n); }
  // The rotary positions' rotations (empty without rope).
  const RopeTable& rope() const { return rope_; }

 private:
  void check(const PackedBatch& batch) const;

  LmConfig config_;
  ParamLayout layout_;
  RopeTable rope_;
  std::vector<float> params_;
};

// Supervised fine-tuning loss: mean over the masked tokens (mask[t] != 0 and a target) of -logp[t]. Fills
// dlogp (dL/dlogp per token) for backward(); returns 0 with zero dlogp when no token is masked in.
float sft_loss(const PackedBatch& batch, const ForwardResult& forward, std::span<const float> mask,
               std::vector<float>& dlogp);

}  // namespace crl::lm
