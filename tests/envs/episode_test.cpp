// Property tests of the episode state machine over thousands of random budgets and step lengths
// (issue 2): no request ever exceeds C; copied summary and tail tokens are never trainable; every sampled
// token appears in exactly one segment with actor mask 1; each summary is trained exactly once; N_after
// equals the sampled tokens of later segments; same seed -> same trajectory hash for 1 and 2 threads.
#include "envs/episode.h"

#include <gtest/gtest.h>

#include "engine/error.h"
#include "engine/runner.h"
#include "envs/registry.h"
#include "policies/rollout.h"

namespace crl {
namespace {

// An environment whose observations have random lengths (0 .. max_observation bytes of text).
class RandomTextEnv final : public Env {
 public:
  RandomTextEnv(int steps, int max_observation, int min_observation = 0)
      : steps_(steps), max_observation_(max_observation), min_observation_(min_observation) {
    spec_.name = "random_text";
  }
  const EnvSpec& spec() const override { return spec_; }

 protected:
  Start do_reset(const Task&, Rng& rng) override {
    rng_ = rng;
    Start s;
    s.system.text = "sys";
    s.user.text = random_text();
    return s;
  }
  StepResult do_step(const Action&) override {
    StepResult r;
    r.observation.text = random_text();
    r.terminated = steps() + 1 >= steps_;
    r.reward = r.terminated ? 1.0 : 0.0;
    return r;
  }

 private:
  std::string random_text() {
    const uint32_t n =
        min_observation_ + rng_.uniform_int(static_cast<uint32_t>(max_observation_ - min_observation_) + 1);
    std::string text(n, 'x');
    for (char& c : text) c = static_cast<char>('a' + rng_.uniform_int(26));
    return text;
  }
  EnvSpec spec_;
  int steps_, max_observation_, min_observation_;
  Rng rng_{StreamKey{}};
};

// Samples 1 .. max_new_tokens random letters from the request's own stream; sometimes ends the turn.
class RandomPolicy final : public Policy {
 public:
  std::string name() const override { return "random"; }
  void act(std::span<const Request* const> requests, std::span<Decision> decisions) const override {
    for (size_t i = 0; i < requests.size(); ++i) {
      Rng rng(requests[i]->stream);
      const int64_t cap = std::min<int64_t>(requests[i]->max_new_tokens, 40);
      const int64_t n = 1 + rng.uniform_int(static_cast<uint32_t>(cap));
      Decision& d = decisions[i];
      d.tokens.clear();
      for (int64_t t = 0; t < n; ++t) d.tokens.push_back('a' + static_cast<TokenId>(rng.uniform_int(26)));
      if (rng.bernoulli(0.5)) d.tokens.back() = 258;  // <|im_end|>
      for (int64_t t = 0; t < n; ++t) d.logprobs.push_back(-static_cast<float>(rng.uniform()));
      d.values.assign(d.tokens.size(), static_cast<float>(rng.uniform()));
    }
  }
};

Budget random_budget(Rng& rng) {
  Budget b;
  b.capacity = 120 + rng.uniform_int(1500);
  b.reserve = 20 + rng.uniform_int(static_cast<uint32_t>(b.capacity / 2));
  b.per_turn_cap = 1 + rng.uniform_int(static_cast<uint32_t>(b.reserve));
  b.summary_cap = 1 + rng.uniform_int(static_cast<uint32_t>(b.reserve));
  b.tail_k = static_cast<int>(rng.uniform_int(4));
  b.max_compactions = static_cast<int>(rng.uniform_int(5));
  return b;
}

Budget make_budget(int64_t capacity, int64_t reserve, int64_t per_turn_cap, int64_t summary_cap) {
  Budget b;
  b.capacity = capacity;
  b.reserve = reserve;
  b.per_turn_cap = per_turn_cap;
  b.summary_cap = summary_cap;
  return b;
}

std::shared_ptr<const Codec> short_codec() {
  return make_text_codec(std::make_shared<ByteTokenizer>(),
                         TextPrompts{"Summarize.", "Resume:", "[cut]", {}});
}

TEST(EpisodeProperties, InvariantsHoldOverThousandsOfRandomBudgets) {
  const auto codec = short_codec();
  const RandomPolicy policy;
  int compacted = 0, truncated = 0, completed = 0, cut = 0;
  for (uint64_t trial = 0; trial < 3000; ++trial) {
    Rng rng(StreamKey{trial, 99, 0, StreamRole::kLearner, 0});
    EpisodeConfig config;
    config.budget = random_budget(rng);
    config.seed = trial;
    const int steps = 1 + static_cast<int>(rng.uniform_int(40));
    const int max_obs = static_cast<int>(rng.uniform_int(120));
    Episode episode(std::make_unique<RandomTextEnv>(steps, max_obs), codec, config);
    episode.start(Task{"t" + std::to_string(trial), trial, ""});
    int64_t submitted_sampled = 0;
    std::vector<std::vector<TokenId>> summaries;
    while (!episode.done()) {
      const Request& request = episode.request();
      ASSERT_LE(request.prompt.size() + request.max_new_tokens, config.budget.capacity) << "trial " << trial;
      ASSERT_GE(request.max_new_tokens, 1);
      if (request.role == Role::kSummarize) {
        ASSERT_LE(request.max_new_tokens, config.budget.summary_cap);
        ASSERT_LE(request.prompt.size(), config.budget.capacity - config.budget.summary_cap);
        ++cut;
      } else {
        ASSERT_LE(request.max_new_tokens, config.budget.per_turn_cap);
      }
      const Request* requests[] = {&request};
      Decision decision;
      policy.act(requests, std::span<Decision>(&decision, 1));
      submitted_sampled += static_cast<int64_t>(decision.tokens.size());
      if (request.role == Role::kSummarize) summaries.push_back(decision.tokens);
      episode.submit(decision);
    }
    const Trajectory t = episode.finish();
    ASSERT_NO_THROW(t.validate());
    EXPECT_EQ(t.sampled_tokens(), submitted_sampled) << "every sampled token in exactly one segment";
    size_t summary_index = 0;
    for (const Segment& s : t.segments) {
      for (size_t i = 0; i < s.response_ids.size(); ++i) {
        const Provenance p = s.response_provenance[i];
        ASSERT_NE(p, Provenance::kCopiedSummary);
        ASSERT_NE(p, Provenance::kCopiedTail);
        ASSERT_EQ(s.actor_mask[i] == 1, p == Provenance::kSampled);
      }
      if (s.kind == SegmentKind::kSummary) {
        ASSERT_LT(summary_index, summaries.size());
        EXPECT_EQ(s.response_ids, summaries[summary_index++]) << "each summary trained once, as sampled";
        EXPECT_EQ(s.n_sampled, static_cast<int64_t>(s.response_ids.size()));
      }
    }
    EXPECT_EQ(summary_index, summaries.size());
    EXPECT_EQ(static_cast<int>(summaries.size()), t.compactions);
    compacted += t.compactions > 0;
    truncated += t.status == EpisodeStatus::kTruncated;
    completed += t.status == EpisodeStatus::kCompleted;
  }
  // The random budgets must actually exercise compaction, truncation and completion.
  EXPECT_GT(compacted, 300);
  EXPECT_GT(truncated, 100);
  EXPECT_GT(completed, 300);
  EXPECT_GT(cut, 300);
}

TEST(Episode, FirstPromptThatDoesNotFitFailsCleanly) {
  EpisodeConfig config;
  config.budget = make_budget(40, 10, 5, 5);
  Episode episode(std::make_unique<RandomTextEnv>(3, 120, 100), short_codec(), config);
  episode.start(Task{"big", 0, ""});
  ASSERT_TRUE(episode.done());
  EXPECT_EQ(episode.status(), EpisodeStatus::kFailed);
  EXPECT_NE(episode.reason().find("does not fit"), std::string::npos);
  const Trajectory t = episode.finish();
  EXPECT_TRUE(t.segments.empty());
}

TEST(Episode, MalformedDecisionsAreRejectedWithoutSideEffects) {
  EpisodeConfig config;
  Episode episode(std::make_unique<RandomTextEnv>(3, 10), short_codec(), config);
  episode.start(Task{"t", 0, ""});
  const std::string before = episode.state_hash();
  Decision too_long;
  too_long.tokens.assign(episode.request().max_new_tokens + 1, 'a');
  try {
    episode.submit(too_long);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "tokens");
  }
  Decision bad_logprobs;
  bad_logprobs.tokens = {'a', 'b'};
  bad_logprobs.logprobs = {-1.0f};
  EXPECT_THROW(episode.submit(bad_logprobs), Error);
  EXPECT_EQ(episode.state_hash(), before);
  Decision failed;
  failed.failed = true;
  failed.error = "server returned 503";
  episode.submit(failed);
  EXPECT_TRUE(episode.done());
  EXPECT_EQ(episode.status(), EpisodeStatus::kFailed);
  EXPECT_EQ(episode.reason(), "server returned 503");
}

TEST(Episode, CompactionBudgetExhaustedEndsTruncated) {
  EpisodeConfig config;
  config.budget = make_budget(200, 60, 20, 20);
  config.budget.max_compactions = 1;
  Episode episode(std::make_unique<RandomTextEnv>(1000, 30), short_codec(), config);
  episode.start(Task{"long", 0, ""});
  const RandomPolicy policy;
  std::vector<Episode*> one = {&episode};
  drive(one, policy);
  EXPECT_EQ(episode.status(), EpisodeStatus::kTruncated);
  EXPECT_NE(episode.reason().find("compaction budget exhausted"), std::string::npos) << episode.reason();
  EXPECT_EQ(episode.finish().compactions, 1);
}

TEST(Episode, SameSeedSameHashesForOneAndTwoThreadsAndAnyGrouping) {
  const auto codec = short_codec();
  const RandomPolicy policy;
  auto run = [&](int threads, size_t group) {
    RolloutSpec spec;
    spec.count = 64;
    spec.group_size = group;
    spec.make_episode = [&](size_t i) {
      EpisodeConfig config;
      config.budget = make_budget(400, 100, 64, 64);
      config.seed = 17;
      config.sample_index = static_cast<int64_t>(i % 4);
      auto e = std::make_unique<Episode>(std::make_unique<RandomTextEnv>(30, 40), codec, config);
      e->start(Task{"task-" + std::to_string(i / 4), i / 4, ""});
      return e;
    };
    std::vector<std::string> hashes;
    for (const Trajectory& t : run_rollouts(spec, policy, Runner(threads))) hashes.push_back(t.hash());
    return hashes;
  };
  const auto one = run(1, 16);
  EXPECT_EQ(run(2, 16), one);
  EXPECT_EQ(run(2, 5), one);
  EXPECT_EQ(run(1, 1), one);
  std::set<std::string> distinct(one.begin(), one.end());
  EXPECT_EQ(distinct.size(), one.size()) << "different tasks and samples give different trajectories";
}

}  // namespace
}  // namespace crl
