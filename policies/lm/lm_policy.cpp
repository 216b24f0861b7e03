#include "policies/lm/lm_policy.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "engine/error.h"
#include "engine/runner.h"
#include "engine/sha256.h"
#include "policies/lm/demonstrations.h"
#include "policies/lm/sft.h"

namespace crl::lm {

namespace {

const char* const kWhere = "policy \"lm\"";
// Enough slots for every live episode of a runner's groups; past it the cache starts over (a miss costs a
// prefill, never a different bit).
constexpr size_t kMaxCacheSlots = 192;

// SFT results shared by the policies of one process (see the header): key -> parameters after SFT, and the
// first and last step's loss.
struct SftMemo {
  std::vector<float> parameters;
  float first = 0.0f, last = 0.0f;
};
std::mutex& sft_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, SftMemo>& sft_memo() {
  static std::map<std::string, SftMemo> memo;
  return memo;
}

float value_of(const LmModel& model, const RowVector& hidden) {
  const int d = model.config().d_model;
  return hidden.dot(model.vector(model.layout().value_w(), d)) + model.parameters()[model.layout().value_b()];
}

// One segment of the batch: where its response tokens start in the batch, and its trajectory segment.
struct SegmentRef {
  int64_t begin = 0;
  const Segment* segment = nullptr;
};

using StatSums = learners::UpdateStatSums;

// What one segment's forward/backward contributes to a minibatch step, kept apart so that segments can run
// on several threads and still be added in batch order (the same bits as one thread).
struct SegmentPart {
  learners::LossResult loss;
  std::vector<float> actor_grad;  // actor update: the actor part of the segment's gradient
  std::vector<int64_t> tokens;    // actor update: batch indices of its effective actor tokens, in order
  std::vector<double> entropy;    // ... and each one's entropy
  std::vector<float> dvalue;      // critic update: dL/dvalue at each position with a nonzero one
  RowMatrix hidden;               // ... and the last hidden state there (a row per position)
};

}  // namespace

LmPolicy::LmPolicy(const PolicyTarget& target, LmPolicyConfig config)
    : config_(std::move(config)), codec_(target.codec), env_params_(target.env_params) {
  if (codec_ == nullptr || codec_->view_name() != "text" || codec_->tokenizer() == nullptr) {
    throw Error(kWhere, "view", "needs the text view (view: \"text\"): it reads and writes tokenizer ids");
  }
  config_.model.vocab = static_cast<int>(codec_->tokenizer()->vocab_size());
  try {
    config_.model.validate();
  } catch (const std::invalid_argument& e) {
    throw Error(kWhere, "d_model", e.what());
  }
  if (target.budget != nullptr) {
    has_budget_ = true;
    budget_ = *target.budget;
    if (config_.model.max_positions < budget_.capacity) {
      throw Error(kWhere, "max_positions",
                  "value " + std::to_string(config_.model.max_positions) +
                      " is below the budget's capacity " + std::to_string(budget_.capacity) +
                      ": every context of the episode must fit the model");
    }
  }
  if (!(config_.temperature >= 0.0f) || !std::isfinite(config_.temperature))
    throw Error(kWhere, "temperature", "must be finite and >= 0");
  if (!(config_.top_p > 0.0f && config_.top_p <= 1.0f)) throw Error(kWhere, "top_p", "must be in (0, 1]");
  if (config_.sft_steps < 0) throw Error(kWhere, "sft_steps", "must be >= 0");
  check_answer_windows(config_.sft_answer_window, config_.sft_answer_batch, codec_->reasoning().enabled(),
                       std::string(kWhere) + " (the setup's reasoning: true)", "sft_answer_window",
                       "sft_answer_batch");
  if (config_.sft_tasks < 1) throw Error(kWhere, "sft_tasks", "must be >= 1");
  if (config_.sft_batch < 1) throw Error(kWhere, "sft_batch", "must be >= 1");
  if (!(config_.sft_lr > 0.0)) throw Error(kWhere, "sft_lr", "must be > 0");
  if (config_.sft_warmup < 0) throw Error(kWhere, "sft_warmup", "must be >= 0");
  if (config_.sft_threads < 1 || config_.sft_threads > 2)
    throw Error(kWhere, "sft_threads", "must be 1 or 2");
  require_backend(config_.backend, kWhere, "backend");
  if (config_.sft_short_capacity < 0) throw Error(kWhere, "sft_short_capacity", "must be >= 0 (0: none)");
  for (const auto& [weight, field] : {std::pair{config_.sft_summary_weight, "sft_summary_weight"},
                                      std::pair{config_.sft_final_weight, "sft_final_weight"}}) {
    if (!(weight > 0.0f) || !std::isfinite(weight)) throw Error(kWhere, field, "must be finite and > 0");
  }
  {
    // The drills' guards now (a drill longer than the model, an alphabet size above the alphabet), not after
    // minutes of SFT rendering.
    const CopyDrillStage& d = config_.drills;
    if (d.steps < 0) throw Error(kWhere, "drill_steps", "must be >= 0 (0: none)");
    if (d.long_steps < 0) throw Error(kWhere, "drill_long_steps", "must be >= 0 (0: none)");
    if (d.batch < 1) throw Error(kWhere, "drill_batch", "must be >= 1");
    if (!(d.lr > 0.0)) throw Error(kWhere, "drill_lr", "must be > 0");
    if (d.warmup < 0) throw Error(kWhere, "drill_warmup", "must be >= 0");
    if (d.mix < 0) throw Error(kWhere, "drill_mix", "must be >= 0 (0: none)");
    config_.drills.drills.alphabet = drill_alphabet(*codec_->tokenizer(), config_.drill_alphabet);
    if (d.steps > 0 || d.long_steps > 0 || d.mix > 0) {
      CopyDrillOptions probe = d.drills;
      probe.examples = 1;
      copy_drill_examples(
          config_.model.vocab, config_.model.max_positions, probe,
          std::string(kWhere) + " drill_min/drill_max/drill_alphabet_size/drill_gap/drill_lookup");
    }
  }
  if (config_.sft_short_capacity > 0 && has_budget_) {
    // The guards now, not after minutes of rendering: names the parameter and what the budget needs.
    short_demonstration_budget(budget_, config_.sft_short_capacity, config_.sft_short_reserve,
                               std::string(kWhere) + " sft_short_capacity/sft_short_reserve");
  }
  const std::vector<TokenId> end = codec_->encode_action("");
  if (end.size() != 1) throw Error(kWhere, "view", "the chat template's end of turn is not one token");
  end_of_turn_ = end.front();
  model_ = LmModel(config_.model);
  frozen_ = LmModel(config_.model);
  optimizer_ = LmOptimizer(model_.layout());
  model_.initialize(0);
  frozen_.parameters() = model_.parameters();
}

void LmPolicy::clear_cache() const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  cache_.clear();
}

LmPolicy::CacheSlot LmPolicy::open(const CacheKey& key, const LmModel& model,
                                   const std::vector<int32_t>& prompt) const {
  CacheSlot slot;
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      const auto& seen = it->second.tokens;
      if (seen.size() <= prompt.size() && std::equal(seen.begin(), seen.end(), prompt.begin())) {
        slot = std::move(it->second);
      }
      cache_.erase(it);
    }
  }
  if (slot.cache == nullptr) slot.cache = std::make_unique<KvCache>(model.config());
  // The cache's last logits are those of the prompt's last token once it has seen the whole prompt.
  for (size_t i = slot.tokens.size(); i < prompt.size(); ++i) slot.cache->advance(model, prompt[i]);
  slot.tokens = prompt;
  return slot;
}

void LmPolicy::keep(const CacheKey& key, CacheSlot slot) const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kMaxCacheSlots) cache_.clear();
  cache_[key] = std::move(slot);
}

Decision LmPolicy::decide(const Request& request) const {
  Decision d;
  std::vector<int32_t> prompt;
  request.prompt.copy_to(prompt);
  const int max_positions = config_.model.max_positions;
  if (prompt.empty() || static_cast<int>(prompt.size()) >= max_positions) {
    d.failed = true;
    d.finish_reason = "abort";
    d.error = std::string(kWhere) + ": a prompt of " + std::to_string(prompt.size()) +
              " tokens does not fit max_positions " + std::to_string(max_positions);
    return d;
  }
  const bool frozen = request.role == Role::kSummarize && config_.frozen_summary;
  const LmModel& actor = frozen ? frozen_ : model_;
  const CacheKey live_key{request.stream.seed, request.stream.task, request.stream.sample, 0};
  const CacheKey frozen_key{request.stream.seed, request.stream.task, request.stream.sample, 1};
  CacheSlot a = open(frozen ? frozen_key : live_key, actor, prompt);
  CacheSlot v;  // the live model's cache when the actor is the frozen copy (values only)
  if (frozen) v = open(live_key, model_, prompt);
  SamplingParams params;
  params.temperature = greedy_ ? 0.0f : config_.temperature;
  params.top_p = config_.top_p;
  Rng rng(request.stream);
  const int64_t limit = std::min<int64_t>(request.max_new_tokens, max_positions - prompt.size());
  d.finish_reason = "length";
  for (int64_t k = 0; k < limit; ++k) {
    const RowVector& logits = a.cache->logits();
    const int32_t token = pick_token(logits, params, rng);
    d.tokens.push_back(token);
    d.logprobs.push_back(logits[token] - log_sum_exp(logits));
    d.values.push_back(value_of(model_, frozen ? v.cache->hidden() : a.cache->hidden()));
    // Fed at once (also the last token: the next prompt starts with it), while the context has room.
    if (a.cache->length() < max_positions) {
      a.cache->advance(actor, token);
      a.tokens.push_back(token);
      if (frozen) {
        v.cache->advance(model_, token);
        v.tokens.push_back(token);
      }
    }
    if (token == end_of_turn_) {
      d.finish_reason = "stop";
      break;
    }
  }
  keep(frozen ? frozen_key : live_key, std::move(a));
  if (frozen) keep(live_key, std::move(v));
  return d;
}

void LmPolicy::act(std::span<const Request* const> requests, std::span<Decision> decisions) const {
  CRL_CHECK(requests.size() == decisions.size(),
            "act(): " << requests.size() << " requests, " << decisions.size() << " decisions");
  for (size_t i = 0; i < requests.size(); ++i) decisions[i] = decide(*requests[i]);
}

void LmPolicy::initialize(uint64_t seed) {
  seed_ = seed;
  model_.initialize(seed);
  optimizer_ = LmOptimizer(model_.layout());
  sft_first_ = sft_last_ = std::numeric_limits<float>::quiet_NaN();
  if (config_.sft_steps > 0 || config_.drills.steps > 0 || config_.drills.long_steps > 0)
    build_base_model(seed);
  frozen_.parameters() = model_.parameters();
  clear_cache();
}

void LmPolicy::build_base_model(uint64_t seed) {
  if (config_.sft_steps > 0 && !has_budget_) {
    throw Error(kWhere, "sft_steps",
                "SFT renders demonstrations under the episodes' budget, which this caller does not give "
                "(the scenario runner does)");
  }
  // The memo key: everything the SFT result depends on.
  std::ostringstream key;
  key << std::setprecision(17) << lm_shape(config_.model) << "|" << config_.model.value_grad_to_trunk << "|"
      << seed << "|" << config_.sft_steps << "|" << config_.sft_tasks << "|" << config_.sft_batch << "|"
      << config_.sft_lr << "|" << config_.sft_warmup << "|" << config_.sft_cosine << "|"
      << codec_->fingerprint() << "|" << budget_.capacity << "," << budget_.reserve << "," << budget_.tail_k
      << "," << budget_.per_turn_cap << "," << budget_.summary_cap << "," << budget_.max_compactions << "|"
      << config_.sft_short_capacity << "," << config_.sft_short_reserve;
  const CopyDrillStage& d = config_.drills;
  key << "|drills " << d.steps << "," << d.long_steps << "," << d.batch << "," << d.lr << "," << d.warmup
      << "," << d.drills.min_half << "," << d.drills.max_half << "," << d.drills.lead << ","
      << d.drills.examples << "," << d.mix << "," << d.drills.alphabet_size << "," << d.drills.lookup_fraction
      << "," << d.drills.max_gap << "|" << config_.sft_summary_weight << "," << config_.sft_final_weight
      << "|" << config_.sft_answer_window << "," << config_.sft_answer_batch << "|"
      << static_cast<int>(config_.backend);  // the back-ends agree to rounding, not in every bit
  for (const int32_t id : d.drills.alphabet) key << "," << id;
  for (const auto& [k, v] : env_params_) key << "|" << k << "=" << v;
  const std::string id = sha256_hex(key.str());
  {
    std::lock_guard<std::mutex> lock(sft_mutex());
    const auto it = sft_memo().find(id);
    if (it != sft_memo().end()) {
      model_.parameters() = it->second.parameters;
      sft_first_ = it->second.first;
      sft_last_ = it->second.last;
      return;
    }
  }
  // One Adam from the drills through SFT (as from a pretraining checkpoint); RL gets a fresh one.
  LmOptimizer base_optimizer(model_.layout());
  train_copy_drills(model_, base_optimizer, config_.drills, seed, config_.sft_threads,
                    std::string(kWhere) + " drill_*", {}, config_.backend);
  if (config_.sft_steps > 0) run_sft(seed, base_optimizer);
  std::lock_guard<std::mutex> lock(sft_mutex());
  sft_memo()[id] = SftMemo{model_.parameters(), sft_first_, sft_last_};
}

void LmPolicy::run_sft(uint64_t seed, LmOptimizer& optimizer) {
  const std::string where = std::string(kWhere) + " sft";
  std::vector<SftExample> examples =
      sft_examples(oracle_demonstrations(env_params_, codec_, budget_, 0, config_.sft_tasks, where),
                   config_.model.max_positions);
  if (config_.sft_short_capacity > 0) {
    const Budget short_budget = short_demonstration_budget(
        budget_, config_.sft_short_capacity, config_.sft_short_reserve, where + " sft_short_capacity");
    const std::vector<Trajectory> short_demos =
        oracle_demonstrations(env_params_, codec_, short_budget, 0, config_.sft_tasks, where);
    require_oracle_wins(short_demos, where + " sft_short_capacity/sft_short_reserve");
    const std::vector<SftExample> drills = sft_examples(short_demos, config_.model.max_positions);
    examples.insert(examples.end(), drills.begin(), drills.end());
  }
  weight_spans(examples, config_.sft_summary_weight, config_.sft_final_weight,
               std::string(kWhere) + " sft_summary_weight/sft_final_weight");
  const std::vector<SftExample> mixed =
      copy_drill_mix(config_.model.vocab, config_.model.max_positions, config_.drills, seed,
                     std::string(kWhere) + " drill_mix");
  examples.insert(examples.end(), mixed.begin(), mixed.end());
  std::vector<SftExample> windows =
      answer_window_ladder(examples, config_.sft_answer_window, config_.model.max_positions,
                           *codec_->tokenizer(), codec_->reasoning());
  if (config_.sft_answer_batch == 0) {
    examples.insert(examples.end(), windows.begin(), windows.end());
    windows.clear();
  }
  SftOptions options;
  options.extra = &windows;
  options.extra_batch = config_.sft_answer_batch;
  options.steps = config_.sft_steps;
  options.batch = config_.sft_batch;
  options.lr = config_.sft_lr;
  options.warmup = config_.sft_warmup;
  options.cosine = config_.sft_cosine;
  options.threads = config_.sft_threads;
  options.backend = config_.backend;
  options.seed = seed;
  const std::vector<float> losses = train_sft(model_, optimizer, examples, options);
  if (!losses.empty()) {
    sft_first_ = losses.front();
    sft_last_ = losses.back();
  }
}

void LmPolicy::train(const TrainStep& step) {
  CRL_CHECK(step.trajectories && step.batch && step.targets && step.learner, "train(): incomplete step");
  learners::LearnerOptions o = step.learner->options();
  if (config_.frozen_summary) o.summary_loss_masked = true;  // the frozen copy's tokens train nothing
  const learners::Learner learner(o, learners::Backend::kCpu);
  learners::Batch b = *step.batch;
  const int64_t tokens = b.num_tokens();
  if (b.old_logprobs.empty()) b.old_logprobs.assign(tokens, 0.0);
  b.new_logprobs = b.old_logprobs;
  b.new_values = b.values;
  const learners::LossNormalizer normalizer = learner.normalizer(b);  // the ONE global denominator
  const std::vector<learners::TokenRange> ranges = learners::rollout_token_ranges(b);
  const int rollouts = static_cast<int>(ranges.size());
  CRL_CHECK(rollouts == static_cast<int>(step.trajectories->size()), "batch and trajectories differ");
  // The segments of each rollout, in batch order.
  std::vector<std::vector<SegmentRef>> segments(static_cast<size_t>(rollouts));
  int64_t at = 0;
  for (int r = 0; r < rollouts; ++r) {
    for (const Segment& s : (*step.trajectories)[r].segments) {
      segments[r].push_back(SegmentRef{at, &s});
      at += static_cast<int64_t>(s.response_ids.size());
    }
  }
  CRL_CHECK(at == tokens, "trajectories hold " << at << " response tokens, the batch " << tokens);

  const bool actor = step.kind == learners::UpdateKind::kActor;
  const int epochs = o.ppo_epochs;
  const int minibatches = std::max(1, std::min(o.minibatches, rollouts));
  const uint64_t position = static_cast<uint64_t>(optimizer_.actor().steps() + optimizer_.critic().steps());
  const LmConfig& c = config_.model;
  const ParamLayout& layout = model_.layout();
  const int d = c.d_model;
  learners::Gradients gradients;
  gradients.resize(tokens);
  StatSums sums;
  std::vector<int> order(static_cast<size_t>(rollouts)), part;
  std::vector<float> grad(static_cast<size_t>(layout.size()));
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (int r = 0; r < rollouts; ++r) order[r] = r;
    if (minibatches > 1) {  // Fisher-Yates; one minibatch keeps index order (the full-batch update)
      Rng rng(StreamKey{seed_, position, static_cast<uint32_t>(epoch), StreamRole::kLearner, 17});
      for (int i = rollouts - 1; i > 0; --i) std::swap(order[i], order[rng.uniform_int(i + 1)]);
    }
    for (int m = 0; m < minibatches; ++m) {
      part.assign(order.begin() + static_cast<int64_t>(rollouts) * m / minibatches,
                  order.begin() + static_cast<int64_t>(rollouts) * (m + 1) / minibatches);
      std::sort(part.begin(), part.end());
      // The minibatch's segments that have a token this update trains, in batch order.
      std::vector<std::pair<int, const SegmentRef*>> work;
      for (int r : part) {
        for (const SegmentRef& ref : segments[r]) {
          const int64_t n = static_cast<int64_t>(ref.segment->response_ids.size());
          bool wanted = false;
          for (int64_t k = 0; k < n && !wanted; ++k) {
            wanted =
                actor ? learners::effective_actor(b, ref.begin + k, o) : b.critic_mask[ref.begin + k] != 0;
          }
          if (wanted) work.emplace_back(r, &ref);
        }
      }
      // Each segment's forward, losses and backward are independent (they write disjoint token ranges of
      // b and gradients), so they may run on the runner's threads; their results are added below in order.
      // In chunks whose kept gradients (one actor-sized vector per segment) stay under 64 MiB: the whole
      // minibatch at the small default sizes, a few segments per thread for a model of millions of
      // parameters (smaller chunks cost time: the threads wait for the longest segment at every chunk's
      // end). One thread: one segment at a time, as a plain loop.
      const int threads = step.runner != nullptr ? step.runner->threads() : 1;
      const size_t kept = std::max<size_t>(1, (size_t{64} << 20) / (sizeof(float) * layout.actor_size()));
      const size_t chunk = threads > 1 ? std::max(kept, static_cast<size_t>(threads)) : 1;
      std::vector<SegmentPart> parts;
      size_t first = 0;  // the chunk's first index in work
      const auto segment_part = [&](size_t i) {
        const size_t w = first + i;
        const auto [r, ref] = work[w];
        const Segment& s = *ref->segment;
        const int64_t n = static_cast<int64_t>(s.response_ids.size());
        const int64_t p = static_cast<int64_t>(s.prompt_ids.size());
        if (p == 0 || p + n > c.max_positions) {
          throw Error(kWhere, "max_positions",
                      "a segment of " + std::to_string(p + n) + " tokens (prompt " + std::to_string(p) +
                          ") of " + (*step.trajectories)[r].rollout_id + " does not fit max_positions " +
                          std::to_string(c.max_positions));
        }
        SegmentPart& out = parts[i];
        PackedBatch pb;
        std::vector<int32_t> seq(s.prompt_ids.begin(), s.prompt_ids.end());
        seq.insert(seq.end(), s.response_ids.begin(), s.response_ids.end());
        pb.add_sequence(seq);
        const ForwardResult f = forward_pass(config_.backend, model_, pb);
        // Response token k is predicted at position p + k - 1: its log-prob and value live there.
        for (int64_t k = 0; k < n; ++k) {
          b.new_logprobs[ref->begin + k] = f.logp[p + k - 1];
          b.new_values[ref->begin + k] = f.values[p + k - 1];
        }
        out.loss = learner.losses(b, *step.targets, normalizer, {ref->begin, ref->begin + n}, &gradients);
        std::vector<float> dlogp(pb.size(), 0.0f), dvalue(pb.size(), 0.0f);
        for (int64_t k = 0; k < n; ++k) {
          const int64_t t = ref->begin + k;
          dlogp[p + k - 1] = static_cast<float>(gradients.logprobs[t]);
          dvalue[p + k - 1] = static_cast<float>(gradients.values[t]);
          if (!actor || !learners::effective_actor(b, t, o)) continue;
          const auto row = f.logits.row(p + k - 1);
          const double lse = f.lse[p + k - 1];
          double h = 0.0;
          for (Eigen::Index j = 0; j < row.size(); ++j) {
            const double lp = row[j] - lse;
            h -= std::exp(lp) * lp;
          }
          out.tokens.push_back(t);
          out.entropy.push_back(h);
        }
        if (actor) {
          std::fill(dvalue.begin(), dvalue.end(), 0.0f);
          std::vector<float> g = backward_pass(config_.backend, model_, pb, f, dlogp, dvalue);
          g.resize(static_cast<size_t>(layout.actor_size()));
          out.actor_grad = std::move(g);
        } else {
          std::vector<int> at;
          for (int t = 0; t < pb.size(); ++t) {
            if (dvalue[t] != 0.0f) at.push_back(t);
          }
          out.hidden.resize(static_cast<Eigen::Index>(at.size()), d);
          for (size_t i = 0; i < at.size(); ++i) {
            out.dvalue.push_back(dvalue[at[i]]);
            out.hidden.row(static_cast<Eigen::Index>(i)) = f.hidden.row(at[i]);
          }
        }
      };
      std::fill(grad.begin(), grad.end(), 0.0f);
      for (first = 0; first < work.size(); first += chunk) {
        parts.assign(std::min(chunk, work.size() - first), SegmentPart{});
        if (parts.size() > 1) {
          step.runner->run(parts.size(), segment_part);
        } else {
          segment_part(0);
        }
        for (const SegmentPart& part_of : parts) {
          if (epoch == 0) {
            sums.policy += part_of.loss.policy_loss;
            sums.value += part_of.loss.value_loss;
          }
          for (size_t i = 0; i < part_of.tokens.size(); ++i) {
            const int64_t t = part_of.tokens[i];
            sums.add_token(b.new_logprobs[t] - b.old_logprobs[t], step.targets->advantages[t],
                           o.clip_epsilon);
            sums.add_entropy(part_of.entropy[i]);
          }
          if (actor) {
            for (int64_t i = 0; i < layout.actor_size(); ++i) grad[i] += part_of.actor_grad[i];
          } else {
            // The critic owns the value head: d/dvalue_w = sum dvalue h, d/dvalue_b = sum dvalue.
            for (size_t i = 0; i < part_of.dvalue.size(); ++i) {
              for (int j = 0; j < d; ++j) {
                grad[layout.value_w() + j] +=
                    part_of.dvalue[i] * part_of.hidden(static_cast<Eigen::Index>(i), j);
              }
              grad[layout.value_b()] += part_of.dvalue[i];
            }
          }
        }
      }
      ++sums.steps;
      if (actor) {
        optimizer_.step_actor(model_.parameters(), grad, step.actor_lr);
      } else {
        optimizer_.step_critic(model_.parameters(), grad, step.critic_lr);
      }
    }
  }
  clear_cache();
  if (step.stats != nullptr && actor) *step.stats = sums.means();
}

void LmPolicy::do_save(proto::checkpoint::PolicyState& out) const {
  save_lm_state(model_, optimizer_, codec_->tokenizer()->fingerprint(), out);
  if (config_.frozen_summary) {
    out.mutable_lm()->mutable_frozen_parameters()->Add(frozen_.parameters().begin(),
                                                       frozen_.parameters().end());
  }
}

void LmPolicy::do_load(const proto::checkpoint::PolicyState& state, const std::string& where) {
  LmCheckpoint loaded = load_lm_state(state, where);  // checks everything before anything changes
  const LmConfig& got = loaded.model.config();
  if (lm_shape(got) != lm_shape(config_.model) ||
      got.value_grad_to_trunk != config_.model.value_grad_to_trunk) {
    throw Error(where, "policy.lm.config",
                "sizes " + lm_shape(got) + ", expected " + lm_shape(config_.model));
  }
  if (loaded.tokenizer_fingerprint != codec_->tokenizer()->fingerprint()) {
    throw Error(where, "policy.lm.tokenizer_fingerprint",
                quote(loaded.tokenizer_fingerprint) + ", but this run's tokenizer is " +
                    quote(codec_->tokenizer()->fingerprint()));
  }
  // A state without a frozen copy (saved by a policy whose summaries learn) loaded into a frozen_summary
  // policy freezes the summarizer at the loaded parameters, as policies/neural does.
  const auto& frozen = state.lm().frozen_parameters();
  if (!frozen.empty() && frozen.size() != model_.size()) {
    throw Error(where, "policy.lm.frozen_parameters",
                std::to_string(frozen.size()) + " values, expected 0 or " + std::to_string(model_.size()));
  }
  for (float x : frozen) {
    if (!std::isfinite(x)) throw Error(where, "policy.lm.frozen_parameters", "a value is not finite");
  }
  model_.parameters() = loaded.model.parameters();
  optimizer_ = loaded.optimizer;
  if (config_.frozen_summary && !frozen.empty()) {
    frozen_.parameters().assign(frozen.begin(), frozen.end());
  } else {
    frozen_.parameters() = model_.parameters();
  }
  clear_cache();
}

namespace {

const PolicyRegistrar kLmPolicyRegistrar(
    {"lm",
     "a small decoder-only transformer with a value head that reads the text view and writes its actions "
     "and summaries as tokenizer ids (policies/lm); SFT on oracle demonstrations, then CompactionRL "
     "(token-level clipped PPO through the learner)",
     {{"d_model", ParamType::kInt, "64", "width"},
      {"heads", ParamType::kInt, "4", "attention heads (divide d_model)"},
      {"layers", ParamType::kInt, "2", "transformer blocks"},
      {"d_ff", ParamType::kInt, "256", "MLP width"},
      {"max_positions", ParamType::kInt, "1024",
       "learned positions: the longest context (>= the budget's capacity)"},
      {"value_grad_to_trunk", ParamType::kBool, "false",
       "false: the critic owns only the value head (the actor the trunk); true: the value loss reaches the "
       "trunk too (only the value head is stepped by the critic pass either way)"},
      {"temperature", ParamType::kDouble, "1", "sampling temperature (0: greedy); 1 keeps PPO on-policy"},
      {"top_p", ParamType::kDouble, "1", "nucleus sampling mass"},
      {"frozen_summary", ParamType::kBool, "false",
       "summaries come from a frozen copy taken after SFT (the control arm); the live model learns to act"},
      {"sft_steps", ParamType::kInt, "0", "SFT steps on oracle demonstrations before RL (0: none)"},
      {"sft_tasks", ParamType::kInt, "64", "SFT demonstrations: tasks 0 .. N-1 of the training split"},
      {"sft_batch", ParamType::kInt, "8", "segments per SFT step"},
      {"sft_lr", ParamType::kDouble, "0.003", "SFT Adam learning rate (RL starts with a fresh Adam)"},
      {"sft_warmup", ParamType::kInt, "0", "SFT: linear warm-up of the rate over this many steps"},
      {"sft_cosine", ParamType::kBool, "false",
       "SFT: cosine decay of the rate to sft_lr/10 at the last step"},
      {"sft_threads", ParamType::kInt, "1",
       "SFT: threads for each step's two halves (1 or 2; the same bits either way)"},
      {"sft_short_capacity", ParamType::kInt, "0",
       "SFT: also the same tasks' demonstrations under this capacity (compacting every few records: many "
       "short segments whose summaries and answers copy values; policies/lm/demonstrations.h); 0: none"},
      {"sft_short_reserve", ParamType::kInt, "0",
       "SFT: the reserve T_comp of those short demonstrations (max(per_turn_cap, summary_cap) <= it < "
       "sft_short_capacity)"},
      {"sft_answer_window", ParamType::kInt, "0",
       "SFT: with the setup's reasoning block, each final answer again on windows of N, 2N, ... tokens of "
       "context, trained only on the answer after the notes (policies/lm/sft.h answer_windows; 0: none)"},
      {"sft_answer_batch", ParamType::kInt, "0",
       "SFT: answer windows per step beside sft_batch segments (0: pooled with the segments)"},
      {"drill_steps", ParamType::kInt, "0",
       "copy drills before SFT (policies/lm/copy_drills.h: random runs repeated, loss on the repeat): Adam "
       "steps (0: none)"},
      {"drill_batch", ParamType::kInt, "16", "copy drills per step"},
      {"drill_lr", ParamType::kDouble, "0.001", "copy drills: Adam rate after the warm-up (constant)"},
      {"drill_warmup", ParamType::kInt, "200", "copy drills: linear warm-up steps"},
      {"drill_min", ParamType::kInt, "8", "copy drills: shortest run"},
      {"drill_max", ParamType::kInt, "32", "copy drills: longest run"},
      {"drill_alphabet_size", ParamType::kInt, "0",
       "copy drills: each drill draws from its own random subset of this many tokens, so that copying must "
       "match several previous tokens (0: the whole alphabet)"},
      {"drill_long_steps", ParamType::kInt, "0",
       "copy drills: after the drill_steps short repeat drills, this many steps of long drills (drill_gap, "
       "drill_lookup; the drill_mix takes their shape); 0: none"},
      {"drill_gap", ParamType::kInt, "0",
       "copy drills: the long drills' gaps, up to this many random tokens between a run and its repeat (and "
       "a lookup's table and questions): a summary copies across hundreds of tokens"},
      {"drill_lookup", ParamType::kDouble, "0",
       "copy drills: the fraction of the long drills (and of drill_mix) that are lookups (a table "
       "of kind key = value entries, then questions naming an entry: the copy matches three tokens, as a "
       "record's value after `FACT code=`); 0: none"},
      {"drill_answer_shape", ParamType::kBool, "false",
       "copy drills: lookup questions in the final answer's shape (`marker kind key [filler] answer` "
       "value: no separator before the value, as before `submit`'s code) instead of ending in the "
       "table's separator"},
      {"drill_mix", ParamType::kInt, "0",
       "copy drills added to the SFT set (keeps the copying the drills built; 0: none)"},
      {"sft_summary_weight", ParamType::kDouble, "1",
       "SFT: loss weight of the summaries' tokens (actions 1)"},
      {"sft_final_weight", ParamType::kDouble, "1",
       "SFT: loss weight of the final action's tokens (the answer; actions 1)"},
      {"drill_alphabet", ParamType::kString, "",
       "copy drills: draw from the distinct tokens of this text (\"0123456789\": the digits); empty: the "
       "whole vocabulary"},
      {"rope", ParamType::kBool, "false", "rotary positions (relative) instead of learned absolute ones"},
      {"backend", ParamType::kString, "cpu",
       "cpu | cuda: where the training passes run (copy drills, SFT, the PPO updates; policies/lm/"
       "backend.h); episodes sample on the CPU either way. cuda needs a device (refused at start)"}},
     [](const Params& params, const PolicyTarget& target) -> std::unique_ptr<Policy> {
       LmPolicyConfig config;
       config.model.d_model = static_cast<int>(params.get_int("d_model"));
       config.model.heads = static_cast<int>(params.get_int("heads"));
       config.model.layers = static_cast<int>(params.get_int("layers"));
       config.model.d_ff = static_cast<int>(params.get_int("d_ff"));
       config.model.max_positions = static_cast<int>(params.get_int("max_positions"));
       config.model.value_grad_to_trunk = params.get_bool("value_grad_to_trunk");
       config.temperature = static_cast<float>(params.get_double("temperature"));
       config.top_p = static_cast<float>(params.get_double("top_p"));
       config.frozen_summary = params.get_bool("frozen_summary");
       config.sft_steps = static_cast<int>(params.get_int("sft_steps"));
       config.sft_tasks = static_cast<int>(params.get_int("sft_tasks"));
       config.sft_batch = static_cast<int>(params.get_int("sft_batch"));
       config.sft_lr = params.get_double("sft_lr");
       config.sft_warmup = static_cast<int>(params.get_int("sft_warmup"));
       config.sft_cosine = params.get_bool("sft_cosine");
       config.sft_threads = static_cast<int>(params.get_int("sft_threads"));
       config.sft_short_capacity = params.get_int("sft_short_capacity");
       config.sft_short_reserve = params.get_int("sft_short_reserve");
       config.model.rope = params.get_bool("rope");
       config.backend = parse_backend(params.get_string("backend"), kWhere, "backend");
       config.drills.steps = static_cast<int>(params.get_int("drill_steps"));
       config.drills.long_steps = static_cast<int>(params.get_int("drill_long_steps"));
       config.drills.batch = static_cast<int>(params.get_int("drill_batch"));
       config.drills.lr = params.get_double("drill_lr");
       config.drills.warmup = static_cast<int>(params.get_int("drill_warmup"));
       config.drills.drills.min_half = static_cast<int>(params.get_int("drill_min"));
       config.drills.drills.max_half = static_cast<int>(params.get_int("drill_max"));
       config.drill_alphabet = params.get_string("drill_alphabet");
       config.drills.mix = static_cast<int>(params.get_int("drill_mix"));
       config.drills.drills.alphabet_size = static_cast<int>(params.get_int("drill_alphabet_size"));
       config.drills.drills.lookup_fraction = params.get_double("drill_lookup");
       config.drills.drills.lookup_answer_shape = params.get_bool("drill_answer_shape");
       config.drills.drills.max_gap = static_cast<int>(params.get_int("drill_gap"));
       config.sft_summary_weight = static_cast<float>(params.get_double("sft_summary_weight"));
       config.sft_final_weight = static_cast<float>(params.get_double("sft_final_weight"));
       config.sft_answer_window = static_cast<int>(params.get_int("sft_answer_window"));
       config.sft_answer_batch = static_cast<int>(params.get_int("sft_answer_batch"));
       return std::make_unique<LmPolicy>(target, config);
     }});

}  // namespace

}  // namespace crl::lm
