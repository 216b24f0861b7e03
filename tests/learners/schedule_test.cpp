// The update schedule (spec 1.5, 1.8): warm-up, 2:1 critic:actor in the order critic, critic, actor, and
// the opt-in raw-reward actor gate.
#include "learners/schedule.h"

#include <gtest/gtest.h>

#include "engine/error.h"

namespace crl::learners {
namespace {

Batch batch_with_rewards(std::vector<double> rewards) {
  Batch b;
  for (double r : rewards) {
    b.begin_rollout(r);
    b.add_segment(SegmentKind::kExecution, {0.0}, {1}, {1});
  }
  return b;
}

using U = UpdateKind;

TEST(LearnerScheduleTest, PaperScheduleWarmsUpThenRunsCriticCriticActor) {
  const Schedule schedule{ScheduleOptions{}};
  const Batch b = batch_with_rewards({0.0, 1.0});
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(schedule.updates(i, b), (std::vector<U>{U::kCritic})) << i;
  for (int64_t i = 50; i < 60; ++i) {
    EXPECT_EQ(schedule.updates(i, b), (std::vector<U>{U::kCritic, U::kCritic, U::kActor})) << i;
  }
}

TEST(LearnerScheduleTest, RatioAndWarmupAreConfigurable) {
  ScheduleOptions o;
  o.warmup_batches = 0;
  o.critic_per_actor = 1;
  const Schedule schedule(o);
  EXPECT_EQ(schedule.updates(0, batch_with_rewards({0.0})), (std::vector<U>{U::kCritic, U::kActor}));
  o.critic_per_actor = 0;
  EXPECT_EQ(Schedule(o).updates(3, batch_with_rewards({0.0})), (std::vector<U>{U::kActor}));
  o.critic_per_actor = -1;
  EXPECT_THROW(Schedule{o}, Error);
}

TEST(LearnerScheduleTest, ActorGateSkipsTheActorWithoutAPositiveReward) {
  ScheduleOptions o;
  o.warmup_batches = 2;
  o.actor_gate = true;
  const Schedule schedule(o);
  EXPECT_EQ(schedule.updates(5, batch_with_rewards({0.0, 0.0})), (std::vector<U>{U::kCritic, U::kCritic}));
  EXPECT_EQ(schedule.updates(5, batch_with_rewards({0.0, 0.5})),
            (std::vector<U>{U::kCritic, U::kCritic, U::kActor}));
  EXPECT_EQ(schedule.updates(1, batch_with_rewards({1.0})),
            (std::vector<U>{U::kCritic}));  // still warming up
  o.gate_threshold = 0.999;                 // the Phase 10 variant
  EXPECT_FALSE(Schedule(o).actor_gate_open(batch_with_rewards({0.5, 0.9})));
  EXPECT_TRUE(Schedule(o).actor_gate_open(batch_with_rewards({0.5, 1.0})));
  o.actor_gate = false;
  EXPECT_TRUE(Schedule(o).actor_gate_open(batch_with_rewards({-1.0})));
}

}  // namespace
}  // namespace crl::learners
