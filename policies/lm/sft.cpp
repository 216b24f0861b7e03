#include "policies/lm/sft.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "engine/error.h"
#include "engine/rng.h"

namespace crl::lm {

std::vector<SftExample> sft_examples(const std::vector<Trajectory>& trajectories, int max_positions,
                                     int* skipped) {
  std::vector<SftExample> out;
  int skip = 0;
  for (const Trajectory& t : trajectories) {
    for (size_t si = 0; si < t.segments.size(); ++si) {
      const Segment& s = t.segments[si];
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
        if (k == 0 || !s.actor_mask[k - 1]) {
          e.spans.push_back(static_cast<int>(target));
          e.span_kinds.push_back(s.kind == SegmentKind::kSummary ? SftExample::kSummary
                                                                 : SftExample::kAction);
        }
      }
      if (si + 1 == t.segments.size() && s.kind != SegmentKind::kSummary && !e.span_kinds.empty())
        e.span_kinds.back() = SftExample::kFinal;
      out.push_back(std::move(e));
    }
  }
  if (skipped != nullptr) *skipped = skip;
  return out;
}

void weight_spans(std::vector<SftExample>& examples, float summary_weight, float final_weight,
                  const std::string& where) {
  const auto check = [&](float w, const char* field) {
    if (!(w > 0.0f) || !std::isfinite(w))
      throw Error(where, field, "must be finite and > 0, not " + std::to_string(w));
  };
  check(summary_weight, "summary weight");
  check(final_weight, "final weight");
  for (SftExample& e : examples) {
    for (size_t i = 0; i < e.spans.size() && i < e.span_kinds.size(); ++i) {
      const float w = e.span_kinds[i] == SftExample::kSummary ? summary_weight
                      : e.span_kinds[i] == SftExample::kFinal ? final_weight
                                                              : 0.0f;
      if (w == 0.0f) continue;
      for (size_t t = static_cast<size_t>(e.spans[i]); t < e.tokens.size() && e.mask[t - 1] != 0.0f; ++t)
        e.mask[t - 1] = w;
    }
  }
}

std::vector<SftExample> answer_windows(const std::vector<SftExample>& examples, int window,
                                       const Tokenizer& tokenizer, const Reasoning& reasoning) {
  std::vector<SftExample> out;
  if (!reasoning.enabled()) return out;
  const auto answer_start = [&](std::span<const int32_t> span) -> size_t {
    for (size_t k = 1; k <= span.size(); ++k) {
      if (tokenizer.decode(span.first(k)).find(reasoning.close) != std::string::npos) return k;
    }
    return std::string::npos;
  };
  for (const SftExample& e : examples) {
    if (e.spans.empty() || e.span_kinds.back() != SftExample::kFinal) continue;
    const size_t span = static_cast<size_t>(e.spans.back());
    size_t end = span;
    while (end < e.tokens.size() && e.mask[end - 1] != 0.0f) ++end;
    const size_t offset = answer_start(std::span<const int32_t>(e.tokens).subspan(span, end - span));
    if (offset == std::string::npos || offset == 0 || span + offset >= end) continue;
    const size_t begin = span > static_cast<size_t>(std::max(window, 0)) ? span - window : 0;
    SftExample w;
    w.tokens.assign(e.tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                    e.tokens.begin() + static_cast<std::ptrdiff_t>(end));
    w.mask.assign(w.tokens.size(), 0.0f);
    for (size_t t = span + offset; t < end; ++t) w.mask[t - 1 - begin] = e.mask[t - 1];
    w.spans = {static_cast<int>(span + offset - begin)};
    w.span_kinds = {SftExample::kFinal};
    out.push_back(std::move(w));
  }
  return out;
}

std::vector<SftExample> answer_window_ladder(const std::vector<SftExample>& examples, int shortest, int limit,
                                             const Tokenizer& tokenizer, const Reasoning& reasoning) {
  std::vector<SftExample> out;
  for (int64_t w = shortest; w > 0 && w < limit; w *= 2) {
    const auto more = answer_windows(examples, static_cast<int>(w), tokenizer, reasoning);
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

void check_answer_windows(int window, int batch, bool reasoning, const std::string& where,
                          const std::string& window_field, const std::string& batch_field) {
  if (window < 0) throw Error(where, window_field, "must be >= 0");
  if (batch < 0) throw Error(where, batch_field, "must be >= 0");
  if (window > 0 && !reasoning)
    throw Error(where, window_field, "needs a reasoning block (the answer follows the notes)");
  if (batch > 0 && window == 0)
    throw Error(where, batch_field, "needs " + window_field + " > 0 (the windows it draws from)");
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

double sft_learning_rate(const SftOptions& o, int step) {
  if (o.warmup > 0 && step < o.warmup) return o.lr * static_cast<double>(step + 1) / o.warmup;
  if (!o.cosine) return o.lr;
  const int span = o.steps - o.warmup - 1;
  const double progress = span > 0 ? static_cast<double>(step - o.warmup) / span : 1.0;
  const double cosine = 0.5 * (1.0 + std::cos(3.141592653589793 * std::min(1.0, progress)));
  return o.lr * (o.min_lr_ratio + (1.0 - o.min_lr_ratio) * cosine);
}

std::vector<float> train_sft(LmModel& model, LmOptimizer& optimizer, const std::vector<SftExample>& examples,
                             const SftOptions& options) {
  std::vector<float> losses;
  if (examples.empty()) return losses;
  for (int step = 0; step < options.steps; ++step) {
    Rng rng(StreamKey{options.seed, static_cast<uint64_t>(step), 0, StreamRole::kLearner, 0});
    std::vector<const SftExample*> chosen;
    for (int i = 0; i < options.batch; ++i) chosen.push_back(&examples[rng.uniform_int(examples.size())]);
    if (options.extra != nullptr && !options.extra->empty()) {
      for (int i = 0; i < options.extra_batch; ++i)
        chosen.push_back(&(*options.extra)[rng.uniform_int(options.extra->size())]);
    }
    // Two halves (see SftOptions::threads); the loss is the mean over the whole minibatch's trained tokens.
    const size_t cut = chosen.size() / 2;
    const std::vector<const SftExample*> part[2] = {{chosen.begin(), chosen.begin() + cut},
                                                    {chosen.begin() + cut, chosen.end()}};
    double count = 0.0;
    for (const SftExample* e : chosen) {
      for (size_t t = 0; t + 1 < e->tokens.size(); ++t)
        count += e->mask[t] != 0.0f ? e->mask[t] : options.observation_weight;
    }
    double total[2] = {0.0, 0.0};
    std::vector<float> grad[2];
    auto run = [&](int h) {
      if (part[h].empty()) return;
      std::vector<float> mask;
      const PackedBatch batch = pack(part[h], mask);
      const ForwardResult f = forward_pass(options.backend, model, batch);
      std::vector<float> dlogp(batch.size(), 0.0f);
      for (int t = 0; t < batch.size(); ++t) {
        const double w = mask[t] != 0.0f ? mask[t] : options.observation_weight;
        if (w == 0.0 || batch.targets[t] < 0) continue;
        total[h] -= w * f.logp[t];
        dlogp[t] = static_cast<float>(-w / count);
      }
      const std::vector<float> dvalue(batch.size(), 0.0f);
      grad[h] = backward_pass(options.backend, model, batch, f, dlogp, dvalue);
    };
    if (options.threads >= 2 && !part[0].empty() && !part[1].empty()) {
      std::thread second(run, 1);
      run(0);
      second.join();
    } else {
      run(0);
      run(1);
    }
    if (grad[0].empty()) grad[0].assign(static_cast<size_t>(model.size()), 0.0f);
    if (!grad[1].empty()) {
      for (size_t i = 0; i < grad[0].size(); ++i) grad[0][i] += grad[1][i];
    }
    losses.push_back(count > 0.0 ? static_cast<float>((total[0] + total[1]) / count) : 0.0f);
    optimizer.step_actor(model.parameters(), grad[0], sft_learning_rate(options, step));
    if (options.after_step) options.after_step(step + 1);
  }
  return losses;
}

SftEval evaluate_sft(const LmModel& model, const std::vector<SftExample>& examples) {
  SftEval out;
  double loss = 0;
  int64_t correct = 0, exact = 0;
  int64_t kind_correct[3] = {0, 0, 0}, kind_exact[3] = {0, 0, 0};
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
    for (size_t i = 0; i < e.spans.size(); ++i) {
      const int kind =
          i < e.span_kinds.size() ? static_cast<int>(e.span_kinds[i]) : static_cast<int>(SftExample::kAction);
      bool all = true;
      for (size_t t = static_cast<size_t>(e.spans[i]); t < e.tokens.size() && e.mask[t - 1] != 0.0f; ++t) {
        all = all && ok[t];
        kind_correct[kind] += ok[t];
        ++out.kind_tokens[kind];
      }
      exact += all;
      kind_exact[kind] += all;
      ++out.spans;
      ++out.kind_spans[kind];
    }
  }
  if (out.tokens > 0) {
    out.loss = loss / static_cast<double>(out.tokens);
    out.token_accuracy = static_cast<double>(correct) / static_cast<double>(out.tokens);
  }
  if (out.spans > 0) out.span_exact = static_cast<double>(exact) / static_cast<double>(out.spans);
  for (int k = 0; k < 3; ++k) {
    if (out.kind_tokens[k] > 0)
      out.kind_token_accuracy[k] = static_cast<double>(kind_correct[k]) / out.kind_tokens[k];
    if (out.kind_spans[k] > 0)
      out.kind_span_exact[k] = static_cast<double>(kind_exact[k]) / out.kind_spans[k];
  }
  return out;
}

}  // namespace crl::lm
