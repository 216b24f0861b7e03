// remote: a Python environment in another process, over loopback, used like a native one (Episode + policy),
// and every failure of the other side (refused connection, silence, garbage) is a clean crl::Error.
#include "envs/remote/remote_env.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>

#include "engine/error.h"
#include "envs/episode.h"
#include "envs/registry.h"
#include "policies/policy.h"
#include "policies/rollout.h"

namespace crl {
namespace {

const std::string kPython =
    "/usr/bin/python3 " + std::string(CRL_SOURCE_DIR) + "/clients/python/crl_remote_env.py --port 0";

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

TEST(RemoteEnv, APythonEnvironmentPlaysLikeANativeOne) {
  if (!have_python()) GTEST_SKIP() << "/usr/bin/python3 is not installed";
  // One started process serves every episode (each connection holds its own episode state).
  const auto probe = make_env("remote", {{"command", kPython}});
  Rng rng(StreamKey{});
  probe->reset(Task{"probe", 0, ""}, rng);
  const std::string port = std::to_string(static_cast<RemoteEnv&>(*probe).port());
  const auto codec = make_codec("text", probe->spec());
  const BisectPolicy policy(codec);
  std::string first_hash;
  for (int repeat = 0; repeat < 2; ++repeat) {
    for (uint64_t index = 0; index < 3; ++index) {
      EpisodeConfig config;
      config.budget.capacity = 4096;
      config.budget.reserve = 1024;
      config.seed = 11;
      Episode episode(make_env("remote", {{"port", port}}), codec, config);
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

TEST(RemoteEnv, FailuresOfTheOtherSideAreCleanErrors) {
  Rng rng(StreamKey{});
  // Nothing listens on port 1.
  EXPECT_THROW(make_env("remote", {{"port", "1"}})->reset(Task{"t", 0, ""}, rng), Error);
  // A command that does not print its port.
  EXPECT_THROW(
      make_env("remote", {{"command", "echo hello"}, {"timeout_ms", "2000"}})->reset(Task{"t", 0, ""}, rng),
      Error);
  EXPECT_THROW(make_env("remote", {{"host", "localhost"}}), Error);
  EXPECT_THROW(make_env("remote", {{"port", "70000"}}), Error);
  EXPECT_THROW(make_env("remote", {{"prot", "1"}}), Error);
  if (!have_python()) return;
  // A process that accepts connections and never answers: the request times out, the env stops the process.
  const std::string silent =
      "/usr/bin/python3 -c 'import socket,time; s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(); "
      "print(\"PORT\", s.getsockname()[1], flush=True); time.sleep(60)'";
  const auto begin = std::chrono::steady_clock::now();
  EXPECT_THROW(make_env("remote", {{"command", silent}, {"timeout_ms", "300"}})->reset(Task{"t", 0, ""}, rng),
               Error);
  EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(5));
  // Inside an Episode, a failing remote step ends the episode as failed with the reason.
  const std::string dies =
      "/usr/bin/python3 -c 'import socket,json; s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(); "
      "print(\"PORT\", s.getsockname()[1], flush=True); c,_=s.accept(); f=c.makefile(\"rw\"); f.readline(); "
      "f.write(json.dumps({\"system\":\"s\",\"user\":\"u\"})+\"\\n\"); f.flush(); f.readline(); c.close()'";
  auto env = make_env("remote", {{"command", dies}});
  const auto codec = make_codec("text", env->spec());
  Episode episode(std::move(env), codec, EpisodeConfig{});
  episode.start(Task{"t", 0, ""});
  const BisectPolicy policy(codec);
  Episode* one[] = {&episode};
  drive(one, policy);
  EXPECT_EQ(episode.status(), EpisodeStatus::kFailed);
  EXPECT_NE(episode.reason().find("closed the connection"), std::string::npos) << episode.reason();
}

}  // namespace
}  // namespace crl
