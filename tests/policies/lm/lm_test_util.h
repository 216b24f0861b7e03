#pragma once
// Shared fixtures of the language-model tests: a small configuration, a batch of sequences of different
// lengths (one empty) and deterministic perturbations so that no parameter sits at a special value.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "engine/rng.h"
#include "policies/lm/cpu/model.h"
#include "tests/float_mismatches.h"

namespace crl::lm::test {

inline LmConfig small_config(bool value_grad_to_trunk = true) {
  LmConfig c;
  c.vocab = 37;
  c.d_model = 16;
  c.heads = 4;
  c.layers = 2;
  c.d_ff = 24;
  c.max_positions = 16;
  c.value_grad_to_trunk = value_grad_to_trunk;
  return c;
}

// initialize(), then norm gains around 1 and a non-zero value head (both start at constants).
inline LmModel perturbed_model(const LmConfig& c, uint64_t seed = 7) {
  LmModel m(c);
  m.initialize(seed);
  Rng rng(StreamKey{seed, 99, 0, StreamRole::kLearner, 0});
  const ParamLayout& l = m.layout();
  auto jitter = [&](int64_t at, int64_t n, float base, float spread) {
    for (int64_t i = 0; i < n; ++i) m.parameters()[at + i] = base + spread * (rng.uniform_float() - 0.5f);
  };
  for (int b = 0; b < c.layers; ++b) {
    jitter(l.block(b).norm1, c.d_model, 1.0f, 0.5f);
    jitter(l.block(b).norm2, c.d_model, 1.0f, 0.5f);
  }
  jitter(l.norm_f(), c.d_model, 1.0f, 0.5f);
  jitter(l.value_w(), c.d_model + 1, 0.0f, 1.0f);
  // Fixed weight scales, whatever initialize()'s are (finite differences and float32 agreement depend on
  // them): query/key/value weights at std 0.2 and embeddings at 0.4 make the attention patterns far from
  // uniform, so that errors in the attention's scale or softmax backward show; the other linear layers at
  // 0.02 (outputs / sqrt(2 layers)) keep the function smooth enough for central differences.
  const auto rescale = [&](int64_t at, int64_t n, float fan_in, float target) {
    const float factor = target * std::sqrt(3.0f * fan_in);  // initialize(): std 1 / sqrt(3 fan_in)
    for (int64_t i = 0; i < n; ++i) m.parameters()[at + i] *= factor;
  };
  for (int64_t i = 0; i < l.block(0).norm1; ++i) m.parameters()[i] *= 20.0f;  // embeddings 0.02 -> 0.4
  const int64_t d = c.d_model, ff = c.d_ff;
  const float out = 0.02f / std::sqrt(2.0f * static_cast<float>(std::max(1, c.layers)));
  for (int b = 0; b < c.layers; ++b) {
    const BlockLayout k = l.block(b);
    rescale(k.wqkv, d * 3 * d, static_cast<float>(d), 0.2f);
    rescale(k.wo, d * d, static_cast<float>(d), out);
    rescale(k.w1, d * ff, static_cast<float>(d), 0.02f);
    rescale(k.w2, ff * d, static_cast<float>(ff), out);
  }
  return m;
}

inline PackedBatch make_batch(const LmConfig& c, const std::vector<int>& lengths, uint64_t seed = 5) {
  Rng rng(StreamKey{seed, 1, 0, StreamRole::kLearner, 0});
  PackedBatch b;
  for (int n : lengths) {
    std::vector<int32_t> seq(n);
    for (int32_t& t : seq) t = static_cast<int32_t>(rng.uniform_int(c.vocab));
    b.add_sequence(seq);
  }
  return b;
}

struct LossInputs {
  std::vector<float> mask, rl_dlogp, dvalue;
};

inline LossInputs make_loss_inputs(int tokens, uint64_t seed = 11) {
  Rng rng(StreamKey{seed, 2, 0, StreamRole::kLearner, 0});
  LossInputs in;
  for (int t = 0; t < tokens; ++t) {
    in.mask.push_back(rng.bernoulli(0.7) ? 1.0f : 0.0f);
    in.rl_dlogp.push_back(rng.bernoulli(0.5) ? 0.3f * (rng.uniform_float() - 0.5f) : 0.0f);
    in.dvalue.push_back(0.2f * (rng.uniform_float() - 0.5f));
  }
  return in;
}

// The test loss (as in torch_reference.py): SFT mean over the mask + sum rl_dlogp logp + sum dvalue value.
// Returns it in double and fills the per-token derivatives.
inline double test_loss(const PackedBatch& b, const ForwardResult& f, const LossInputs& in,
                        std::vector<float>& dlogp) {
  double loss = sft_loss(b, f, in.mask, dlogp);
  for (int t = 0; t < b.size(); ++t) {
    dlogp[t] += in.rl_dlogp[t];
    loss += static_cast<double>(in.rl_dlogp[t]) * f.logp[t] + static_cast<double>(in.dvalue[t]) * f.values[t];
  }
  return loss;
}

// Every tensor of the layout by name and [begin, end), so that a comparison reports each one separately (a
// small tensor's error is not hidden by a large one's).
inline std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> named_tensors(const LmConfig& c,
                                                                                      const ParamLayout& l) {
  std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> out = {
      {"tok_emb", {l.tok_emb(), l.pos_emb()}}};
  out.push_back({"pos_emb", {l.pos_emb(), c.layers > 0 ? l.block(0).norm1 : l.norm_f()}});
  for (int k = 0; k < c.layers; ++k) {
    const BlockLayout bl = l.block(k);
    const std::string p = "block" + std::to_string(k) + ".";
    out.push_back({p + "norm1", {bl.norm1, bl.wqkv}});
    out.push_back({p + "wqkv", {bl.wqkv, bl.wo}});
    out.push_back({p + "wo", {bl.wo, bl.norm2}});
    out.push_back({p + "norm2", {bl.norm2, bl.w1}});
    out.push_back({p + "w1", {bl.w1, bl.w2}});
    out.push_back({p + "w2", {bl.w2, bl.w2 + int64_t{c.d_ff} * c.d_model}});
  }
  out.push_back({"norm_f", {l.norm_f(), l.value_w()}});
  out.push_back({"value_w", {l.value_w(), l.value_b()}});
  out.push_back({"value_b", {l.value_b(), l.size()}});
  return out;
}

using crl::test::mismatches;  // tests/float_mismatches.h

}  // namespace crl::lm::test
