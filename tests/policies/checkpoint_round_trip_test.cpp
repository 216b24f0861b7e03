// Checkpoints of every trainable policy (policies/trainable.h): a policy saved after some training and loaded
// into a fresh one (through the checkpoint file format) holds the same state, takes the same next actions and
// makes the same next updates, bit for bit; a state of another type or shape is refused with both named.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "engine/error.h"
#include "engine/runner.h"
#include "engine/sha256.h"
#include "envs/registry.h"
#include "learners/batch.h"
#include "learners/learner.h"
#include "learners/schedule.h"
#include "policies/tabular/tabular_policy.h"
#include "policies/trainable.h"
#include "scenarios/checkpoint.h"
#include "scenarios/runner.h"

namespace crl {
namespace {

using proto::checkpoint::PolicyState;
using scenarios::EpisodeSetup;

// A policy type with the environment it is made for (a fresh object each time).
struct Case {
  std::string name;  // for messages
  std::string policy;
  std::map<std::string, std::string> policy_params;
  std::string env;
  std::map<std::string, std::string> env_params;
  Budget budget;
  double actor_lr = 0.5, critic_lr = 0.2;

  EpisodeSetup setup() const {
    EpisodeSetup s;
    s.env = env;
    s.params = env_params;
    const auto prototype = make_env(env, env_params);
    s.codec = make_codec("symbolic", prototype->spec());
    s.budget = budget;
    return s;
  }
};

Budget budget(int64_t capacity, int64_t reserve, int64_t per_turn, int64_t summary, int compactions) {
  Budget b;
  b.capacity = capacity;
  b.reserve = reserve;
  b.tail_k = 2;
  b.per_turn_cap = per_turn;
  b.summary_cap = summary;
  b.max_compactions = compactions;
  return b;
}

std::vector<Case> cases() {
  return {
      {"tabular",
       "tabular",
       {},
       "memory_chain",
       {{"length", "8"}, {"reset_points", "3"}},
       budget(256, 16, 4, 4, 1),
       0.5,
       0.2},
      {"neural",
       "neural",
       {{"hidden", "16"}},
       "synthetic",
       {{"view", "symbolic"}, {"split", "train"}},
       budget(64, 16, 4, 6, 8),
       0.02,
       0.02},
  };
}

// A policy of the case with its environment kept alive (the policy may point into its spec).
struct Made {
  EpisodeSetup setup;
  std::unique_ptr<Env> prototype;
  std::unique_ptr<Policy> policy;
  Trainable* trainable = nullptr;
};

Made make(const Case& c) {
  Made m;
  m.setup = c.setup();
  m.prototype = make_env(c.env, c.env_params);
  m.policy = make_policy(c.policy, c.policy_params, PolicyTarget{&m.prototype->spec(), m.setup.codec});
  m.trainable = dynamic_cast<Trainable*>(m.policy.get());
  return m;
}

// Trains `batches` batches of 16 episodes from episode `first`, as the scenario runner does (critic then
// actor on every batch).
void train(const Case& c, Made& m, int64_t first, int batches) {
  const learners::Learner learner(learners::LearnerOptions{}, learners::Backend::kCpu);
  learners::ScheduleOptions options;
  options.warmup_batches = 0;
  options.critic_per_actor = 1;
  const learners::Schedule schedule(options);
  for (int b = 0; b < batches; ++b) {
    const auto batch =
        scenarios::collect_episodes(m.setup, *m.policy, 7, "train-", first + 16 * b, 16, Runner(1));
    const learners::Batch flat = learners::make_batch(batch);
    const learners::Advantages targets = learner.advantages(flat);
    for (const auto kind : schedule.updates(b, flat)) {
      m.trainable->train(TrainStep{&batch, &flat, &targets, &learner, kind, c.actor_lr, c.critic_lr});
    }
  }
}

// The SHA-256 of the saved state (readable when two differ).
std::string state_bytes(const Trainable& t) {
  PolicyState state;
  t.save(state);
  std::string out;
  EXPECT_TRUE(state.SerializeToString(&out));
  return Sha256().update(out).hex_digest();
}

std::string trajectories_hash(const Made& m, uint64_t seed) {
  Sha256 all;
  for (const Trajectory& t : scenarios::collect_episodes(m.setup, *m.policy, seed, "eval-", 0, 24, Runner(2)))
    all.update(t.hash());
  return all.hex_digest();
}

TEST(CheckpointRoundTrip, EveryTrainablePolicyResumesBitForBit) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Made a = make(c);
    ASSERT_NE(a.trainable, nullptr);
    a.trainable->initialize(7);
    train(c, a, 0, 3);

    // Through the file format (hash, envelope), into a policy initialised with another seed.
    proto::checkpoint::Checkpoint ck;
    a.trainable->save(*ck.mutable_policy());
    const auto decoded = scenarios::decode_checkpoint(scenarios::encode_checkpoint(ck), "memory.ckpt");
    Made b = make(c);
    b.trainable->initialize(99);
    ASSERT_NE(state_bytes(*a.trainable), state_bytes(*b.trainable)) << "the test needs a different start";
    b.trainable->load(decoded.policy(), "memory.ckpt");
    EXPECT_EQ(state_bytes(*a.trainable), state_bytes(*b.trainable));

    // Identical next actions (sampled and greedy) ...
    EXPECT_EQ(trajectories_hash(a, 11), trajectories_hash(b, 11));
    a.trainable->set_greedy(true);
    b.trainable->set_greedy(true);
    EXPECT_EQ(trajectories_hash(a, 11), trajectories_hash(b, 11));
    a.trainable->set_greedy(false);
    b.trainable->set_greedy(false);
    // ... and identical next updates (the optimizer state came along: Adam's moments and step count).
    train(c, a, 48, 2);
    train(c, b, 48, 2);
    EXPECT_EQ(state_bytes(*a.trainable), state_bytes(*b.trainable));
    EXPECT_EQ(trajectories_hash(a, 12), trajectories_hash(b, 12));
  }
}

// reset_optimizer (Setup.fresh_optimizer) keeps what the policy does and forgets how it was moving: the
// same next actions, Adam's moments zero and its step count 0 in the saved state. Tabular (plain SGD) has
// nothing to forget: its state is unchanged.
TEST(CheckpointRoundTrip, AFreshOptimizerKeepsTheParameters) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Made a = make(c);
    a.trainable->initialize(7);
    train(c, a, 0, 3);
    const std::string before = state_bytes(*a.trainable);
    const std::string actions = trajectories_hash(a, 11);
    PolicyState trained;
    a.trainable->save(trained);
    a.trainable->reset_optimizer();
    EXPECT_EQ(trajectories_hash(a, 11), actions);
    PolicyState fresh;
    a.trainable->save(fresh);
    if (c.policy == "tabular") {
      EXPECT_EQ(state_bytes(*a.trainable), before);
      continue;
    }
    ASSERT_TRUE(fresh.has_neural());
    for (int h = 0; h < fresh.neural().head_size(); ++h) {
      const auto& was = trained.neural().head(h);
      const auto& now = fresh.neural().head(h);
      EXPECT_TRUE(std::equal(was.parameters().begin(), was.parameters().end(), now.parameters().begin()));
      for (const auto* adam : {&now.actor_adam(), &now.critic_adam()}) {
        EXPECT_EQ(adam->steps(), 0) << "head " << h;
        EXPECT_TRUE(std::all_of(adam->m().begin(), adam->m().end(), [](float x) { return x == 0.0f; }));
        EXPECT_TRUE(std::all_of(adam->v().begin(), adam->v().end(), [](float x) { return x == 0.0f; }));
      }
    }
    EXPECT_GT(trained.neural().head(0).actor_adam().steps(), 0) << "the test needs an optimizer that stepped";
  }
}

TEST(CheckpointRoundTrip, GreedyTakesTheMostProbableAction) {
  Case c = cases()[0];
  Made m = make(c);
  m.trainable->initialize(7);
  train(c, m, 0, 20);
  m.trainable->set_greedy(true);
  const auto& table = dynamic_cast<const TabularPolicy&>(*m.policy);
  int decisions = 0;
  for (const Trajectory& t : scenarios::collect_episodes(m.setup, *m.policy, 1, "eval-", 0, 16, Runner(1))) {
    for (const Segment& seg : t.segments) {
      for (size_t i = 0; i < seg.response_ids.size(); ++i) {
        if (!seg.actor_mask[i]) continue;
        const TabularCell cell = table.cell(seg, i);
        const std::vector<double> p = table.probabilities(cell.role, cell.memory);
        EXPECT_EQ(p[cell.action], *std::max_element(p.begin(), p.end()));
        ++decisions;
      }
    }
  }
  EXPECT_GT(decisions, 16);
}

std::string load_error(const Case& into, const PolicyState& state) {
  Made m = make(into);
  const std::string before = state_bytes(*m.trainable);
  try {
    m.trainable->load(state, "other.ckpt");
  } catch (const Error& e) {
    EXPECT_EQ(state_bytes(*m.trainable), before) << "a refused state must leave the policy unchanged";
    return e.what();
  }
  ADD_FAILURE() << "load accepted a foreign state";
  return "";
}

TEST(CheckpointRoundTrip, OtherTypesAndShapesAreRefusedWithBothNamed) {
  const std::vector<Case> all = cases();
  PolicyState tabular, neural;
  make(all[0]).trainable->save(tabular);
  make(all[1]).trainable->save(neural);

  // Another type.
  std::string message = load_error(all[1], tabular);
  EXPECT_NE(message.find("other.ckpt"), std::string::npos) << message;
  EXPECT_NE(message.find("\"tabular\" policy of shape \"arity 2"), std::string::npos) << message;
  EXPECT_NE(message.find("is \"neural\" of shape \"shared trunk, 4 heads"), std::string::npos) << message;

  // Another shape: hidden units.
  Case wider = all[1];
  wider.policy_params["hidden"] = "32";
  message = load_error(wider, neural);
  EXPECT_NE(message.find("16 hidden"), std::string::npos) << message;
  EXPECT_NE(message.find("32 hidden"), std::string::npos) << message;

  // Another shape: the memory chain's fact arity.
  Case arity3 = all[0];
  arity3.env_params["fact_arity"] = "3";
  message = load_error(arity3, tabular);
  EXPECT_NE(message.find("arity 2"), std::string::npos) << message;
  EXPECT_NE(message.find("arity 3"), std::string::npos) << message;

  // Right type and shape, inconsistent contents (a hand-made file): the field is named.
  PolicyState cut = neural;
  cut.mutable_neural()->mutable_head(1)->mutable_parameters()->RemoveLast();  // the frozen copy
  message = load_error(all[1], cut);
  EXPECT_NE(message.find("policy.neural.head[1].parameters"), std::string::npos) << message;
  PolicyState short_table = tabular;
  short_table.mutable_tabular()->mutable_summarize_values()->RemoveLast();
  message = load_error(all[0], short_table);
  EXPECT_NE(message.find("policy.tabular.summarize_values"), std::string::npos) << message;
}

}  // namespace
}  // namespace crl
