#include "server/gateway/harness_env.h"

#include <algorithm>

namespace crl::server::gateway {

namespace {

class HarnessCodec final : public Codec {
 public:
  HarnessCodec(std::shared_ptr<const Codec> text, std::optional<HarmonyTokens> harmony)
      : text_(std::move(text)), harmony_(std::move(harmony)) {}
  std::string view_name() const override { return "text"; }
  ContextTemplate context_template() const override { return text_->context_template(); }
  std::vector<TokenId> encode_system(const Observation& system) const override { return system.symbols; }
  std::vector<TokenId> encode_user(const Observation& user) const override { return user.symbols; }
  std::vector<TokenId> encode_observation(const Observation& observation,
                                          std::span<const TokenId>) const override {
    return observation.symbols;
  }
  Action decode_action(std::span<const TokenId>) const override {
    return Action{};  // the harness reads the answer from the HTTP response, not from the environment
  }
  std::vector<TokenId> encode_action(const std::string& text) const override {
    return text_->encode_action(text);
  }
  std::span<const TokenId> summary_body(std::span<const TokenId> summary) const override {
    if (!harmony_) return text_->summary_body(summary);
    const auto message = std::find(summary.rbegin(), summary.rend(), harmony_->message);
    std::span<const TokenId> body = summary.subspan(static_cast<size_t>(summary.rend() - message));
    const auto& closers = harmony_->closers;
    if (!body.empty() && std::find(closers.begin(), closers.end(), body.back()) != closers.end())
      body = body.first(body.size() - 1);
    return body;
  }
  std::string decode(std::span<const TokenId> tokens) const override { return text_->decode(tokens); }
  std::string fingerprint() const override { return text_->fingerprint(); }

 private:
  std::shared_ptr<const Codec> text_;
  std::optional<HarmonyTokens> harmony_;
};

}  // namespace

const EnvSpec& HarnessEnv::spec() const {
  static const EnvSpec spec = [] {
    EnvSpec s;
    s.name = "gateway";
    s.description = "an agent harness behind the compaction gateway (server/gateway)";
    return s;
  }();
  return spec;
}

void HarnessEnv::stage_start(std::vector<TokenId> system, std::vector<TokenId> rest, bool opens_turn) {
  start_ = Start{};
  start_.system.symbols = std::move(system);
  start_.user.symbols = std::move(rest);
  start_.opens_turn = opens_turn;
}

void HarnessEnv::stage_step(std::vector<TokenId> observation, double reward, bool terminated, bool truncated,
                            bool opens_turn) {
  step_ = StepResult{};
  step_.observation.symbols = std::move(observation);
  step_.opens_turn = opens_turn;
  step_.reward = reward;
  step_.terminated = terminated;
  step_.truncated = truncated;
  if (truncated) step_.info = "the trainer reported the rollout truncated";
}

Env::Start HarnessEnv::do_reset(const Task&, Rng&) {
  return std::move(start_);
}

StepResult HarnessEnv::do_step(const Action&) {
  return std::move(step_);
}

std::shared_ptr<const Codec> make_harness_codec(std::shared_ptr<const Codec> text_codec,
                                                std::optional<HarmonyTokens> harmony) {
  return std::make_shared<HarnessCodec>(std::move(text_codec), std::move(harmony));
}

}  // namespace crl::server::gateway
