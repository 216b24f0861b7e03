#pragma once
// Trajectories for the viewer's tests: real memory-chain episodes (crl run's demo), a hostile variant whose
// environment text and summary try to break out of the page, and one 100k-token rollout.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli/command.h"
#include "engine/trajectory.h"
#include "engine/trajectory_io.h"

namespace crl::ui::testing {

// The attack: closes the data element, opens a script, and hides the rest of the page in a comment.
inline const std::string kAttack =
    "</script><script>document.documentElement.dataset.pwned='1'</script><!--<script>";

inline std::string test_dir(const std::string& name) {
  const auto dir = std::filesystem::path(CRL_BINARY_DIR) / "ui_test" / name;
  std::filesystem::create_directories(dir);
  return dir.string();
}

inline int run_quiet(const std::vector<std::string>& args, std::string* err = nullptr) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int code = cli::run_cli(args);
  ::testing::internal::GetCapturedStdout();
  const std::string e = ::testing::internal::GetCapturedStderr();
  if (err) *err = e;
  return code;
}

// Two memory-chain episodes played by the oracle (7 segments each: 3 compactions), as `crl run` exports them.
inline std::string demo_export(const std::string& dir) {
  const std::string path = dir + "/demo.jsonl";
  EXPECT_EQ(run_quiet({"run", "--episodes", "2", "--trace", "0", "--out", path}), 0);
  return path;
}

inline int64_t actor_tokens(const Trajectory& t) {
  int64_t n = 0;
  for (const Segment& s : t.segments)
    for (uint8_t m : s.actor_mask) n += m;
  return n;
}

// The demo with the attack inserted as an observation into the first segment (byte tokenizer: one id per
// byte, so it decodes to the attack) and written as the text of the first summary.
inline std::string hostile_export(const std::string& dir) {
  std::vector<Trajectory> ts = read_trajectories(demo_export(dir));
  Segment& s = ts[0].segments[0];
  size_t at = 0;
  while (at < s.response_ids.size() && s.response_provenance[at] != Provenance::kEnvironment) ++at;
  EXPECT_LT(at, s.response_ids.size()) << "no observation in the first segment";
  const size_t n = kAttack.size();
  std::vector<TokenId> ids;
  for (char c : kAttack) ids.push_back(static_cast<uint8_t>(c));
  s.response_ids.insert(s.response_ids.begin() + at, ids.begin(), ids.end());
  s.response_provenance.insert(s.response_provenance.begin() + at, n, Provenance::kEnvironment);
  s.actor_mask.insert(s.actor_mask.begin() + at, n, 0);
  s.critic_mask.insert(s.critic_mask.begin() + at, n, 0);
  s.logprobs.insert(s.logprobs.begin() + at, n, 0.0f);
  s.values.insert(s.values.begin() + at, n, 0.0f);
  ts[0].segments[1].text = "summary says " + kAttack;
  const std::string path = dir + "/hostile.jsonl";
  ts[0].validate();
  write_trajectories(path, ts);
  return path;
}

// One rollout of a single execution segment with `n` response tokens: turns of 8 sampled tokens and 56
// environment tokens (an unknown environment, so the page shows ids).
inline std::string big_export(const std::string& dir, size_t n) {
  Trajectory t;
  t.rollout_id = "big/0";
  t.env = "not_registered";
  t.task_id = "big";
  t.reward = 1.0;
  Segment s;
  for (int i = 0; i < 16; ++i) {
    s.prompt_ids.push_back(1000 + i);
    s.prompt_provenance.push_back(Provenance::kPrompt);
  }
  for (size_t i = 0; i < n; ++i) {
    const bool sampled = i % 64 < 8;
    s.response_ids.push_back(static_cast<TokenId>(i % 500));
    s.response_provenance.push_back(sampled ? Provenance::kSampled : Provenance::kEnvironment);
    s.actor_mask.push_back(sampled);
    s.critic_mask.push_back(sampled);
    s.logprobs.push_back(sampled ? -0.5f : 0.0f);
    s.values.push_back(sampled ? static_cast<float>(i) / static_cast<float>(n) : 0.0f);
    s.n_sampled += sampled;
  }
  t.segments.push_back(std::move(s));
  t.validate();  // n_s is the actor-mask sum
  const std::string path = dir + "/big.jsonl";
  write_trajectories(path, {t});
  return path;
}

}  // namespace crl::ui::testing
