#pragma once
// Runs a scenario: for every arm and seed, train the policy with the CompactionRL learner and evaluate it on
// held-out episodes.
//
// One (arm, seed) run:
//   repeat until `episodes` training episodes are done:
//     collect a batch of `batch_size` episodes with run_rollouts (task "train-<i>", stream keyed by the run
//     seed, the task and the sample), the policy frozen during the collection;
//     compute advantages and returns for the whole batch with the CompactionRL learner (learners/learner.h:
//     local GAE per segment x (gamma lambda_s)^N_after, from the values recorded at sampling time);
//     apply the schedule: critic-only for the first `warmup_batches` batches, then `critic_per_actor`
//     critic passes and one actor pass, each pass visiting the trainable tokens in index order;
//     every `eval_interval` episodes, evaluate on tasks "eval-<i>" (sampled, as in training) -> a curve
//     point.
//   the final accuracy: the mean reward over `eval_episodes` held-out episodes.
// A policy learns when it is a Trainable (policies/trainable.h: the tabular and the neural policy); the
// runner calls initialize(seed) and then train() once per update the schedule asks for. Other policies are
// evaluated as they are. Checkpoints and resume (RunOptions::checkpoint_dir, resume): a checkpoint holds the
// policy's state and the loop's position (episodes and batches done, the curve so far, the reward window of
// the next point), taken between batches. Random streams are counter-based, keyed by the episode index, so
// nothing else shapes the later episodes and a resumed run continues bit for bit. The final evaluation's
// episodes are evaluated again when a run resumes from its final checkpoint (a pure function of the policy
// and the seed). Environment parameters of evaluation episodes may differ (training.eval_env_params, e.g.
// split: dev). An arm may pretrain first (setup.pretrain, proto/scenario.proto: another task mix, other
// policy parameters, tasks "pretrain-<i>"), inside the same job, so shards stay independent. For the
// synthetic suite (symbolic or text view) the final evaluation is also broken down per task type (exact match
// and summary metrics, envs/synthetic/metrics.h). Why the result cannot depend on the thread count: episodes
// only read their own streams and the policy snapshot; the updates run on one thread in index order.
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/runner.h"
#include "engine/trajectory.h"
#include "envs/codec.h"
#include "learners/options.h"
#include "learners/schedule.h"
#include "policies/policy.h"
#include "scenarios/scenario.h"

namespace crl::scenarios {

// Exact match and summary metrics of evaluation episodes of one task type, or of all types pooled (type
// "all"), for environments with typed tasks (the synthetic suite); episodes 0: not measured.
struct TypeResult {
  std::string type;
  int64_t episodes = 0;
  double exact_match = 0.0;
  double summaries_per_episode = 0.0;
  double recall = 0.0;      // mean milestone recall per summary
  double invention = 0.0;   // invented / mentions
  double repetition = 0.0;  // repeated / mentions
  double length = 0.0;      // mean summary length (symbols up to and including STOP; text view: tokens)
  double f1 = 0.0;          // mean plan-token F1 per summary
};

struct CurvePoint {
  int64_t episode = 0;  // training episodes done
  // Mean training reward over the episodes since the previous point (NaN at episode 0).
  double train_reward = std::numeric_limits<double>::quiet_NaN();
  double eval_accuracy = 0.0;
  int64_t eval_episodes = 0;
  // The PPO updates since the previous point (learners/update_stats.h), so that a report can show whether
  // the ratio moved and the clip bound: the number of actor updates of a trainer that measures them (the
  // neural policy), the mean over them of mean |rho - 1|, clip fraction, approximate KL and entropy, and the
  // max ratio. All 0 without such updates.
  int64_t ppo_updates = 0;
  double mean_abs_ratio = 0.0, max_ratio = 0.0, clip_fraction = 0.0, approx_kl = 0.0, entropy = 0.0;
  // The summaries written in the point's evaluation episodes, all task types pooled (type "all"): the
  // paper's Fig. 4 (summary length, recall, invention, repetition over training). Synthetic suite only;
  // episodes 0 elsewhere.
  TypeResult summaries = {};
};

struct SeedResult {
  uint64_t seed = 0;
  double accuracy = 0.0;  // final held-out accuracy
  int64_t episodes = 0;   // training episodes
  int64_t eval_episodes = 0;
  std::vector<CurvePoint> curve;
  // The first rewarded episode of the final evaluation (for the report's trace); has_example is false when
  // no episode was rewarded.
  bool has_example = false;
  Trajectory example;
  std::vector<double> example_factors;  // correction factor of each of its segments under the arm's learner
  std::vector<TypeResult> types;        // per task type (empty for untyped environments)
};

struct ArmResult {
  std::string name;
  std::string description;
  double mean_accuracy = 0.0;
  double chance = std::numeric_limits<double>::quiet_NaN();  // 1 / fact_arity when the env declares one
  std::vector<SeedResult> seeds;
  std::shared_ptr<const Codec> codec;  // decodes the example trajectories
  std::vector<TypeResult> types;       // per task type, each metric the mean over seeds (episodes: the sum)
};

struct ScenarioResult {
  std::string name;
  std::vector<ArmResult> arms;
};

struct Progress {
  const std::string* arm = nullptr;
  uint64_t seed = 0;
  int64_t episode = 0;
  int64_t episodes = 0;
  double running_accuracy = 0.0;  // mean training reward over the last eval interval
};

struct RunOptions {
  int threads = 1;
  std::vector<uint64_t> seeds;                    // non-empty: replaces the scenario's seeds
  std::function<void(const Progress&)> progress;  // called after every batch (may be empty)
  // Progress in episodes (training and evaluation; planned_episodes() is the total): `stage` is called on the
  // main thread when an (arm, seed) run starts, `episodes_done` from the worker threads as episodes finish
  // (and once with the episodes a resumed run skips). Both may be empty; neither can change a result.
  std::function<void(const std::string& arm, uint64_t seed)> stage;
  std::function<void(int64_t episodes)> episodes_done;
  // Non-empty: each (arm, seed) run of a trainable policy writes checkpoints under this folder
  // (scenarios/checkpoint.h layout) every training.checkpoint_every episodes and at the end. A run that does
  // not resume first removes the older checkpoints of its (arm, seed).
  std::string checkpoint_dir;
  // With checkpoint_dir: each (arm, seed) run continues from its newest checkpoint there (from the start when
  // it has none). The results are the bytes an uninterrupted run gives.
  bool resume = false;
};

// Copies a TypeResult to and from a message with the same field names (proto/type_metrics.proto).
template <typename Message>
void type_to_proto(const TypeResult& t, Message* m) {
  m->set_type(t.type);
  m->set_episodes(t.episodes);
  m->set_exact_match(t.exact_match);
  m->set_summaries_per_episode(t.summaries_per_episode);
  m->set_recall(t.recall);
  m->set_invention(t.invention);
  m->set_repetition(t.repetition);
  m->set_length(t.length);
  m->set_f1(t.f1);
}
template <typename Message>
TypeResult type_from_proto(const Message& m) {
  return TypeResult{m.type(),   m.episodes(),  m.exact_match(), m.summaries_per_episode(),
                    m.recall(), m.invention(), m.repetition(),  m.length(),
                    m.f1()};
}

// Copies a curve point to and from a message with the same field names (the checkpoint's CurvePoint, the
// shard record's Point): every field, so that a resumed or merged run reports the same bytes.
template <typename Message>
void point_to_proto(const CurvePoint& p, Message* m) {
  m->set_episode(p.episode);
  m->set_train_reward(p.train_reward);
  m->set_eval_accuracy(p.eval_accuracy);
  m->set_eval_episodes(p.eval_episodes);
  m->set_ppo_updates(p.ppo_updates);
  m->set_mean_abs_ratio(p.mean_abs_ratio);
  m->set_max_ratio(p.max_ratio);
  m->set_clip_fraction(p.clip_fraction);
  m->set_approx_kl(p.approx_kl);
  m->set_entropy(p.entropy);
  if (p.summaries.episodes > 0) type_to_proto(p.summaries, m->mutable_summaries());
}
template <typename Message>
CurvePoint point_from_proto(const Message& m) {
  CurvePoint p;
  p.episode = m.episode();
  p.train_reward = m.train_reward();
  p.eval_accuracy = m.eval_accuracy();
  p.eval_episodes = m.eval_episodes();
  p.ppo_updates = m.ppo_updates();
  p.mean_abs_ratio = m.mean_abs_ratio();
  p.max_ratio = m.max_ratio();
  p.clip_fraction = m.clip_fraction();
  p.approx_kl = m.approx_kl();
  p.entropy = m.entropy();
  if (m.has_summaries()) p.summaries = type_from_proto(m.summaries());
  return p;
}

ScenarioResult run_scenario(const ScenarioSpec& spec, const RunOptions& options);
// The episodes (training and evaluation) run_scenario runs for `spec` and the seeds of `options`; with
// `select`, those of the selected jobs only (as run_jobs).
int64_t planned_episodes(const ScenarioSpec& spec, const RunOptions& options,
                         const std::function<bool(size_t)>& select = {});

// The jobs of a scenario: one (arm, seed) run each, job index = arm index x seeds + seed index (arms in file
// order, seeds in the order given). run_scenario() runs them all and assembles the result; a sharded run
// (scenarios/shard.h) runs a subset, and `crl merge` assembles the results of every shard through the same
// assemble_result(), so a merged result is the single-process result by construction.
struct JobResult {
  size_t arm = 0;         // index into ScenarioSpec::arms
  size_t seed_index = 0;  // index into the seeds
  SeedResult result;
};
// Runs the jobs whose index `select` accepts (every job when `select` is empty), in index order.
std::vector<JobResult> run_jobs(const ScenarioSpec& spec, const RunOptions& options,
                                const std::function<bool(size_t)>& select);
// The scenario's result from the results of all its jobs, each exactly once, in any order (throws
// crl::Error otherwise).
ScenarioResult assemble_result(const ScenarioSpec& spec, const std::vector<uint64_t>& seeds,
                               std::vector<JobResult> jobs);

// The episodes of a run, shared by the runner and `crl eval` (so that both evaluate the same episodes):
// episode i of collect_episodes is task "<prefix><first + i>" (split "train" for the prefixes "train-" and
// "pretrain-", else "test"), group index first + i, its random streams keyed by `seed`; the trajectories in
// index order, the same for any thread count. A run trains on "train-<i>" and evaluates on "eval-<i>" from 0.
struct EpisodeSetup {
  std::string env;                            // a registered environment
  std::map<std::string, std::string> params;  // its parameters
  std::shared_ptr<const Codec> codec;
  Budget budget;
};
std::vector<Trajectory> collect_episodes(const EpisodeSetup& setup, const Policy& policy, uint64_t seed,
                                         const std::string& prefix, int64_t first, int64_t count,
                                         const Runner& runner,
                                         const std::function<void(size_t)>& on_done = {});
// Per task type exact match and summary metrics of evaluation episodes, for environments with typed tasks
// (the synthetic suite in the symbolic view, and in the text view with summaries measured on the decoded
// text: envs/synthetic/metrics.h episode_metrics_text); empty for the others.
std::vector<TypeResult> type_breakdown(const EpisodeSetup& setup, const std::vector<Trajectory>& episodes);
// The same metrics over all task types pooled (type "all"): a curve point's summaries. Episodes 0 for the
// environments without typed tasks.
TypeResult pooled_summaries(const EpisodeSetup& setup, const std::vector<Trajectory>& episodes);

// The learner's options and schedule for a scenario's learner block (the learning rates stay with the policy
// updates).
learners::LearnerOptions learner_options(const proto::scenario::LearnerConfig& learner);
learners::ScheduleOptions schedule_options(const proto::scenario::LearnerConfig& learner);

}  // namespace crl::scenarios
