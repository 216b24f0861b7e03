// The memory-chain oracle: the policy that always keeps the fact in its summary and answers it. It shows
// what a perfect summarizer does (the demo of `crl run` without a scenario) and serves as the upper bound
// of the memory-chain scenarios. It reads only its prompt, like any policy.
//
// Text view: the fact is the value after the last "FACT " in the prompt (the observation of step 1, or the
// summary "FACT v" copied into a resume message). Symbolic view: the value after the last FACT or RESUME
// symbol. Execution turns answer when the prompt ends with the question, and `continue` otherwise (forced,
// untrained, in the symbolic view).
#include <string>

#include "envs/memory_chain/memory_chain.h"
#include "policies/policy.h"

namespace crl {
namespace {

class MemoryChainOracle final : public Policy {
 public:
  explicit MemoryChainOracle(std::shared_ptr<const Codec> codec) : codec_(std::move(codec)) {}
  std::string name() const override { return "memory_chain_oracle"; }

  void act(std::span<const Request* const> requests, std::span<Decision> decisions) const override {
    for (size_t i = 0; i < requests.size(); ++i) decisions[i] = decide(*requests[i]);
  }

 private:
  Decision decide(const Request& request) const {
    const std::vector<TokenId> ids = request.prompt.ids();
    Decision decision;
    if (codec_->view_name() == "symbolic") {
      int memory = -1;
      bool asked = false;
      for (size_t i = 0; i < ids.size(); ++i) {
        if ((ids[i] == kMcFact || ids[i] == kMcResume) && i + 1 < ids.size()) {
          memory = ids[i + 1] >= kMcValue0 ? ids[i + 1] - kMcValue0 : -1;
        }
        if (ids[i] == kMcQuery) asked = true;
      }
      if (request.role == Role::kSummarize) {
        decision.tokens = {memory >= 0 ? kMcValue0 + memory : kMcEmpty};
      } else if (asked) {
        decision.tokens = {kMcValue0 + std::max(memory, 0)};
      } else {
        decision.tokens = {kMcContinue};
        decision.forced = true;
      }
      decision.logprobs.assign(decision.tokens.size(), 0.0f);
      return decision;
    }
    const std::string text = codec_->decode(ids);
    // The last "FACT <digits>" (the system prompt and the question mention FACT without a value).
    std::string fact = "unknown";
    for (size_t at = text.find("FACT "); at != std::string::npos; at = text.find("FACT ", at + 1)) {
      size_t end = at + 5;
      while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
      if (end > at + 5) fact = text.substr(at + 5, end - at - 5);
    }
    const size_t last_turn = text.rfind("<|im_start|>user\n");
    const bool asked =
        last_turn != std::string::npos && text.find("QUESTION", last_turn) != std::string::npos;
    std::string reply;
    if (request.role == Role::kSummarize) {
      reply = "FACT " + fact;
    } else {
      reply = asked ? "answer " + fact : "continue";
    }
    decision.tokens = codec_->encode_action(reply);
    if (static_cast<int64_t>(decision.tokens.size()) > request.max_new_tokens) {
      decision.tokens.resize(request.max_new_tokens);
      decision.finish_reason = "length";
    }
    decision.logprobs.assign(decision.tokens.size(), 0.0f);  // deterministic: log-prob of 1
    return decision;
  }

  std::shared_ptr<const Codec> codec_;
};

const PolicyRegistrar kMemoryChainOracleRegistrar({"memory_chain_oracle",
                                                   "keeps the memory-chain fact in every summary",
                                                   {},
                                                   [](const Params&,
                                                      const PolicyTarget& target) -> std::unique_ptr<Policy> {
                                                     return std::make_unique<MemoryChainOracle>(target.codec);
                                                   }});

}  // namespace
}  // namespace crl
