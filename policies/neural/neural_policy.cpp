#include "policies/neural/neural_policy.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"
#include "policies/neural/cuda/network_cuda.h"
#include "policies/neural/raw_features.h"

namespace crl::neural {

namespace {

double log_sum_exp(const std::vector<double>& scores) {
  double top = -INFINITY;
  for (double s : scores) top = std::max(top, s);
  double total = 0.0;
  for (double s : scores) total += std::exp(s - top);
  return top + std::log(total);
}

// Rows of every decision, gathered before they become one matrix.
struct DecisionBuilder {
  std::vector<float> data;
  std::vector<int> offsets{0};
  std::vector<int> chosen, head, rollout;
  std::vector<int64_t> token;
  void add(const RowMatrix& rows, int choice, int h, int64_t at, int r) {
    data.insert(data.end(), rows.data(), rows.data() + rows.size());
    offsets.push_back(offsets.back() + static_cast<int>(rows.rows()));
    chosen.push_back(choice);
    head.push_back(h);
    token.push_back(at);
    rollout.push_back(r);
  }
  int groups() const { return static_cast<int>(chosen.size()); }
};

// The training forward and backward on the policy's backend: `cuda` runs them on the device
// (cuda/network_cuda.h, the same math and gradient layout as Network), `cpu` on Network (Eigen).
ForwardResult forward_on(learners::Backend backend, const Network& net, const DecisionBatch& b) {
  return backend == learners::Backend::kCuda ? cuda_forward(net, b) : net.forward(b);
}
std::vector<float> backward_on(learners::Backend backend, const Network& net, const DecisionBatch& b,
                               const ForwardResult& f, std::span<const float> dlogp,
                               std::span<const float> dvalue) {
  return backend == learners::Backend::kCuda ? cuda_backward(net, b, f, dlogp, dvalue)
                                             : net.backward(b, f, dlogp, dvalue);
}

// Everything one PPO update shares across its minibatch steps.
struct UpdateContext {
  const TrainingDecisions& d;
  const learners::Advantages& targets;
  const learners::Learner& learner;  // the loss options (a frozen summarizer's tokens masked)
  learners::LossNormalizer normalizer;
  std::vector<learners::TokenRange> ranges;  // per rollout
  std::vector<int> group_begin;              // per rollout + 1: its decisions are [begin_r, begin_{r+1})
  std::vector<std::vector<int>> extras;      // per group: indices into d.extra
  learners::Batch batch;                     // new log-probs and values written per minibatch
  learners::Gradients gradients;

  UpdateContext(const TrainingDecisions& decisions, const learners::Batch& b, const learners::Advantages& a,
                const learners::Learner& l)
      : d(decisions), targets(a), learner(l), batch(b) {
    const int64_t tokens = batch.num_tokens();
    if (batch.old_logprobs.empty()) batch.old_logprobs.assign(tokens, 0.0);
    batch.new_logprobs = batch.old_logprobs;
    batch.new_values = batch.values;
    normalizer = learner.normalizer(batch);  // the ONE global denominator of the batch (spec 1.5)
    ranges = learners::rollout_token_ranges(batch);
    group_begin.assign(ranges.size() + 1, 0);
    for (int g = 0; g < d.batch.groups(); ++g) {
      CRL_CHECK(d.token[g] < tokens && d.rollout[g] < static_cast<int>(ranges.size()),
                "decision outside the batch");
      ++group_begin[d.rollout[g] + 1];
    }
    for (size_t r = 0; r < ranges.size(); ++r) group_begin[r + 1] += group_begin[r];
    extras.resize(d.batch.groups());
    for (size_t e = 0; e < d.extra.size(); ++e) extras[d.extra[e].group].push_back(static_cast<int>(e));
    gradients.resize(tokens);
  }
};

using StatSums = learners::UpdateStatSums;

// One minibatch (the decisions of `rollouts`, sorted) at the network's current parameters: forward, the
// learner's losses and gradients of the rollouts' tokens under the global denominator, the measurements,
// and backward. Returns the gradient of the pass's kind (actor: the log-prob terms; critic: the values).
std::vector<float> minibatch_gradient(const Network& net, UpdateContext& c, const std::vector<int>& rollouts,
                                      bool actor, StatSums* sums, bool first_epoch,
                                      learners::Backend backend) {
  const TrainingDecisions& d = c.d;
  const int inputs = static_cast<int>(d.batch.x.cols());
  DecisionBatch sub;
  std::vector<int> global;  // sub group -> decision index
  int rows = 0;
  for (int r : rollouts) rows += d.batch.offsets[c.group_begin[r + 1]] - d.batch.offsets[c.group_begin[r]];
  sub.x.resize(rows, inputs);
  for (int r : rollouts) {
    const int gb = c.group_begin[r], ge = c.group_begin[r + 1];
    if (ge == gb) continue;
    const int rb = d.batch.offsets[gb], re = d.batch.offsets[ge];
    sub.x.middleRows(sub.offsets.back(), re - rb) = d.batch.x.middleRows(rb, re - rb);
    for (int g = gb; g < ge; ++g) {
      sub.offsets.push_back(sub.offsets.back() + d.batch.offsets[g + 1] - d.batch.offsets[g]);
      sub.chosen.push_back(d.batch.chosen[g]);
      sub.head.push_back(d.batch.head_of(g));
      global.push_back(g);
    }
  }
  const int groups = sub.groups();
  ForwardResult f;
  if (groups > 0) f = forward_on(backend, net, sub);
  for (int j = 0; j < groups; ++j) {
    const int g = global[j];
    c.batch.new_logprobs[d.token[g]] = f.logp[j];
    c.batch.new_values[d.token[g]] = f.values[j];
    for (int e : c.extras[g]) c.batch.new_values[d.extra[e].token] = f.values[j];
  }
  learners::LossResult loss;
  for (int r : rollouts)
    loss += c.learner.losses(c.batch, c.targets, c.normalizer, c.ranges[r], &c.gradients);
  if (sums != nullptr) {
    const learners::LearnerOptions& o = c.learner.options();
    ++sums->steps;
    if (first_epoch) {
      sums->policy += loss.policy_loss;
      sums->value += loss.value_loss;
    }
    for (int r : rollouts) {
      for (int64_t t = c.ranges[r].begin; t < c.ranges[r].end; ++t) {
        if (!learners::effective_actor(c.batch, t, o)) continue;
        sums->add_token(c.batch.new_logprobs[t] - c.batch.old_logprobs[t], c.targets.advantages[t],
                        o.clip_epsilon);
      }
    }
    for (int j = 0; j < groups; ++j) {
      if (!learners::effective_actor(c.batch, d.token[global[j]], o)) continue;
      sums->add_entropy(f.entropy[j]);
    }
  }
  if (groups == 0) return std::vector<float>(static_cast<size_t>(net.shape().size()), 0.0f);
  std::vector<float> dlogp(groups, 0.0f), dvalue(groups, 0.0f);
  for (int j = 0; j < groups; ++j) {
    const int g = global[j];
    if (actor) {
      dlogp[j] = static_cast<float>(c.gradients.logprobs[d.token[g]]);
    } else {
      dvalue[j] = static_cast<float>(c.gradients.values[d.token[g]]);
      for (int e : c.extras[g]) dvalue[j] += static_cast<float>(c.gradients.values[d.extra[e].token]);
    }
  }
  return backward_on(backend, net, sub, f, dlogp, dvalue);
}

}  // namespace

NeuralPolicy::NeuralPolicy(const PolicyTarget& target, NeuralConfig config)
    : config_(config),
      featurizer_(make_featurizer(config.features,  // issue 15: default | raw (raw_features.h)
                                  target.env != nullptr ? target.env->symbols : std::vector<std::string>{})) {
  if (target.env == nullptr || target.codec == nullptr || target.codec->view_name() != "symbolic") {
    throw Error("policy \"neural\"", "view", "needs the symbolic view (view: \"symbolic\")");
  }
  if (config_.hidden < 1) {
    throw Error("policy \"neural\"", "hidden", "value " + std::to_string(config_.hidden) + " must be >= 1");
  }
  std::string why;  // backend: cuda trains on the device (cuda/network_cuda.h); refused when none is usable
  if (config_.backend == learners::Backend::kCuda && !network_cuda_available(&why)) {
    throw Error("policy \"neural\"", "backend", "cuda was asked for, but " + why + "; use backend: cpu");
  }
  const NetworkShape shape{featurizer_.inputs(), config_.hidden, kHeads};
  network_ = Network(shape);
  frozen_ = network_;
  actor_adam_ = Adam(0, shape.actor_size());
  critic_adam_ = Adam(shape.actor_size(), shape.size());
  imitation_adam_ = Adam(0, shape.actor_size());
  initialize(0);
}

void NeuralPolicy::reset_optimizer() {
  actor_adam_.reset();
  critic_adam_.reset();
  imitation_adam_.reset();
}

void NeuralPolicy::initialize(uint64_t seed) {
  seed_ = seed;
  network_.initialize(seed, 0);
  freeze_summary();
  actor_adam_.reset();
  critic_adam_.reset();
  imitation_adam_.reset();
}

// The warm start (trainable.h): cross-entropy of the demonstrator's answer slots only (summary decisions of
// the demonstrations, if any, get no gradient), one Adam step of its own optimizer over the actor part, so
// that RL then starts with fresh moments. A frozen summarizer is the warm-started network (the paper's frozen
// arm keeps the base model's summaries), so the frozen copy is retaken after each step.
double NeuralPolicy::imitate(const std::vector<Trajectory>& demonstrations, double lr) {
  const TrainingDecisions d = decisions(demonstrations);
  int answers = 0;
  for (int g = 0; g < d.batch.groups(); ++g) answers += d.batch.head_of(g) != kSummaryHead;
  if (answers == 0) return 0.0;
  const ForwardResult f = forward_on(config_.backend, network_, d.batch);
  std::vector<float> dlogp(static_cast<size_t>(d.batch.groups()), 0.0f);
  std::vector<float> dvalue(dlogp.size(), 0.0f);
  double loss = 0.0;
  for (int g = 0; g < d.batch.groups(); ++g) {
    if (d.batch.head_of(g) == kSummaryHead) continue;
    dlogp[g] = -1.0f / static_cast<float>(answers);
    loss -= f.logp[g];
  }
  const std::vector<float> grad = backward_on(config_.backend, network_, d.batch, f, dlogp, dvalue);
  imitation_adam_.step(network_.parameters(), grad, lr);
  if (config_.frozen_summary) freeze_summary();
  return loss / answers;
}

Decision NeuralPolicy::decide(const Request& request) const {
  const Featurizer& f = featurizer_;
  std::vector<TokenId> ids;
  request.prompt.copy_to(ids);
  const ParsedContext context = f.parse(ids);
  Rng rng(request.stream);
  Decision d;
  std::vector<Candidate> candidates;
  RowMatrix rows;
  std::vector<double> scores;
  float value = 0.0f;
  auto sample = [&](const Network& net, int head) {
    net.score(rows, head, scores, value);
    if (&net != &network_) {  // a frozen summarizer: the live critic still values the decision
      std::vector<double> unused;
      network_.score(rows, head, unused, value);
    }
    int k = 0;
    if (greedy_) {
      for (size_t j = 1; j < scores.size(); ++j) k = scores[j] > scores[k] ? static_cast<int>(j) : k;
    } else {
      k = rng.categorical(scores);
    }
    d.tokens.push_back(candidates[k].token);
    d.logprobs.push_back(static_cast<float>(scores[k] - log_sum_exp(scores)));
    d.values.push_back(value);
    return candidates[k].token;
  };
  Chosen chosen;
  // Issue 15: the `summary: rule | none` baselines summarize without the network (rule_summarizer.h).
  if (request.role == Role::kSummarize && config_.fixed_summary)
    return config_.fixed_summary->decide(context, request.max_new_tokens);
  if (request.role == Role::kSummarize) {
    for (int slot = 0; slot < request.max_new_tokens; ++slot) {
      f.summary_slot(context, slot, chosen, candidates, rows);
      const TokenId token = sample(summary_network(), kSummaryHead);
      if (token == f.stop) break;
      f.choose(context, token, chosen);
    }
    return d;
  }
  if (!context.question || request.max_new_tokens < 2) {
    d.tokens = {f.next};
    d.forced = true;
    return d;
  }
  const int slots = std::min<int64_t>(f.answer_length(context), request.max_new_tokens - 1);
  d.tokens = {f.submit};
  d.logprobs = {0.0f};
  d.values = {0.0f};
  for (int slot = 0; slot < slots; ++slot) {
    f.answer_slot(context, slot, chosen, candidates, rows);
    if (candidates.empty()) break;
    f.choose(context, sample(network_, answer_head(context)), chosen);
  }
  if (d.tokens.size() == 1) {  // nothing to answer from: a forced, rejected answer
    Decision forced;
    forced.tokens = {f.submit, f.stop};
    forced.forced = true;
    return forced;
  }
  d.values[0] = d.values[1];  // `submit` carries the first slot's value
  return d;
}

void NeuralPolicy::act(std::span<const Request* const> requests, std::span<Decision> decisions) const {
  CRL_CHECK(requests.size() == decisions.size(),
            "act(): " << requests.size() << " requests, " << decisions.size() << " decisions");
  for (size_t i = 0; i < requests.size(); ++i) decisions[i] = decide(*requests[i]);
}

TrainingDecisions NeuralPolicy::decisions(const std::vector<Trajectory>& trajectories) const {
  const Featurizer& f = featurizer_;
  DecisionBuilder builder;
  TrainingDecisions out;
  std::vector<Candidate> candidates;
  RowMatrix rows;
  std::vector<TokenId> context_ids;
  int64_t token = 0;
  for (size_t ti = 0; ti < trajectories.size(); ++ti) {
    const Trajectory& t = trajectories[ti];
    const int rollout = static_cast<int>(ti);
    auto add = [&](int head, TokenId sampled, int64_t at) {
      const int k = Featurizer::find(candidates, sampled);
      CRL_CHECK(k >= 0,
                t.rollout_id << ": the sampled token " << sampled << " is not a candidate of its decision");
      builder.add(rows, k, head, at, rollout);
    };
    for (const Segment& seg : t.segments) {
      const size_t n = seg.response_ids.size();
      if (seg.kind == SegmentKind::kSummary) {
        const ParsedContext context = f.parse(seg.prompt_ids);
        Chosen chosen;
        for (size_t i = 0; i < n; ++i) {
          if (seg.actor_mask[i] || seg.critic_mask[i]) {
            f.summary_slot(context, static_cast<int>(i), chosen, candidates, rows);
            add(kSummaryHead, seg.response_ids[i], token + static_cast<int64_t>(i));
          }
          f.choose(context, seg.response_ids[i], chosen);
        }
      } else {
        for (size_t i = 0; i < n; ++i) {
          if (seg.response_ids[i] != f.submit || !seg.actor_mask[i]) continue;
          context_ids.assign(seg.prompt_ids.begin(), seg.prompt_ids.end());
          context_ids.insert(context_ids.end(), seg.response_ids.begin(), seg.response_ids.begin() + i);
          const ParsedContext context = f.parse(context_ids);
          Chosen chosen;
          const int head = answer_head(context);
          const int first_group = builder.groups();
          for (size_t j = i + 1; j < n && seg.actor_mask[j]; ++j) {
            f.answer_slot(context, static_cast<int>(j - i - 1), chosen, candidates, rows);
            add(head, seg.response_ids[j], token + static_cast<int64_t>(j));
            f.choose(context, seg.response_ids[j], chosen);
          }
          if (builder.groups() > first_group)
            out.extra.push_back({token + static_cast<int64_t>(i), first_group});
        }
      }
      token += static_cast<int64_t>(n);
    }
  }
  out.batch.x = Eigen::Map<const RowMatrix>(builder.data.data(), builder.offsets.back(), f.inputs());
  out.batch.offsets = std::move(builder.offsets);
  out.batch.chosen = std::move(builder.chosen);
  out.batch.head = std::move(builder.head);
  out.token = std::move(builder.token);
  out.rollout = std::move(builder.rollout);
  return out;
}

learners::LearnerOptions NeuralPolicy::loss_options(const TrainStep& step) const {
  learners::LearnerOptions o = step.learner->options();
  if (config_.frozen_summary) o.summary_loss_masked = true;  // the frozen copy's tokens train nothing
  return o;
}

void NeuralPolicy::train(const TrainStep& step) {
  CRL_CHECK(step.trajectories && step.batch && step.targets && step.learner, "train(): incomplete step");
  const TrainingDecisions d = decisions(*step.trajectories);
  const learners::Learner learner(loss_options(step), learners::Backend::kCpu);
  UpdateContext c(d, *step.batch, *step.targets, learner);
  const bool actor = step.kind == learners::UpdateKind::kActor;
  const int rollouts = static_cast<int>(c.ranges.size());
  const int epochs = learner.options().ppo_epochs;
  const int minibatches = std::max(1, std::min(learner.options().minibatches, rollouts));
  // The shuffle's stream: the run's seed and how many optimizer steps came before (checkpointed with Adam),
  // so the same run shuffles the same way however it was interrupted.
  const uint64_t position = static_cast<uint64_t>(actor_adam_.steps() + critic_adam_.steps());
  StatSums sums;
  std::vector<int> order(static_cast<size_t>(rollouts));
  std::vector<int> part;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (int r = 0; r < rollouts; ++r) order[r] = r;
    if (minibatches > 1) {  // Fisher-Yates; one minibatch keeps index order (the full-batch update)
      Rng rng(StreamKey{seed_, position, static_cast<uint32_t>(epoch), StreamRole::kLearner, 17});
      for (int i = rollouts - 1; i > 0; --i) std::swap(order[i], order[rng.uniform_int(i + 1)]);
    }
    for (int m = 0; m < minibatches; ++m) {
      const int begin = static_cast<int>(static_cast<int64_t>(rollouts) * m / minibatches);
      const int end = static_cast<int>(static_cast<int64_t>(rollouts) * (m + 1) / minibatches);
      part.assign(order.begin() + begin, order.begin() + end);
      std::sort(part.begin(), part.end());
      const std::vector<float> grad =
          minibatch_gradient(network_, c, part, actor, &sums, epoch == 0, config_.backend);
      if (actor) {
        actor_adam_.step(network_.parameters(), grad, step.actor_lr);
      } else {
        critic_adam_.step(network_.parameters(), grad, step.critic_lr);
      }
    }
  }
  if (step.stats != nullptr) *step.stats = sums.means();
}

std::vector<float> NeuralPolicy::gradient(const TrainStep& step, const std::vector<int>& rollouts) const {
  const TrainingDecisions d = decisions(*step.trajectories);
  const learners::Learner learner(loss_options(step), learners::Backend::kCpu);
  UpdateContext c(d, *step.batch, *step.targets, learner);
  std::vector<int> sorted = rollouts;
  std::sort(sorted.begin(), sorted.end());
  return minibatch_gradient(network_, c, sorted, step.kind == learners::UpdateKind::kActor, nullptr, false,
                            config_.backend);
}

std::string NeuralPolicy::shape() const {
  return "shared trunk, " + std::to_string(kHeads) + " heads, " + std::to_string(featurizer_.inputs()) +
         " inputs, " + std::to_string(config_.hidden) + " hidden";
}

// Saved as two NeuralHead entries: [0] the network with both Adam states, [1] the frozen copy (parameters
// only), so that a resumed frozen arm keeps the summarizer it had.
void NeuralPolicy::do_save(proto::checkpoint::PolicyState& out) const {
  auto* n = out.mutable_neural();
  n->set_inputs(featurizer_.inputs());
  n->set_hidden(config_.hidden);
  auto save_adam = [](const Adam& adam, proto::checkpoint::AdamState* a) {
    a->set_steps(adam.steps());
    a->mutable_m()->Add(adam.first_moment().begin(), adam.first_moment().end());
    a->mutable_v()->Add(adam.second_moment().begin(), adam.second_moment().end());
  };
  auto* live = n->add_head();
  live->mutable_parameters()->Add(network_.parameters().begin(), network_.parameters().end());
  save_adam(actor_adam_, live->mutable_actor_adam());
  save_adam(critic_adam_, live->mutable_critic_adam());
  // The copy that writes this policy's summaries: the frozen one, or the live network when summaries learn.
  // So a policy pretrained with learned summaries and loaded into a frozen_summary policy (the pretrain
  // stage, scenarios/runner.cpp) is frozen at its trained summarizer, not at its initialisation (issue 15).
  auto* frozen = n->add_head();
  const Network& summaries = summary_network();
  frozen->mutable_parameters()->Add(summaries.parameters().begin(), summaries.parameters().end());
}

void NeuralPolicy::do_load(const proto::checkpoint::PolicyState& state, const std::string& where) {
  const auto& n = state.neural();
  auto fail = [&](const std::string& field, const std::string& what) {
    throw Error(where, "policy.neural." + field, what);
  };
  if (!state.has_neural() || n.head_size() != 2) {
    fail("head", std::to_string(n.head_size()) + " entries, expected 2 (the network and its frozen copy)");
  }
  auto check = [&](int64_t got, int64_t expected, const std::string& field) {
    if (got != expected) fail(field, std::to_string(got) + " values, expected " + std::to_string(expected));
  };
  // Check everything first, so that a bad file leaves the policy as it was.
  const auto& live = n.head(0);
  const int64_t size = network_.shape().size();
  check(live.parameters_size(), size, "head[0].parameters");
  check(live.actor_adam().m_size(), actor_adam_.size(), "head[0].actor_adam.m");
  check(live.actor_adam().v_size(), actor_adam_.size(), "head[0].actor_adam.v");
  check(live.critic_adam().m_size(), critic_adam_.size(), "head[0].critic_adam.m");
  check(live.critic_adam().v_size(), critic_adam_.size(), "head[0].critic_adam.v");
  check(n.head(1).parameters_size(), size, "head[1].parameters");
  auto load_adam = [](const proto::checkpoint::AdamState& a, Adam& adam) {
    adam.restore(a.steps(), std::vector<float>(a.m().begin(), a.m().end()),
                 std::vector<float>(a.v().begin(), a.v().end()));
  };
  network_.parameters().assign(live.parameters().begin(), live.parameters().end());
  frozen_.parameters().assign(n.head(1).parameters().begin(), n.head(1).parameters().end());
  load_adam(live.actor_adam(), actor_adam_);
  load_adam(live.critic_adam(), critic_adam_);
}

namespace {
const PolicyRegistrar kNeuralPolicyRegistrar(
    {"neural",
     "one pointer MLP (shared trunk, answer and summary heads, zero-initialised value head) over records and "
     "memory slots (synthetic suite, symbolic view); trained by the scenario runner with clipped PPO, Adam",
     {{"hidden", ParamType::kInt, "64", "hidden units of the shared trunk"},
      {"frozen_summary", ParamType::kBool, "false",
       "summaries come from a frozen copy of the network taken at initialisation (the control arm); the live "
       "network learns to answer"},
      {"backend", ParamType::kString, "cpu",
       "cpu | cuda: cuda runs training's forward and backward on a CUDA device (sampling stays on the CPU); "
       "refused when no device is usable"},
      {"features", ParamType::kString, "default",
       "default | raw: raw gives the network only record and question fields (raw_features.h)"},
      {"summary", ParamType::kString, "learned",
       "learned | frozen | rule | none: who writes summaries (rule_summarizer.h; frozen = frozen_summary)"}},
     [](const Params& params, const PolicyTarget& target) -> std::unique_ptr<Policy> {
       NeuralConfig config;
       config.hidden = static_cast<int>(params.get_int("hidden"));
       config.frozen_summary = params.get_bool("frozen_summary");
       config.backend = learners::parse_backend(params.get_string("backend"), "policy \"neural\"", "backend");
       // Issue 15: the feature view and the summary baselines; fixed summaries never train the summary actor.
       config.features = params.get_string("features");
       const SummaryMode summary = parse_summary_mode(params.get_string("summary"));
       if (summary != SummaryMode::kLearned) config.frozen_summary = true;
       if (target.env != nullptr) config.fixed_summary = make_fixed_summarizer(summary, target.env->symbols);
       return std::make_unique<NeuralPolicy>(target, config);
     }});
}  // namespace

}  // namespace crl::neural
