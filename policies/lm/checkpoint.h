#pragma once
// The language model's training state in the engine's checkpoint format (proto/checkpoint.proto LmState,
// inside a PolicyState of type "lm"): sizes, the flat parameter vector, Adam's moments for the actor and
// the critic parts, and the tokenizer's fingerprint. A file is a scenarios/checkpoint.h Checkpoint (format
// tag, version, SHA-256 of the payload, written durably with a temporary file and a rename), so `crl lm
// serve --checkpoint` reads what a scenario run or `crl lm init` wrote, and damage is named, never loaded.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "policies/lm/cpu/model.h"
#include "policies/neural/network.h"
#include "proto/checkpoint.pb.h"

namespace crl::lm {

inline constexpr const char* kLmPolicyType = "lm";

// Adam over the actor part [0, value_w) and the critic part [value_w, end) of the parameters, kept apart
// (as in policies/neural) because the learner's schedule steps them at different times (critic warm-up,
// 2 critic : 1 actor). Deterministic, one thread.
class LmOptimizer {
 public:
  LmOptimizer() = default;
  explicit LmOptimizer(const ParamLayout& layout)
      : actor_(0, layout.actor_size()), critic_(layout.actor_size(), layout.size()) {}
  // `gradients` covers the whole parameter vector; each step reads only its part.
  void step_actor(std::vector<float>& params, std::span<const float> gradients, double lr) {
    actor_.step(params, gradients, lr);
  }
  void step_critic(std::vector<float>& params, std::span<const float> gradients, double lr) {
    critic_.step(params, gradients, lr);
  }
  const neural::Adam& actor() const { return actor_; }
  const neural::Adam& critic() const { return critic_; }
  neural::Adam& actor() { return actor_; }
  neural::Adam& critic() { return critic_; }

 private:
  neural::Adam actor_, critic_;
};

struct LmCheckpoint {
  LmModel model;
  LmOptimizer optimizer;
  std::string tokenizer_fingerprint;
};

// "vocab 512, d_model 128, heads 4, layers 4, d_ff 512, max_positions 512" (PolicyState.shape).
std::string lm_shape(const LmConfig& config);

// Fills `out` (type "lm", shape, LmState) deterministically.
void save_lm_state(const LmModel& model, const LmOptimizer& optimizer,
                   const std::string& tokenizer_fingerprint, proto::checkpoint::PolicyState& out);

// Reads a state; throws crl::Error naming `where` and the field (policy.lm.config.heads,
// policy.lm.parameters, policy.lm.actor_adam.m, ...) for another policy type, invalid sizes, a parameter
// count or Adam moment count that does not match the sizes, or a non-finite parameter.
LmCheckpoint load_lm_state(const proto::checkpoint::PolicyState& state, const std::string& where);

}  // namespace crl::lm
