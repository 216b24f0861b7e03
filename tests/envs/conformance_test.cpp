// The conformance battery (DESIGN.md style point 7): run over EVERY registered environment.
//
// For each name in env_registry().names() the table below says how to drive it (parameters, tasks, a
// registered policy or a small text player, a budget under which it must compact), or why it cannot be
// driven here. A newly registered environment without an entry fails EveryRegisteredEnvironmentHasAnEntry.
// Checks per environment:
//   * play to completion (Episode + policy) without a failed status;
//   * same seed -> same trajectory hash; the environment's step results are a pure function of (task, seed,
//     actions): replaying the action log in a fresh instance, stopped half-way ("snapshot") and continued,
//     reproduces every result (identical continuation);
//   * invalid actions (empty, binary, huge, unknown) give a clean crl::Error or an observation, never a
//   crash;
//   * observations are within the declared spec (text present for text envs, symbols < |vocabulary|,
//     at most max_observation_bytes, valid UTF-8);
//   * compaction happens under the entry's small budget.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>

#include "engine/error.h"
#include "engine/file_io.h"
#include "envs/coding_repo/coding_repo.h"
#include "envs/episode.h"
#include "envs/registry.h"
#include "envs/remote/remote_env.h"
#include "policies/policy.h"
#include "policies/rollout.h"
#include "tests/temp_dir.h"

namespace crl {
namespace {

// A text player: the next command from the decoded prompt and the request's own stream.
using Player = std::function<std::string(const std::string& prompt, Rng& rng)>;

struct Entry {
  std::map<std::string, std::string> params;
  std::vector<Task> tasks;
  std::string policy;  // a registered policy, or empty: `player`
  std::map<std::string, std::string> policy_params;
  Player player;
  Budget budget;        // play budget
  Budget small_budget;  // compaction must happen under it
  std::string skip;     // non-empty: not driven here, and why
};

Budget budget(int64_t c, int64_t reserve, int64_t turn, int64_t summary, int max_compactions) {
  Budget b;
  b.capacity = c;
  b.reserve = reserve;
  b.per_turn_cap = turn;
  b.summary_cap = summary;
  b.max_compactions = max_compactions;
  return b;
}

std::string source_dir() {
  return CRL_SOURCE_DIR;
}

// The shell environment's scratch root: unique to this process (two suites at once never share it), removed
// at exit. 0711 like the environment's own folders: without namespaces the sandbox uid must traverse it.
std::string shell_scratch_root() {
  static const test::TempDir root("shell_conformance");
  namespace fs = std::filesystem;
  fs::permissions(root.path(), fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
  return root.str();
}

// The table: one entry per registered environment.
std::map<std::string, Entry> table() {
  std::map<std::string, Entry> t;
  t["memory_chain"] = Entry{{{"length", "24"}, {"reset_points", "8,16"}},
                            {{"chain-0", 0, ""}, {"chain-1", 1, ""}},
                            "memory_chain_oracle",
                            {},
                            nullptr,
                            budget(2048, 512, 64, 256, 3),
                            budget(2048, 512, 64, 256, 3),
                            ""};
  t["coding_repo"] = Entry{{{"source", "data"}, {"data_dir", source_dir() + "/data/coding_repo"}},
                           {{"repo-operator-test-0000", 0, "test"}, {"repo-comparison-test-0001", 1, "test"}},
                           "coding_repo_solver",
                           {},
                           nullptr,
                           coding_budget(),
                           budget(2048, 768, 128, 512, 8),
                           ""};
  // envs/README.md's example (tests/envs/readme_example_env.cpp; registered in this binary only).
  t["echo"] = Entry{{{"turns", "40"}},
                    {{"echo-0", 0, ""}},
                    "",
                    {},
                    [](const std::string&, Rng& rng) -> std::string {
                      return "hello " + std::to_string(rng.uniform_int(1000000));
                    },
                    budget(2048, 512, 64, 256, 3),
                    budget(2048, 768, 64, 256, 6),
                    ""};
  // The synthetic suite: `next` until the question, then a random 4-digit answer; sometimes a typo.
  t["synthetic"] = Entry{{{"split", "dev"}},
                         {{"conf-0", 0, "dev"}, {"conf-1", 25, "dev"}},
                         "",
                         {},
                         [](const std::string& prompt, Rng& rng) -> std::string {
                           const size_t last = prompt.rfind("<|im_start|>user\n");
                           if (last != std::string::npos && prompt.find("END", last) != std::string::npos) {
                             return "submit " + std::to_string(1000 + rng.uniform_int(9000));
                           }
                           return rng.bernoulli(0.1) ? "nxt" : "next";
                         },
                         budget(2048, 512, 64, 256, 6),
                         budget(1536, 512, 64, 256, 6),
                         ""};
  // Harbor-style sample tasks, solved by replaying their solutions in the sandbox.
  t["shell"] = Entry{{{"tasks_dir", source_dir() + "/data/shell_tasks"},
                      {"scratch_root", shell_scratch_root()},
                      {"command_timeout_sec", "10"}},
                     {{"count-errors", 0, ""}, {"fix-sum-script", 1, ""}, {"hello-file", 2, ""}},
                     "shell_solution_replay",
                     {{"tasks_dir", source_dir() + "/data/shell_tasks"}},
                     nullptr,
                     budget(8192, 2048, 256, 256, 3),
                     budget(1536, 768, 64, 256, 6),
                     ""};
  // A Python environment in another process (clients/python/crl_remote_env.py), started once per test binary
  // by an anchor instance and shared through its port (starting Python per episode costs seconds here).
  Entry remote{{},
               {{"guess-0", 0, ""}, {"guess-1", 1, ""}},
               "",
               {},
               [](const std::string&, Rng& rng) -> std::string {
                 return rng.bernoulli(0.1) ? "guess what"
                                           : "guess " + std::to_string(1 + rng.uniform_int(100));
               },
               budget(4096, 1024, 64, 256, 3),
               budget(1024, 384, 64, 256, 6),
               ""};
  static const int port = [] {
    if (std::system("/usr/bin/python3 -c pass > /dev/null 2>&1") != 0) return 0;
    static auto anchor = make_env("remote", {{"command", "/usr/bin/python3 " + source_dir() +
                                                             "/clients/python/crl_remote_env.py --port 0"}});
    Rng rng(StreamKey{});
    anchor->reset(Task{"anchor", 0, ""}, rng);
    return static_cast<RemoteEnv&>(*anchor).port();
  }();
  if (port == 0) remote.skip = "/usr/bin/python3 is not installed";
  remote.params = {{"port", std::to_string(port)}};
  t["remote"] = remote;
  return t;
}

// Wraps a Player as a Policy; summaries keep the tail of the prompt.
class PlayerPolicy final : public Policy {
 public:
  PlayerPolicy(Player player, std::shared_ptr<const Codec> codec)
      : player_(std::move(player)), codec_(std::move(codec)) {}
  std::string name() const override { return "conformance_player"; }
  void act(std::span<const Request* const> requests, std::span<Decision> decisions) const override {
    for (size_t i = 0; i < requests.size(); ++i) {
      const Request& r = *requests[i];
      Rng rng(r.stream);
      const std::string prompt = codec_->decode(r.prompt.ids());
      std::string reply = r.role == Role::kExecute
                              ? player_(prompt, rng)
                              : "NOTES " + prompt.substr(prompt.size() > 200 ? prompt.size() - 200 : 0);
      Decision& d = decisions[i];
      d = Decision{};
      d.tokens = codec_->encode_action(reply);
      if (static_cast<int64_t>(d.tokens.size()) > r.max_new_tokens) d.tokens.resize(r.max_new_tokens);
      d.logprobs.assign(d.tokens.size(), 0.0f);
    }
  }

 private:
  Player player_;
  std::shared_ptr<const Codec> codec_;
};

// Records every action and result of the wrapped environment (the action log).
class RecordingEnv final : public Env {
 public:
  explicit RecordingEnv(std::unique_ptr<Env> inner) : inner_(std::move(inner)) {}
  const EnvSpec& spec() const override { return inner_->spec(); }
  std::vector<Action> actions;
  std::vector<StepResult> results;
  Start start;

 protected:
  Start do_reset(const Task& task, Rng& rng) override {
    actions.clear();
    results.clear();
    start = inner_->reset(task, rng);
    return start;
  }
  StepResult do_step(const Action& action) override {
    actions.push_back(action);
    results.push_back(inner_->step(action));
    return results.back();
  }

 private:
  std::unique_ptr<Env> inner_;
};

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (int k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    i += n;
  }
  return true;
}

void expect_within_spec(const EnvSpec& spec, const Observation& o, const std::string& what) {
  if (spec.has_text) {
    EXPECT_TRUE(valid_utf8(o.text)) << what;
    if (spec.max_observation_bytes > 0) {
      EXPECT_LE(o.text.size(), spec.max_observation_bytes) << what;
    }
  }
  if (spec.symbols.empty()) {
    EXPECT_TRUE(o.symbols.empty()) << what;
  }
  for (TokenId s : o.symbols) {
    EXPECT_GE(s, 0) << what;
    EXPECT_LT(static_cast<size_t>(s), spec.symbols.size()) << what;
  }
  EXPECT_TRUE(!o.text.empty() || !o.symbols.empty()) << what << ": empty observation";
}

bool same(const StepResult& a, const StepResult& b) {
  return a.observation.text == b.observation.text && a.observation.symbols == b.observation.symbols &&
         a.reward == b.reward && a.terminated == b.terminated && a.truncated == b.truncated &&
         a.request_compaction == b.request_compaction && a.info == b.info;
}

struct Played {
  std::string hash;
  double reward = 0;
  EpisodeStatus status = EpisodeStatus::kCompleted;
  std::string reason;
  int compactions = 0;
  StreamKey env_stream;
  std::vector<Action> actions;
  std::vector<StepResult> results;
  Env::Start start;
};

Played play(const std::string& name, const Entry& e, const Task& task, const Budget& b, uint64_t seed) {
  auto recording = std::make_unique<RecordingEnv>(make_env(name, e.params));
  RecordingEnv* log = recording.get();
  const auto codec = make_codec(log->spec().has_text ? "text" : "symbolic", log->spec());
  std::unique_ptr<Policy> policy =
      e.policy.empty() ? std::make_unique<PlayerPolicy>(e.player, codec)
                       : make_policy(e.policy, e.policy_params, PolicyTarget{&log->spec(), codec});
  EpisodeConfig config;
  config.budget = b;
  config.seed = seed;
  Episode episode(std::move(recording), codec, config);
  episode.start(task);
  Episode* one[] = {&episode};
  drive(one, *policy);
  Played p;
  p.hash = episode.state_hash();
  p.reward = episode.reward();
  p.status = episode.status();
  p.reason = episode.reason();
  p.compactions = episode.context().compactions();
  p.env_stream = episode.env_stream();
  p.actions = log->actions;
  p.results = log->results;
  p.start = log->start;
  return p;
}

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const auto t = table();
    auto it = t.find(GetParam());
    if (it == t.end()) GTEST_SKIP() << "no entry (EveryRegisteredEnvironmentHasAnEntry fails)";
    entry_ = it->second;
    if (!entry_.skip.empty()) GTEST_SKIP() << entry_.skip;
  }
  Entry entry_;
};

// The README's example is the file compiled here, byte for byte.
TEST(ConformanceTable, TheReadmeExampleIsTheCompiledOne) {
  const std::string readme = read_file(source_dir() + "/envs/README.md");
  const std::string compiled = read_file(source_dir() + "/tests/envs/readme_example_env.cpp");
  const size_t begin = readme.find("```cpp\n") + 7;
  const std::string code = readme.substr(begin, readme.find("```", begin) - begin);
  EXPECT_NE(compiled.find(code), std::string::npos)
      << "envs/README.md and tests/envs/readme_example_env.cpp differ";
}

TEST(ConformanceTable, EveryRegisteredEnvironmentHasAnEntry) {
  const auto t = table();
  for (const std::string& name : env_registry().names()) {
    EXPECT_TRUE(t.count(name)) << "environment " << name
                               << " is registered but has no entry in tests/envs/conformance_test.cpp";
  }
}

TEST_P(Conformance, PlaysToCompletionWithinTheSpec) {
  for (const Task& task : entry_.tasks) {
    const Played p = play(GetParam(), entry_, task, entry_.budget, 1);
    EXPECT_NE(p.status, EpisodeStatus::kFailed) << task.id << ": " << p.reason;
    EXPECT_FALSE(p.actions.empty()) << task.id;
    const auto env = make_env(GetParam(), entry_.params);  // keeps the spec alive while it is read
    const EnvSpec& spec = env->spec();
    expect_within_spec(spec, p.start.user, task.id + " first observation");
    for (size_t i = 0; i < p.results.size(); ++i) {
      expect_within_spec(spec, p.results[i].observation, task.id + " step " + std::to_string(i));
    }
  }
}

TEST_P(Conformance, SameSeedSameTrajectoryHash) {
  const Task& task = entry_.tasks.front();
  const Played a = play(GetParam(), entry_, task, entry_.budget, 5);
  const Played b = play(GetParam(), entry_, task, entry_.budget, 5);
  EXPECT_EQ(a.hash, b.hash);
  EXPECT_EQ(a.actions.size(), b.actions.size());
}

TEST_P(Conformance, ReplayFromHalfWayGivesAnIdenticalContinuation) {
  const Task& task = entry_.tasks.front();
  const Played p = play(GetParam(), entry_, task, entry_.budget, 3);
  ASSERT_FALSE(p.actions.empty());
  const size_t half = p.actions.size() / 2;
  auto replay = make_env(GetParam(), entry_.params);
  Rng rng(p.env_stream);
  const Env::Start start = replay->reset(task, rng);
  EXPECT_EQ(start.user.text, p.start.user.text);
  EXPECT_EQ(start.system.text, p.start.system.text);
  for (size_t i = 0; i < half; ++i)
    ASSERT_TRUE(same(replay->step(p.actions[i]), p.results[i])) << "step " << i;
  // The "snapshot" is the replayed prefix: the continuation must be identical.
  for (size_t i = half; i < p.actions.size(); ++i) {
    ASSERT_TRUE(same(replay->step(p.actions[i]), p.results[i])) << "continuation step " << i;
  }
}

TEST_P(Conformance, InvalidActionsGiveCleanErrorsOrObservations) {
  const std::vector<std::string> bad = {"",
                                        "   ",
                                        std::string("\x01\xff\xfe\x00zz", 6),
                                        std::string(20000, 'q'),
                                        "definitely-not-a-command --now",
                                        "\n\n\n"};
  auto env = make_env(GetParam(), entry_.params);
  Rng rng(StreamKey{9, 9, 0, StreamRole::kEnvironment, 0});
  env->reset(entry_.tasks.front(), rng);
  for (const std::string& text : bad) {
    if (env->done()) env->reset(entry_.tasks.front(), rng);
    try {
      const StepResult r = env->step(Action{text, {}});
      expect_within_spec(env->spec(), r.observation, "invalid action");
    } catch (const Error&) {
      // a clean, typed error is acceptable
    }
  }
}

TEST_P(Conformance, CompactsUnderASmallBudget) {
  const Played p = play(GetParam(), entry_, entry_.tasks.front(), entry_.small_budget, 2);
  EXPECT_GE(p.compactions, 1) << p.reason;
}

INSTANTIATE_TEST_SUITE_P(Registered, Conformance, ::testing::ValuesIn(env_registry().names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace crl
