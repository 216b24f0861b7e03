#include "scenarios/runner.h"

#include <algorithm>

#include "engine/runner.h"
#include "envs/registry.h"
#include "learners/batch.h"
#include "learners/learner.h"
#include "learners/schedule.h"
#include "policies/rollout.h"
#include "policies/tabular/tabular_policy.h"

namespace crl::scenarios {

namespace {

using proto::scenario::LearnerConfig;
using proto::scenario::Setup;

Budget budget_of(const Setup& s) {
  Budget b;
  b.capacity = s.budget().capacity();
  b.reserve = s.budget().reserve();
  b.tail_k = s.budget().tail_k();
  b.per_turn_cap = s.budget().per_turn_cap();
  b.summary_cap = s.budget().summary_cap();
  b.max_compactions = s.budget().max_compactions();
  return b;
}

// What every run of one arm shares: the environment's name and parameters, the codec and the budget.
struct ArmContext {
  const ArmSpec* arm = nullptr;
  std::map<std::string, std::string> env_params;
  std::shared_ptr<const Codec> codec;
  const EnvSpec* env_spec = nullptr;
  std::unique_ptr<Env> prototype;
  Budget budget;
};

std::vector<Trajectory> collect(const ArmContext& c, const Policy& policy, uint64_t seed,
                                const std::string& prefix, int64_t first, int64_t count,
                                const Runner& runner) {
  RolloutSpec spec;
  spec.count = static_cast<size_t>(count);
  // Groups only decide which thread drives which episodes; results do not depend on them.
  spec.group_size = std::max<size_t>(8, (spec.count + runner.threads() - 1) / runner.threads());
  spec.make_episode = [&](size_t i) {
    EpisodeConfig config;
    config.budget = c.budget;
    config.seed = seed;
    config.group_index = first + static_cast<int64_t>(i);
    auto episode = std::make_unique<Episode>(make_env(c.arm->setup.env().name(), c.env_params), c.codec,
                                             std::move(config));
    const uint64_t index = static_cast<uint64_t>(first) + i;
    episode->start(Task{prefix + std::to_string(index), index, prefix == "eval-" ? "test" : "train"});
    return episode;
  };
  return run_rollouts(spec, policy, runner);
}

double mean_reward(const std::vector<Trajectory>& trajectories) {
  double total = 0.0;
  for (const Trajectory& t : trajectories) total += t.reward;
  return trajectories.empty() ? 0.0 : total / static_cast<double>(trajectories.size());
}

// One pass over the batch's trainable tokens in index order (trajectories, segments, positions).
enum class Pass { kCritic, kActor };
void update(TabularPolicy& policy, const std::vector<Trajectory>& batch, const learners::Advantages& targets,
            Pass pass, const LearnerConfig& l) {
  size_t token = 0;
  for (const Trajectory& t : batch) {
    for (const Segment& seg : t.segments) {
      for (size_t i = 0; i < seg.response_ids.size(); ++i, ++token) {
        const bool actor = seg.actor_mask[i] != 0, critic = seg.critic_mask[i] != 0;
        if (pass == Pass::kActor && actor) {
          policy.actor_step(policy.cell(seg, i), targets.advantages[token], l.actor_lr());
        } else if (pass == Pass::kCritic && critic) {
          policy.critic_step(policy.cell(seg, i), targets.returns[token], l.critic_lr());
        }
      }
    }
  }
}

SeedResult run_one(const ArmContext& c, uint64_t seed, const RunOptions& options, const Runner& runner) {
  const Setup& s = c.arm->setup;
  const auto& training = s.training();
  const LearnerConfig& l = s.learner();
  const std::unique_ptr<Policy> policy = make_policy(
      s.policy().name(), policy_params(s), PolicyTarget{c.env_spec, c.codec}, "arm " + quote(c.arm->name));
  // Only the tabular policy learns today; any other registered policy is evaluated as it is.
  TabularPolicy* trainable = dynamic_cast<TabularPolicy*>(policy.get());
  const learners::Learner learner(learner_options(l), learners::Backend::kCpu);
  const learners::Schedule schedule(schedule_options(l));

  SeedResult result;
  result.seed = seed;
  result.episodes = training.episodes();
  result.eval_episodes = training.eval_episodes();
  const int64_t curve_eval =
      training.curve_eval_episodes() > 0 ? training.curve_eval_episodes() : training.eval_episodes();

  auto evaluate = [&](int64_t count, std::vector<Trajectory>* keep) {
    std::vector<Trajectory> eval = collect(c, *policy, seed, "eval-", 0, count, runner);
    const double accuracy = mean_reward(eval);
    if (keep != nullptr) *keep = std::move(eval);
    return accuracy;
  };

  CurvePoint start;
  start.episode = 0;
  start.eval_episodes = training.episodes() == 0 ? training.eval_episodes() : curve_eval;
  std::vector<Trajectory> final_eval;
  start.eval_accuracy = evaluate(start.eval_episodes, training.episodes() == 0 ? &final_eval : nullptr);
  result.curve.push_back(start);

  int64_t done = 0, batches = 0, next_point = training.eval_interval();
  double window_reward = 0.0;
  int64_t window_episodes = 0;
  while (done < training.episodes()) {
    // A batch never straddles a curve point, so the points fall exactly on multiples of eval_interval.
    const int64_t count = std::min({training.batch_size(), training.episodes() - done, next_point - done});
    const std::vector<Trajectory> batch = collect(c, *policy, seed, "train-", done, count, runner);
    for (const Trajectory& t : batch) window_reward += t.reward;
    window_episodes += count;
    if (trainable != nullptr) {
      // Advantages and returns once per batch, from the values recorded at sampling time (spec 1.4); then
      // the schedule's updates in order (critic warm-up, then critic x ratio and the actor).
      const learners::Batch flat = learners::make_batch(batch);
      const learners::Advantages targets = learner.advantages(flat);
      for (const learners::UpdateKind kind : schedule.updates(batches, flat)) {
        update(*trainable, batch, targets,
               kind == learners::UpdateKind::kActor ? Pass::kActor : Pass::kCritic, l);
      }
    }
    done += count;
    ++batches;
    if (options.progress) {
      options.progress(
          Progress{&c.arm->name, seed, done, training.episodes(),
                   window_episodes > 0 ? window_reward / static_cast<double>(window_episodes) : 0.0});
    }
    if (done >= next_point || done == training.episodes()) {
      CurvePoint point;
      point.episode = done;
      point.train_reward = window_reward / static_cast<double>(window_episodes);
      const bool final_point = done == training.episodes();
      point.eval_episodes = final_point ? training.eval_episodes() : curve_eval;
      point.eval_accuracy = evaluate(point.eval_episodes, final_point ? &final_eval : nullptr);
      result.curve.push_back(point);
      window_reward = 0.0;
      window_episodes = 0;
      while (next_point <= done) next_point += training.eval_interval();
    }
  }
  result.accuracy = result.curve.back().eval_accuracy;
  for (const Trajectory& t : final_eval) {
    if (t.reward > 0.0) {
      result.has_example = true;
      result.example = t;
      result.example_factors = learner.advantages(learners::make_batch({t})).factor;
      break;
    }
  }
  return result;
}

}  // namespace

learners::LearnerOptions learner_options(const LearnerConfig& l) {
  learners::LearnerOptions o;
  o.gamma = l.gamma();
  o.lambda_mode = l.lambda_mode() == LearnerConfig::ADAPTIVE ? learners::LambdaMode::kAdaptive
                                                             : learners::LambdaMode::kFixed;
  o.lambda = l.lambda();
  o.lambda_alpha = l.lambda_alpha();
  o.correction = l.correction();
  o.critic_target = l.critic_target() == LearnerConfig::CORRECTED ? learners::CriticTarget::kCorrected
                                                                  : learners::CriticTarget::kLocal;
  return o;
}

learners::ScheduleOptions schedule_options(const LearnerConfig& l) {
  learners::ScheduleOptions o;
  o.warmup_batches = l.warmup_batches();
  o.critic_per_actor = l.critic_per_actor();
  return o;
}

ScenarioResult run_scenario(const ScenarioSpec& spec, const RunOptions& options) {
  const Runner runner(std::max(1, options.threads));
  const std::vector<uint64_t>& seeds = options.seeds.empty() ? spec.seeds : options.seeds;
  ScenarioResult out;
  out.name = spec.name;
  for (const ArmSpec& arm : spec.arms) {
    ArmContext c;
    c.arm = &arm;
    c.env_params = env_params(arm.setup);
    c.prototype = make_env(arm.setup.env().name(), c.env_params, "arm " + quote(arm.name));
    c.env_spec = &c.prototype->spec();
    c.codec = make_codec(arm.setup.view(), *c.env_spec);
    c.budget = budget_of(arm.setup);

    ArmResult result;
    result.name = arm.name;
    result.description = arm.description;
    result.codec = c.codec;
    const Params resolved = Params::resolve(env_registry().entry(arm.setup.env().name()).params, c.env_params,
                                            "arm " + quote(arm.name));
    if (resolved.values().count("fact_arity")) {
      result.chance = 1.0 / static_cast<double>(resolved.get_int("fact_arity"));
    }
    double total = 0.0;
    for (uint64_t seed : seeds) {
      result.seeds.push_back(run_one(c, seed, options, runner));
      total += result.seeds.back().accuracy;
    }
    result.mean_accuracy = total / static_cast<double>(result.seeds.size());
    out.arms.push_back(std::move(result));
  }
  return out;
}

}  // namespace crl::scenarios
