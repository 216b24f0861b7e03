// The neural policy: what it reads from a symbolic context, its network's gradients (finite differences),
// sampling that depends only on the request, the decisions rebuilt for training, and its updates.
#include "policies/neural/neural_policy.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/error.h"
#include "engine/runner.h"
#include "envs/registry.h"
#include "envs/synthetic/symbolic.h"
#include "learners/batch.h"
#include "learners/learner.h"
#include "policies/rollout.h"

namespace crl::neural {
namespace {

using envs::synthetic::Vocabulary;

struct Fixture {
  std::unique_ptr<Env> env = make_env("synthetic", {{"view", "symbolic"}, {"split", "train"}});
  std::shared_ptr<const Codec> codec = make_codec("symbolic", env->spec());
  PolicyTarget target{&env->spec(), codec};
};

Budget small_budget() {
  Budget b;
  b.capacity = 64;
  b.reserve = 16;
  b.tail_k = 2;
  b.per_turn_cap = 4;
  b.summary_cap = 6;
  b.max_compactions = 8;
  return b;
}

std::vector<Trajectory> rollouts(const Fixture& f, const Policy& policy, size_t count, uint64_t seed,
                                 int threads = 1, Budget budget = small_budget()) {
  RolloutSpec spec;
  spec.count = count;
  spec.group_size = 5;
  spec.make_episode = [&](size_t i) {
    EpisodeConfig config;
    config.budget = budget;
    config.seed = seed;
    config.group_index = static_cast<int64_t>(i);
    auto episode = std::make_unique<Episode>(
        make_env("synthetic", {{"view", "symbolic"}, {"split", "train"}}), f.codec, std::move(config));
    episode->start(Task{"train-" + std::to_string(i), i, "train"});
    return episode;
  };
  return run_rollouts(spec, policy, Runner(threads));
}

TEST(NeuralFeatures, ParsesRecordsTaskQuestionAndIgnoresUnseen) {
  Fixture f;
  const Featurizer z(f.env->spec().symbols);
  const Vocabulary& v = Vocabulary::get();
  std::vector<std::string> values;
  for (const std::string& name : v.names()) {
    if (name.starts_with("val:")) values.push_back(name);
  }
  const std::string code = values.at(0), other = values.at(1);
  const std::vector<TokenId> context = {v.system,
                                        v.resume,
                                        v.id("type:early_fact"),
                                        v.id("key:code"),
                                        v.rec(0),
                                        v.id("kind:FACT"),
                                        v.id("key:code"),
                                        v.id(code),
                                        v.rec(3),
                                        v.unseen,
                                        v.resume_end,
                                        v.turn,
                                        v.next,
                                        v.rec(5),
                                        v.id("kind:NOTE"),
                                        v.id("key:badge"),
                                        v.id(other),
                                        v.end,
                                        v.question,
                                        v.id("type:early_fact"),
                                        v.id("key:code")};
  const ParsedContext c = z.parse(context);
  EXPECT_TRUE(c.question);
  EXPECT_GE(c.type, 0);
  EXPECT_GE(c.target, 0);
  ASSERT_EQ(c.records.size(), 16u);
  EXPECT_TRUE(c.records[0].present);
  EXPECT_EQ(c.records[0].value, v.id(code));
  EXPECT_FALSE(c.records[3].present);  // [rec:04, UNSEEN] is nothing
  EXPECT_TRUE(c.records[5].present);
  EXPECT_EQ(z.answer_length(c), 1);

  std::vector<Candidate> candidates;
  RowMatrix rows;
  z.summary_slot(c, 0, Chosen{}, candidates, rows);
  ASSERT_EQ(candidates.size(), 4u);  // keep:01, keep:06, KEEP_TASK, STOP
  EXPECT_EQ(candidates[0].token, v.keep(0));
  EXPECT_EQ(candidates[1].token, v.keep(5));
  EXPECT_EQ(candidates[2].token, v.keep_task);
  EXPECT_EQ(candidates[3].token, v.stop);
  EXPECT_EQ(rows.rows(), 4);
  EXPECT_EQ(rows.cols(), z.inputs());
  Chosen chosen;
  z.choose(c, v.keep(0), chosen);
  z.choose(c, v.keep_task, chosen);
  z.summary_slot(c, 2, chosen, candidates, rows);
  ASSERT_EQ(candidates.size(), 2u);  // keep:06, STOP
  z.answer_slot(c, 0, Chosen{}, candidates, rows);
  ASSERT_EQ(candidates.size(), 1u);  // only the record of the question's key
  EXPECT_EQ(candidates[0].token, v.id(code));
}

TEST(NeuralFeatures, OtherVocabulariesAreRejected) {
  std::unique_ptr<Env> chain = make_env("memory_chain");
  const auto codec = make_codec("symbolic", chain->spec());
  EXPECT_THROW(NeuralPolicy(PolicyTarget{&chain->spec(), codec}, {}), Error);
  std::unique_ptr<Env> text = make_env("synthetic", {{"view", "text"}});
  EXPECT_THROW(NeuralPolicy(PolicyTarget{&text->spec(), make_codec("text", text->spec())}, {}), Error);
}

DecisionBatch random_batch(int inputs, uint64_t seed, int heads = 1) {
  Rng rng(StreamKey{seed, 0, 0, StreamRole::kLearner, 9});
  DecisionBatch b;
  const int groups = 7;
  for (int g = 0; g < groups; ++g) {
    const int n = 1 + static_cast<int>(rng.uniform_int(5));
    b.offsets.push_back(b.offsets.back() + n);
    b.chosen.push_back(static_cast<int>(rng.uniform_int(n)));
    b.head.push_back(g % heads);
  }
  b.x.resize(b.offsets.back(), inputs);
  for (Eigen::Index i = 0; i < b.x.size(); ++i)
    b.x.data()[i] = rng.uniform_float() < 0.3f ? rng.uniform_float() : 0.0f;
  return b;
}

// The actor's gradient (through W1, b1 and every head's w_k, b_k) against central differences of
// sum_g dlogp_g logp_g, with the groups spread over three heads; the value head's (wv, bv) against those of
// sum_g dvalue_g v_g. The value head reads the trunk without passing gradient into it (network.h), so W1
// and b1 get no gradient from the values.
TEST(NeuralNetwork, BackwardMatchesFiniteDifferences) {
  Network net(NetworkShape{11, 6, 3});
  net.initialize(3, 0);
  // Non-zero heads, so every parameter has a gradient.
  Rng rng(StreamKey{5, 0, 0, StreamRole::kLearner, 1});
  for (int64_t i = net.shape().b1(); i < net.shape().size(); ++i)
    net.parameters()[i] = rng.uniform_float() - 0.5f;
  const DecisionBatch b = random_batch(11, 1, 3);
  std::vector<float> dlogp(b.groups()), dvalue(b.groups()), zero(b.groups(), 0.0f);
  for (int g = 0; g < b.groups(); ++g) {
    dlogp[g] = rng.uniform_float() - 0.5f;
    dvalue[g] = rng.uniform_float() - 0.5f;
  }
  auto objective = [&](const Network& n, bool values) {
    const ForwardResult f = n.forward(b);
    double total = 0.0;
    for (int g = 0; g < b.groups(); ++g)
      total += values ? double(dvalue[g]) * f.values[g] : double(dlogp[g]) * f.logp[g];
    return total;
  };
  const std::vector<float> actor = net.backward(b, net.forward(b), dlogp, zero);
  const std::vector<float> critic = net.backward(b, net.forward(b), zero, dvalue);
  const std::vector<float> both = net.backward(b, net.forward(b), dlogp, dvalue);
  ASSERT_EQ(static_cast<int64_t>(actor.size()), net.shape().size());
  int checked = 0;
  for (int64_t i = 0; i < net.shape().size(); ++i) {
    const bool value_head = i >= net.shape().actor_size();
    Network plus = net, minus = net;
    const float h = 1e-2f;
    plus.parameters()[i] += h;
    minus.parameters()[i] -= h;
    const double numeric = (objective(plus, value_head) - objective(minus, value_head)) / (2.0 * h);
    const float analytic = value_head ? critic[i] : actor[i];
    EXPECT_NEAR(analytic, numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << "parameter " << i;
    EXPECT_EQ(value_head ? actor[i] : critic[i], 0.0f) << "parameter " << i;
    EXPECT_FLOAT_EQ(both[i], analytic) << "parameter " << i;
    checked += std::fabs(numeric) > 1e-4 ? 1 : 0;
  }
  EXPECT_GT(checked, net.shape().size() / 2);
}

TEST(NeuralPolicy, StartsUniformWithZeroValuesAndForcesNextUntilTheQuestion) {
  Fixture f;
  NeuralPolicy policy(f.target, {});
  policy.initialize(7);
  const std::vector<Trajectory> ts = rollouts(f, policy, 6, 7);
  int summaries = 0, answers = 0;
  for (const Trajectory& t : ts) {
    EXPECT_GT(t.compactions, 0) << t.rollout_id;
    for (const Segment& seg : t.segments) {
      for (size_t i = 0; i < seg.response_ids.size(); ++i) {
        if (!seg.actor_mask[i]) continue;
        EXPECT_EQ(seg.values[i], 0.0f);  // zero-initialised value head
        if (seg.kind == SegmentKind::kSummary) ++summaries;
        if (seg.kind == SegmentKind::kExecution && seg.response_ids[i] != policy.featurizer().submit)
          ++answers;
      }
      // Forced `next` actions are never trainable.
      for (size_t i = 0; i < seg.response_ids.size(); ++i) {
        if (seg.response_ids[i] == policy.featurizer().next) {
          EXPECT_EQ(seg.actor_mask[i], 0);
        }
      }
    }
  }
  EXPECT_GT(summaries, 6);
  EXPECT_GE(answers, 6);
}

TEST(NeuralPolicy, SameSeedSameTrajectoriesForAnyThreadCount) {
  Fixture f;
  NeuralPolicy policy(f.target, {});
  policy.initialize(11);
  const auto a = rollouts(f, policy, 12, 3, 1);
  const auto b = rollouts(f, policy, 12, 3, 3);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].hash(), b[i].hash());
  const auto c = rollouts(f, policy, 12, 4, 1);
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += a[i].hash() != c[i].hash() ? 1 : 0;
  EXPECT_GT(differ, 0);
}

// Random, non-zero heads so log-probs are not uniform and values are not zero.
void randomize_heads(Network& net, uint64_t seed) {
  Rng rng(StreamKey{seed, 0, 0, StreamRole::kLearner, 2});
  for (int64_t i = net.shape().w(0); i < net.shape().size(); ++i)
    net.parameters()[i] = rng.uniform_float() - 0.5f;
}

// The decisions rebuilt from trajectories give back the behaviour log-probs and values (same network).
TEST(NeuralPolicy, RebuiltDecisionsReproduceBehaviourLogProbs) {
  Fixture f;
  NeuralPolicy policy(f.target, {});
  policy.initialize(5);
  randomize_heads(policy.network(), 1);
  const auto ts = rollouts(f, policy, 8, 9);
  const learners::Batch batch = learners::make_batch(ts);
  const TrainingDecisions d = policy.decisions(ts);
  int64_t compared = 0;
  int heads[NeuralPolicy::kHeads] = {};
  const ForwardResult fw = policy.network().forward(d.batch);
  for (int g = 0; g < d.batch.groups(); ++g) {
    const int64_t t = d.token[g];
    EXPECT_NEAR(fw.logp[g], batch.old_logprobs[t], 1e-4);
    EXPECT_NEAR(fw.values[g], batch.values[t], 1e-4);
    ++heads[d.batch.head_of(g)];
    ++compared;
  }
  EXPECT_GT(heads[NeuralPolicy::kSummaryHead], 0);
  EXPECT_GT(heads[0] + heads[1] + heads[2], 0);
  // Every actor token is a decision, except `submit` (log-prob 0 by the grammar).
  int64_t actor = 0;
  for (int64_t t = 0; t < batch.num_tokens(); ++t) actor += batch.actor_mask[t];
  EXPECT_EQ(compared + static_cast<int64_t>(d.extra.size()), actor);
}

// The actor's parameters (trunk and every head) and the value head's, of the live network.
std::vector<float> actor_part(const Network& net) {
  const auto& p = net.parameters();
  return std::vector<float>(p.begin(), p.begin() + net.shape().actor_size());
}
std::vector<float> critic_part(const Network& net) {
  const auto& p = net.parameters();
  return std::vector<float>(p.begin() + net.shape().actor_size(), p.end());
}
// The summary head's own output parameters (w_k, b_k of the summary head).
std::vector<float> summary_head(const Network& net) {
  const NetworkShape& s = net.shape();
  const auto& p = net.parameters();
  std::vector<float> out(p.begin() + s.w(NeuralPolicy::kSummaryHead),
                         p.begin() + s.w(NeuralPolicy::kSummaryHead) + s.hidden);
  out.push_back(p[s.b(NeuralPolicy::kSummaryHead)]);
  return out;
}

learners::LearnerOptions options_lambda1() {
  learners::LearnerOptions o;
  o.lambda_mode = learners::LambdaMode::kFixed;
  o.lambda = 1.0;
  return o;
}

void train_once(NeuralPolicy& policy, const std::vector<Trajectory>& ts, const learners::Learner& learner,
                learners::UpdateKind kind) {
  const learners::Batch batch = learners::make_batch(ts);
  const learners::Advantages targets = learner.advantages(batch);
  policy.train(TrainStep{&ts, &batch, &targets, &learner, kind, 0.01, 0.01});
}

TEST(NeuralPolicy, ZeroRewardReplayLeavesEverythingAtZero) {
  Fixture f;
  NeuralPolicy policy(f.target, {});
  policy.initialize(2);
  std::vector<Trajectory> ts = rollouts(f, policy, 6, 2);
  for (Trajectory& t : ts) t.reward = 0.0;
  const learners::Learner learner(options_lambda1());
  const std::vector<float> before = policy.network().parameters();
  train_once(policy, ts, learner, learners::UpdateKind::kCritic);
  train_once(policy, ts, learner, learners::UpdateKind::kActor);
  EXPECT_EQ(policy.network().parameters(), before);
}

// The summary policy's log-probs of every summary decision of `ts` under `policy` (its summary network).
std::vector<float> summary_logprobs(const NeuralPolicy& policy, const std::vector<Trajectory>& ts) {
  const TrainingDecisions d = policy.decisions(ts);
  const ForwardResult fw = policy.summary_network().forward(d.batch);
  std::vector<float> out;
  for (int g = 0; g < d.batch.groups(); ++g) {
    if (d.batch.head_of(g) == NeuralPolicy::kSummaryHead) out.push_back(fw.logp[g]);
  }
  return out;
}

// A batch with a learning signal (every other episode rewarded).
std::vector<Trajectory> rewarded(const Fixture& f, const Policy& policy, size_t count, uint64_t seed) {
  std::vector<Trajectory> ts = rollouts(f, policy, count, seed);
  for (size_t i = 0; i < ts.size(); ++i) ts[i].reward = i % 2 == 0 ? 1.0 : 0.0;
  return ts;
}

// frozen_summary: summaries come from a frozen copy; the live network (trunk and answer heads) and its
// critic learn, and the summary behaviour is exactly the initial one.
TEST(NeuralPolicy, FrozenSummaryNeverChangesTheSummaryPolicy) {
  Fixture f;
  NeuralConfig frozen;
  frozen.frozen_summary = true;
  NeuralPolicy policy(f.target, frozen);
  policy.initialize(4);
  const std::vector<Trajectory> ts = rewarded(f, policy, 10, 4);
  const learners::Learner learner(options_lambda1());
  const std::vector<float> start = policy.network().parameters();
  const std::vector<float> behaviour = summary_logprobs(policy, ts);
  ASSERT_FALSE(behaviour.empty());
  for (int k = 0; k < 2; ++k) {
    train_once(policy, ts, learner, learners::UpdateKind::kCritic);
    train_once(policy, ts, learner, learners::UpdateKind::kActor);
  }
  EXPECT_EQ(policy.summary_network().parameters(), start);
  EXPECT_EQ(summary_logprobs(policy, ts), behaviour);
  EXPECT_NE(actor_part(policy.network()), actor_part(policy.summary_network()));    // the live actor learns
  EXPECT_NE(critic_part(policy.network()), critic_part(policy.summary_network()));  // its critic learns
}

// Item (a) of issue 15: one network acts and summarizes. With the summary loss masked ("w/o sum.") the
// summary head's own parameters get no gradient, yet the summary policy moves, through the shared trunk and
// readout the answers train, so it is no longer the frozen arm; and the joint arm's summary gradient changes
// what the shared weights (hence the answers) learn. With separate networks per role (the old code) the
// masked arm's summary policy stayed exactly uniform, i.e. equal to the frozen arm's, and the joint and
// masked arms' answer networks took the same steps.
TEST(NeuralPolicy, SharedTrunkSummaryMaskedMovesTheSummaryPolicyUnlikeFrozen) {
  Fixture f;
  NeuralPolicy masked(f.target, {}), joint(f.target, {});
  NeuralConfig frozen_config;
  frozen_config.frozen_summary = true;
  NeuralPolicy frozen(f.target, frozen_config);
  for (NeuralPolicy* p : {&masked, &joint, &frozen}) p->initialize(6);
  const std::vector<Trajectory> ts = rewarded(f, masked, 12, 6);
  learners::LearnerOptions o = options_lambda1();
  const learners::Learner joint_learner(o);
  o.summary_loss_masked = true;
  const learners::Learner masked_learner(o);
  const std::vector<float> uniform = summary_logprobs(masked, ts);
  const std::vector<float> head_start = summary_head(masked.network());
  for (int k = 0; k < 3; ++k) {
    train_once(masked, ts, masked_learner, learners::UpdateKind::kActor);
    train_once(frozen, ts, joint_learner, learners::UpdateKind::kActor);
    train_once(joint, ts, joint_learner, learners::UpdateKind::kActor);
  }
  // Masked: the summary head's own weights never move, its behaviour does.
  EXPECT_EQ(summary_head(masked.network()), head_start);
  const std::vector<float> moved = summary_logprobs(masked, ts);
  ASSERT_EQ(moved.size(), uniform.size());
  double masked_change = 0.0;
  for (size_t i = 0; i < moved.size(); ++i)
    masked_change = std::max(masked_change, double(std::fabs(moved[i] - uniform[i])));
  EXPECT_GT(masked_change, 1e-3);
  // Frozen: exactly the initial summary behaviour.
  EXPECT_EQ(summary_logprobs(frozen, ts), uniform);
  // Joint vs masked: the summary gradient reaches the shared trunk, so the answer heads' inputs differ.
  const auto& a = joint.network().parameters();
  const auto& b = masked.network().parameters();
  double trunk_change = 0.0;
  for (int64_t i = 0; i < joint.network().shape().trunk_size(); ++i)
    trunk_change = std::max(trunk_change, double(std::fabs(a[i] - b[i])));
  EXPECT_GT(trunk_change, 1e-4);
}

}  // namespace
}  // namespace crl::neural
