// Rollout scheduling over the simulated server (engine/sim/rollout_scheduler.h): a synchronous batch waits
// for its slowest rollout, the asynchronous scheduler respects its staleness bound, partial rollouts close a
// batch without the stragglers, summary calls block their rollout, and runs are deterministic.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/sim/rollout_scheduler.h"

namespace crl::sim {
namespace {

constexpr SimTime kMs = 1000000;

ServerProfile fast_profile() {
  ServerProfile p;
  p.max_running = 64;
  p.kv_budget_tokens = 1000000;
  p.prefill_tokens_per_s = 100000.0;
  p.decode_base_ms = 1.0;
  p.decode_per_seq_ms = 0.05;
  p.decode_per_kv_token_ns = 0.0;
  return p;
}

// Rollout i: `turns` execution calls growing a context, one summary after the third turn; rollout 0 of
// every `slow_every` rollouts has ten times the turns.
RolloutTrace make_trace(int64_t i, int slow_every) {
  RolloutTrace t;
  const int turns = (slow_every > 0 && i % slow_every == 0) ? 40 : 4 + static_cast<int>(i % 3);
  int64_t context = 200;
  for (int k = 0; k < turns; ++k) {
    SimCall c;
    c.prompt_tokens = context;
    c.shared_prefix_tokens = k == 0 ? 0 : context - 60;
    c.output_tokens = 20 + (i * 7 + k) % 11;
    c.env_ns = 2 * kMs;
    t.calls.push_back(c);
    context += c.output_tokens + 40;
    if (k == 2) {
      SimCall s;
      s.kind = CallKind::kSummarize;
      s.prompt_tokens = context + 30;
      s.shared_prefix_tokens = context;
      s.output_tokens = 50;
      t.calls.push_back(s);
      context = 150;
      ++t.compactions;
    }
  }
  // The first request after the summary re-prefills the rebuilt context.
  for (size_t k = 1; k < t.calls.size(); ++k) {
    if (t.calls[k - 1].kind == CallKind::kSummarize) {
      t.calls[k].after_compaction = true;
      t.calls[k].shared_prefix_tokens = 30;
    }
  }
  t.turns = turns;
  t.reward = i % 2;
  return t;
}

struct Traces {
  explicit Traces(int slow_every) : slow_every(slow_every) {}
  const RolloutTrace& operator()(int64_t i) {
    while (static_cast<int64_t>(traces.size()) <= i) {
      traces.push_back(make_trace(static_cast<int64_t>(traces.size()), slow_every));
    }
    return traces[i];
  }
  int slow_every;
  std::deque<RolloutTrace> traces;  // references stay valid as it grows
};

ScheduleResult run(SchedulerMode mode, int64_t staleness, int slow_every, int64_t concurrency = 8,
                   int64_t steps = 5) {
  ScheduleOptions o;
  o.mode = mode;
  o.batch_size = 8;
  o.train_steps = steps;
  o.concurrency = concurrency;
  o.max_staleness = staleness;
  o.train_seconds_per_token = 1e-6;
  o.train_overhead_seconds = 0.05;
  Traces traces(slow_every);
  return run_schedule(fast_profile(), o, [&](int64_t i) -> const RolloutTrace& { return traces(i); });
}

TEST(SimRolloutScheduler, SyncBatchWaitsForItsSlowestRollout) {
  const ScheduleResult r = run(SchedulerMode::kSync, 0, 8);
  ASSERT_EQ(r.batches.size(), 5u);
  for (const BatchRecord& b : r.batches) {
    SimTime slowest = 0;
    for (const RolloutRecord& x : r.rollouts) {
      if (x.consumed_by_step == b.step) slowest = std::max(slowest, x.finished);
    }
    EXPECT_EQ(b.rollouts_ready, slowest);
    EXPECT_GT(b.trained, b.rollouts_ready);
  }
  // Batch j trains exactly rollouts [8j, 8j + 8), launched only after batch j - 1 trained.
  for (const RolloutRecord& x : r.rollouts) {
    EXPECT_EQ(x.consumed_by_step, x.index / 8);
    EXPECT_EQ(x.staleness, 0);
    if (x.index >= 8) {
      EXPECT_GE(x.launched, r.batches[x.index / 8 - 1].trained);
    }
  }
  // The slow rollout (index 0 of each batch) is the one every batch waited for.
  const auto longest = stragglers(r, 1);
  ASSERT_EQ(longest.size(), 1u);
  EXPECT_EQ(longest.front()->index % 8, 0);
  EXPECT_EQ(longest.front()->turns, 40);
  EXPECT_NE(format_stragglers(r, 3).find("40 turns"), std::string::npos);
}

TEST(SimRolloutScheduler, AsyncRespectsTheStalenessBoundAndOverlapsTraining) {
  for (int64_t s : {0, 1, 2}) {
    const ScheduleResult r = run(SchedulerMode::kAsync, s, 5, 16);
    ASSERT_EQ(r.batches.size(), 5u) << "staleness " << s;
    EXPECT_LE(r.max_staleness_seen, s);
    for (const RolloutRecord& x : r.rollouts) {
      if (x.consumed_by_step >= 0) {
        EXPECT_LE(x.consumed_by_step - x.version_at_launch, s);
        EXPECT_FALSE(x.discarded);
      }
    }
    if (s >= 1) {
      EXPECT_GE(r.max_staleness_seen, 1) << "generation never overlapped training";
    }
  }
  // Overlapping generation with training finishes the same number of steps sooner.
  EXPECT_LT(run(SchedulerMode::kAsync, 1, 5, 16).end, run(SchedulerMode::kSync, 0, 5, 16).end);
}

TEST(SimRolloutScheduler, PartialRolloutsCloseABatchWithoutTheStragglers) {
  const ScheduleResult r = run(SchedulerMode::kPartial, 0, 16, 12, 16);
  ASSERT_EQ(r.batches.size(), 16u);
  const RolloutRecord& slow = r.rollouts[0];
  EXPECT_EQ(slow.turns, 40);
  ASSERT_GT(slow.finished, 0) << "the slow rollout never finished";
  EXPECT_GT(slow.finished, r.batches[0].rollouts_ready);  // batch 0 did not wait for it
  EXPECT_GT(slow.consumed_by_step, 0);
  EXPECT_GE(slow.versions_spanned, 1);
  EXPECT_GT(slow.paused_ns, 0);  // it waited while the trainer ran
  const ScheduleResult sync = run(SchedulerMode::kSync, 0, 16, 12);
  EXPECT_LT(r.batches[0].rollouts_ready, sync.batches[0].rollouts_ready);
}

TEST(SimRolloutScheduler, SummaryCallsBlockTheirRolloutAndTimeAddsUp) {
  const ScheduleResult r = run(SchedulerMode::kSync, 0, 0);
  for (const RolloutRecord& x : r.rollouts) {
    if (x.finished == 0) continue;
    EXPECT_GT(x.summary_ns, 0);
    EXPECT_GT(x.summary_tokens, 0);
    EXPECT_GT(x.reprefill_tokens, 0);
    // One call at a time: the wall time is exactly queueing + service + environment time.
    EXPECT_EQ(x.wall_ns(), x.queue_ns + x.execute_ns + x.summary_ns + x.env_ns) << "rollout " << x.index;
    EXPECT_GT(x.cache_hit_tokens, 0);
  }
}

TEST(SimRolloutScheduler, SameInputsGiveTheSameRun) {
  for (SchedulerMode mode : {SchedulerMode::kSync, SchedulerMode::kAsync, SchedulerMode::kPartial}) {
    const ScheduleResult a = run(mode, 1, 6), b = run(mode, 1, 6);
    ASSERT_EQ(a.rollouts.size(), b.rollouts.size());
    EXPECT_EQ(a.end, b.end);
    EXPECT_EQ(a.events, b.events);
    for (size_t i = 0; i < a.rollouts.size(); ++i) {
      EXPECT_EQ(a.rollouts[i].finished, b.rollouts[i].finished);
      EXPECT_EQ(a.rollouts[i].gpu_seconds, b.rollouts[i].gpu_seconds);
    }
  }
}

}  // namespace
}  // namespace crl::sim
