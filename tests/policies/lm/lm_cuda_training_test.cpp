// Training on the CUDA twin (policies/lm/backend.h) against the CPU: SFT steps (`crl lm train --backend
// cuda`) and the runner policy's PPO updates (`backend: cuda`) from the same start give the same losses and
// parameters to float rounding, and the same bits on a second run. Skipped with the reason where no device
// is usable (scripts/gpu_check.sh makes a skip a failure). The errors without a device are tested
// everywhere by LmTrain.TheBackendIsCheckedBeforeAnyWork and LmRunnerPolicy.RegisteredForTheTextViewOnly.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/rng.h"
#include "learners/batch.h"
#include "learners/learner.h"
#include "lm_runner_fixture.h"
#include "lm_test_util.h"
#include "policies/lm/cuda/lm_cuda.h"
#include "policies/lm/lm_policy.h"
#include "policies/lm/sft.h"

namespace crl::lm {
namespace {

// Random sequences of 6 to 16 tokens, the second half of each trained (weights 1 and 2).
std::vector<SftExample> random_examples(const LmConfig& c, int count) {
  Rng rng(StreamKey{21, 0, 0, StreamRole::kLearner, 0});
  std::vector<SftExample> out(static_cast<size_t>(count));
  for (SftExample& e : out) {
    const int n = 6 + static_cast<int>(rng.uniform_int(11));
    for (int t = 0; t < n; ++t) e.tokens.push_back(static_cast<int32_t>(rng.uniform_int(c.vocab)));
    e.mask.assign(static_cast<size_t>(n), 0.0f);
    for (int t = n / 2; t + 1 < n; ++t) e.mask[static_cast<size_t>(t)] = t % 3 == 0 ? 2.0f : 1.0f;
    e.spans = {n / 2};
    e.span_kinds = {SftExample::kAction};
  }
  return out;
}

TEST(LmCuda, SftStepsMatchTheCpu) {
  std::string why;
  if (!lm_cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  for (const bool rope : {false, true}) {
    SCOPED_TRACE(rope ? "rotary positions" : "learned positions");
    LmConfig c = test::small_config();
    c.rope = rope;
    const std::vector<SftExample> examples = random_examples(c, 12);
    SftOptions o;
    o.steps = 4;
    o.batch = 4;
    o.lr = 1e-2;
    o.threads = 2;
    std::vector<float> losses[3], params[3];
    for (int run = 0; run < 3; ++run) {  // the CPU, the device, the device again
      LmModel m = test::perturbed_model(c);
      LmOptimizer optimizer(m.layout());
      o.backend = run == 0 ? LmBackend::kCpu : LmBackend::kCuda;
      losses[run] = train_sft(m, optimizer, examples, o);
      params[run] = m.parameters();
    }
    std::string first;
    ASSERT_EQ(losses[1].size(), losses[0].size());
    EXPECT_EQ(test::mismatches("losses", losses[1].data(), losses[0].data(), losses[0].size(), 1e-4, &first),
              0)
        << first;
    // Four Adam steps amplify rounding where a moment is near zero: parameters to 1e-3.
    EXPECT_EQ(
        test::mismatches("parameters", params[1].data(), params[0].data(), params[0].size(), 1e-3, &first), 0)
        << first;
    EXPECT_NE(params[1], test::perturbed_model(c).parameters()) << "the device steps moved nothing";
    EXPECT_EQ(params[2], params[1]) << "the device run is not the same bits twice";
    EXPECT_EQ(losses[2], losses[1]);
  }
}

// The runner policy's critic and actor updates with `backend: cuda` against the CPU's, on the same episodes
// (sampled on the CPU, as both back-ends do).
TEST(LmCuda, RunnerUpdatesMatchTheCpu) {
  std::string why;
  if (!lm_cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  const test::RunnerFixture f;
  LmPolicyConfig config = test::RunnerFixture::config();
  config.model.rope = true;
  LmPolicy cpu(f.target(), config);
  config.backend = LmBackend::kCuda;
  LmPolicy gpu(f.target(), config);
  cpu.initialize(5);
  gpu.initialize(5);
  ASSERT_EQ(gpu.model().parameters(), cpu.model().parameters());
  std::vector<Trajectory> batch = f.episodes(cpu, 3);
  batch[0].reward = 1.0;
  batch[2].reward = 1.0;
  const learners::Batch flat = learners::make_batch(batch);
  const learners::Learner learner(learners::LearnerOptions{}, learners::Backend::kCpu);
  const learners::Advantages targets = learner.advantages(flat);
  learners::UpdateStats stats[2];
  LmPolicy* policies[2] = {&cpu, &gpu};
  for (int p = 0; p < 2; ++p) {
    for (const auto kind : {learners::UpdateKind::kCritic, learners::UpdateKind::kActor}) {
      policies[p]->train(TrainStep{&batch, &flat, &targets, &learner, kind, 1e-2, 1e-2, &stats[p]});
    }
  }
  EXPECT_EQ(stats[1].token_evals, stats[0].token_evals);
  EXPECT_NEAR(stats[1].entropy, stats[0].entropy, 1e-4 * std::abs(stats[0].entropy));
  std::string first;
  const std::vector<float>& want = cpu.model().parameters();
  const std::vector<float>& got = gpu.model().parameters();
  EXPECT_EQ(test::mismatches("parameters", got.data(), want.data(), want.size(), 1e-3, &first), 0) << first;
}

}  // namespace
}  // namespace crl::lm
