#include "policies/neural/neural_policy.h"

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

// Rows of one role's decisions, gathered before they become one matrix.
struct RoleBuilder {
  std::vector<float> data;
  std::vector<int> offsets{0};
  std::vector<int> chosen;
  std::vector<int64_t> token;
  void add(const RowMatrix& rows, int choice, int64_t at) {
    data.insert(data.end(), rows.data(), rows.data() + rows.size());
    offsets.push_back(offsets.back() + static_cast<int>(rows.rows()));
    chosen.push_back(choice);
    token.push_back(at);
  }
  RoleDecisions build(int inputs) && {
    RoleDecisions out;
    out.batch.x = Eigen::Map<const RowMatrix>(data.data(), offsets.back(), inputs);
    out.batch.offsets = std::move(offsets);
    out.batch.chosen = std::move(chosen);
    out.token = std::move(token);
    return out;
  }
};

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
  if (config_.backend == learners::Backend::kCuda) {
    std::string why;
    if (!network_cuda_available(&why)) throw Error("policy \"neural\"", "backend", "cuda: " + why);
  }
  const NetworkShape shape{featurizer_.inputs(), config_.hidden};
  for (int r = 0; r < kHeads; ++r) {
    networks_[r] = Network(shape);
    actor_adam_[r] = Adam(0, shape.actor_size());
    critic_adam_[r] = Adam(shape.actor_size(), shape.size());
  }
  initialize(0);
}

void NeuralPolicy::initialize(uint64_t seed) {
  for (int r = 0; r < kHeads; ++r) {
    networks_[r].initialize(seed, static_cast<uint32_t>(r));
    actor_adam_[r].reset();
    critic_adam_[r].reset();
  }
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
  auto sample = [&](const Network& net) {
    net.score(rows, scores, value);
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
      const TokenId token = sample(networks_[kSummaryHead]);
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
    f.choose(context, sample(networks_[answer_head(context)]), chosen);
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
  std::array<RoleBuilder, kHeads> builders;
  TrainingDecisions out;
  std::vector<Candidate> candidates;
  RowMatrix rows;
  std::vector<TokenId> context_ids;
  int64_t token = 0;
  auto add = [&](int role, TokenId sampled, int64_t at, const std::string& where) {
    const int k = Featurizer::find(candidates, sampled);
    CRL_CHECK(k >= 0, where << ": the sampled token " << sampled << " is not a candidate of its decision");
    builders[role].add(rows, k, at);
  };
  for (const Trajectory& t : trajectories) {
    for (const Segment& seg : t.segments) {
      const size_t n = seg.response_ids.size();
      if (seg.kind == SegmentKind::kSummary) {
        const ParsedContext context = f.parse(seg.prompt_ids);
        Chosen chosen;
        for (size_t i = 0; i < n; ++i) {
          if (seg.actor_mask[i] || seg.critic_mask[i]) {
            f.summary_slot(context, static_cast<int>(i), chosen, candidates, rows);
            add(kSummaryHead, seg.response_ids[i], token + static_cast<int64_t>(i), t.rollout_id);
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
          const int first_group = static_cast<int>(builders[head].chosen.size());
          for (size_t j = i + 1; j < n && seg.actor_mask[j]; ++j) {
            f.answer_slot(context, static_cast<int>(j - i - 1), chosen, candidates, rows);
            add(head, seg.response_ids[j], token + static_cast<int64_t>(j), t.rollout_id);
            f.choose(context, seg.response_ids[j], chosen);
          }
          if (static_cast<int>(builders[head].chosen.size()) > first_group) {
            out.extra.push_back({token + static_cast<int64_t>(i), head, first_group});
          }
        }
      }
      token += static_cast<int64_t>(n);
    }
  }
  for (int r = 0; r < kHeads; ++r) out.heads[r] = std::move(builders[r]).build(f.inputs());
  return out;
}

void NeuralPolicy::train(const TrainStep& step) {
  CRL_CHECK(step.trajectories && step.batch && step.targets && step.learner, "train(): incomplete step");
  const TrainingDecisions d = decisions(*step.trajectories);
  learners::Batch batch = *step.batch;
  const int64_t tokens = batch.num_tokens();
  if (batch.old_logprobs.empty()) batch.old_logprobs.assign(tokens, 0.0);
  batch.new_logprobs = batch.old_logprobs;
  batch.new_values = batch.values;
  std::array<ForwardResult, kHeads> forward;
  const bool cuda = config_.backend == learners::Backend::kCuda;
  for (int r = 0; r < kHeads; ++r) {
    const RoleDecisions& role = d.heads[r];
    if (role.batch.groups() == 0) continue;
    forward[r] = cuda ? cuda_forward(networks_[r], role.batch) : networks_[r].forward(role.batch);
    for (int g = 0; g < role.batch.groups(); ++g) {
      CRL_CHECK(role.token[g] < tokens, "decision token outside the batch");
      batch.new_logprobs[role.token[g]] = forward[r].logp[g];
      batch.new_values[role.token[g]] = forward[r].values[g];
    }
  }
  for (const auto& e : d.extra) batch.new_values[e.token] = forward[e.head].values[e.group];

  // With the CUDA back-end the learner's losses and gradients run on the device too (same options).
  learners::Gradients gradients;
  if (cuda) {
    learners::Learner(step.learner->options(), learners::Backend::kCuda)
        .losses(batch, *step.targets, &gradients);
  } else {
    step.learner->losses(batch, *step.targets, &gradients);
  }
  const bool actor = step.kind == learners::UpdateKind::kActor;
  for (int r = 0; r < kHeads; ++r) {
    const RoleDecisions& role = d.heads[r];
    const int groups = role.batch.groups();
    if (groups == 0) continue;
    if (actor && r == kSummaryHead && config_.frozen_summary) continue;
    std::vector<float> dlogp(groups, 0.0f), dvalue(groups, 0.0f);
    for (int g = 0; g < groups; ++g) {
      if (actor) {
        dlogp[g] = static_cast<float>(gradients.logprobs[role.token[g]]);
      } else {
        dvalue[g] = static_cast<float>(gradients.values[role.token[g]]);
      }
    }
    if (!actor) {
      for (const auto& e : d.extra) {
        if (e.head == r) dvalue[e.group] += static_cast<float>(gradients.values[e.token]);
      }
    }
    const std::vector<float> grad = cuda ? cuda_backward(networks_[r], role.batch, forward[r], dlogp, dvalue)
                                         : networks_[r].backward(role.batch, forward[r], dlogp, dvalue);
    if (actor) {
      actor_adam_[r].step(networks_[r].parameters(), grad, step.actor_lr);
    } else {
      critic_adam_[r].step(networks_[r].parameters(), grad, step.critic_lr);
    }
  }
}

std::string NeuralPolicy::shape() const {
  return std::to_string(kHeads) + " heads, " + std::to_string(featurizer_.inputs()) + " inputs, " +
         std::to_string(config_.hidden) + " hidden";
}

void NeuralPolicy::do_save(proto::checkpoint::PolicyState& out) const {
  auto* n = out.mutable_neural();
  n->set_inputs(featurizer_.inputs());
  n->set_hidden(config_.hidden);
  auto save_adam = [](const Adam& adam, proto::checkpoint::AdamState* a) {
    a->set_steps(adam.steps());
    a->mutable_m()->Add(adam.first_moment().begin(), adam.first_moment().end());
    a->mutable_v()->Add(adam.second_moment().begin(), adam.second_moment().end());
  };
  for (int r = 0; r < kHeads; ++r) {
    auto* head = n->add_head();
    const std::vector<float>& p = networks_[r].parameters();
    head->mutable_parameters()->Add(p.begin(), p.end());
    save_adam(actor_adam_[r], head->mutable_actor_adam());
    save_adam(critic_adam_[r], head->mutable_critic_adam());
  }
}

void NeuralPolicy::do_load(const proto::checkpoint::PolicyState& state, const std::string& where) {
  const auto& n = state.neural();
  auto fail = [&](const std::string& field, const std::string& what) {
    throw Error(where, "policy.neural." + field, what);
  };
  if (!state.has_neural() || n.head_size() != kHeads) {
    fail("head", std::to_string(n.head_size()) + " heads, expected " + std::to_string(kHeads));
  }
  auto check = [&](int64_t got, int64_t expected, const std::string& field) {
    if (got != expected) fail(field, std::to_string(got) + " values, expected " + std::to_string(expected));
  };
  // Check everything first, so that a bad file leaves the policy as it was.
  for (int r = 0; r < kHeads; ++r) {
    const auto& h = n.head(r);
    const std::string at = "head[" + std::to_string(r) + "].";
    check(h.parameters_size(), networks_[r].shape().size(), at + "parameters");
    check(h.actor_adam().m_size(), actor_adam_[r].size(), at + "actor_adam.m");
    check(h.actor_adam().v_size(), actor_adam_[r].size(), at + "actor_adam.v");
    check(h.critic_adam().m_size(), critic_adam_[r].size(), at + "critic_adam.m");
    check(h.critic_adam().v_size(), critic_adam_[r].size(), at + "critic_adam.v");
  }
  auto load_adam = [](const proto::checkpoint::AdamState& a, Adam& adam) {
    adam.restore(a.steps(), std::vector<float>(a.m().begin(), a.m().end()),
                 std::vector<float>(a.v().begin(), a.v().end()));
  };
  for (int r = 0; r < kHeads; ++r) {
    const auto& h = n.head(r);
    networks_[r].parameters().assign(h.parameters().begin(), h.parameters().end());
    load_adam(h.actor_adam(), actor_adam_[r]);
    load_adam(h.critic_adam(), critic_adam_[r]);
  }
}

namespace {
const PolicyRegistrar kRegistrar(
    {"neural",
     "pointer MLP over records and memory slots with a zero-initialised value head (synthetic suite, "
     "symbolic view); trained by the scenario runner with the CompactionRL learner, Adam",
     {{"hidden", ParamType::kInt, "64", "hidden units of each role's network"},
      {"frozen_summary", ParamType::kBool, "false",
       "never update the summary network's actor (it stays uniform over its candidates: the control arm)"},
      {"backend", ParamType::kString, "cpu", "cpu | cuda: where training runs forward and backward"},
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
