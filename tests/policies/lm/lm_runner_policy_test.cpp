// The runner policy `lm` (policies/lm/lm_policy.h): text decisions with the model's own log-probs and
// values, the per-episode KV prefix cache changing no bit, episodes recorded with the LLM path's masks, the
// PPO update aligned with the positions that sampled each token (the ratio starts at 1), the critic and
// actor passes touching disjoint parameters, SFT in initialize() (memoised), checkpoints and typed errors.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/error.h"
#include "engine/proto_bytes.h"
#include "engine/runner.h"
#include "envs/registry.h"
#include "envs/synthetic/metrics.h"
#include "envs/synthetic/synthetic_env.h"
#include "learners/batch.h"
#include "learners/learner.h"
#include "lm_runner_fixture.h"
#include "policies/lm/cuda/lm_cuda.h"
#include "policies/lm/demonstrations.h"
#include "policies/lm/lm_policy.h"
#include "scenarios/runner.h"

namespace crl::lm {
namespace {

using Fixture = test::RunnerFixture;
using test::tokenizer;

TEST(LmRunnerPolicy, RegisteredForTheTextViewOnly) {
  Fixture f;
  const auto policy = make_policy("lm", {{"d_model", "16"}, {"heads", "2"}, {"layers", "1"}}, f.target());
  EXPECT_EQ(policy->name(), "lm");
  const auto symbolic_env = make_env("synthetic", {{"view", "symbolic"}});
  const PolicyTarget symbolic{&symbolic_env->spec(), make_codec("symbolic", symbolic_env->spec())};
  try {
    make_policy("lm", {}, symbolic);
    FAIL() << "the symbolic view was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "view");
  }
  // Every context of the budget must fit the learned positions.
  try {
    make_policy("lm", {{"max_positions", "512"}}, f.target());
    FAIL() << "max_positions below the capacity was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "max_positions");
    EXPECT_NE(std::string(e.what()).find("1024"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_policy("lm", {{"heads", "3"}}, f.target()), Error);
  EXPECT_THROW(make_policy("lm", {{"top_p", "0"}}, f.target()), Error);
  // The training back-end: a name it knows, and cuda only with a device (asked at start, not at the first
  // update). With a device, LmCuda.RunnerUpdatesMatchTheCpu compares the updates.
  try {
    make_policy("lm", {{"backend", "tpu"}}, f.target());
    FAIL() << "backend tpu was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "backend");
    EXPECT_NE(std::string(e.what()).find("expected cpu or cuda, got \"tpu\""), std::string::npos) << e.what();
  }
  std::string why;
  if (!lm_cuda_available(&why)) {
    try {
      make_policy("lm", {{"backend", "cuda"}}, f.target());
      FAIL() << "backend cuda was accepted without a device";
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), "backend");
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(make_policy("lm", {{"backend", "cpu"}}, f.target())->name(), "lm");
}

// Decisions: the sampled tokens with the model's own log-prob and value at the position that predicted each
// (what a forward pass over prompt + tokens gives), the same with a warm or a cold cache, and per thread
// count; the turn ends at <|im_end|> or the limit.
TEST(LmRunnerPolicy, DecisionsCarryTheForwardsLogProbsAndValuesAndTheCacheChangesNoBit) {
  Fixture f;
  // After a little SFT the model ends its turns with <|im_end|> (a fresh one almost never samples it), so
  // the cache must also hold the turn's last token (the next prompt starts with it).
  LmPolicyConfig config = Fixture::sft_config(30, 6);
  LmPolicy policy(f.target(), config);
  policy.initialize(11);  // the SFT test's key: memoised within the binary
  // A value head away from 0, so that values are checked too.
  auto& p = policy.model().parameters();
  const ParamLayout& l = policy.model().layout();
  for (int j = 0; j < 16; ++j) p[l.value_w() + j] = 0.1f * static_cast<float>(j % 5) - 0.2f;
  p[l.value_b()] = 0.3f;
  policy.clear_cache();
  const std::vector<Trajectory> warm = f.episodes(policy, 3);
  ASSERT_EQ(warm.size(), 3u);
  // The same episodes from a cold cache every call (a fresh policy per call is the same as clearing).
  LmPolicy cold(f.target(), config);
  cold.model().parameters() = policy.model().parameters();
  struct NoCache final : Policy {
    const LmPolicy* inner;
    std::string name() const override { return "nocache"; }
    void act(std::span<const Request* const> r, std::span<Decision> d) const override {
      inner->clear_cache();
      inner->act(r, d);
    }
  } nocache;
  nocache.inner = &cold;
  const std::vector<Trajectory> fresh = f.episodes(nocache, 3, 2);
  int summaries = 0;
  int64_t sampled = 0, stops = 0;
  for (size_t e = 0; e < warm.size(); ++e) {
    ASSERT_EQ(warm[e].segments.size(), fresh[e].segments.size());
    for (size_t s = 0; s < warm[e].segments.size(); ++s) {
      const Segment& a = warm[e].segments[s];
      const Segment& b = fresh[e].segments[s];
      EXPECT_EQ(a.response_ids, b.response_ids);
      EXPECT_EQ(a.logprobs, b.logprobs);
      EXPECT_EQ(a.values, b.values);
      summaries += a.kind == SegmentKind::kSummary;
      // Forward over the segment: every sampled token's log-prob and value at position p + k - 1.
      PackedBatch pb;
      std::vector<int32_t> seq(a.prompt_ids.begin(), a.prompt_ids.end());
      seq.insert(seq.end(), a.response_ids.begin(), a.response_ids.end());
      pb.add_sequence(seq);
      const ForwardResult fw = policy.model().forward(pb);
      const size_t P = a.prompt_ids.size();
      for (size_t k = 0; k < a.response_ids.size(); ++k) {
        const bool mine = a.response_provenance[k] == Provenance::kSampled;
        EXPECT_EQ(a.actor_mask[k], mine ? 1 : 0);
        EXPECT_EQ(a.critic_mask[k], mine ? 1 : 0);
        if (!mine) continue;
        ++sampled;
        stops += a.response_ids[k] == *tokenizer()->special_token("<|im_end|>");
        EXPECT_NEAR(a.logprobs[k], fw.logp[P + k - 1], 2e-4) << "segment " << s << " token " << k;
        EXPECT_NEAR(a.values[k], fw.values[P + k - 1], 2e-4) << "segment " << s << " token " << k;
      }
    }
  }
  EXPECT_GT(sampled, 20);
  EXPECT_GT(stops, 5) << "turns ended by <|im_end|>";
  EXPECT_GT(summaries, 0) << "C = 1024 compacts a text episode of the suite";
}

TEST(LmRunnerPolicy, PpoRatioStartsAtOneAndCriticAndActorTouchDisjointParameters) {
  Fixture f;
  LmPolicy policy(f.target(), Fixture::config());
  policy.initialize(5);
  std::vector<Trajectory> batch = f.episodes(policy, 2);
  batch[0].reward = 1.0;  // a signal for the advantages, whatever the untrained model did
  const learners::Batch flat = learners::make_batch(batch);
  const learners::Learner learner(learners::LearnerOptions{}, learners::Backend::kCpu);
  const learners::Advantages targets = learner.advantages(flat);
  const int64_t split = policy.model().layout().actor_size();
  auto changed = [&](const std::vector<float>& before, int64_t begin, int64_t end) {
    int64_t n = 0;
    for (int64_t i = begin; i < end; ++i) n += before[i] != policy.model().parameters()[i];
    return n;
  };
  std::vector<float> before = policy.model().parameters();
  policy.train(TrainStep{&batch, &flat, &targets, &learner, learners::UpdateKind::kCritic, 1e-3, 1e-2});
  EXPECT_EQ(changed(before, 0, split), 0);
  EXPECT_GT(changed(before, split, policy.model().size()), 0);
  before = policy.model().parameters();
  learners::UpdateStats stats;
  policy.train(
      TrainStep{&batch, &flat, &targets, &learner, learners::UpdateKind::kActor, 1e-3, 1e-2, &stats});
  EXPECT_GT(changed(before, 0, split), 0);
  EXPECT_EQ(changed(before, split, policy.model().size()), 0);
  // One epoch, one minibatch: every token is evaluated at the parameters that sampled it, so rho = 1 up to
  // the float difference between the cached sampler and the training forward.
  EXPECT_GT(stats.token_evals, 0);
  EXPECT_LT(stats.mean_abs_ratio, 1e-3);
  EXPECT_LT(std::fabs(stats.max_ratio - 1.0), 1e-3);
  EXPECT_GT(stats.entropy, 0.0);
}

// The update's segments may run on the scenario runner's threads (TrainStep.runner): the parameters, the
// optimizer state and the statistics are the same bits with 1 or 3 threads as without a runner.
TEST(LmRunnerPolicy, AnUpdateOnSeveralThreadsIsTheSameBitsAsOnOne) {
  Fixture f;
  LmPolicy reference(f.target(), Fixture::config());
  reference.initialize(5);
  std::vector<Trajectory> batch = f.episodes(reference, 3);
  batch[0].reward = 1.0;
  batch[2].reward = 1.0;
  const learners::Batch flat = learners::make_batch(batch);
  learners::LearnerOptions options;
  options.minibatches = 2;
  const learners::Learner learner(options, learners::Backend::kCpu);
  const learners::Advantages targets = learner.advantages(flat);
  auto train = [&](LmPolicy& policy, const Runner* runner, learners::UpdateStats& stats) {
    for (const auto kind : {learners::UpdateKind::kCritic, learners::UpdateKind::kActor}) {
      policy.train(TrainStep{&batch, &flat, &targets, &learner, kind, 1e-2, 1e-2, &stats, runner});
    }
  };
  learners::UpdateStats expected;
  train(reference, nullptr, expected);
  proto::checkpoint::PolicyState want;
  reference.save(want);
  for (const int threads : {1, 3}) {
    LmPolicy policy(f.target(), Fixture::config());
    policy.initialize(5);
    const Runner runner(threads);
    learners::UpdateStats stats;
    train(policy, &runner, stats);
    EXPECT_EQ(policy.model().parameters(), reference.model().parameters()) << threads << " threads";
    proto::checkpoint::PolicyState got;
    policy.save(got);
    EXPECT_EQ(deterministic_bytes(got), deterministic_bytes(want)) << threads << " threads: optimizer state";
    EXPECT_EQ(stats.token_evals, expected.token_evals);
    EXPECT_EQ(stats.approx_kl, expected.approx_kl);
    EXPECT_EQ(stats.entropy, expected.entropy);
    EXPECT_EQ(stats.max_ratio, expected.max_ratio);
  }
}

// A gradient step's worth of training changes the next decisions: the cache is cleared with the parameters.
TEST(LmRunnerPolicy, TrainingClearsTheCacheAndCheckpointsResumeBitForBit) {
  Fixture f;
  LmPolicyConfig config = Fixture::config();
  config.frozen_summary = true;
  LmPolicy policy(f.target(), config);
  policy.initialize(9);
  std::vector<Trajectory> batch = f.episodes(policy, 2);
  batch[1].reward = 1.0;
  const learners::Batch flat = learners::make_batch(batch);
  const learners::Learner learner(learners::LearnerOptions{}, learners::Backend::kCpu);
  const learners::Advantages targets = learner.advantages(flat);
  policy.train(TrainStep{&batch, &flat, &targets, &learner, learners::UpdateKind::kActor, 1e-2, 1e-2});
  // The frozen copy did not move; the live model did.
  EXPECT_NE(policy.model().parameters(), policy.summary_model().parameters());
  proto::checkpoint::PolicyState state;
  policy.save(state);
  EXPECT_EQ(state.type(), "lm");
  EXPECT_EQ(state.lm().frozen_parameters_size(), policy.model().size());
  LmPolicy restored(f.target(), config);
  restored.initialize(1);
  restored.load(state, "ckpt");
  EXPECT_EQ(restored.model().parameters(), policy.model().parameters());
  EXPECT_EQ(restored.summary_model().parameters(), policy.summary_model().parameters());
  const auto a = f.episodes(policy, 2), b = f.episodes(restored, 2);
  for (size_t e = 0; e < a.size(); ++e) {
    ASSERT_EQ(a[e].segments.size(), b[e].segments.size());
    for (size_t s = 0; s < a[e].segments.size(); ++s) {
      EXPECT_EQ(a[e].segments[s].response_ids, b[e].segments[s].response_ids);
      EXPECT_EQ(a[e].segments[s].logprobs, b[e].segments[s].logprobs);
    }
  }
  // Damage is named, and leaves the policy as it was.
  proto::checkpoint::PolicyState bad = state;
  bad.mutable_lm()->mutable_frozen_parameters()->Add(1.0f);
  try {
    restored.load(bad, "bad.ckpt");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "policy.lm.frozen_parameters");
  }
  EXPECT_EQ(restored.model().parameters(), policy.model().parameters());
  bad = state;
  bad.mutable_lm()->set_tokenizer_fingerprint("other");
  EXPECT_THROW(restored.load(bad, "bad.ckpt"), Error);
}

// SFT in initialize(): the loss falls, the result is memoised (a second policy with the same key gets the
// same parameters), and without the runner's budget it is refused with the reason.
TEST(LmRunnerPolicy, SftBeforeRlLowersTheLossAndIsAPureFunctionOfItsKey) {
  Fixture f;
  LmPolicyConfig config = Fixture::sft_config(30, 6);
  LmPolicy a(f.target(), config);
  a.initialize(11);
  EXPECT_LT(a.sft_last_loss(), a.sft_first_loss());
  LmPolicy b(f.target(), config);
  b.initialize(11);
  EXPECT_EQ(a.model().parameters(), b.model().parameters());
  LmPolicy fresh(f.target(), Fixture::config());
  fresh.initialize(11);
  EXPECT_NE(a.model().parameters(), fresh.model().parameters());
  PolicyTarget no_budget = f.target();
  no_budget.budget = nullptr;
  LmPolicy c(no_budget, config);
  try {
    c.initialize(11);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "sft_steps");
  }
}

// sft_short_capacity adds the short demonstrations to the SFT set: a different model from the same seed (the
// memo key has them), and a short budget that breaks the guards is refused when the policy is built, naming
// both parameters.
TEST(LmRunnerPolicy, ShortDemonstrationsChangeTheSftAndBadOnesAreRefused) {
  Fixture f;
  LmPolicyConfig config = Fixture::sft_config(6, 2);
  LmPolicy plain(f.target(), config);
  plain.initialize(11);
  config.sft_short_capacity = 768;
  config.sft_short_reserve = 256;
  LmPolicy drilled(f.target(), config);
  drilled.initialize(11);
  EXPECT_NE(plain.model().parameters(), drilled.model().parameters());
  LmPolicy again(f.target(), config);
  again.initialize(11);
  EXPECT_EQ(again.model().parameters(), drilled.model().parameters());
  config.sft_short_reserve = 64;  // below the summary cap 96
  try {
    LmPolicy bad(f.target(), config);
    FAIL() << "a reserve below the summary cap was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sft_short_capacity/sft_short_reserve"), std::string::npos)
        << e.what();
  }
  config.sft_short_capacity = -1;
  EXPECT_THROW(LmPolicy(f.target(), config), Error);
}

// sft_answer_window / sft_answer_batch: with the setup's reasoning block, answer windows join the SFT (pooled
// or drawn beside the segments) and change the base model; without reasoning, or a batch without windows,
// the policy is refused with the parameter named.
TEST(LmRunnerPolicy, AnswerWindowsNeedReasoningAndChangeTheSft) {
  Fixture f;
  TextPrompts prompts;
  prompts.reasoning = think_reasoning();
  f.codec = make_text_codec(tokenizer(), prompts);
  f.budget.per_turn_cap = 160;  // the notes and the answer
  LmPolicyConfig config = Fixture::sft_config(4, 2);
  LmPolicy plain(f.target(), config);
  plain.initialize(11);
  config.sft_answer_window = 16;
  LmPolicy pooled(f.target(), config);
  pooled.initialize(11);
  EXPECT_NE(plain.model().parameters(), pooled.model().parameters());
  config.sft_answer_batch = 3;
  LmPolicy beside(f.target(), config);
  beside.initialize(11);
  EXPECT_NE(beside.model().parameters(), pooled.model().parameters());
  EXPECT_NE(beside.model().parameters(), plain.model().parameters());

  const auto refused = [](const PolicyTarget& target, const LmPolicyConfig& c, const std::string& field) {
    try {
      LmPolicy bad(target, c);
      ADD_FAILURE() << field << ": accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  Fixture without;  // no reasoning block: no notes to answer from
  without.budget.per_turn_cap = 160;
  refused(without.target(), config, "sft_answer_window");
  LmPolicyConfig no_windows = Fixture::sft_config(4, 2);
  no_windows.sft_answer_batch = 2;
  refused(f.target(), no_windows, "sft_answer_batch");
  no_windows.sft_answer_batch = 0;
  no_windows.sft_answer_window = -1;
  refused(f.target(), no_windows, "sft_answer_window");
}

// drill_* parameters: copy drills before SFT change the base model (the memo key has them), reproducibly;
// drills alone need no budget; bad values are refused by name when the policy is built.
TEST(LmRunnerPolicy, CopyDrillsBuildTheBaseModelAndBadOnesAreRefused) {
  Fixture f;
  LmPolicyConfig config = Fixture::sft_config(4, 2);
  LmPolicy plain(f.target(), config);
  plain.initialize(11);
  config.drills.steps = 5;
  config.drills.batch = 2;
  config.drills.drills.min_half = 4;
  config.drills.drills.max_half = 6;
  config.drill_alphabet = "0123456789";
  LmPolicy drilled(f.target(), config);
  drilled.initialize(11);
  EXPECT_NE(plain.model().parameters(), drilled.model().parameters());
  LmPolicy again(f.target(), config);
  again.initialize(11);
  EXPECT_EQ(again.model().parameters(), drilled.model().parameters());
  config.drill_alphabet = "";
  LmPolicy whole(f.target(), config);
  whole.initialize(11);
  EXPECT_NE(whole.model().parameters(), drilled.model().parameters());
  config.sft_steps = 0;  // drills only: no demonstrations, so no budget needed
  PolicyTarget no_budget = f.target();
  no_budget.budget = nullptr;
  LmPolicy only(no_budget, config);
  only.initialize(11);
  LmPolicy fresh(no_budget, Fixture::config());
  fresh.initialize(11);
  EXPECT_NE(only.model().parameters(), fresh.model().parameters());
  const auto refused = [&](const std::map<std::string, std::string>& params, const std::string& field) {
    try {
      make_policy("lm", params, f.target());
      ADD_FAILURE() << "accepted: " << field;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  config.sft_steps = 4;  // drills mixed into SFT, and weighted summaries and answers, each change the SFT
  config.drills.steps = 0;
  LmPolicy base(f.target(), config);
  base.initialize(11);
  config.drills.mix = 8;
  LmPolicy mixed(f.target(), config);
  mixed.initialize(11);
  EXPECT_NE(mixed.model().parameters(), base.model().parameters());
  config.drills.mix = 0;
  config.sft_summary_weight = 4.0f;
  LmPolicy weighted(f.target(), config);
  weighted.initialize(11);
  EXPECT_NE(weighted.model().parameters(), base.model().parameters());
  config.sft_summary_weight = 1.0f;
  config.sft_final_weight = 4.0f;
  LmPolicy answers(f.target(), config);
  answers.initialize(11);
  EXPECT_NE(answers.model().parameters(), base.model().parameters());
  EXPECT_NE(answers.model().parameters(), weighted.model().parameters());
  refused({{"drill_mix", "-1"}}, "drill_mix");
  refused({{"drill_steps", "10"}, {"drill_alphabet", "0123"}, {"drill_alphabet_size", "5"}},
          "drill_alphabet_size");
  refused({{"sft_summary_weight", "0"}}, "sft_summary_weight");
  refused({{"sft_final_weight", "-2"}}, "sft_final_weight");
  refused({{"drill_steps", "-1"}}, "drill_steps");
  refused({{"drill_batch", "0"}}, "drill_batch");
  refused({{"drill_lr", "0"}}, "drill_lr");
  refused({{"drill_steps", "10"}, {"drill_min", "1"}}, "drill_min/drill_max");
  refused({{"drill_steps", "10"}, {"drill_max", "600"}},
          "drill_min/drill_max");  // longer than 1024 positions
  refused({{"drill_long_steps", "-1"}}, "drill_long_steps");
  refused({{"drill_long_steps", "10"}, {"drill_gap", "-1"}}, "drill_gap");
  refused({{"drill_long_steps", "10"}, {"drill_gap", "1000"}}, "drill_gap");  // 8 + 64 + 1000 > 1024
  refused({{"drill_long_steps", "10"}, {"drill_lookup", "2"}}, "drill_lookup");
  // Long drills (gaps, lookups) after the short ones change the base; the key of the memoised base has them.
  config.sft_steps = 0;
  config.drills.steps = 3;
  LmPolicy short_only(no_budget, config);
  short_only.initialize(11);
  config.drills.long_steps = 2;
  config.drills.drills.max_gap = 20;
  config.drills.drills.lookup_fraction = 0.5;
  LmPolicy with_long(no_budget, config);
  with_long.initialize(11);
  EXPECT_NE(with_long.model().parameters(), short_only.model().parameters());
  config.drills.drills.max_gap = 10;
  LmPolicy other_gap(no_budget, config);
  other_gap.initialize(11);
  EXPECT_NE(with_long.model().parameters(), other_gap.model().parameters());
}

// The text view's summary metrics (envs/synthetic/metrics.h episode_metrics_text) on the oracle's
// demonstrations: records seen come from the observations, so the oracle's summaries have observed
// milestones, recall 1 and no invention; a summary that names a distractor counts it as invented.
TEST(LmRunnerPolicy, TextSummaryMetricsReadTheOraclesSummaries) {
  Fixture f;
  const auto demos = oracle_demonstrations(f.params, f.codec, f.budget, 0, 6, "test");
  const auto& tasks = dynamic_cast<const envs::synthetic::SyntheticEnv&>(*f.env).tasks().tasks;
  int summaries = 0;
  for (const Trajectory& t : demos) {
    const auto& task = tasks[static_cast<size_t>(t.group_index) % tasks.size()];
    const envs::synthetic::EpisodeMetrics m = envs::synthetic::episode_metrics_text(task, t, *f.codec);
    EXPECT_TRUE(m.exact_match);
    EXPECT_EQ(m.records_seen, static_cast<int>(task.records.size())) << task.task_id;
    for (const auto& s : m.summaries) {
      ++summaries;
      EXPECT_GT(s.observed_milestones, 0) << task.task_id;
      EXPECT_DOUBLE_EQ(s.recall(), 1.0) << task.task_id;
      EXPECT_EQ(s.invented, 0) << task.task_id;
      EXPECT_GT(s.length, 5);
    }
  }
  EXPECT_GT(summaries, 3);
}

}  // namespace
}  // namespace crl::lm
