// remote: a Python environment in another process, over loopback with the server's HTTP step protocol, used
// like a native one (Episode + policy, run_rollouts); the steps of a lockstep round go out as one
// /v1/batch/step; every failure of the other side (refused connection, silence, a dead process, malformed or
// error answers) is a clean crl::Error naming the endpoint and the field.
#include "envs/remote/remote_env.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine/error.h"
#include "engine/runner.h"
#include "engine/trajectory_io.h"
#include "envs/episode.h"
#include "envs/registry.h"
#include "policies/policy.h"
#include "policies/rollout.h"
#include "tests/temp_dir.h"

namespace crl {
namespace {

const std::string kEnvScript = std::string(CRL_SOURCE_DIR) + "/clients/python/crl_remote_env.py";
const std::string kPython = "/usr/bin/python3 " + kEnvScript + " --port 0";

std::string fake(const std::string& mode) {
  return "/usr/bin/python3 " + std::string(CRL_SOURCE_DIR) + "/tests/envs/remote_fake_env.py --mode " + mode;
}

bool have_python() {
  return std::system("/usr/bin/python3 -c pass > /dev/null 2>&1") == 0;
}

// Binary search over the "too low / too high" answers in the prompt.
class BisectPolicy final : public Policy {
 public:
  explicit BisectPolicy(std::shared_ptr<const Codec> codec) : codec_(std::move(codec)) {}
  std::string name() const override { return "bisect"; }
  void act(std::span<const Request* const> requests, std::span<Decision> decisions) const override {
    for (size_t i = 0; i < requests.size(); ++i) {
      const std::string text = codec_->decode(requests[i]->prompt.ids());
      int lo = 1, hi = 100;
      for (size_t at = text.find(" is too "); at != std::string::npos; at = text.find(" is too ", at + 1)) {
        size_t begin = at;
        while (begin > 0 && std::isdigit(static_cast<unsigned char>(text[begin - 1]))) --begin;
        const int k = std::atoi(text.c_str() + begin);
        if (text.compare(at + 8, 3, "low") == 0) lo = std::max(lo, k + 1);
        if (text.compare(at + 8, 4, "high") == 0) hi = std::min(hi, k - 1);
      }
      const std::string reply =
          requests[i]->role == Role::kSummarize
              ? std::to_string(lo - 1) + " is too low. " + std::to_string(hi + 1) + " is too high."
              : "guess " + std::to_string((lo + hi) / 2);
      decisions[i] = Decision{};
      decisions[i].tokens = codec_->encode_action(reply);
      decisions[i].logprobs.assign(decisions[i].tokens.size(), 0.0f);
    }
  }

 private:
  std::shared_ptr<const Codec> codec_;
};

// Guesses a number drawn from the request's own stream: deterministic, and rarely right.
class RandomGuessPolicy final : public Policy {
 public:
  explicit RandomGuessPolicy(std::shared_ptr<const Codec> codec) : codec_(std::move(codec)) {}
  std::string name() const override { return "random_guess"; }
  void act(std::span<const Request* const> requests, std::span<Decision> decisions) const override {
    for (size_t i = 0; i < requests.size(); ++i) {
      Rng rng(requests[i]->stream);
      const std::string reply = requests[i]->role == Role::kSummarize
                                    ? "NOTES guessed so far"
                                    : "guess " + std::to_string(1 + rng.uniform_int(100));
      decisions[i] = Decision{};
      decisions[i].tokens = codec_->encode_action(reply);
      decisions[i].logprobs.assign(decisions[i].tokens.size(), -1.0f);
    }
  }

 private:
  std::shared_ptr<const Codec> codec_;
};

// Always "guess 0": every step is "too low", so each episode runs exactly the 12 turns of GuessNumber.
class ZeroPolicy final : public Policy {
 public:
  explicit ZeroPolicy(std::shared_ptr<const Codec> codec) : codec_(std::move(codec)) {}
  std::string name() const override { return "zero"; }
  void act(std::span<const Request* const> requests, std::span<Decision> decisions) const override {
    for (size_t i = 0; i < requests.size(); ++i) {
      decisions[i] = Decision{};
      decisions[i].tokens = codec_->encode_action("guess 0");
    }
  }

 private:
  std::shared_ptr<const Codec> codec_;
};

// One Python process for the tests of this binary that only need a working environment.
int shared_port() {
  static const int port = [] {
    if (!have_python()) return 0;
    static auto anchor = make_env("remote", {{"command", kPython}});
    Rng rng(StreamKey{});
    anchor->reset(Task{"anchor", 0, ""}, rng);
    return static_cast<RemoteEnv&>(*anchor).port();
  }();
  return port;
}

EpisodeConfig config(uint64_t seed, int64_t sample = 0) {
  EpisodeConfig c;
  c.budget.capacity = 8192;
  c.budget.reserve = 1024;
  c.seed = seed;
  c.sample_index = sample;
  return c;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

size_t count_prefix(const std::vector<std::string>& lines, const std::string& prefix) {
  size_t n = 0;
  for (const auto& line : lines) n += line.rfind(prefix, 0) == 0;
  return n;
}

TEST(RemoteEnv, APythonEnvironmentPlaysLikeANativeOne) {
  if (!have_python()) GTEST_SKIP() << "/usr/bin/python3 is not installed";
  const std::string port = std::to_string(shared_port());
  const auto probe = make_env("remote", {{"port", port}});
  const auto codec = make_codec("text", probe->spec());
  const BisectPolicy policy(codec);
  std::string first_hash;
  for (int repeat = 0; repeat < 2; ++repeat) {
    for (uint64_t index = 0; index < 3; ++index) {
      Episode episode(make_env("remote", {{"port", port}}), codec, config(11));
      episode.start(Task{"guess-" + std::to_string(index), index, ""});
      Episode* one[] = {&episode};
      drive(one, policy);
      EXPECT_EQ(episode.reward(), 1.0) << episode.reason();
      EXPECT_EQ(episode.status(), EpisodeStatus::kCompleted);
      if (index == 0 && repeat == 0) first_hash = episode.state_hash();
      if (index == 0 && repeat == 1) {
        EXPECT_EQ(episode.state_hash(), first_hash) << "same seed, same trajectory";
      }
    }
  }
}

TEST(RemoteEnv, DirectStepsAndResetsOfOneInstance) {
  if (!have_python()) GTEST_SKIP() << "/usr/bin/python3 is not installed";
  auto env = make_env("remote", {{"port", std::to_string(shared_port())}});
  auto& remote = static_cast<RemoteEnv&>(*env);
  Rng rng(StreamKey{1, 2, 0, StreamRole::kEnvironment, 0});
  const Env::Start start = env->reset(Task{"guess-7", 7, ""}, rng);
  EXPECT_NE(start.system.text.find("secret number"), std::string::npos);
  EXPECT_NE(start.user.text.find("task guess-7: start guessing"), std::string::npos) << start.user.text;
  const std::string first_id = remote.episode_id();
  EXPECT_FALSE(first_id.empty());
  // Not announced to a batcher: one POST /v1/episodes/{id}/step each.
  const StepResult low = env->step(Action{"guess 0", {}});
  EXPECT_NE(low.observation.text.find("0 is too low"), std::string::npos) << low.observation.text;
  EXPECT_FALSE(low.terminated || low.truncated);
  const StepResult bad = env->step(Action{"hello", {}});
  EXPECT_EQ(bad.info, "invalid command");  // info travels in `reason`
  // A second reset drops the open episode and starts a new one.
  env->reset(Task{"guess-8", 8, ""}, rng);
  EXPECT_NE(remote.episode_id(), first_id);
  // An announced step must be stepped with the same action.
  PendingStep announced{env.get(), Action{"guess 50", {}}};
  prepare_steps(std::span<const PendingStep>(&announced, 1));
  try {
    env->step(Action{"guess 51", {}});
    ADD_FAILURE() << "a different action than the announced one was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "action") << e.what();
  }
}

// The default command names the reference environment by absolute path (remote_env.h
// default_remote_command: found next to the binary or in the source tree), so that a server started from any
// directory starts it. Before, it was relative to the working directory: a reset from "/" failed.
TEST(RemoteEnv, TheDefaultProcessStartsFromAnyWorkingDirectory) {
  namespace fs = std::filesystem;
  EXPECT_EQ(RemoteConfig{}.command,
            "/usr/bin/python3 '" + fs::path(kEnvScript).lexically_normal().string() + "' --port 0");
  if (!have_python()) GTEST_SKIP() << "/usr/bin/python3 is not installed";
  const fs::path before = fs::current_path();
  fs::current_path("/");
  std::string system_text, error;
  try {
    auto env = make_env("remote", {});
    Rng rng(StreamKey{1, 2, 0, StreamRole::kEnvironment, 0});
    system_text = env->reset(Task{"guess-7", 7, ""}, rng).system.text;
  } catch (const Error& e) {
    error = e.what();
  }
  fs::current_path(before);
  EXPECT_EQ(error, "");
  EXPECT_NE(system_text.find("secret number"), std::string::npos) << system_text;
}

// DESIGN.md rule 9: N episodes x T steps in lockstep are T batch requests, not N x T step requests.
TEST(RemoteEnv, LockstepRoundsAreOneBatchRequestEach) {
  if (!have_python()) GTEST_SKIP() << "/usr/bin/python3 is not installed";
  constexpr int kEpisodes = 8, kTurns = 12;  // GuessNumber's turn limit
  for (const bool batch : {true, false}) {
    const test::TempDir temp;
    const std::string log = temp.file("requests.log");
    {
      const auto anchor = make_env("remote", {{"command", kPython + " --request-log " + log}});
      Rng rng(StreamKey{});
      anchor->reset(Task{"anchor", 0, ""}, rng);
      const std::string port = std::to_string(static_cast<RemoteEnv&>(*anchor).port());
      const auto codec = make_codec("text", anchor->spec());
      const ZeroPolicy policy(codec);
      std::vector<std::unique_ptr<Episode>> owned;
      std::vector<Episode*> episodes;
      for (int i = 0; i < kEpisodes; ++i) {
        owned.push_back(std::make_unique<Episode>(
            make_env("remote", {{"port", port}, {"batch", batch ? "true" : "false"}}), codec, config(3, i)));
        owned.back()->start(Task{"guess-" + std::to_string(i), static_cast<uint64_t>(i), ""});
        episodes.push_back(owned.back().get());
      }
      drive(episodes, policy);
      for (const auto& e : owned) {
        EXPECT_EQ(e->status(), EpisodeStatus::kTruncated) << e->reason();
        EXPECT_EQ(e->turn(), kTurns);
        EXPECT_EQ(e->reason(), "turn limit");
      }
    }
    const auto lines = read_lines(log);
    EXPECT_EQ(count_prefix(lines, "GET /v1/info"), 1u);
    EXPECT_EQ(std::count(lines.begin(), lines.end(), "POST /v1/episodes"), kEpisodes + 1);  // + the anchor
    if (batch) {
      EXPECT_EQ(count_prefix(lines, "POST /v1/batch/step"), static_cast<size_t>(kTurns));
      EXPECT_EQ(count_prefix(lines, "POST /v1/episodes/"), 0u);
      EXPECT_EQ(lines.size(), static_cast<size_t>(1 + kEpisodes + 1 + kTurns + 1)) << "+ the anchor's DELETE";
    } else {
      EXPECT_EQ(count_prefix(lines, "POST /v1/batch/step"), 0u);
      EXPECT_EQ(count_prefix(lines, "POST /v1/episodes/"), static_cast<size_t>(kEpisodes * kTurns));
      EXPECT_EQ(lines.size(), static_cast<size_t>(1 + kEpisodes + 1 + kEpisodes * kTurns + 1));
    }
    // Ended episodes are forgotten by the process: the only DELETE is the anchor's open episode.
    EXPECT_EQ(count_prefix(lines, "DELETE /v1/episodes/"), 1u);
  }
}

// run_rollouts with the remote environment: byte-identical trajectories run twice and for 1 vs 2 threads.
TEST(RemoteEnv, RolloutsAreByteIdenticalAcrossRunsAndThreadCounts) {
  if (!have_python()) GTEST_SKIP() << "/usr/bin/python3 is not installed";
  const std::string port = std::to_string(shared_port());
  const auto probe = make_env("remote", {{"port", port}});
  const auto codec = make_codec("text", probe->spec());
  const RandomGuessPolicy policy(codec);
  auto run = [&](int threads, size_t group_size) {
    RolloutSpec spec;
    spec.count = 10;
    spec.group_size = group_size;
    spec.make_episode = [&](size_t i) {
      EpisodeConfig c = config(21, static_cast<int64_t>(i % 2));
      c.budget.capacity = 1024;  // small: compaction happens, so rounds mix summaries and steps
      c.budget.reserve = 384;
      c.budget.max_compactions = 6;
      auto episode = std::make_unique<Episode>(make_env("remote", {{"port", port}}), codec, c);
      episode->start(Task{"guess-" + std::to_string(i / 2), i / 2, ""});
      return episode;
    };
    const Runner runner(threads);
    return run_rollouts(spec, policy, runner);
  };
  const auto a = run(1, 4);
  const auto b = run(1, 4);
  const auto c = run(2, 3);
  int compactions = 0;
  for (const Trajectory& t : a) {
    EXPECT_NE(t.status, EpisodeStatus::kFailed) << t.reason;
    compactions += t.compactions;
  }
  EXPECT_GT(compactions, 0);
  EXPECT_EQ(to_jsonl(a), to_jsonl(b));
  EXPECT_EQ(to_jsonl(a), to_jsonl(c));
}

TEST(RemoteEnv, BinaryProtobufOnTheWire) {
  if (!have_python()) GTEST_SKIP() << "/usr/bin/python3 is not installed";
  const std::string modules = std::string(CRL_BINARY_DIR) + "/generated/python";
  if (!std::filesystem::exists(modules + "/server_pb2.py") ||
      std::system("/usr/bin/python3 -c 'import google.protobuf' > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3-protobuf or " << modules << "/server_pb2.py is missing";
  }
  const auto anchor =
      make_env("remote", {{"command", "env CRL_PROTO_PY=" + modules + " " + kPython}, {"wire", "protobuf"}});
  Rng rng(StreamKey{});
  anchor->reset(Task{"anchor", 0, ""}, rng);
  const std::string port = std::to_string(static_cast<RemoteEnv&>(*anchor).port());
  const auto codec = make_codec("text", anchor->spec());
  const BisectPolicy policy(codec);
  std::string hashes[2];
  for (int w = 0; w < 2; ++w) {
    std::vector<std::unique_ptr<Episode>> owned;
    std::vector<Episode*> episodes;
    for (uint64_t i = 0; i < 3; ++i) {
      owned.push_back(std::make_unique<Episode>(
          make_env("remote", {{"port", port}, {"wire", w == 0 ? "json" : "protobuf"}}), codec, config(4)));
      owned.back()->start(Task{"guess-" + std::to_string(i), i, ""});
      episodes.push_back(owned.back().get());
    }
    drive(episodes, policy);
    for (const auto& e : owned) {
      EXPECT_EQ(e->status(), EpisodeStatus::kCompleted) << e->reason();
      hashes[w] += e->state_hash();
    }
  }
  EXPECT_EQ(hashes[0], hashes[1]) << "the same episodes over JSON and over binary protobuf";
}

TEST(RemoteEnv, FailuresOfTheOtherSideAreCleanErrors) {
  Rng rng(StreamKey{});
  // Nothing listens on port 1.
  try {
    make_env("remote", {{"port", "1"}})->reset(Task{"t", 0, ""}, rng);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot connect"), std::string::npos) << e.what();
  }
  // A command that does not print its port.
  EXPECT_THROW(
      make_env("remote", {{"command", "echo hello"}, {"timeout_ms", "2000"}})->reset(Task{"t", 0, ""}, rng),
      Error);
  // A command that cannot start names its exit status and the directory it ran in (a relative path in it is
  // the usual cause).
  try {
    make_env("remote", {{"command", "/bin/sh -c 'exit 3'"}})->reset(Task{"t", 0, ""}, rng);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exited with status 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("it ran in \""), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_env("remote", {{"host", "localhost"}}), Error);
  EXPECT_THROW(make_env("remote", {{"port", "70000"}}), Error);
  EXPECT_THROW(make_env("remote", {{"prot", "1"}}), Error);
  EXPECT_THROW(make_env("remote", {{"wire", "xml"}}), Error);
  if (!have_python()) return;
  // A process that accepts connections and never answers: the request times out, the env stops the process.
  const auto begin = std::chrono::steady_clock::now();
  try {
    make_env("remote", {{"command", fake("silent")}, {"timeout_ms", "300"}})->reset(Task{"t", 0, ""}, rng);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no answer within 300 ms"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("GET /v1/info"), std::string::npos) << e.what();
  }
  // A generous bound (python starts on a loaded machine): it only has to tell the 300 ms timeout from the
  // fake's 60 s silence.
  EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(30));
  // An environment without a text view, and one that the process does not serve.
  try {
    make_env("remote", {{"command", fake("no_text")}})->reset(Task{"t", 0, ""}, rng);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "views") << e.what();
  }
  try {
    make_env("remote", {{"command", kPython}, {"env", "chess"}})->reset(Task{"t", 0, ""}, rng);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "env") << e.what();
    EXPECT_NE(std::string(e.what()).find("guess_number"), std::string::npos) << e.what();
  }
  // Inside an Episode, a failing remote step ends the episode as failed with the reason.
  auto play = [&](const std::string& command, int episodes_count) {
    auto anchor = make_env("remote", {{"command", command}});
    anchor->reset(Task{"anchor", 0, ""}, rng);
    const std::string port = std::to_string(static_cast<RemoteEnv&>(*anchor).port());
    const auto codec = make_codec("text", anchor->spec());
    std::vector<std::unique_ptr<Episode>> owned;
    std::vector<Episode*> episodes;
    for (int i = 0; i < episodes_count; ++i) {
      owned.push_back(std::make_unique<Episode>(make_env("remote", {{"port", port}}), codec, config(1, i)));
      owned.back()->start(Task{"t", 0, ""});
      episodes.push_back(owned.back().get());
    }
    drive(episodes, BisectPolicy(codec));
    return owned;
  };
  for (const auto& e : play(fake("dies_on_step"), 2)) {
    EXPECT_EQ(e->status(), EpisodeStatus::kFailed);
    EXPECT_NE(e->reason().find("closed the connection"), std::string::npos) << e->reason();
    EXPECT_NE(e->reason().find("POST /v1/batch/step"), std::string::npos) << e->reason();
  }
  for (const auto& e : play(fake("bad_answer"), 1)) {
    EXPECT_EQ(e->status(), EpisodeStatus::kFailed);
    EXPECT_NE(e->reason().find("observation"), std::string::npos) << e->reason();
  }
  const auto mixed = play(fake("item_error"), 3);
  EXPECT_EQ(mixed[0]->status(), EpisodeStatus::kCompleted) << mixed[0]->reason();
  EXPECT_EQ(mixed[1]->status(), EpisodeStatus::kFailed);
  EXPECT_NE(mixed[1]->reason().find("HTTP 409 injected: item failed"), std::string::npos)
      << mixed[1]->reason();
  EXPECT_NE(mixed[1]->reason().find("action.text"), std::string::npos) << mixed[1]->reason();
  EXPECT_NE(mixed[1]->reason().find("results[1]"), std::string::npos) << mixed[1]->reason();
}

}  // namespace
}  // namespace crl
