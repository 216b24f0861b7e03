// coding_repo: the generator reproduces the committed splits byte for byte (and their SHA-256 manifest),
// the splits are balanced, the commands behave, and the scripted solver solves every dev task with
// compaction in between. Regenerate the data with:
//   CRL_UPDATE_DATA=1 build/tests/envs/env_coding_tests --gtest_filter='CodingRepoData.*'
// CRL_DEBUG_SOLVER=1 (or 2: with the prompts) prints the solver's dev episodes turn by turn.
#include "envs/coding_repo/coding_repo.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>

#include "engine/file_io.h"
#include "engine/sha256.h"
#include "envs/episode.h"
#include "envs/registry.h"
#include "policies/policy.h"
#include "policies/rollout.h"

namespace crl {
namespace {

const std::string kDataDir = std::string(CRL_SOURCE_DIR) + "/data/coding_repo";

std::string manifest(const std::map<std::string, std::string>& files) {
  std::string out;
  for (const auto& [name, content] : files) out += sha256_hex(content) + "  " + name + "\n";
  return out;
}

TEST(CodingRepoData, RegenerationMatchesTheCommittedSplitsByteForByte) {
  const auto files = coding::generate_splits();
  if (std::getenv("CRL_UPDATE_DATA")) {
    for (const auto& [name, content] : files) write_file_atomic(kDataDir + "/" + name, content);
    write_file_atomic(kDataDir + "/MANIFEST.sha256", manifest(files));
  }
  for (const auto& [name, content] : files) {
    EXPECT_EQ(read_file(kDataDir + "/" + name), content) << name << " differs from its regeneration";
  }
  EXPECT_EQ(read_file(kDataDir + "/MANIFEST.sha256"), manifest(files));
}

TEST(CodingRepoData, SplitsAreBalancedByBugKindAndDisjoint) {
  std::set<std::string> ids;
  for (const auto& [split, per_kind] :
       std::vector<std::pair<std::string, int>>{{"train", 4}, {"dev", 2}, {"test", 2}}) {
    std::istringstream in(read_file(kDataDir + "/" + split + ".jsonl"));
    std::map<std::string, int> kinds;
    for (std::string line; std::getline(in, line);) {
      const coding::Project p = coding::project_from_json(line);
      EXPECT_EQ(p.split, split);
      EXPECT_TRUE(ids.insert(p.id).second) << p.id;
      ++kinds[p.bug_kind];
      // The committed record is the generator's output for its id.
      EXPECT_EQ(coding::project_to_json(coding::generate_project(p.id, p.bug_kind, split)), line);
    }
    for (const auto& kind : coding::bug_kinds()) EXPECT_EQ(kinds[kind], per_kind) << split << " " << kind;
  }
}

TEST(CodingRepoData, BadRecordsAreNamedErrors) {
  EXPECT_THROW(coding::project_from_json("{"), std::invalid_argument);
  EXPECT_THROW(coding::project_from_json("{\"id\": 3}"), std::invalid_argument);
  EXPECT_THROW(coding::generate_project("x", "typo"), std::invalid_argument);
}

TEST(CodingRepoInterpreter, EvaluatesAndReportsErrors) {
  const std::vector<std::string> f = {"def f(a, b):",  "    \"\"\"doc\"\"\"", "    t = a * 3",
                                      "    if t > 5:", "        t = t - b",   "    return t"};
  EXPECT_EQ(coding::evaluate(f, "f", {1, 1}).value, 3);
  EXPECT_EQ(coding::evaluate(f, "f", {2, 1}).value, 5);
  EXPECT_NE(coding::evaluate(f, "g", {2, 1}).error.find("NameError"), std::string::npos);
  EXPECT_NE(coding::evaluate(f, "f", {2}).error.find("TypeError"), std::string::npos);
  auto broken = f;
  broken[2] = "    t = a ** 3";
  EXPECT_NE(coding::evaluate(broken, "f", {1, 1}).error.find("SyntaxError"), std::string::npos);
  broken[2] = "    t = x * 3";
  EXPECT_NE(coding::evaluate(broken, "f", {1, 1}).error.find("NameError"), std::string::npos);
  broken[2] = "    t = 9223372036854775807 * 3";
  EXPECT_NE(coding::evaluate(broken, "f", {1, 1}).error.find("OverflowError"), std::string::npos);
  const auto c = coding::parse_case("f(2, 5) == 11, got 9");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->expected, 11);
  EXPECT_EQ(coding::format_call(*c), "f(2, 5)");
}

std::unique_ptr<CodingRepo> make_repo(const std::map<std::string, std::string>& params = {}) {
  auto env = make_env("coding_repo", params);
  return std::unique_ptr<CodingRepo>(static_cast<CodingRepo*>(env.release()));
}

TEST(CodingRepoEnv, CommandsAndTheVerifier) {
  auto env = make_repo({{"source", "data"}, {"data_dir", kDataDir}});
  Rng rng(StreamKey{});
  env->reset(Task{"repo-operator-dev-0000", 0, "dev"}, rng);
  const coding::Project& p = env->project();
  EXPECT_NE(env->step(Action{"ls", {}}).observation.text.find("README.md  ("), std::string::npos);
  const std::string cat = env->step(Action{"cat " + p.bug_file + " 1 5", {}}).observation.text;
  EXPECT_NE(cat.find("==> " + p.bug_file + " (lines 1-5 of "), std::string::npos) << cat;
  const std::string run = env->step(Action{"run_tests", {}}).observation.text;
  EXPECT_NE(run.find(" FAILED: " + p.bug_function + "("), std::string::npos) << run;
  EXPECT_NE(env->step(Action{"grep def " + p.bug_function + "(", {}}).observation.text.find(p.bug_file + ":"),
            std::string::npos);
  EXPECT_NE(env->step(Action{"edit tests/test_x.py 1 x", {}}).observation.text.find("ERROR"),
            std::string::npos);
  EXPECT_NE(env->step(Action{"edit README.md 1 x", {}}).observation.text.find("read-only"),
            std::string::npos);
  const StepResult bad = env->step(Action{"rm -rf /", {}});
  EXPECT_EQ(bad.info, "invalid command");
  EXPECT_FALSE(bad.truncated);
  // The recorded original line repairs the project.
  const std::string edit = "edit " + p.bug_file + " " + std::to_string(p.bug_line) + " " + p.original_line;
  EXPECT_NE(env->step(Action{edit, {}}).observation.text.find("edited"), std::string::npos);
  EXPECT_NE(env->step(Action{"run_tests", {}}).observation.text.find(" 0 failed =="), std::string::npos);
  const StepResult done = env->step(Action{"submit", {}});
  EXPECT_TRUE(done.terminated);
  EXPECT_EQ(done.reward, 1.0);
}

TEST(CodingRepoEnv, SubmittingTheBuggyProjectEarnsNothingAndLimitsTruncate) {
  auto env = make_repo({{"max_invalid", "2"}});
  Rng rng(StreamKey{});
  env->reset(Task{"repo-constant-x", 0, ""}, rng);
  EXPECT_EQ(env->step(Action{"submit", {}}).reward, 0.0);
  env->reset(Task{"repo-constant-x", 0, ""}, rng);
  EXPECT_FALSE(env->step(Action{"nonsense", {}}).truncated);
  EXPECT_TRUE(env->step(Action{"\x01\xff", {}}).truncated);
  EXPECT_THROW(make_env("coding_repo", {{"source", "disk"}}), Error);
  EXPECT_THROW(make_env("coding_repo", {{"page_lines", "many"}}), Error);
  EXPECT_THROW(make_env("coding_repo", {{"pages", "3"}}), Error);
  auto data = make_repo({{"source", "data"}, {"data_dir", kDataDir}});
  EXPECT_THROW(data->reset(Task{"repo-nope", 0, "dev"}, rng), Error);
}

// The scripted solver solves every committed task (train, dev, test) under the coding budget, compacting
// on the way.
TEST(CodingRepoSolver, SolvesEveryCommittedTaskWithCompaction) {
  std::vector<Task> tasks;
  for (const char* split : {"train", "dev", "test"}) {
    std::istringstream in(read_file(kDataDir + "/" + split + ".jsonl"));
    for (std::string line; std::getline(in, line);) {
      tasks.push_back(Task{coding::project_from_json(line).id, tasks.size(), split});
    }
  }
  ASSERT_EQ(tasks.size(), 24u);
  const auto probe = make_env("coding_repo");
  const auto codec = make_codec("text", probe->spec());
  const auto solver = make_policy("coding_repo_solver", {}, PolicyTarget{&probe->spec(), codec});
  int min_compactions = 99;
  for (const Task& task : tasks) {
    EpisodeConfig config;
    config.budget = coding_budget();
    config.seed = 7;
    Episode episode(make_env("coding_repo", {{"source", "data"}, {"data_dir", kDataDir}}), codec, config);
    episode.start(task);
    while (!episode.done()) {
      const Request* one[] = {&episode.request()};
      Decision d;
      solver->act(one, std::span<Decision>(&d, 1));
      if (std::getenv("CRL_DEBUG_SOLVER")) {
        std::printf(
            "---- %s turn %d role %s prompt %zu\n%s\n>>>> %s\n", task.id.c_str(), one[0]->turn,
            role_name(one[0]->role), one[0]->prompt.size(),
            std::getenv("CRL_DEBUG_SOLVER")[0] == '2' ? codec->decode(one[0]->prompt.ids()).c_str() : "",
            codec->decode(d.tokens).c_str());
      }
      episode.submit(d);
    }
    EXPECT_EQ(episode.reward(), 1.0) << task.id << ": " << episode.reason();
    EXPECT_EQ(episode.status(), EpisodeStatus::kCompleted) << task.id << ": " << episode.reason();
    min_compactions = std::min(min_compactions, episode.context().compactions());
  }
  EXPECT_GE(min_compactions, 2) << "observations should force several compactions per episode";
}

}  // namespace
}  // namespace crl

namespace crl {
namespace {

// Beyond the committed dev split: generated projects of every kind are solvable too.
TEST(CodingRepoSolver, SolvesGeneratedTasksOfEveryKind) {
  const auto probe = make_env("coding_repo");
  const auto codec = make_codec("text", probe->spec());
  const auto solver = make_policy("coding_repo_solver", {}, PolicyTarget{&probe->spec(), codec});
  int solved = 0, total = 0;
  for (int i = 0; i < 20; ++i) {
    for (const auto& kind : coding::bug_kinds()) {
      EpisodeConfig config;
      config.budget = coding_budget();
      Episode episode(make_env("coding_repo"), codec, config);
      episode.start(Task{"repo-" + kind + "-gen-" + std::to_string(i), static_cast<uint64_t>(i), ""});
      Episode* one[] = {&episode};
      drive(one, *solver);
      solved += episode.reward() == 1.0;
      ++total;
      EXPECT_EQ(episode.reward(), 1.0) << episode.task().id << ": " << episode.reason();
    }
  }
  EXPECT_EQ(solved, total);
}

}  // namespace
}  // namespace crl
