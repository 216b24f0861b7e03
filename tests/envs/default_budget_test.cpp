// Default budgets (issue 14 item 6): every registered environment's default budget for each of its views
// fits its first prompt, a turn at the per-turn cap, the summary request and a rebuild with the default
// (byte) tokenizer; the spec-wide Budget{} did not for the synthetic text view (C = 1024: every episode
// ended truncated at its first compaction). Episode::budget_fit names the smallest capacity that works, and
// that capacity does work.
#include <gtest/gtest.h>

#include <cstdlib>

#include "envs/codec.h"
#include "envs/episode.h"
#include "envs/registry.h"
#include "envs/synthetic/oracle.h"
#include "envs/synthetic/synthetic_env.h"

namespace crl {
namespace {

const std::string kSource = CRL_SOURCE_DIR;

// Parameters and a task that let each environment start here (shell: the sample task folders; remote: the
// Python reference process).
struct EnvSetup {
  std::map<std::string, std::string> params;
  Task task{"t0", 0, ""};
  std::string skip;
};

EnvSetup setup_for(const std::string& name) {
  EnvSetup s;
  if (name == "shell") {
    s.params = {{"tasks_dir", kSource + "/data/shell_tasks"}};
    s.task = Task{"hello-file", 0, ""};
  } else if (name == "remote") {
    if (std::system("/usr/bin/python3 -c pass > /dev/null 2>&1") != 0) s.skip = "no /usr/bin/python3";
    s.params = {{"command", "/usr/bin/python3 " + kSource + "/clients/python/crl_remote_env.py --port 0"}};
  } else if (name == "coding_repo") {
    s.task = Task{"repo-operator-t0", 0, ""};
  }
  return s;
}

TEST(DefaultBudget, EveryEnvironmentsDefaultFitsItsFirstPromptInEachView) {
  for (const std::string& name : env_registry().names()) {
    SCOPED_TRACE(name);
    const EnvSetup setup = setup_for(name);
    if (!setup.skip.empty()) {
      std::cout << "[  SKIPPED ] " << name << ": " << setup.skip << "\n";
      continue;
    }
    const auto prototype = make_env(name, setup.params);
    std::vector<std::string> views;
    if (prototype->spec().has_text) views.push_back("text");
    if (!prototype->spec().symbols.empty()) views.push_back("symbolic");
    for (const std::string& view : views) {
      SCOPED_TRACE(view);
      EpisodeConfig config;
      config.budget = prototype->spec().default_budget(view);
      Episode episode(make_env(name, setup.params), make_codec(view, prototype->spec()), config);
      episode.start(setup.task);
      const BudgetFit fit = episode.budget_fit();
      EXPECT_TRUE(fit.fits) << fit.detail;
      EXPECT_FALSE(episode.done()) << episode.reason();
    }
  }
}

// The synthetic text view with the old spec-wide default (C = 1024) cannot compact; the capacity budget_fit
// names can, and the environment's default plays the oracle to a completed episode with compactions.
TEST(DefaultBudget, SyntheticTextViewCompactsWithItsDefaultAndNotWithTheOldOne) {
  namespace syn = envs::synthetic;
  const auto codec = make_codec("text", syn::synthetic_env_spec());
  const auto run = [&](const Budget& budget, int* compactions) {
    EpisodeConfig config;
    config.budget = budget;
    Episode episode(make_env("synthetic"), codec, config);
    episode.start(Task{"dev-4", 4, "dev"});
    const auto& env = static_cast<const syn::SyntheticEnv&>(episode.env());
    syn::Oracle oracle(env.task(), /*symbolic=*/false);
    while (!episode.done()) {
      Decision d;
      d.tokens = episode.request().role == Role::kSummarize
                     ? codec->encode_action(oracle.summary_text(env.records_seen()))
                     : codec->encode_action(oracle.act().text);
      if (static_cast<int64_t>(d.tokens.size()) > episode.request().max_new_tokens)
        d.tokens.resize(static_cast<size_t>(episode.request().max_new_tokens));
      episode.submit(d);
    }
    *compactions = episode.context().compactions();
    return std::make_pair(episode.status(), episode.budget_fit());
  };
  int compactions = 0;
  const auto [old_status, old_fit] = run(Budget{}, &compactions);
  EXPECT_FALSE(old_fit.fits);
  EXPECT_EQ(old_status, EpisodeStatus::kTruncated);
  EXPECT_EQ(compactions, 0);
  EXPECT_GT(old_fit.min_capacity, 1024);
  EXPECT_NE(old_fit.detail.find("smallest capacity that works is " + std::to_string(old_fit.min_capacity)),
            std::string::npos)
      << old_fit.detail;

  const auto [status, fit] = run(syn::synthetic_env_spec().text_budget, &compactions);
  EXPECT_TRUE(fit.fits) << fit.detail;
  EXPECT_EQ(status, EpisodeStatus::kCompleted);
  EXPECT_GE(compactions, 1);
}

}  // namespace
}  // namespace crl
