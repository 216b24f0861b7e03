// `crl eval`: evaluates a saved policy (a checkpoint written by `crl run`, scenarios/checkpoint.h).
//
//   crl eval --checkpoint FILE [--env NAME] [--split dev|test] [--episodes N] [--seed S] [--sample]
//            [--threads N] [--out metrics.json] [--trajectories t.jsonl]
//
// The checkpoint carries the arm's whole setup, so the policy (its type and parameters), the view and the
// context budget are the run's. The episodes are the ones a run evaluates (scenarios/runner.h
// collect_episodes: tasks "eval-<i>", i < N, streams keyed by the seed), so with --sample and the defaults
// (the run's evaluation split, eval_episodes episodes, the checkpoint's seed) the numbers are those the run
// reported for that arm and seed. Without --sample the policy decodes greedily (the most probable candidate).
//
// Defaults and choices:
//  * --env: the checkpoint's environment. Its parameters are the run's evaluation parameters
//    (training.eval_env_params over env.params); another environment starts from its own defaults.
//  * --split: an environment with a `split` parameter (the synthetic suite) evaluates on that split; one
//    without (the memory chain generates its tasks) accepts only `test`, its held-out tasks "eval-<i>".
//    Default: the run's evaluation split.
//  * --episodes: training.eval_episodes of the run; --seed: the checkpoint's.
// Writes (optional) the metrics as JSON (keys in a fixed order) and the trajectories (.jsonl or binary
// protobuf, like `crl run --out`); prints the same metrics.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "engine/error.h"
#include "engine/runner.h"
#include "engine/trajectory_io.h"
#include "envs/registry.h"
#include "policies/trainable.h"
#include "scenarios/checkpoint.h"
#include "scenarios/output_set.h"
#include "scenarios/runner.h"
#include "scenarios/scenario.h"

namespace crl::cli {
namespace {

using nlohmann::ordered_json;

bool declares(const std::string& env, const std::string& param) {
  for (const ParamSpec& p : env_registry().entry(env).params) {
    if (p.name == param) return true;
  }
  return false;
}

int eval_command(const std::vector<std::string>& args) {
  std::string checkpoint_path, env_name, split, out_path, trajectories_path;
  int64_t episodes = 0;
  uint64_t seed = 0;
  int threads = 1;
  bool sample = false;
  std::string progress_mode = "auto";
  po::options_description options;
  add_progress_option(options, progress_mode);
  options.add_options()("checkpoint", po::value(&checkpoint_path), "checkpoint file written by crl run")(
      "env", po::value(&env_name), "environment (default: the checkpoint's)")(
      "split", po::value(&split), "dev | test (default: the run's evaluation split)")(
      "episodes", po::value(&episodes), "evaluation episodes (default: the run's eval_episodes)")(
      "seed", po::value(&seed), "seed of the episodes' random streams (default: the checkpoint's)")(
      "sample", po::bool_switch(&sample), "sample from the policy (as the run evaluates) instead of greedy")(
      "threads", po::value(&threads)->default_value(threads), "worker threads (results do not depend on it)")(
      "out", po::value(&out_path), "write the metrics here (JSON)")(
      "trajectories", po::value(&trajectories_path), "write the trajectories here (.jsonl, else protobuf)");
  po::positional_options_description positional;
  po::variables_map vm;
  int exit_code = 0;
  if (!parse_options("eval",
                     "--checkpoint FILE [--env NAME] [--split dev|test] [--episodes N] [--seed S] [--sample] "
                     "[--out metrics.json] [--trajectories t.jsonl]",
                     options, positional, args, vm, exit_code)) {
    return exit_code;
  }
  if (checkpoint_path.empty()) throw Error("option --checkpoint", "", "is required");
  const ProgressMode progress_choice = parse_progress_mode(progress_mode);
  if (threads < 1) throw Error("option --threads", "", "value " + std::to_string(threads) + " must be >= 1");
  if (vm.count("episodes") && episodes < 1) {
    throw Error("option --episodes", "", "value " + std::to_string(episodes) + " must be >= 1");
  }
  if (vm.count("split") && split != "dev" && split != "test") {
    throw Error("option --split", "", "value " + quote(split) + " is not dev or test");
  }

  const proto::checkpoint::Checkpoint ck = scenarios::read_checkpoint(checkpoint_path);
  // A checkpoint without a run's setup (`crl lm train`'s base models) would be evaluated with the default
  // setup's policy and fail on a confusing mismatch: say what it is instead.
  if (!ck.has_setup()) {
    throw Error(
        checkpoint_path, "setup",
        "this checkpoint records no run setup (it was not written by `crl run`: a `crl lm train` model is "
        "evaluated by a scenario that loads it, Setup.init_checkpoint, or served with `crl lm serve`)");
  }
  const proto::scenario::Setup& setup = ck.setup();
  if (env_name.empty()) env_name = setup.env().name();
  if (!env_registry().contains(env_name)) {
    env_registry().entry(env_name);  // throws the registry's error listing the names
  }
  scenarios::EpisodeSetup episode;
  episode.env = env_name;
  if (env_name == setup.env().name()) {
    episode.params = scenarios::env_params(setup);
    for (const auto& [k, v] : setup.training().eval_env_params()) episode.params[k] = v;
  }
  if (!split.empty()) {
    if (declares(env_name, "split")) {
      episode.params["split"] = split;
    } else if (split != "test") {
      throw Error("option --split", "",
                  "environment " + quote(env_name) + " has no split parameter: its held-out tasks are " +
                      "generated (eval-<i>); use --split test");
    }
  }
  const std::unique_ptr<Env> prototype = make_env(env_name, episode.params, "option --env/--split");
  episode.codec = scenarios::setup_codec(setup, prototype->spec());
  episode.budget = scenarios::budget_of(setup);
  const std::unique_ptr<Policy> policy =
      make_policy(setup.policy().name(), scenarios::policy_params(setup),
                  PolicyTarget{&prototype->spec(), episode.codec, episode.params, &episode.budget},
                  checkpoint_path + ": policy");
  auto* trainable = dynamic_cast<Trainable*>(policy.get());
  if (trainable == nullptr) {
    throw Error(checkpoint_path, "policy.type", "policy " + quote(policy->name()) + " has no saved state");
  }
  trainable->load(ck.policy(), checkpoint_path);
  trainable->set_greedy(!sample);
  if (!vm.count("episodes")) episodes = setup.training().eval_episodes();
  if (!vm.count("seed")) seed = ck.seed();

  // Progress in episodes, counted from the worker threads (cli/progress.h).
  ProgressReporter progress("crl eval", progress_choice);
  progress.set_total(episodes);
  progress.set_stage(env_name + ", seed " + std::to_string(seed));
  std::function<void(size_t)> done;
  if (progress.enabled()) done = [&](size_t n) { progress.advance(static_cast<int64_t>(n)); };
  const std::vector<Trajectory> trajectories =
      scenarios::collect_episodes(episode, *policy, seed, "eval-", 0, episodes, Runner(threads), done);
  progress.finish();

  double reward = 0.0;
  int64_t compactions = 0, summaries = 0, summary_tokens = 0, sampled_tokens = 0, context_tokens = 0;
  for (const Trajectory& t : trajectories) {
    reward += t.reward;
    compactions += t.compactions;
    for (const Segment& seg : t.segments) {
      for (uint8_t m : seg.actor_mask) sampled_tokens += m != 0 ? 1 : 0;
      context_tokens += static_cast<int64_t>(seg.prompt_ids.size() + seg.response_ids.size());
      if (seg.kind != SegmentKind::kSummary) continue;
      ++summaries;
      summary_tokens += static_cast<int64_t>(seg.response_ids.size());
    }
  }
  const double n = static_cast<double>(trajectories.size());
  const std::vector<scenarios::TypeResult> types = scenarios::type_breakdown(episode, trajectories);
  ordered_json metrics;
  metrics["checkpoint"] = checkpoint_path;
  metrics["scenario"] = ck.scenario();
  metrics["arm"] = ck.arm();
  metrics["trained_seed"] = ck.seed();
  metrics["trained_episodes"] = ck.run().episodes_done();
  metrics["env"] = env_name;
  metrics["env_params"] = ordered_json(episode.params);
  metrics["decoding"] = sample ? "sample" : "greedy";
  metrics["seed"] = seed;
  metrics["episodes"] = trajectories.size();
  metrics["accuracy"] = reward / n;
  metrics["compactions"] = compactions;
  metrics["compactions_per_episode"] = static_cast<double>(compactions) / n;
  metrics["summaries"] = summaries;
  metrics["summary_tokens_mean"] = summaries == 0 ? 0.0 : static_cast<double>(summary_tokens) / summaries;
  metrics["sampled_tokens"] = sampled_tokens;
  metrics["context_tokens"] = context_tokens;
  if (!types.empty()) {
    ordered_json by_type = ordered_json::object();
    for (const scenarios::TypeResult& t : types) {
      by_type[t.type] = {{"episodes", t.episodes},
                         {"exact_match", t.exact_match},
                         {"summaries_per_episode", t.summaries_per_episode},
                         {"recall", t.recall},
                         {"invention", t.invention},
                         {"repetition", t.repetition},
                         {"summary_length", t.length},
                         {"plan_token_f1", t.f1}};
    }
    metrics["types"] = by_type;
  }
  if (!out_path.empty()) scenarios::write_file_durable(out_path, metrics.dump(2) + "\n");
  if (!trajectories_path.empty()) write_trajectories(trajectories_path, trajectories);

  std::printf("%s, arm %s, seed %llu after %lld training episodes: %s on %s, %lld episodes (seed %llu)\n",
              ck.scenario().c_str(), ck.arm().c_str(), static_cast<unsigned long long>(ck.seed()),
              static_cast<long long>(ck.run().episodes_done()), sample ? "sampled" : "greedy",
              env_name.c_str(), static_cast<long long>(trajectories.size()),
              static_cast<unsigned long long>(seed));
  std::printf(
      "accuracy %.2f%%, compactions %.2f per episode, summaries %lld (mean %.2f tokens), sampled tokens "
      "%lld, context tokens %lld\n",
      100.0 * reward / n, static_cast<double>(compactions) / n, static_cast<long long>(summaries),
      summaries == 0 ? 0.0 : static_cast<double>(summary_tokens) / summaries,
      static_cast<long long>(sampled_tokens), static_cast<long long>(context_tokens));
  for (const scenarios::TypeResult& t : types) {
    std::printf(
        "  %-14s exact match %6.2f%% (%lld episodes), summaries/episode %.2f, recall %.3f, invention %.3f, "
        "repetition %.3f, length %.2f, plan F1 %.3f\n",
        t.type.c_str(), 100.0 * t.exact_match, static_cast<long long>(t.episodes), t.summaries_per_episode,
        t.recall, t.invention, t.repetition, t.length, t.f1);
  }
  if (!out_path.empty()) std::printf("wrote %s\n", out_path.c_str());
  if (!trajectories_path.empty()) std::printf("wrote %s\n", trajectories_path.c_str());
  return 0;
}

const CommandRegistrar kEvalCommandRegistrar({"eval",
                                              "evaluate a saved policy (a crl run checkpoint) on a split",
                                              eval_command});

}  // namespace
}  // namespace crl::cli
