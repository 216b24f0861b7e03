#include "scenarios/runner.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>

#include "engine/error.h"
#include "engine/runner.h"
#include "envs/registry.h"
#include "envs/synthetic/metrics.h"
#include "envs/synthetic/synthetic_env.h"
#include "envs/synthetic/task_mix.h"
#include "learners/batch.h"
#include "learners/learner.h"
#include "learners/schedule.h"
#include "policies/rollout.h"
#include "policies/trainable.h"
#include "scenarios/checkpoint.h"
#include "scenarios/warm_start.h"

namespace crl::scenarios {

namespace {

using proto::scenario::LearnerConfig;
using proto::scenario::Setup;

// What every run of one arm shares: the training and evaluation episode setups (the same environment, codec
// and budget; the evaluation's parameters have training.eval_env_params over the setup's).
struct ArmContext {
  const ArmSpec* arm = nullptr;
  EpisodeSetup train;
  EpisodeSetup eval;
  const EnvSpec* env_spec = nullptr;
  std::unique_ptr<Env> prototype;
};

double mean_reward(const std::vector<Trajectory>& trajectories) {
  double total = 0.0;
  for (const Trajectory& t : trajectories) total += t.reward;
  return trajectories.empty() ? 0.0 : total / static_cast<double>(trajectories.size());
}

// Where one (arm, seed) run stands between two batches: everything the next batches depend on besides the
// policy's own state (proto/checkpoint.proto RunState).
struct LoopState {
  int64_t done = 0;        // training episodes done (also the position in the run's random streams)
  int64_t batches = 0;     // batches trained (the learner schedule's position)
  int64_t next_point = 0;  // the next curve point
  double window_reward = 0.0;
  int64_t window_episodes = 0;
  CurvePoint
      window_ppo;  // PPO measurements of the actor updates since the previous point: sums (max_ratio a max)
};

// The PPO window: sums over the actor updates, then their means at the curve point.
void add_ppo(CurvePoint& window, const learners::UpdateStats& s) {
  ++window.ppo_updates;
  window.mean_abs_ratio += s.mean_abs_ratio;
  window.max_ratio = std::max(window.max_ratio, s.max_ratio);
  window.clip_fraction += s.clip_fraction;
  window.approx_kl += s.approx_kl;
  window.entropy += s.entropy;
}
void close_ppo(const CurvePoint& window, CurvePoint& point) {
  point.ppo_updates = window.ppo_updates;
  if (window.ppo_updates == 0) return;
  const double n = static_cast<double>(window.ppo_updates);
  point.mean_abs_ratio = window.mean_abs_ratio / n;
  point.max_ratio = window.max_ratio;
  point.clip_fraction = window.clip_fraction / n;
  point.approx_kl = window.approx_kl / n;
  point.entropy = window.entropy / n;
}

proto::checkpoint::Checkpoint make_checkpoint(const std::string& scenario, const ArmContext& c, uint64_t seed,
                                              const Trainable& trainable, const LoopState& loop,
                                              const std::vector<CurvePoint>& curve, int64_t total) {
  proto::checkpoint::Checkpoint out;
  out.set_scenario(scenario);
  out.set_arm(c.arm->name);
  out.set_seed(seed);
  *out.mutable_setup() = c.arm->setup;
  trainable.save(*out.mutable_policy());
  auto* run = out.mutable_run();
  run->set_episodes_done(loop.done);
  run->set_batches_done(loop.batches);
  run->set_next_point(loop.next_point);
  run->set_window_reward(loop.window_reward);
  run->set_window_episodes(loop.window_episodes);
  run->set_episodes_total(total);
  point_to_proto(loop.window_ppo, run->mutable_window_ppo());
  for (const CurvePoint& p : curve) point_to_proto(p, run->add_curve());
  return out;
}

// The setup that decides a run's results: the arm's, without checkpoint_every (how often checkpoints are
// written changes nothing else, so a run may resume with another value).
Setup result_setup(Setup setup) {
  setup.mutable_training()->clear_checkpoint_every();
  return setup;
}

// Restores the newest checkpoint of the run from `folder`; false when there is none. Throws crl::Error when
// the newest one is unreadable or belongs to another scenario, arm, seed or setup.
bool restore(const std::string& folder, const std::string& scenario, const ArmContext& c, uint64_t seed,
             Trainable& trainable, LoopState& loop, std::vector<CurvePoint>& curve, int64_t total) {
  const std::vector<std::string> files = list_checkpoints(folder);
  if (files.empty()) return false;
  const std::string& path = files.front();
  const proto::checkpoint::Checkpoint ck = read_checkpoint(path);
  const std::string again = " (run without --resume to start over)";
  if (ck.scenario() != scenario || ck.arm() != c.arm->name || ck.seed() != seed) {
    throw Error(path, "",
                "belongs to scenario " + quote(ck.scenario()) + ", arm " + quote(ck.arm()) + ", seed " +
                    std::to_string(ck.seed()) + ", not to scenario " + quote(scenario) + ", arm " +
                    quote(c.arm->name) + ", seed " + std::to_string(seed) + again);
  }
  if (!google::protobuf::util::MessageDifferencer::Equals(result_setup(ck.setup()),
                                                          result_setup(c.arm->setup))) {
    throw Error(path, "setup",
                "was written for another setup of arm " + quote(c.arm->name) +
                    " (the scenario file changed since)" + again);
  }
  const auto& run = ck.run();
  // A file with the right hash can still be hand-made: the loop must be able to continue from it.
  if (run.episodes_total() != total || run.episodes_done() < 0 || run.episodes_done() > total ||
      run.curve_size() < 1 || run.batches_done() < 0 || run.window_episodes() < 0 ||
      (run.episodes_done() < total && run.next_point() <= run.episodes_done())) {
    throw Error(path, "run",
                "inconsistent run state (" + std::to_string(run.episodes_done()) + " of " +
                    std::to_string(run.episodes_total()) + " episodes, " + std::to_string(run.curve_size()) +
                    " curve points)");
  }
  trainable.load(ck.policy(), path);
  loop.done = run.episodes_done();
  loop.batches = run.batches_done();
  loop.next_point = run.next_point();
  loop.window_reward = run.window_reward();
  loop.window_episodes = run.window_episodes();
  loop.window_ppo = point_from_proto(run.window_ppo());
  curve.clear();
  for (const auto& p : run.curve()) curve.push_back(point_from_proto(p));
  return true;
}

// The pretraining stage (proto PretrainConfig): a policy built with the pretraining's parameters trains on
// `episodes` episodes "pretrain-<i>" of the environment with the pretraining's parameters (same learner,
// schedule from batch 0, batch size), then its whole state (parameters and optimizer) moves into `target`,
// the arm's own policy. Runs on the runner's threads like training; a pure function of the seed.
void pretrain(const ArmContext& c, uint64_t seed, Trainable& target, const learners::Learner& learner,
              const learners::Schedule& schedule, const Runner& runner,
              const std::function<void(size_t)>& episodes_done) {
  const Setup& s = c.arm->setup;
  const auto& p = s.pretrain();
  EpisodeSetup setup = c.train;
  for (const auto& [k, v] : p.env_params()) setup.params[k] = v;
  const std::string where = "arm " + quote(c.arm->name) + " pretrain";
  const std::unique_ptr<Env> env = make_env(setup.env, setup.params, where);
  std::map<std::string, std::string> params = policy_params(s);
  for (const auto& [k, v] : p.policy_params()) params[k] = v;
  const std::unique_ptr<Policy> policy = make_policy(
      s.policy().name(), params, PolicyTarget{&env->spec(), setup.codec, setup.params, &setup.budget}, where);
  Trainable* trainable = dynamic_cast<Trainable*>(policy.get());
  CRL_CHECK(trainable != nullptr, "pretraining a policy that does not learn (checked by parse_scenario)");
  trainable->initialize(seed);
  // The same base model as the arm's own warm start would give (demonstrations of the arm's environment).
  warm_start(s.warm_start(), c.train, seed, *trainable, "arm " + quote(c.arm->name) + " warm_start");
  const LearnerConfig& l = s.learner();
  int64_t done = 0, batches = 0;
  while (done < p.episodes()) {
    const int64_t count = std::min(s.training().batch_size(), p.episodes() - done);
    const std::vector<Trajectory> batch =
        collect_episodes(setup, *policy, seed, "pretrain-", done, count, runner, episodes_done);
    const learners::Batch flat = learners::make_batch(batch);
    const learners::Advantages targets = learner.advantages(flat);
    for (const learners::UpdateKind kind : schedule.updates(batches, flat)) {
      trainable->train(TrainStep{&batch, &flat, &targets, &learner, kind, l.actor_lr(), l.critic_lr()});
    }
    done += count;
    ++batches;
  }
  proto::checkpoint::PolicyState state;
  trainable->save(state);
  target.load(state, where);
}

SeedResult run_one(const std::string& scenario, const ArmContext& c, uint64_t seed, const RunOptions& options,
                   const Runner& runner) {
  const Setup& s = c.arm->setup;
  const auto& training = s.training();
  const LearnerConfig& l = s.learner();
  const std::unique_ptr<Policy> policy = make_policy(
      s.policy().name(), policy_params(s),
      PolicyTarget{c.env_spec, c.train.codec, c.train.params, &c.train.budget}, "arm " + quote(c.arm->name));
  // A Trainable policy (tabular, neural) trains itself; any other registered policy is evaluated as it is.
  Trainable* trainable = dynamic_cast<Trainable*>(policy.get());
  if (trainable != nullptr) trainable->initialize(seed);
  const learners::Learner learner(learner_options(l), learners::Backend::kCpu);
  const learners::Schedule schedule(schedule_options(l));

  SeedResult result;
  result.seed = seed;
  result.episodes = training.episodes();
  result.eval_episodes = training.eval_episodes();
  const int64_t curve_eval =
      training.curve_eval_episodes() > 0 ? training.curve_eval_episodes() : training.eval_episodes();

  std::function<void(size_t)> episodes_done;
  if (options.episodes_done) {
    episodes_done = [&options](size_t n) { options.episodes_done(static_cast<int64_t>(n)); };
  }
  // Evaluates `count` held-out episodes into `point` (accuracy and the pooled summary metrics).
  auto evaluate = [&](int64_t count, CurvePoint& point, std::vector<Trajectory>* keep) {
    std::vector<Trajectory> eval =
        collect_episodes(c.eval, *policy, seed, "eval-", 0, count, runner, episodes_done);
    point.eval_episodes = count;
    point.eval_accuracy = mean_reward(eval);
    point.summaries = pooled_summaries(c.eval, eval);
    if (keep != nullptr) *keep = std::move(eval);
  };

  // Checkpoints only for policies with a state; a fresh run first removes the older ones of this run, so
  // that --resume never finds checkpoints of an earlier, different run.
  const std::string folder = options.checkpoint_dir.empty() || trainable == nullptr
                                 ? std::string()
                                 : checkpoint_folder(options.checkpoint_dir, c.arm->name, seed);
  const int64_t total = training.episodes(), every = training.checkpoint_every();
  LoopState loop;
  loop.next_point = training.eval_interval();
  bool resumed = false;
  if (!folder.empty()) {
    if (options.resume) {
      resumed = restore(folder, scenario, c, seed, *trainable, loop, result.curve, total);
    } else {
      remove_checkpoints(folder);
    }
  }
  auto save = [&] {
    if (folder.empty()) return;
    write_checkpoint(checkpoint_path(options.checkpoint_dir, c.arm->name, seed, loop.done),
                     make_checkpoint(scenario, c, seed, *trainable, loop, result.curve, total));
  };
  int64_t next_checkpoint = every > 0 ? (loop.done / every + 1) * every : std::numeric_limits<int64_t>::max();

  if (resumed && options.episodes_done) {  // what the checkpoint holds counts as done
    int64_t skipped = loop.done + s.pretrain().episodes();
    for (const CurvePoint& p : result.curve) skipped += p.eval_episodes;
    if (loop.done == total && total > 0) skipped -= training.eval_episodes();  // evaluated again below
    options.episodes_done(skipped);
  }
  std::vector<Trajectory> final_eval;
  bool have_final_eval = false;
  if (!resumed) {
    if (trainable != nullptr && s.has_init_checkpoint()) {  // parse_scenario checked that it loads
      trainable->load(read_checkpoint(s.init_checkpoint()).policy(), s.init_checkpoint());
      if (s.fresh_optimizer()) trainable->reset_optimizer();
    } else if (trainable != nullptr && s.pretrain().episodes() > 0) {
      pretrain(c, seed, *trainable, learner, schedule, runner, episodes_done);  // warm-starts its policy
    } else if (trainable != nullptr) {
      warm_start(s.warm_start(), c.train, seed, *trainable, "arm " + quote(c.arm->name) + " warm_start");
    }
    CurvePoint start;
    start.episode = 0;
    evaluate(total == 0 ? training.eval_episodes() : curve_eval, start, total == 0 ? &final_eval : nullptr);
    have_final_eval = total == 0;
    result.curve.push_back(start);
  }

  while (loop.done < total) {
    // A batch never straddles a curve point, so the points fall exactly on multiples of eval_interval.
    const int64_t count = std::min({training.batch_size(), total - loop.done, loop.next_point - loop.done});
    const std::vector<Trajectory> batch =
        collect_episodes(c.train, *policy, seed, "train-", loop.done, count, runner, episodes_done);
    for (const Trajectory& t : batch) loop.window_reward += t.reward;
    loop.window_episodes += count;
    if (trainable != nullptr) {
      // Advantages and returns once per batch, from the values recorded at sampling time (spec 1.4); then
      // the schedule's updates in order (critic warm-up, then critic x ratio and the actor).
      const learners::Batch flat = learners::make_batch(batch);
      const learners::Advantages targets = learner.advantages(flat);
      for (const learners::UpdateKind kind : schedule.updates(loop.batches, flat)) {
        learners::UpdateStats stats;
        trainable->train(
            TrainStep{&batch, &flat, &targets, &learner, kind, l.actor_lr(), l.critic_lr(), &stats, &runner});
        if (kind == learners::UpdateKind::kActor && stats.steps > 0) add_ppo(loop.window_ppo, stats);
      }
    }
    loop.done += count;
    ++loop.batches;
    if (options.progress) {
      options.progress(Progress{
          &c.arm->name, seed, loop.done, total,
          loop.window_episodes > 0 ? loop.window_reward / static_cast<double>(loop.window_episodes) : 0.0});
    }
    if (loop.done >= loop.next_point || loop.done == total) {
      CurvePoint point;
      point.episode = loop.done;
      point.train_reward = loop.window_reward / static_cast<double>(loop.window_episodes);
      const bool final_point = loop.done == total;
      evaluate(final_point ? training.eval_episodes() : curve_eval, point,
               final_point ? &final_eval : nullptr);
      close_ppo(loop.window_ppo, point);
      loop.window_ppo = CurvePoint{};
      have_final_eval = final_point;
      result.curve.push_back(point);
      loop.window_reward = 0.0;
      loop.window_episodes = 0;
      while (loop.next_point <= loop.done) loop.next_point += training.eval_interval();
    }
    // Intermediate checkpoints after the first batch that reaches each multiple of checkpoint_every (the
    // batches are never cut for them); the final one follows the loop.
    if (loop.done >= next_checkpoint && loop.done < total) {
      save();
      while (next_checkpoint <= loop.done) next_checkpoint += every;
    }
  }
  if (!resumed || have_final_eval) save();  // resumed from the final checkpoint: it is already there
  // Resumed from the final checkpoint: the final evaluation is a pure function of the policy and the seed,
  // so running it again gives the episodes the uninterrupted run evaluated.
  if (!have_final_eval) {
    CurvePoint again;
    evaluate(training.eval_episodes(), again, &final_eval);
  }
  result.accuracy = result.curve.back().eval_accuracy;
  result.types = type_breakdown(c.eval, final_eval);
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

std::vector<Trajectory> collect_episodes(const EpisodeSetup& setup, const Policy& policy, uint64_t seed,
                                         const std::string& prefix, int64_t first, int64_t count,
                                         const Runner& runner, const std::function<void(size_t)>& on_done) {
  RolloutSpec spec;
  spec.on_done = on_done;
  spec.count = static_cast<size_t>(count);
  // Groups only decide which thread drives which episodes; results do not depend on them.
  spec.group_size = std::max<size_t>(8, (spec.count + runner.threads() - 1) / runner.threads());
  const std::string split = prefix == "train-" || prefix == "pretrain-" ? "train" : "test";
  spec.make_episode = [&](size_t i) {
    EpisodeConfig config;
    config.budget = setup.budget;
    config.seed = seed;
    config.group_index = first + static_cast<int64_t>(i);
    auto episode =
        std::make_unique<Episode>(make_env(setup.env, setup.params), setup.codec, std::move(config));
    const uint64_t index = static_cast<uint64_t>(first) + i;
    // Training and evaluation run more episodes than a split holds tasks: they cycle through it by design.
    episode->start(Task{prefix + std::to_string(index), index, split, /*cycle=*/true});
    return episode;
  };
  return run_rollouts(spec, policy, runner);
}

namespace {

// The synthetic suite's metrics of evaluation episodes (symbolic view, or the text view with summaries
// measured on the decoded text); false for other environments.
bool synthetic_metrics(const EpisodeSetup& setup, const std::vector<Trajectory>& eval,
                       envs::synthetic::MetricsTable& table) {
  if (setup.env != "synthetic") return false;
  const bool text = setup.codec->view_name() == "text";  // a policy that writes text (policies/lm)
  const Params p = Params::resolve(env_registry().entry("synthetic").params, setup.params, "evaluation");
  // The tasks the environment cycles through, restricted like the environment's (`types`).
  const auto tasks = envs::synthetic::restrict_task_types(
      envs::synthetic::shared_task_set(p.get_string("source"), p.get_string("data_dir"),
                                       p.get_string("namespace"), p.get_string("split")),
      p.get_string("types"));
  for (const Trajectory& t : eval) {
    const auto& task = tasks->tasks[static_cast<size_t>(t.group_index) % tasks->tasks.size()];
    table.add(text ? envs::synthetic::episode_metrics_text(task, t, *setup.codec)
                   : envs::synthetic::episode_metrics_symbolic(task, t));
  }
  return true;
}

TypeResult type_result(std::string name, const envs::synthetic::MetricsTable::Totals& totals) {
  TypeResult r;
  r.type = std::move(name);
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
  return r;
}

}  // namespace

std::vector<TypeResult> type_breakdown(const EpisodeSetup& setup, const std::vector<Trajectory>& eval) {
  std::vector<TypeResult> out;
  envs::synthetic::MetricsTable table;
  if (!synthetic_metrics(setup, eval, table)) return out;
  for (const envs::synthetic::TaskType type : envs::synthetic::kTaskTypes) {
    out.push_back(type_result(std::string(envs::synthetic::task_type_name(type)), table.totals(type)));
  }
  return out;
}

TypeResult pooled_summaries(const EpisodeSetup& setup, const std::vector<Trajectory>& eval) {
  envs::synthetic::MetricsTable table;
  if (!synthetic_metrics(setup, eval, table)) return TypeResult{};
  return type_result("all", table.all());
}

learners::LearnerOptions learner_options(const LearnerConfig& l) {
  learners::LearnerOptions o;
  o.gamma = l.gamma();
  switch (l.lambda_mode()) {
    case LearnerConfig::ADAPTIVE:
      o.lambda_mode = learners::LambdaMode::kAdaptive;
      break;
    case LearnerConfig::TOKENWISE:
      o.lambda_mode = learners::LambdaMode::kTokenwise;
      break;
    default:
      o.lambda_mode = learners::LambdaMode::kFixed;
  }
  o.lambda = l.lambda();
  o.lambda_alpha = l.lambda_alpha();
  o.correction = l.correction();
  switch (l.correction_segments()) {
    case LearnerConfig::EXECUTION:
      o.correction_segments = learners::CorrectionSegments::kExecution;
      break;
    case LearnerConfig::SUMMARY:
      o.correction_segments = learners::CorrectionSegments::kSummary;
      break;
    default:
      o.correction_segments = learners::CorrectionSegments::kAll;
  }
  switch (l.critic_target()) {
    case LearnerConfig::CORRECTED:
      o.critic_target = learners::CriticTarget::kCorrected;
      break;
    case LearnerConfig::STITCHED:
      o.critic_target = learners::CriticTarget::kStitched;
      break;
    default:
      o.critic_target = learners::CriticTarget::kLocal;
  }
  o.summary_loss_masked = l.summary_loss_masked();
  o.token_level_normalization = l.token_level_normalization();
  o.whiten_advantages = l.whiten_advantages();
  o.whiten_epsilon = l.whiten_epsilon();
  o.positive_only = l.positive_only();
  o.clip_epsilon = l.clip_epsilon();
  o.value_clip = l.value_clip();
  o.kl_coef = l.kl_coef();
  o.ppo_epochs = l.ppo_epochs();
  o.minibatches = l.minibatches();
  return o;
}

learners::ScheduleOptions schedule_options(const LearnerConfig& l) {
  learners::ScheduleOptions o;
  o.warmup_batches = l.warmup_batches();
  o.critic_per_actor = l.critic_per_actor();
  o.actor_gate = l.actor_gate();
  o.gate_threshold = l.gate_threshold();
  o.positive_only = l.positive_only();
  return o;
}

namespace {

// The arm's episode setups and its environment (the prototype the spec points into).
void make_context(const ArmSpec& arm, ArmContext& c) {
  c.arm = &arm;
  c.train.env = arm.setup.env().name();
  c.train.params = env_params(arm.setup);
  c.prototype = make_env(arm.setup.env().name(), c.train.params, "arm " + quote(arm.name));
  c.env_spec = &c.prototype->spec();
  c.train.codec = setup_codec(arm.setup, *c.env_spec);
  c.train.budget = budget_of(arm.setup);
  c.eval = c.train;
  for (const auto& [k, v] : arm.setup.training().eval_env_params()) c.eval.params[k] = v;
}

}  // namespace

std::vector<JobResult> run_jobs(const ScenarioSpec& spec, const RunOptions& options,
                                const std::function<bool(size_t)>& select) {
  const Runner runner(std::max(1, options.threads));
  const std::vector<uint64_t>& seeds = options.seeds.empty() ? spec.seeds : options.seeds;
  std::vector<JobResult> out;
  for (size_t a = 0; a < spec.arms.size(); ++a) {
    ArmContext c;
    for (size_t s = 0; s < seeds.size(); ++s) {
      const size_t index = a * seeds.size() + s;
      if (select && !select(index)) continue;
      if (c.arm == nullptr) make_context(spec.arms[a], c);
      if (options.stage) options.stage(spec.arms[a].name, seeds[s]);
      out.push_back(JobResult{a, s, run_one(spec.name, c, seeds[s], options, runner)});
    }
  }
  return out;
}

ScenarioResult assemble_result(const ScenarioSpec& spec, const std::vector<uint64_t>& seeds,
                               std::vector<JobResult> jobs) {
  std::sort(jobs.begin(), jobs.end(), [](const JobResult& x, const JobResult& y) {
    return std::pair(x.arm, x.seed_index) < std::pair(y.arm, y.seed_index);
  });
  if (jobs.size() != spec.arms.size() * seeds.size()) {
    throw Error("scenario " + quote(spec.name), "",
                std::to_string(jobs.size()) + " job results for " + std::to_string(spec.arms.size()) +
                    " arms x " + std::to_string(seeds.size()) + " seeds");
  }
  ScenarioResult out;
  out.name = spec.name;
  for (size_t a = 0; a < spec.arms.size(); ++a) {
    const ArmSpec& arm = spec.arms[a];
    ArmContext c;
    make_context(arm, c);
    ArmResult result;
    result.name = arm.name;
    result.description = arm.description;
    result.codec = c.train.codec;
    const Params resolved = Params::resolve(env_registry().entry(arm.setup.env().name()).params,
                                            c.train.params, "arm " + quote(arm.name));
    if (resolved.values().count("fact_arity")) {
      result.chance = 1.0 / static_cast<double>(resolved.get_int("fact_arity"));
    }
    double total = 0.0;
    for (size_t s = 0; s < seeds.size(); ++s) {
      JobResult& job = jobs[a * seeds.size() + s];
      if (job.arm != a || job.seed_index != s || job.result.seed != seeds[s]) {
        throw Error("scenario " + quote(spec.name), "",
                    "job results do not cover arm " + quote(arm.name) + " seed " + std::to_string(seeds[s]) +
                        " exactly once");
      }
      result.seeds.push_back(std::move(job.result));
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

ScenarioResult run_scenario(const ScenarioSpec& spec, const RunOptions& options) {
  return assemble_result(spec, options.seeds.empty() ? spec.seeds : options.seeds,
                         run_jobs(spec, options, {}));
}

int64_t planned_episodes(const ScenarioSpec& spec, const RunOptions& options,
                         const std::function<bool(size_t)>& select) {
  const size_t seeds = options.seeds.empty() ? spec.seeds.size() : options.seeds.size();
  int64_t episodes = 0;
  for (size_t a = 0; a < spec.arms.size(); ++a) {
    const auto& t = spec.arms[a].setup.training();
    const int64_t total = t.episodes();
    const int64_t curve_eval = t.curve_eval_episodes() > 0 ? t.curve_eval_episodes() : t.eval_episodes();
    // As run_one: the start point, one point per multiple of eval_interval below the total, the final point.
    int64_t n = total == 0 ? t.eval_episodes() : curve_eval + total + t.eval_episodes();
    n += spec.arms[a].setup.pretrain().episodes();
    if (total > 0 && t.eval_interval() > 0) n += ((total - 1) / t.eval_interval()) * curve_eval;
    // Jobs are numbered arm x seeds + seed, as in run_jobs (a shard selects some of them).
    for (size_t s = 0; s < seeds; ++s) {
      if (!select || select(a * seeds + s)) episodes += n;
    }
  }
  return episodes;
}

}  // namespace crl::scenarios
