#include "policies/lm/cpu/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

namespace crl::lm {

KvCache::KvCache(const LmConfig& c) {
  keys_.assign(c.layers, RowMatrix(c.max_positions, c.d_model));
  values_.assign(c.layers, RowMatrix(c.max_positions, c.d_model));
}

const RowVector& KvCache::push(const LmModel& model, int32_t token) {
  advance(model, token);
  return logits();
}

const RowVector& KvCache::logits() {
  if (stale_ != nullptr) {
    const LmConfig& c = stale_->config();
    logits_.noalias() = a_ * stale_->matrix(stale_->layout().tok_emb(), c.vocab, c.d_model).transpose();
    stale_ = nullptr;
  }
  return logits_;
}

void KvCache::advance(const LmModel& model, int32_t token) {
  const LmConfig& c = model.config();
  const ParamLayout& l = model.layout();
  if (token < 0 || token >= c.vocab)
    throw std::invalid_argument("lm sampling: token " + std::to_string(token) + " outside 0.." +
                                std::to_string(c.vocab - 1));
  if (length_ >= c.max_positions)
    throw std::invalid_argument("lm sampling: the sequence is at max_positions " +
                                std::to_string(c.max_positions));
  const int d = c.d_model, H = c.heads, hd = c.head_dim(), ff = c.d_ff, n = length_ + 1;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  x_ = model.matrix(l.tok_emb(), c.vocab, d).row(token);
  if (!c.rope) x_ += model.matrix(l.pos_emb(), c.max_positions, d).row(length_);
  a_.resize(d);
  attn_.resize(d);
  for (int b = 0; b < c.layers; ++b) {
    const BlockLayout bl = l.block(b);
    rmsnorm_row(x_, model.vector(bl.norm1, d), c.norm_eps, a_);
    qkv_.noalias() = a_ * model.matrix(bl.wqkv, d, 3 * d);
    if (c.rope) {
      for (int h = 0; h < 2 * H; ++h) model.rope().rotate(qkv_.data() + h * hd, length_);
    }
    keys_[b].row(length_) = qkv_.segment(d, d);
    values_[b].row(length_) = qkv_.segment(2 * d, d);
    for (int h = 0; h < H; ++h) {
      scores_.noalias() = qkv_.segment(h * hd, hd) * keys_[b].block(0, h * hd, n, hd).transpose();
      scores_ *= scale;
      const float m = scores_.maxCoeff();
      scores_ = (scores_.array() - m).exp().matrix();
      scores_ /= scores_.sum();
      attn_.segment(h * hd, hd).noalias() = scores_ * values_[b].block(0, h * hd, n, hd);
    }
    x_.noalias() += attn_ * model.matrix(bl.wo, d, d);
    rmsnorm_row(x_, model.vector(bl.norm2, d), c.norm_eps, a_);
    u_.noalias() = a_ * model.matrix(bl.w1, d, ff);
    u_ = u_.unaryExpr([](float v) { return gelu(v); });
    x_.noalias() += u_ * model.matrix(bl.w2, ff, d);
  }
  rmsnorm_row(x_, model.vector(l.norm_f(), d), c.norm_eps, a_);
  stale_ = &model;
  ++length_;
}

int32_t pick_token(const RowVector& logits, const SamplingParams& p, Rng& rng) {
  const int V = static_cast<int>(logits.size());
  if (p.temperature <= 0.0f) {
    Eigen::Index best = 0;
    logits.maxCoeff(&best);  // the first maximum
    return static_cast<int32_t>(best);
  }
  // Probabilities after temperature, in double.
  std::vector<double> prob(V);
  const double m = logits.maxCoeff(), inv_t = 1.0 / p.temperature;
  double total = 0.0;
  for (int i = 0; i < V; ++i) total += prob[i] = std::exp((logits[i] - m) * inv_t);
  std::vector<int> order(V);
  std::iota(order.begin(), order.end(), 0);
  int kept = V;
  if (p.top_k > 0 && p.top_k < V) {  // the k most likely, the lower id first on ties
    kept = p.top_k;
    std::partial_sort(order.begin(), order.begin() + kept, order.end(),
                      [&](int a, int b) { return prob[a] > prob[b] || (prob[a] == prob[b] && a < b); });
    total = 0.0;
    for (int k = 0; k < kept; ++k) total += prob[order[k]];
  } else if (p.top_p < 1.0f) {
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return prob[a] > prob[b]; });
  }
  if (p.top_p < 1.0f) {
    const int candidates = kept;
    double cumulative = 0.0;
    kept = 0;
    while (kept < candidates && (kept == 0 || cumulative < p.top_p * total))
      cumulative += prob[order[kept++]];
    total = cumulative;
  }
  const double target = rng.uniform() * total;
  double cumulative = 0.0;
  for (int k = 0; k < kept; ++k) {
    cumulative += prob[order[k]];
    if (target < cumulative) return order[k];
  }
  // Rounding at the top end: the last kept token with non-zero probability.
  for (int k = kept - 1; k > 0; --k)
    if (prob[order[k]] > 0.0) return order[k];
  return order[0];
}

namespace {

// The k most likely tokens of a logits row with their log-probs, best first, the lower id first on ties.
std::vector<std::pair<int32_t, float>> top_tokens(const RowVector& logits, float lse, int k) {
  std::vector<int32_t> order(static_cast<size_t>(logits.size()));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<std::pair<int32_t, float>> out;
  for (int i = 0; i < k; ++i) out.emplace_back(order[i], logits[order[i]] - lse);
  return out;
}

}  // namespace

void check_sampling(const LmConfig& c, std::span<const SampleRequest> requests, const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature))
    throw std::invalid_argument("lm sampling: temperature must be finite and >= 0, got " +
                                std::to_string(p.temperature));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    throw std::invalid_argument("lm sampling: top_p must be in (0, 1], got " + std::to_string(p.top_p));
  if (p.max_new_tokens < 0)
    throw std::invalid_argument("lm sampling: max_new_tokens must be >= 0, got " +
                                std::to_string(p.max_new_tokens));
  if (!p.stop_strings.empty() && p.tokenizer == nullptr)
    throw std::invalid_argument("lm sampling: stop_strings need a tokenizer");
  for (const std::string& s : p.stop_strings)
    if (s.empty()) throw std::invalid_argument("lm sampling: a stop string is empty");
  if (p.top_logprobs < 0 || p.top_logprobs > c.vocab)
    throw std::invalid_argument("lm sampling: top_logprobs must be in 0.." + std::to_string(c.vocab) +
                                ", got " + std::to_string(p.top_logprobs));
  for (size_t r = 0; r < requests.size(); ++r) {
    const auto& prompt = requests[r].prompt;
    if (prompt.empty() || static_cast<int>(prompt.size()) > c.max_positions)
      throw std::invalid_argument("lm sampling: request " + std::to_string(r) + " has a prompt of " +
                                  std::to_string(prompt.size()) + " tokens, expected 1.." +
                                  std::to_string(c.max_positions));
    for (int32_t t : prompt)
      if (t < 0 || t >= c.vocab)
        throw std::invalid_argument("lm sampling: request " + std::to_string(r) + " has token " +
                                    std::to_string(t) + ", expected 0.." + std::to_string(c.vocab - 1));
    const int from = requests[r].prompt_logprobs_from;
    if (from < -1 || from >= static_cast<int>(prompt.size()))
      throw std::invalid_argument("lm sampling: request " + std::to_string(r) +
                                  " asks for prompt log-probs from position " + std::to_string(from) +
                                  ", expected -1 (none) or 0.." + std::to_string(prompt.size() - 1) +
                                  " (below the prompt's " + std::to_string(prompt.size()) + " tokens)");
  }
}

std::vector<SampleResult> sample_with(TokenDecoder& decoder, const LmConfig& c,
                                      std::span<const SampleRequest> requests, const SamplingParams& p,
                                      const SampleObserver& observer) {
  size_t longest_stop = 0;
  for (const std::string& s : p.stop_strings) longest_stop = std::max(longest_stop, s.size());
  const size_t n = requests.size();
  std::vector<SampleResult> out(n);
  std::vector<Rng> rngs;
  rngs.reserve(n);
  for (const SampleRequest& request : requests) rngs.emplace_back(request.stream);
  std::vector<RowVector> logits(n);
  std::vector<char> done(n, 0);
  std::vector<int> slots;
  std::vector<int32_t> tokens;
  size_t longest_prompt = 0;
  for (const SampleRequest& request : requests)
    longest_prompt = std::max(longest_prompt, request.prompt.size());
  for (size_t t = 0; t < longest_prompt; ++t) {
    slots.clear();
    tokens.clear();
    for (size_t r = 0; r < n; ++r) {
      const SampleRequest& request = requests[r];
      if (t >= request.prompt.size()) continue;
      const int32_t token = request.prompt[t];
      const int from = request.prompt_logprobs_from;
      if (from >= 0 && static_cast<int>(t) >= from) {  // the log-prob of this prompt token given those before
        SampleResult& o = out[r];
        if (t == 0) {
          o.prompt_logprobs.push_back(std::numeric_limits<float>::quiet_NaN());
          if (p.top_logprobs > 0) o.prompt_top.emplace_back();
        } else {
          const float lse = log_sum_exp(logits[r]);
          o.prompt_logprobs.push_back(logits[r][token] - lse);
          if (p.top_logprobs > 0) o.prompt_top.push_back(top_tokens(logits[r], lse, p.top_logprobs));
        }
      }
      slots.push_back(static_cast<int>(r));
      tokens.push_back(token);
    }
    decoder.push(slots, tokens, logits);
  }
  for (int step = 0; step < p.max_new_tokens; ++step) {
    bool any = false;
    slots.clear();
    tokens.clear();
    for (size_t r = 0; r < n; ++r) {
      if (done[r]) continue;
      const int32_t token = pick_token(logits[r], p, rngs[r]);
      SampleResult& o = out[r];
      o.tokens.push_back(token);
      const float lse = log_sum_exp(logits[r]);
      o.logprobs.push_back(logits[r][token] - lse);
      if (p.top_logprobs > 0) o.top.push_back(top_tokens(logits[r], lse, p.top_logprobs));
      if (p.tokenizer != nullptr) {
        // A stop string ending in this token starts at most longest_stop - 1 bytes before the new bytes.
        const size_t before = o.text.size();
        o.text += p.tokenizer->decode(std::span<const int32_t>(&token, 1));
        const size_t from = before >= longest_stop ? before - longest_stop + 1 : 0;
        size_t first = std::string::npos;
        for (size_t k = 0; k < p.stop_strings.size(); ++k) {
          const size_t at = o.text.find(p.stop_strings[k], from);
          if (at < first) {  // the earliest match; the lower index among matches at one offset
            first = at;
            o.stop_string = static_cast<int>(k);
          }
        }
        if (first != std::string::npos) o.stop_offset = static_cast<int64_t>(first);
      }
      if (std::find(p.stop_ids.begin(), p.stop_ids.end(), token) != p.stop_ids.end()) {
        o.finish = FinishReason::kStop;
        o.stop_string = -1;
        o.stop_offset = -1;
        done[r] = 1;
      } else if (o.stop_string >= 0) {
        o.finish = FinishReason::kStop;
        done[r] = 1;
      } else if (step + 1 < p.max_new_tokens) {
        if (decoder.length(static_cast<int>(r)) >= c.max_positions) {
          o.finish = FinishReason::kContext;
          done[r] = 1;
        } else {
          slots.push_back(static_cast<int>(r));
          tokens.push_back(token);
        }
      }
      any = any || !done[r];
    }
    if (observer) {
      // Finished: stopped now or before, or out of tokens (the last step, or not fed again: the context).
      std::vector<char> finished(done);
      if (step + 1 >= p.max_new_tokens) std::fill(finished.begin(), finished.end(), 1);
      if (!observer(step, out, finished)) break;
    }
    if (!slots.empty()) decoder.push(slots, tokens, logits);
    if (!any) break;
  }
  return out;
}

namespace {

// The CPU's decoder: a KvCache per slot, each row computed alone (see the header on determinism).
class CpuDecoder final : public TokenDecoder {
 public:
  CpuDecoder(const LmModel& model, size_t slots) : model_(model), caches_(slots, KvCache(model.config())) {}
  void push(std::span<const int> slots, std::span<const int32_t> tokens,
            std::vector<RowVector>& logits) override {
    for (size_t i = 0; i < slots.size(); ++i) logits[slots[i]] = caches_[slots[i]].push(model_, tokens[i]);
  }
  int length(int slot) const override { return caches_[slot].length(); }

 private:
  const LmModel& model_;
  std::vector<KvCache> caches_;
};

}  // namespace

std::vector<SampleResult> sample(const LmModel& model, std::span<const SampleRequest> requests,
                                 const SamplingParams& p, const SampleObserver& observer) {
  check_sampling(model.config(), requests, p);
  CpuDecoder decoder(model, requests.size());
  return sample_with(decoder, model.config(), requests, p, observer);
}

}  // namespace crl::lm
