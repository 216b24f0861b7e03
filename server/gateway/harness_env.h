#pragma once
// The harness as an environment, so that a gateway session runs on the engine's own Episode (envs/episode.h)
// and gets exactly its compaction: the trigger on the request to be sent, the summary request, the rebuild
// system + resume(summary) + newest k steps with k = tail_k -> 0, per-turn clamping, max compactions then
// truncated, and the recorder's segments and masks. Nothing of that is re-implemented here.
//
// The environment's observations are the harness's new messages, already rendered to token ids by the
// session (message_render.h): the session stages them before each Episode::submit() and the codec passes
// the ids through (Observation::symbols carries them). The harness answers a turn only with its next call,
// so the session holds each sampled answer and submits it when the messages that follow it arrive.
#include <memory>
#include <optional>
#include <vector>

#include "envs/codec.h"
#include "envs/env.h"

namespace crl::server::gateway {

class HarnessEnv final : public Env {
 public:
  const EnvSpec& spec() const override;
  // What the next reset() / step() returns.
  void stage_start(std::vector<TokenId> system, std::vector<TokenId> rest, bool opens_turn = false);
  // `opens_turn`: the observation opens the next assistant turn itself (StepResult::opens_turn).
  void stage_step(std::vector<TokenId> observation, double reward, bool terminated, bool truncated,
                  bool opens_turn = false);

 protected:
  Start do_reset(const Task& task, Rng& rng) override;
  StepResult do_step(const Action& action) override;

 private:
  Start start_;
  StepResult step_;
};

// gpt-oss's harmony format (tool_call_format.h): a sampled answer is several messages, each "<|message|>"
// and its text up to a closing token. A summary's body, what resume(summary) holds, is the text of its last
// message (the "final" channel after the analysis), without the header or the closing token: the resume
// turn is a user message and holds no message structure of the policy's.
struct HarmonyTokens {
  TokenId message = 0;
  std::vector<TokenId> closers;  // <|end|>, <|call|>, <|return|>
};

// A text codec whose observations arrive as ids (HarnessEnv); the template, summary instruction, resume
// preface and decoding are the text codec's (envs/codec.h), and so is a summary's body unless `harmony`.
std::shared_ptr<const Codec> make_harness_codec(std::shared_ptr<const Codec> text_codec,
                                                std::optional<HarmonyTokens> harmony = std::nullopt);

}  // namespace crl::server::gateway
