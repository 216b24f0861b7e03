// The tabular actor-critic: what it reads from a prompt, how it samples, and its SGD updates on hand cases.
#include "policies/tabular/tabular_policy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "engine/error.h"
#include "engine/runner.h"
#include "envs/memory_chain/memory_chain.h"
#include "envs/registry.h"
#include "learners/batch.h"
#include "learners/learner.h"
#include "policies/rollout.h"

namespace crl {
namespace {

struct Fixture {
  std::unique_ptr<Env> env = make_env("memory_chain");
  std::shared_ptr<const Codec> codec = make_codec("symbolic", env->spec());
  PolicyTarget target{&env->spec(), codec};
};

// A request whose prompt is `tokens` (split into two spans, so a FACT/RESUME marker and its value may sit in
// different spans), sampled from stream `ordinal`.
struct PromptRequest {
  TokenArena arena;
  Request request;
  PromptRequest(Role role, const std::vector<TokenId>& tokens, uint64_t ordinal = 0, size_t split = 2) {
    std::vector<Span> spans;
    const size_t cut = std::min(split, tokens.size());
    spans.push_back(arena.append(std::span<const TokenId>(tokens).first(cut), Provenance::kPrompt));
    spans.push_back(arena.append(std::span<const TokenId>(tokens).subspan(cut), Provenance::kEnvironment));
    request.role = role;
    request.prompt = PromptView(&arena, spans);
    request.max_new_tokens = 4;
    request.stream =
        StreamKey{7, 1, 0, role == Role::kExecute ? StreamRole::kExecute : StreamRole::kSummarize, ordinal};
  }
};

Decision act_one(const Policy& policy, const Request& request) {
  const Request* requests[] = {&request};
  Decision decisions[1];
  policy.act(requests, decisions);
  return decisions[0];
}

TEST(TabularPolicy, ContinueIsForcedUntilTheQuestion) {
  Fixture f;
  TabularPolicy policy(f.target, {});
  PromptRequest r(Role::kExecute, {kMcSystem, kMcFact, kMcValue0 + 1, kMcContinue, kMcNoise, kMcValue0});
  const Decision d = act_one(policy, r.request);
  EXPECT_EQ(d.tokens, std::vector<TokenId>{kMcContinue});
  EXPECT_TRUE(d.forced);
}

TEST(TabularPolicy, ZeroTablesSampleUniformlyWithLogProbsAndValues) {
  Fixture f;
  TabularPolicy policy(f.target, {});
  ASSERT_EQ(policy.arity(), 2);
  int answers[2] = {0, 0}, summaries[3] = {0, 0, 0};
  for (uint64_t ordinal = 0; ordinal < 3000; ++ordinal) {
    PromptRequest ask(Role::kExecute, {kMcSystem, kMcResume, kMcValue0, kMcContinue, kMcQuery}, ordinal);
    const Decision a = act_one(policy, ask.request);
    ASSERT_EQ(a.tokens.size(), 1u);
    ASSERT_FALSE(a.forced);
    EXPECT_NEAR(a.logprobs[0], std::log(0.5), 1e-6);
    EXPECT_EQ(a.values, std::vector<float>{0.0f});
    ++answers[a.tokens[0] - kMcValue0];
    PromptRequest sum(Role::kSummarize, {kMcSystem, kMcFact, kMcValue0 + 1, kMcSummarize}, ordinal);
    const Decision s = act_one(policy, sum.request);
    EXPECT_NEAR(s.logprobs[0], std::log(1.0 / 3.0), 1e-6);
    ++summaries[s.tokens[0] == kMcEmpty ? 2 : s.tokens[0] - kMcValue0];
  }
  for (int n : answers) EXPECT_NEAR(n, 1500, 120);
  for (int n : summaries) EXPECT_NEAR(n, 1000, 100);
}

TEST(TabularPolicy, SameStreamSameDecision) {
  Fixture f;
  TabularPolicy policy(f.target, {});
  PromptRequest a(Role::kSummarize, {kMcSystem, kMcFact, kMcValue0, kMcSummarize}, 42);
  PromptRequest b(Role::kSummarize, {kMcSystem, kMcFact, kMcValue0, kMcSummarize}, 42, 1);
  EXPECT_EQ(act_one(policy, a.request).tokens, act_one(policy, b.request).tokens);
}

TEST(TabularPolicy, ReadsTheMemorySymbolAfterTheNewestFactOrResume) {
  Fixture f;
  TabularPolicy policy(f.target, {});
  // Make the answer table deterministic per memory state: from V0 answer V1, from V1 answer V0, from EMPTY
  // V1.
  for (int k = 0; k < 40; ++k) {
    policy.actor_step({Role::kExecute, 0, 1}, 1.0, 0.5);
    policy.actor_step({Role::kExecute, 1, 0}, 1.0, 0.5);
    policy.actor_step({Role::kExecute, 2, 1}, 1.0, 0.5);
  }
  auto answer = [&](const std::vector<TokenId>& prompt, size_t split) {
    PromptRequest r(Role::kExecute, prompt, 3, split);
    return act_one(policy, r.request).tokens.at(0);
  };
  // The value after RESUME, also when the span boundary falls between RESUME and its value.
  EXPECT_EQ(answer({kMcSystem, kMcResume, kMcValue0, kMcContinue, kMcQuery}, 2), kMcValue0 + 1);
  EXPECT_EQ(answer({kMcSystem, kMcResume, kMcValue0 + 1, kMcContinue, kMcQuery}, 3), kMcValue0);
  // The newest marker wins over an older FACT.
  EXPECT_EQ(answer({kMcSystem, kMcFact, kMcValue0 + 1, kMcResume, kMcValue0, kMcQuery}, 2), kMcValue0 + 1);
  // RESUME EMPTY and no marker at all are the EMPTY memory.
  EXPECT_EQ(answer({kMcSystem, kMcResume, kMcEmpty, kMcQuery}, 2), kMcValue0 + 1);
  EXPECT_EQ(answer({kMcSystem, kMcNoise, kMcValue0, kMcQuery}, 2), kMcValue0 + 1);
}

TEST(TabularPolicy, ActorStepIsSoftmaxPolicyGradient) {
  Fixture f;
  TabularPolicy policy(f.target, {});
  // Zero logits, two answers: logits += 0.5 * 1 * (onehot(1) - [1/2, 1/2]) = [-0.25, 0.25].
  policy.actor_step({Role::kExecute, 0, 1}, 1.0, 0.5);
  const auto p = policy.probabilities(Role::kExecute, 0);
  EXPECT_NEAR(p[1], 1.0 / (1.0 + std::exp(-0.5)), 1e-12);
  EXPECT_NEAR(p[0] + p[1], 1.0, 1e-12);
  // Three summary actions, negative advantage on EMPTY: logits = -0.5 * 2 * ([0,0,1] - 1/3) = [1/3, 1/3,
  // -2/3].
  policy.actor_step({Role::kSummarize, 1, 2}, -2.0, 0.5);
  const auto q = policy.probabilities(Role::kSummarize, 1);
  const double z = 2 * std::exp(1.0 / 3) + std::exp(-2.0 / 3);
  EXPECT_NEAR(q[0], std::exp(1.0 / 3) / z, 1e-12);
  EXPECT_NEAR(q[2], std::exp(-2.0 / 3) / z, 1e-12);
  // Other rows are untouched.
  EXPECT_EQ(policy.probabilities(Role::kSummarize, 0), (std::vector<double>{1.0 / 3, 1.0 / 3, 1.0 / 3}));
  // A sampled log-prob matches the table.
  PromptRequest r(Role::kSummarize, {kMcSystem, kMcFact, kMcValue0 + 1, kMcSummarize});
  const Decision d = act_one(policy, r.request);
  const int action = d.tokens[0] == kMcEmpty ? 2 : d.tokens[0] - kMcValue0;
  EXPECT_NEAR(d.logprobs[0], std::log(q[action]), 1e-6);
}

TEST(TabularPolicy, CriticStepMovesTowardsTheTarget) {
  Fixture f;
  TabularPolicy policy(f.target, {});
  policy.critic_step({Role::kSummarize, 0, 0}, 1.0, 0.2);
  EXPECT_NEAR(policy.value(Role::kSummarize, 0), 0.2, 1e-12);
  policy.critic_step({Role::kSummarize, 0, 2}, 1.0, 0.2);
  EXPECT_NEAR(policy.value(Role::kSummarize, 0), 0.36, 1e-12);
  EXPECT_EQ(policy.value(Role::kExecute, 0), 0.0);
  PromptRequest r(Role::kSummarize, {kMcSystem, kMcFact, kMcValue0, kMcSummarize});
  EXPECT_NEAR(act_one(policy, r.request).values.at(0), 0.36f, 1e-6);
}

TEST(TabularPolicy, FrozenSummaryStaysUniformButTheAnswerLearns) {
  Fixture f;
  TabularPolicy policy(f.target, TabularConfig{true});
  policy.actor_step({Role::kSummarize, 0, 0}, 5.0, 0.5);
  policy.actor_step({Role::kExecute, 0, 0}, 5.0, 0.5);
  EXPECT_EQ(policy.probabilities(Role::kSummarize, 0), (std::vector<double>{1.0 / 3, 1.0 / 3, 1.0 / 3}));
  EXPECT_GT(policy.probabilities(Role::kExecute, 0)[0], 0.9);
  policy.critic_step({Role::kSummarize, 0, 0}, 1.0, 0.5);
  EXPECT_EQ(policy.value(Role::kSummarize, 0), 0.5);
}

TEST(TabularPolicy, CellsOfARecordedEpisodeNameTheMemoryAndTheChoice) {
  Fixture f;
  TabularPolicy policy(f.target, {});
  Budget budget;
  budget.capacity = 256;
  budget.reserve = 16;
  budget.per_turn_cap = 4;
  budget.summary_cap = 4;
  EpisodeConfig config;
  config.budget = budget;
  config.seed = 7;
  Episode episode(make_env("memory_chain"), f.codec, config);
  episode.start(Task{"cells", 0, ""});
  Episode* episodes[] = {&episode};
  drive(episodes, policy);
  const Trajectory t = episode.finish();
  ASSERT_EQ(t.segments.size(), 4u);
  // sum_0 sees the fact itself; each later decision sees what the previous summary wrote.
  const int fact = t.segments[0].prompt_ids[2] - kMcValue0;
  int memory = fact;
  for (size_t s = 0; s < 4; ++s) {
    const Segment& seg = t.segments[s];
    size_t position = 0;
    while (!seg.actor_mask[position]) ++position;
    const TabularCell c = policy.cell(seg, position);
    EXPECT_EQ(c.role, s < 3 ? Role::kSummarize : Role::kExecute);
    EXPECT_EQ(c.memory, memory) << "segment " << s;
    const TokenId token = seg.response_ids[position];
    EXPECT_EQ(policy.action_token(c.role, c.action), token);
    memory = token == kMcEmpty ? 2 : token - kMcValue0;
  }
  EXPECT_THROW(policy.cell(t.segments[3], 0), Error);  // a forced CONTINUE is no decision of the policy
}

// One episode of the 96-step chain with a reset every 8 steps (11 summaries), played by `policy`.
Trajectory eleven_summaries(const Fixture& f, const Policy& policy, uint64_t seed, const std::string& task) {
  EpisodeConfig config;
  config.budget = memory_chain_symbolic_budget();
  config.budget.tail_k = 2;
  config.budget.max_compactions = 11;
  config.seed = seed;
  Episode episode(make_env("memory_chain", {{"reset_period", "8"}}), f.codec, config);
  episode.start(Task{task, 0, ""});
  Episode* episodes[] = {&episode};
  drive(episodes, policy);
  return episode.finish();
}

// The memory each summary saw and the choice it made, in order.
std::vector<std::pair<int, int>> summary_choices(const TabularPolicy& policy, const Trajectory& t) {
  std::vector<std::pair<int, int>> out;
  for (const Segment& seg : t.segments) {
    if (seg.kind != SegmentKind::kSummary) continue;
    const TabularCell c = policy.cell(seg, 0);
    out.emplace_back(c.memory, c.action);
  }
  return out;
}

TEST(TabularPolicy, PerEpisodeExplorationRepeatsTheChoiceOfEachState) {
  // Per-visit draws give a state different choices within one episode; per-episode draws never do, and a
  // state's choice still follows pi (uniform here: all three actions appear over many episodes).
  Fixture f;
  TabularConfig per_episode;
  per_episode.exploration = TabularExploration::kPerEpisode;
  const TabularPolicy consistent(f.target, per_episode), fresh(f.target, {});
  int fresh_repeats_broken = 0;
  std::set<int> actions_of_v0;
  for (int e = 0; e < 40; ++e) {
    const std::string task = "t" + std::to_string(e);
    for (const auto* policy : {&consistent, &fresh}) {
      const Trajectory t = eleven_summaries(f, *policy, 7, task);
      const auto choices = summary_choices(*policy, t);
      ASSERT_EQ(choices.size(), 11u);
      std::map<int, int> choice_of;
      bool broken = false;
      for (const auto& [memory, action] : choices) {
        const auto [it, fresh_state] = choice_of.try_emplace(memory, action);
        broken |= !fresh_state && it->second != action;
      }
      if (policy == &consistent) {
        EXPECT_FALSE(broken) << task;
        if (choice_of.count(0)) actions_of_v0.insert(choice_of[0]);
      } else {
        fresh_repeats_broken += broken ? 1 : 0;
      }
    }
  }
  EXPECT_GT(fresh_repeats_broken, 20);
  EXPECT_EQ(actions_of_v0.size(), 3u);
  // Same stream, same memory: the same decision whatever the ordinal.
  PromptRequest a(Role::kSummarize, {kMcSystem, kMcResume, kMcValue0 + 1, kMcSummarize}, 3);
  PromptRequest b(Role::kSummarize, {kMcSystem, kMcResume, kMcValue0 + 1, kMcSummarize}, 9);
  EXPECT_EQ(act_one(consistent, a.request).tokens, act_one(consistent, b.request).tokens);
}

TEST(TabularPolicy, PerEpisodeTrainingCountsEachChoiceOncePerEpisode) {
  // An episode that visits a state 11 times made one choice there: one actor step with the mean advantage,
  // not 11 (per-visit training takes one step per token).
  Fixture f;
  TabularConfig per_episode;
  per_episode.exploration = TabularExploration::kPerEpisode;
  TabularPolicy consistent(f.target, per_episode), fresh(f.target, {}), reference(f.target, {});
  std::vector<Trajectory> batch;
  for (int e = 0; batch.empty(); ++e) {  // an episode whose summaries all see the same memory
    Trajectory t = eleven_summaries(f, consistent, 17, "same-" + std::to_string(e));
    const auto choices = summary_choices(consistent, t);
    if (choices.front().first == choices.front().second) batch.push_back(std::move(t));
  }
  const auto [memory, action] = summary_choices(consistent, batch[0]).front();
  const learners::Batch flat = learners::make_batch(batch);
  learners::Advantages targets;
  targets.advantages.assign(flat.actor_mask.size(), 0.5);
  targets.returns.assign(flat.actor_mask.size(), 1.0);
  const TrainStep step{&batch, &flat, &targets, nullptr, learners::UpdateKind::kActor, 0.5, 0.2};
  consistent.train(step);
  fresh.train(step);
  reference.actor_step({Role::kSummarize, memory, action}, 0.5, 0.5);
  for (int a = 0; a < 3; ++a) {
    EXPECT_NEAR(consistent.probabilities(Role::kSummarize, memory)[a],
                reference.probabilities(Role::kSummarize, memory)[a], 1e-12);
  }
  EXPECT_GT(fresh.probabilities(Role::kSummarize, memory)[action],
            consistent.probabilities(Role::kSummarize, memory)[action] + 0.1);
}

TEST(TabularPolicy, EntropyStepPullsTowardsUniform) {
  Fixture f;
  TabularConfig with_entropy;
  with_entropy.entropy = 0.1;
  TabularPolicy policy(f.target, with_entropy), none(f.target, {});
  for (TabularPolicy* p : {&policy, &none}) p->actor_step({Role::kSummarize, 0, 0}, 4.0, 0.5);
  const double before = policy.probabilities(Role::kSummarize, 0)[0];
  policy.entropy_step({Role::kSummarize, 0, 0}, 0.5);
  none.entropy_step({Role::kSummarize, 0, 0}, 0.5);
  const std::vector<double> p = policy.probabilities(Role::kSummarize, 0);
  EXPECT_LT(p[0], before);
  EXPECT_NEAR(p[0] + p[1] + p[2], 1.0, 1e-12);
  EXPECT_NEAR(p[1], p[2], 1e-12);
  EXPECT_EQ(none.probabilities(Role::kSummarize, 0)[0], before);  // beta 0: no change
  // At uniform the entropy gradient is zero.
  policy.entropy_step({Role::kSummarize, 1, 0}, 0.5);
  EXPECT_NEAR(policy.probabilities(Role::kSummarize, 1)[0], 1.0 / 3, 1e-15);
}

TEST(TabularPolicy, TablesFollowTheFactArity) {
  const auto env = make_env("memory_chain", {{"fact_arity", "3"}});
  const auto codec = make_codec("symbolic", env->spec());
  TabularPolicy policy(PolicyTarget{&env->spec(), codec}, {});
  EXPECT_EQ(policy.arity(), 3);
  EXPECT_EQ(policy.actions(Role::kExecute), 3);
  EXPECT_EQ(policy.actions(Role::kSummarize), 4);  // V0, V1, V2, EMPTY
  EXPECT_EQ(policy.memory_states(), 4);
  EXPECT_EQ(policy.action_token(Role::kSummarize, 3), kMcEmpty);
  EXPECT_EQ(policy.memory_name(2), "V2");
  EXPECT_EQ(policy.memory_name(3), "EMPTY");
  PromptRequest r(Role::kSummarize, {kMcSystem, kMcFact, kMcValue0 + 2, kMcSummarize});
  EXPECT_NEAR(act_one(policy, r.request).logprobs.at(0), std::log(0.25), 1e-6);
}

TEST(TabularPolicy, NeedsTheSymbolicMemoryChainVocabulary) {
  Fixture f;
  const auto text = make_codec("text", f.env->spec());
  EXPECT_THROW(TabularPolicy(PolicyTarget{&f.env->spec(), text}, {}), Error);
  EnvSpec other;
  other.name = "other";
  other.symbols = {"A", "B"};
  EXPECT_THROW(TabularPolicy(PolicyTarget{&other, make_symbolic_codec(other)}, {}), Error);
  EXPECT_THROW(make_policy("tabular", {{"frozen", "true"}}, f.target), Error);
  EXPECT_NO_THROW(make_policy("tabular", {{"frozen_summary", "true"}}, f.target));
  EXPECT_NO_THROW(make_policy("tabular", {{"exploration", "per_episode"}, {"entropy", "0.05"}}, f.target));
  auto message = [&](const std::map<std::string, std::string>& params) {
    try {
      make_policy("tabular", params, f.target);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(
      message({{"exploration", "sometimes"}}).find("\"sometimes\" is not one of per_visit, per_episode"),
      std::string::npos);
  EXPECT_NE(message({{"entropy", "-0.5"}}).find("entropy"), std::string::npos);
  EXPECT_NE(message({{"entropy", "nan"}}).find("entropy"), std::string::npos);
}

}  // namespace
}  // namespace crl
