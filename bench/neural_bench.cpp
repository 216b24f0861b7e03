// Neural policy throughput (policies/neural): batched inference and update, in decisions/s.
//   BM_NeuralForwardBatched/N      one Eigen forward over N decisions (~10 candidate rows each)
//   BM_NeuralForwardPerDecision/N  baseline in the same run: the same N decisions one at a time (the
//                                  sampling path, Network::score per decision)
//   BM_NeuralForwardBackward/N     forward + backward (every parameter's gradient) over N decisions
//   BM_NeuralActEpisodes/N         act() driving N synthetic episodes to the end (forced `next`, summaries
//                                  and answers), items = policy decisions
//   BM_NeuralTrainStep/N           one actor update on a batch of N episodes: rebuild the decisions, forward,
//                                  learner losses and gradients, backward, Adam; items = trainable tokens
//   BM_NeuralPpoUpdate/E/M         one clipped-PPO actor update on 32 episodes with E epochs of M shuffled
//                                  minibatches (issue 15); /1/1 is the one-pass baseline in the same run;
//                                  items = updates, counter episodes/s = episodes trained per second
//   BM_NeuralEpisodes/N            act() driving N synthetic episodes; items = episodes
//   BM_NeuralCudaForwardBackward/N the CUDA twin of BM_NeuralForwardBackward (skipped without a device)
// The hard view of scenarios/ablation_table.pbtxt (namespace hard, 48 records, `features: raw`, its budget):
//   BM_NeuralHardEpisodes/N        act() driving N hard episodes (8-14 compactions each); items = episodes
//   BM_NeuralHardPpoUpdate/E/M     one clipped-PPO actor update on 32 hard episodes; /1/1 is the baseline,
//                                  /2/4 the ablation table's setting; items = updates
//   BM_NeuralHardWarmStart/N       one warm-start step (NeuralPolicy::imitate) on N full-context oracle
//                                  demonstrations (scenarios/warm_start.h); items = demonstrations
#include <benchmark/benchmark.h>

#include "engine/runner.h"
#include "envs/registry.h"
#include "learners/batch.h"
#include "learners/learner.h"
#include "policies/neural/cuda/network_cuda.h"
#include "policies/neural/neural_policy.h"
#include "policies/rollout.h"
#include "scenarios/warm_start.h"

namespace crl::neural {
namespace {

constexpr int kInputs = 99, kHidden = 64;

DecisionBatch make_decisions(int groups) {
  Rng rng(StreamKey{1, static_cast<uint64_t>(groups), 0, StreamRole::kLearner, 0});
  DecisionBatch b;
  for (int g = 0; g < groups; ++g) {
    const int n = 4 + static_cast<int>(rng.uniform_int(13));
    b.offsets.push_back(b.offsets.back() + n);
    b.chosen.push_back(static_cast<int>(rng.uniform_int(n)));
  }
  b.x = RowMatrix::Zero(b.offsets.back(), kInputs);
  for (Eigen::Index r = 0; r < b.x.rows(); ++r) {
    for (int k = 0; k < 12; ++k) b.x(r, rng.uniform_int(kInputs)) = 1.0f;
  }
  return b;
}

Network make_network() {
  Network net(NetworkShape{kInputs, kHidden});
  net.initialize(3, 0);
  Rng rng(StreamKey{3, 0, 0, StreamRole::kLearner, 1});
  for (int64_t i = net.shape().b1(); i < net.shape().size(); ++i)
    net.parameters()[i] = rng.uniform_float() - 0.5f;
  return net;
}

void BM_NeuralForwardBatched(benchmark::State& state) {
  const Network net = make_network();
  const DecisionBatch b = make_decisions(static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(net.forward(b));
  state.SetItemsProcessed(state.iterations() * b.groups());
}

void BM_NeuralForwardPerDecision(benchmark::State& state) {
  const Network net = make_network();
  const DecisionBatch b = make_decisions(static_cast<int>(state.range(0)));
  std::vector<RowMatrix> rows;
  for (int g = 0; g < b.groups(); ++g)
    rows.push_back(b.x.middleRows(b.offsets[g], b.offsets[g + 1] - b.offsets[g]));
  std::vector<double> scores;
  float value = 0.0f;
  for (auto _ : state) {
    for (const RowMatrix& r : rows) {
      net.score(r, 0, scores, value);
      benchmark::DoNotOptimize(value);
    }
  }
  state.SetItemsProcessed(state.iterations() * b.groups());
}

void BM_NeuralForwardBackward(benchmark::State& state) {
  const Network net = make_network();
  const DecisionBatch b = make_decisions(static_cast<int>(state.range(0)));
  const std::vector<float> dl(b.groups(), 0.01f), dv(b.groups(), 0.02f);
  for (auto _ : state) {
    const ForwardResult f = net.forward(b);
    benchmark::DoNotOptimize(net.backward(b, f, dl, dv));
  }
  state.SetItemsProcessed(state.iterations() * b.groups());
}

void BM_NeuralCudaForwardBackward(benchmark::State& state) {
  std::string why;
  if (!network_cuda_available(&why)) {
    state.SkipWithError(("no CUDA device: " + why).c_str());
    return;
  }
  const Network net = make_network();
  const DecisionBatch b = make_decisions(static_cast<int>(state.range(0)));
  const std::vector<float> dl(b.groups(), 0.01f), dv(b.groups(), 0.02f);
  for (auto _ : state) {
    const ForwardResult f = cuda_forward(net, b);
    benchmark::DoNotOptimize(cuda_backward(net, b, f, dl, dv));
  }
  state.SetItemsProcessed(state.iterations() * b.groups());
}

// A view of the synthetic suite with its budget: the default one (16 records, synthetic_neural.pbtxt) or the
// hard one (48 records, `features: raw`, scenarios/ablation_table.pbtxt).
struct View {
  std::map<std::string, std::string> params;
  NeuralConfig config;
  Budget budget;
  static View standard() {
    View v{{{"view", "symbolic"}, {"split", "train"}}, {}, {}};
    v.budget.capacity = 64;
    v.budget.reserve = 16;
    v.budget.per_turn_cap = 4;
    v.budget.summary_cap = 6;
    v.budget.max_compactions = 8;
    return v;
  }
  static View hard() {
    View v = standard();
    v.params["namespace"] = "hard";
    v.config.features = "raw";
    v.budget.tail_k = 2;
    v.budget.summary_cap = 4;
    v.budget.max_compactions = 16;
    return v;
  }
};

struct Setup {
  View view;
  std::unique_ptr<Env> env = make_env("synthetic", view.params);
  std::shared_ptr<const Codec> codec = make_codec("symbolic", env->spec());
  NeuralPolicy policy{PolicyTarget{&env->spec(), codec}, view.config};
  explicit Setup(View v = View::standard()) : view(std::move(v)) { policy.initialize(1); }
  std::vector<Trajectory> run(size_t count) const {
    RolloutSpec spec;
    spec.count = count;
    spec.group_size = count;
    spec.make_episode = [&](size_t i) {
      EpisodeConfig config;
      config.budget = view.budget;
      config.seed = 5;
      auto e = std::make_unique<Episode>(make_env("synthetic", view.params), codec, std::move(config));
      e->start(Task{"train-" + std::to_string(i), i, "train"});
      return e;
    };
    return run_rollouts(spec, policy, Runner(1));
  }
};

void BM_NeuralActEpisodes(benchmark::State& state) {
  const Setup s;
  int64_t decisions = 0;
  for (auto _ : state) {
    for (const Trajectory& t : s.run(static_cast<size_t>(state.range(0)))) {
      decisions += std::stoll(t.metadata.at("turns")) + t.compactions;
    }
  }
  state.SetItemsProcessed(decisions);
}

void BM_NeuralTrainStep(benchmark::State& state) {
  Setup s;
  std::vector<Trajectory> ts = s.run(static_cast<size_t>(state.range(0)));
  for (size_t i = 0; i < ts.size(); ++i) ts[i].reward = i % 2 ? 1.0 : 0.0;
  learners::LearnerOptions o;
  o.lambda_mode = learners::LambdaMode::kFixed;
  o.lambda = 1.0;
  const learners::Learner learner(o);
  const learners::Batch batch = learners::make_batch(ts);
  const learners::Advantages targets = learner.advantages(batch);
  int64_t trainable = 0;
  for (int64_t t = 0; t < batch.num_tokens(); ++t) trainable += batch.actor_mask[t];
  for (auto _ : state) {
    s.policy.train(TrainStep{&ts, &batch, &targets, &learner, learners::UpdateKind::kActor, 1e-6, 1e-6});
  }
  state.SetItemsProcessed(state.iterations() * trainable);
}

// One clipped-PPO actor update on 32 episodes of `view`, E epochs (range 0) of M minibatches (range 1).
void ppo_update(benchmark::State& state, View view, learners::LambdaMode lambda_mode) {
  Setup s(std::move(view));
  std::vector<Trajectory> ts = s.run(32);
  for (size_t i = 0; i < ts.size(); ++i) ts[i].reward = i % 2 ? 1.0 : 0.0;
  learners::LearnerOptions o;
  o.lambda_mode = lambda_mode;
  o.lambda = 1.0;
  o.ppo_epochs = static_cast<int>(state.range(0));
  o.minibatches = static_cast<int>(state.range(1));
  const learners::Learner learner(o);
  const learners::Batch batch = learners::make_batch(ts);
  const learners::Advantages targets = learner.advantages(batch);
  learners::UpdateStats stats;
  for (auto _ : state) {
    s.policy.train(
        TrainStep{&ts, &batch, &targets, &learner, learners::UpdateKind::kActor, 1e-3, 1e-3, &stats});
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["episodes/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * ts.size()), benchmark::Counter::kIsRate);
  state.counters["clip_fraction"] = stats.clip_fraction;
}

void BM_NeuralPpoUpdate(benchmark::State& state) {
  ppo_update(state, View::standard(), learners::LambdaMode::kFixed);
}

void BM_NeuralHardEpisodes(benchmark::State& state) {
  const Setup s(View::hard());
  for (auto _ : state) benchmark::DoNotOptimize(s.run(static_cast<size_t>(state.range(0))));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void BM_NeuralHardPpoUpdate(benchmark::State& state) {
  ppo_update(state, View::hard(), learners::LambdaMode::kAdaptive);
}

void BM_NeuralHardWarmStart(benchmark::State& state) {
  Setup s(View::hard());
  scenarios::EpisodeSetup setup{"synthetic", s.view.params, s.codec, s.view.budget};
  setup.budget.capacity = 512;  // full-context demonstrations, as the ablation table's warm start
  const std::vector<Trajectory> demos =
      scenarios::oracle_demonstrations(setup, 7, 0, state.range(0), "bench");
  for (auto _ : state) benchmark::DoNotOptimize(s.policy.imitate(demos, 1e-3));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void BM_NeuralEpisodes(benchmark::State& state) {
  const Setup s;
  for (auto _ : state) benchmark::DoNotOptimize(s.run(static_cast<size_t>(state.range(0))));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

BENCHMARK(BM_NeuralForwardPerDecision)->Arg(64)->Arg(1024);
BENCHMARK(BM_NeuralForwardBatched)->Arg(64)->Arg(1024)->Arg(16384);
BENCHMARK(BM_NeuralForwardBackward)->Arg(64)->Arg(1024)->Arg(16384);
BENCHMARK(BM_NeuralCudaForwardBackward)->Arg(1024)->Arg(16384);
BENCHMARK(BM_NeuralActEpisodes)->Arg(32)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_NeuralTrainStep)->Arg(32)->Arg(128)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_NeuralPpoUpdate)->Args({1, 1})->Args({4, 1})->Args({4, 4})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_NeuralEpisodes)->Arg(32)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_NeuralHardEpisodes)->Arg(32)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_NeuralHardPpoUpdate)->Args({1, 1})->Args({2, 4})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_NeuralHardWarmStart)->Arg(32)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace crl::neural
