// The synthetic env inside the lead's Episode (budgeted context with compaction): the oracle, with oracle
// summaries, wins every dev task in both views, compactions do happen, and the summary metrics can be taken
// at each summary request from the env's records_seen().
#include <iostream>

#include "envs/codec.h"
#include "envs/episode.h"
#include "envs/registry.h"
#include "envs/synthetic/oracle.h"
#include "envs/synthetic/synthetic_env.h"
#include "gtest/gtest.h"

namespace crl::envs::synthetic {
namespace {

struct Played {
  double reward = 0;
  int compactions = 0;
  std::vector<SummaryMetrics> summaries;
  std::string reason;
  Trajectory trajectory;
};

Played play(const std::string& view, const Budget& budget, int task_index) {
  std::unique_ptr<Env> env = crl::make_env("synthetic", {{"view", view}});
  const auto& synthetic = dynamic_cast<const SyntheticEnv&>(*env);
  const SyntheticTask& task = synthetic.tasks().tasks[task_index];
  const auto codec = make_codec(view, env->spec());
  Episode episode(std::move(env), codec, EpisodeConfig{budget, 7, 0, 0, ""});
  episode.start(Task{task.task_id, 0, "dev"});
  const bool symbolic = view == "symbolic";
  Oracle oracle(task, symbolic);
  const Vocabulary& v = Vocabulary::get();
  Played played;
  while (!episode.done()) {
    Decision decision;
    const int seen = synthetic.records_seen();
    if (episode.request().role == Role::kSummarize) {
      if (symbolic) {
        decision.tokens = oracle.summary_symbols(seen);
        played.summaries.push_back(summary_metrics_symbols(task, seen, decision.tokens));
      } else {
        const std::string summary = oracle.summary_text(seen);
        decision.tokens = codec->encode_action(summary);
        played.summaries.push_back(summary_metrics_text(task, seen, summary));
      }
    } else {
      const Action action = oracle.act();
      if (symbolic) {
        std::string names;
        for (TokenId id : action.symbols) names += (names.empty() ? "" : " ") + v.name(id);
        decision.tokens = codec->encode_action(names);
      } else {
        decision.tokens = codec->encode_action(action.text);
      }
    }
    episode.submit(decision);
  }
  played.reward = episode.reward();
  played.compactions = episode.context().compactions();
  played.reason = episode.reason();
  played.trajectory = episode.finish();
  return played;
}

TEST(synthetic_episode, OracleWinsEveryDevTaskWithCompactionInBothViews) {
  // Text view, byte tokenizer (one token per byte): records are ~150-190 tokens here, so the budget is
  // scaled up from the spec's LLM-tokenizer numbers (C = 1024, T_comp = 256) to force 1-3 compactions.
  Budget text_budget;
  text_budget.capacity = 3072;
  text_budget.reserve = 768;
  text_budget.summary_cap = 512;
  // Symbolic view: a record is 4 symbols, so a small window forces compactions.
  Budget symbolic_budget;
  symbolic_budget.capacity = 64;
  symbolic_budget.reserve = 16;
  symbolic_budget.per_turn_cap = 8;
  symbolic_budget.summary_cap = 8;
  for (const auto& [view, budget] :
       {std::pair<std::string, Budget>{"text", text_budget}, {"symbolic", symbolic_budget}}) {
    int compacted = 0;
    int histogram[4] = {0, 0, 0, 0};
    for (int i = 0; i < 60; ++i) {
      const Played p = play(view, budget, i);
      SCOPED_TRACE(view + " task " + std::to_string(i) + ": " + p.reason);
      ASSERT_EQ(p.reward, 1.0);
      EXPECT_LE(p.compactions, 3);
      EXPECT_EQ(static_cast<size_t>(p.compactions), p.summaries.size());
      compacted += p.compactions > 0 ? 1 : 0;
      ++histogram[std::min(p.compactions, 3)];
      for (const SummaryMetrics& m : p.summaries) {
        EXPECT_DOUBLE_EQ(m.recall(), 1.0);
        EXPECT_EQ(m.invented, 0);
        EXPECT_EQ(m.repeated, 0);
      }
      if (view == "symbolic") {
        // The metrics read off the trajectory alone (what the scenario runner has) equal those taken live.
        std::unique_ptr<Env> env = crl::make_env("synthetic", {{"view", view}});
        const SyntheticTask& task = dynamic_cast<const SyntheticEnv&>(*env).tasks().tasks[i];
        const EpisodeMetrics e = episode_metrics_symbolic(task, p.trajectory);
        EXPECT_TRUE(e.exact_match);
        EXPECT_EQ(e.compactions, p.compactions);
        ASSERT_EQ(e.summaries.size(), p.summaries.size());
        for (size_t k = 0; k < e.summaries.size(); ++k) {
          EXPECT_EQ(e.summaries[k].observed_milestones, p.summaries[k].observed_milestones);
          EXPECT_EQ(e.summaries[k].recalled, p.summaries[k].recalled);
          EXPECT_EQ(e.summaries[k].mentions, p.summaries[k].mentions);
          EXPECT_EQ(e.summaries[k].length, p.summaries[k].length);
        }
      }
    }
    EXPECT_EQ(compacted, 60) << view << ": every episode compacts at least once";
    std::cout << view << ": episodes with 0/1/2/3 compactions: " << histogram[0] << "/" << histogram[1] << "/"
              << histogram[2] << "/" << histogram[3] << "\n";
  }
}

// The symbolic resume context is written by the environment from the memory-slot summary: a kept record is
// copied as it was observed, a record not shown yet becomes [rec:<i>, UNSEEN], STOP ends the summary.
TEST(synthetic_episode, SymbolicResumeCopiesKeptRecordsAsObserved) {
  std::unique_ptr<Env> env = crl::make_env("synthetic", {{"view", "symbolic"}});
  const auto& synthetic = dynamic_cast<const SyntheticEnv&>(*env);
  const SyntheticTask task = synthetic.tasks().tasks[0];
  const auto codec = make_codec("symbolic", env->spec());
  Budget budget;
  budget.capacity = 64;
  budget.reserve = 16;
  budget.per_turn_cap = 4;
  budget.summary_cap = 6;
  Episode episode(std::move(env), codec, EpisodeConfig{budget, 7, 0, 0, ""});
  episode.start(Task{task.task_id, 0, "dev"});
  const Vocabulary& v = Vocabulary::get();
  while (episode.request().role == Role::kExecute) {
    Decision next;
    next.tokens = {v.next};
    episode.submit(next);
  }
  const int seen = synthetic.records_seen();
  ASSERT_GT(seen, 2);
  ASSERT_LT(seen, kRecordsPerTask);
  Decision summary;
  summary.tokens = {v.keep(0), v.keep(kRecordsPerTask - 1), v.stop, v.keep(1)};
  episode.submit(summary);
  ASSERT_FALSE(episode.done());
  const std::vector<TokenId> prompt = episode.request().prompt.ids();
  std::vector<TokenId> expected = {v.resume};
  const auto first = symbolic_record(task, 0);
  expected.insert(expected.end(), first.begin(), first.end());
  expected.push_back(v.rec(kRecordsPerTask - 1));
  expected.push_back(v.unseen);
  expected.push_back(v.resume_end);
  ASSERT_GT(prompt.size(), expected.size() + 1);
  EXPECT_EQ(std::vector<TokenId>(prompt.begin() + 1, prompt.begin() + 1 + expected.size()), expected);
  // The invention is measured on the same summary: the unseen record's value is not an observed milestone.
  const SummaryMetrics m = summary_metrics_symbols(task, seen, summary.tokens);
  EXPECT_EQ(m.length, 3);
}

}  // namespace
}  // namespace crl::envs::synthetic
