#include "policies/lm/sft.h"

#include <algorithm>

#include "engine/rng.h"

namespace crl::lm {

std::vector<SftExample> sft_examples(const std::vector<Trajectory>& trajectories, int max_positions,
                                     int* skipped) {
  std::vector<SftExample> out;
  int skip = 0;
  for (const Trajectory& t : trajectories) {
    for (const Segment& s : t.segments) {
      const size_t n = s.prompt_ids.size() + s.response_ids.size();
      if (s.n_sampled == 0 || s.prompt_ids.empty()) continue;
      if (static_cast<int>(n) > max_positions) {
        ++skip;
        continue;
      }
      SftExample e;
      e.tokens.assign(s.prompt_ids.begin(), s.prompt_ids.end());
      e.tokens.insert(e.tokens.end(), s.response_ids.begin(), s.response_ids.end());
      e.mask.assign(n, 0.0f);
      for (size_t k = 0; k < s.response_ids.size(); ++k) {
        if (!s.actor_mask[k]) continue;
        const size_t target = s.prompt_ids.size() + k;
        e.mask[target - 1] = 1.0f;
        if (k == 0 || !s.actor_mask[k - 1]) e.spans.push_back(static_cast<int>(target));
      }
      out.push_back(std::move(e));
    }
  }
  if (skipped != nullptr) *skipped = skip;
  return out;
}

namespace {

PackedBatch pack(const std::vector<const SftExample*>& examples, std::vector<float>& mask) {
  PackedBatch b;
  mask.clear();
  for (const SftExample* e : examples) {
    b.add_sequence(e->tokens);
    mask.insert(mask.end(), e->mask.begin(), e->mask.end());
  }
  return b;
}

}  // namespace

std::vector<float> train_sft(LmModel& model, LmOptimizer& optimizer, const std::vector<SftExample>& examples,
                             const SftOptions& options) {
  std::vector<float> losses;
  if (examples.empty()) return losses;
  for (int step = 0; step < options.steps; ++step) {
    Rng rng(StreamKey{options.seed, static_cast<uint64_t>(step), 0, StreamRole::kLearner, 0});
    std::vector<const SftExample*> chosen;
    for (int i = 0; i < options.batch; ++i) chosen.push_back(&examples[rng.uniform_int(examples.size())]);
    std::vector<float> mask, dlogp;
    const PackedBatch batch = pack(chosen, mask);
    const ForwardResult f = model.forward(batch);
    losses.push_back(sft_loss(batch, f, mask, dlogp));
    const std::vector<float> dvalue(batch.size(), 0.0f);
    const std::vector<float> grad = model.backward(batch, f, dlogp, dvalue);
    optimizer.step_actor(model.parameters(), grad, options.lr);
  }
  return losses;
}

SftEval evaluate_sft(const LmModel& model, const std::vector<SftExample>& examples) {
  SftEval out;
  double loss = 0;
  int64_t correct = 0, exact = 0;
  for (const SftExample& e : examples) {
    PackedBatch b;
    b.add_sequence(e.tokens);
    const ForwardResult f = model.forward(b);
    std::vector<bool> ok(e.tokens.size(), true);
    for (size_t t = 0; t + 1 < e.tokens.size(); ++t) {
      if (e.mask[t] == 0.0f) continue;
      Eigen::Index best = 0;
      f.logits.row(static_cast<Eigen::Index>(t)).maxCoeff(&best);
      ok[t + 1] = best == e.tokens[t + 1];
      correct += ok[t + 1];
      loss -= f.logp[t];
      ++out.tokens;
    }
    for (int start : e.spans) {
      bool all = true;
      for (size_t t = static_cast<size_t>(start); t < e.tokens.size() && e.mask[t - 1] != 0.0f; ++t)
        all = all && ok[t];
      exact += all;
      ++out.spans;
    }
  }
  if (out.tokens > 0) {
    out.loss = loss / static_cast<double>(out.tokens);
    out.token_accuracy = static_cast<double>(correct) / static_cast<double>(out.tokens);
  }
  if (out.spans > 0) out.span_exact = static_cast<double>(exact) / static_cast<double>(out.spans);
  return out;
}

}  // namespace crl::lm
