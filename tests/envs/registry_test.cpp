#include "envs/registry.h"

#include <gtest/gtest.h>

#include "engine/error.h"
#include "policies/policy.h"

namespace crl {
namespace {

// The registered names: a new environment or policy must be added here on purpose (link-safety check:
// a registrar dropped by the linker makes this fail).
TEST(Registry, RegisteredEnvironmentsAndPolicies) {
  const std::vector<std::string> envs = env_registry().names();
  for (const char* name : {"memory_chain", "synthetic"}) {
    EXPECT_NE(std::find(envs.begin(), envs.end(), name), envs.end()) << name;
  }
  const std::vector<std::string> policies = policy_registry().names();
  EXPECT_NE(std::find(policies.begin(), policies.end(), "memory_chain_oracle"), policies.end());
  EXPECT_TRUE(std::is_sorted(envs.begin(), envs.end()));
}

TEST(Registry, UnknownNamesListWhatExists) {
  try {
    make_env("memroy_chain", {}, "scenario.pbtxt:3:5");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scenario.pbtxt:3:5"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("memory_chain"), std::string::npos) << e.what();
  }
}

TEST(Registry, EveryEnvironmentResetsAndStepsWithDefaults) {
  for (const std::string& name : env_registry().names()) {
    auto env = make_env(name);
    EXPECT_EQ(env->spec().name, name);
    Rng rng(StreamKey{1, 1, 0, StreamRole::kEnvironment, 0});
    const auto start = env->reset(Task{"t0", 0, "train"}, rng);
    EXPECT_TRUE(!start.user.text.empty() || !start.user.symbols.empty()) << name;
  }
}

}  // namespace
}  // namespace crl
