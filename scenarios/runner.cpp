#include "scenarios/runner.h"

#include <algorithm>

#include "engine/runner.h"
#include "envs/registry.h"
#include "envs/synthetic/metrics.h"
#include "envs/synthetic/synthetic_env.h"
#include "learners/batch.h"
#include "learners/learner.h"
#include "learners/schedule.h"
#include "policies/rollout.h"
#include "policies/tabular/tabular_policy.h"
#include "policies/trainable.h"

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
  std::map<std::string, std::string> eval_env_params;  // env_params with training.eval_env_params over them
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
    const bool eval = prefix == "eval-";
    auto episode = std::make_unique<Episode>(
        make_env(c.arm->setup.env().name(), eval ? c.eval_env_params : c.env_params), c.codec,
        std::move(config));
    const uint64_t index = static_cast<uint64_t>(first) + i;
    // Training and evaluation run more episodes than a split holds tasks: they cycle through it by design.
    episode->start(Task{prefix + std::to_string(index), index, eval ? "test" : "train", /*cycle=*/true});
    return episode;
  };
  return run_rollouts(spec, policy, runner);
}

double mean_reward(const std::vector<Trajectory>& trajectories) {
  double total = 0.0;
  for (const Trajectory& t : trajectories) total += t.reward;
  return trajectories.empty() ? 0.0 : total / static_cast<double>(trajectories.size());
}

// The tabular policy as a Trainable: each pass is plain SGD over the batch's trainable tokens in index order
// (trajectories, segments, positions), on the learner's advantages (actor) or returns (critic).
class TabularTrainer final : public Trainable {
 public:
  explicit TabularTrainer(TabularPolicy& policy) : policy_(policy) {}
  void initialize(uint64_t /*seed: the tables start at zero*/) override {}
  void train(const TrainStep& step) override {
    size_t token = 0;
    const bool actor_pass = step.kind == learners::UpdateKind::kActor;
    for (const Trajectory& t : *step.trajectories) {
      for (const Segment& seg : t.segments) {
        for (size_t i = 0; i < seg.response_ids.size(); ++i, ++token) {
          const bool actor = seg.actor_mask[i] != 0, critic = seg.critic_mask[i] != 0;
          if (actor_pass && actor) {
            policy_.actor_step(policy_.cell(seg, i), step.targets->advantages[token], step.actor_lr);
          } else if (!actor_pass && critic) {
            policy_.critic_step(policy_.cell(seg, i), step.targets->returns[token], step.critic_lr);
          }
        }
      }
    }
  }

 private:
  TabularPolicy& policy_;
};

// Per task type exact match and summary metrics of the final evaluation, for environments with typed tasks
// (the synthetic suite in the symbolic view); empty for the others.
std::vector<TypeResult> type_breakdown(const ArmContext& c, const std::vector<Trajectory>& eval) {
  std::vector<TypeResult> out;
  if (c.arm->setup.env().name() != "synthetic" || c.codec->view_name() != "symbolic") return out;
  const Params p = Params::resolve(env_registry().entry("synthetic").params, c.eval_env_params, "evaluation");
  const auto tasks = envs::synthetic::shared_task_set(p.get_string("source"), p.get_string("data_dir"),
                                                      p.get_string("namespace"), p.get_string("split"));
  envs::synthetic::MetricsTable table;
  for (const Trajectory& t : eval) {
    const auto& task = tasks->tasks[static_cast<size_t>(t.group_index) % tasks->tasks.size()];
    table.add(envs::synthetic::episode_metrics_symbolic(task, t));
  }
  for (const envs::synthetic::TaskType type : envs::synthetic::kTaskTypes) {
    const auto& totals = table.totals(type);
    TypeResult r;
    r.type = std::string(envs::synthetic::task_type_name(type));
    r.episodes = totals.episodes;
    r.exact_match = totals.episodes > 0 ? static_cast<double>(totals.exact) / totals.episodes : 0.0;
    const double summaries = totals.summaries > 0 ? totals.summaries : 1.0;
    r.summaries_per_episode =
        totals.episodes > 0 ? static_cast<double>(totals.summaries) / totals.episodes : 0.0;
    r.recall = totals.recall_sum / summaries;
    r.invention = totals.mentions > 0 ? static_cast<double>(totals.invented) / totals.mentions : 0.0;
    r.repetition = totals.mentions > 0 ? static_cast<double>(totals.repeated) / totals.mentions : 0.0;
    r.length = totals.length_sum / summaries;
    r.f1 = totals.f1_sum / summaries;
    out.push_back(r);
  }
  return out;
}

SeedResult run_one(const ArmContext& c, uint64_t seed, const RunOptions& options, const Runner& runner) {
  const Setup& s = c.arm->setup;
  const auto& training = s.training();
  const LearnerConfig& l = s.learner();
  const std::unique_ptr<Policy> policy = make_policy(
      s.policy().name(), policy_params(s), PolicyTarget{c.env_spec, c.codec}, "arm " + quote(c.arm->name));
  // A Trainable policy (neural) trains itself; the tabular policy through its adapter; any other registered
  // policy is evaluated as it is.
  Trainable* trainable = dynamic_cast<Trainable*>(policy.get());
  std::unique_ptr<TabularTrainer> tabular;
  if (trainable == nullptr) {
    if (auto* table = dynamic_cast<TabularPolicy*>(policy.get())) {
      tabular = std::make_unique<TabularTrainer>(*table);
      trainable = tabular.get();
    }
  }
  if (trainable != nullptr) trainable->initialize(seed);
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
        trainable->train(TrainStep{&batch, &flat, &targets, &learner, kind, l.actor_lr(), l.critic_lr()});
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
  result.types = type_breakdown(c, final_eval);
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
  o.summary_loss_masked = l.summary_loss_masked();
  o.clip_epsilon = l.clip_epsilon();
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
    c.eval_env_params = c.env_params;
    for (const auto& [k, v] : arm.setup.training().eval_env_params()) c.eval_env_params[k] = v;
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
    // Per type: the mean over seeds of each metric.
    if (!result.seeds.empty()) result.types = result.seeds.front().types;
    for (size_t i = 0; i < result.types.size(); ++i) {
      TypeResult& m = result.types[i];
      m = TypeResult{m.type};
      for (const SeedResult& s : result.seeds) {
        const TypeResult& x = s.types[i];
        const double w = 1.0 / static_cast<double>(result.seeds.size());
        m.episodes += x.episodes;
        m.exact_match += w * x.exact_match;
        m.summaries_per_episode += w * x.summaries_per_episode;
        m.recall += w * x.recall;
        m.invention += w * x.invention;
        m.repetition += w * x.repetition;
        m.length += w * x.length;
        m.f1 += w * x.f1;
      }
    }
    out.arms.push_back(std::move(result));
  }
  return out;
}

}  // namespace crl::scenarios
