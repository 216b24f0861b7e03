#pragma once
// The runner policy `lm`'s test fixture (lm_runner_policy_test.cpp, lm_cuda_training_test.cpp): a tiny model
// on the synthetic suite's text view with the committed BPE tokenizer; C = 1024 compacts.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/runner.h"
#include "envs/codec.h"
#include "envs/registry.h"
#include "policies/lm/lm_policy.h"
#include "scenarios/runner.h"

namespace crl::lm::test {

inline std::shared_ptr<const Tokenizer> tokenizer() {
  static const auto t =
      make_tokenizer(std::string(CRL_SOURCE_DIR) + "/data/tokenizers/synthetic_bpe512.json");
  return t;
}

struct RunnerFixture {
  std::map<std::string, std::string> params{{"view", "text"}, {"split", "train"}};
  std::unique_ptr<Env> env = make_env("synthetic", params);
  std::shared_ptr<const Codec> codec = make_text_codec(tokenizer());
  Budget budget{1024, 256, 2, 48, 96, 3};
  PolicyTarget target() const { return PolicyTarget{&env->spec(), codec, params, &budget}; }
  static LmPolicyConfig config() {
    LmPolicyConfig c;
    c.model.d_model = 16;
    c.model.heads = 2;
    c.model.layers = 1;
    c.model.d_ff = 32;
    c.model.max_positions = 1024;
    return c;
  }
  // config() with SFT of `steps` steps of 4 segments from tasks 0 .. tasks-1.
  static LmPolicyConfig sft_config(int steps, int tasks) {
    LmPolicyConfig c = config();
    c.sft_steps = steps;
    c.sft_tasks = tasks;
    c.sft_batch = 4;
    return c;
  }
  scenarios::EpisodeSetup setup() const {
    return scenarios::EpisodeSetup{"synthetic", params, codec, budget};
  }
  std::vector<Trajectory> episodes(const Policy& policy, int count, int threads = 1) const {
    const Runner runner(threads);
    return scenarios::collect_episodes(setup(), policy, 7, "train-", 0, count, runner);
  }
};

}  // namespace crl::lm::test
