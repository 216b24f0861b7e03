#include "policies/lm/checkpoint.h"

#include <cmath>
#include <stdexcept>

#include "engine/error.h"

namespace crl::lm {

std::string lm_shape(const LmConfig& c) {
  return "vocab " + std::to_string(c.vocab) + ", d_model " + std::to_string(c.d_model) + ", heads " +
         std::to_string(c.heads) + ", layers " + std::to_string(c.layers) + ", d_ff " +
         std::to_string(c.d_ff) + ", max_positions " + std::to_string(c.max_positions) +
         (c.rope ? ", rope" : "");
}

void save_lm_state(const LmModel& model, const LmOptimizer& optimizer,
                   const std::string& tokenizer_fingerprint, proto::checkpoint::PolicyState& out) {
  const LmConfig& c = model.config();
  out.set_type(kLmPolicyType);
  out.set_shape(lm_shape(c));
  auto* lm = out.mutable_lm();
  auto* cfg = lm->mutable_config();
  cfg->set_vocab(c.vocab);
  cfg->set_d_model(c.d_model);
  cfg->set_heads(c.heads);
  cfg->set_layers(c.layers);
  cfg->set_d_ff(c.d_ff);
  cfg->set_max_positions(c.max_positions);
  cfg->set_norm_eps(c.norm_eps);
  cfg->set_value_grad_to_trunk(c.value_grad_to_trunk);
  cfg->set_rope(c.rope);
  lm->mutable_parameters()->Add(model.parameters().begin(), model.parameters().end());
  auto save_adam = [](const neural::Adam& adam, proto::checkpoint::AdamState* a) {
    a->set_steps(adam.steps());
    a->mutable_m()->Add(adam.first_moment().begin(), adam.first_moment().end());
    a->mutable_v()->Add(adam.second_moment().begin(), adam.second_moment().end());
  };
  save_adam(optimizer.actor(), lm->mutable_actor_adam());
  save_adam(optimizer.critic(), lm->mutable_critic_adam());
  lm->set_tokenizer_fingerprint(tokenizer_fingerprint);
}

LmCheckpoint load_lm_state(const proto::checkpoint::PolicyState& state, const std::string& where) {
  auto fail = [&](const std::string& field, const std::string& what) {
    throw Error(where, "policy." + field, what);
  };
  if (state.type() != kLmPolicyType || !state.has_lm()) {
    fail("type", "a " + quote(state.type()) + " policy state, expected " + quote(kLmPolicyType));
  }
  const auto& s = state.lm();
  if (!s.has_config()) fail("lm.config", "missing");
  const auto& cfg = s.config();
  LmConfig c;
  c.vocab = cfg.vocab();
  c.d_model = cfg.d_model();
  c.heads = cfg.heads();
  c.layers = cfg.layers();
  c.d_ff = cfg.d_ff();
  c.max_positions = cfg.max_positions();
  c.norm_eps = cfg.has_norm_eps() ? cfg.norm_eps() : c.norm_eps;
  c.value_grad_to_trunk = cfg.value_grad_to_trunk();
  c.rope = cfg.rope();
  try {
    c.validate();
    // Bound the allocation a hostile file can ask for (1 G floats = 4 GB).
    if (ParamLayout(c).size() > (int64_t{1} << 30)) throw std::invalid_argument("more than 2^30 parameters");
  } catch (const std::invalid_argument& e) {
    fail("lm.config", e.what());
  }
  LmCheckpoint out{LmModel(c), LmOptimizer(ParamLayout(c)), s.tokenizer_fingerprint()};
  const int64_t n = out.model.size();
  if (s.parameters_size() != n) {
    fail("lm.parameters", std::to_string(s.parameters_size()) + " values, expected " + std::to_string(n) +
                              " for " + lm_shape(c));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(s.parameters(static_cast<int>(i)))) {
      fail("lm.parameters", "parameter " + std::to_string(i) + " is not finite");
    }
  }
  out.model.parameters().assign(s.parameters().begin(), s.parameters().end());
  auto load_adam = [&](const proto::checkpoint::AdamState& a, neural::Adam& adam, const std::string& field) {
    if (a.m_size() != adam.size() || a.v_size() != adam.size() || a.steps() < 0) {
      fail("lm." + field, std::to_string(a.m_size()) + " / " + std::to_string(a.v_size()) + " moments and " +
                              std::to_string(a.steps()) + " steps, expected " + std::to_string(adam.size()) +
                              " each and steps >= 0");
    }
    adam.restore(a.steps(), std::vector<float>(a.m().begin(), a.m().end()),
                 std::vector<float>(a.v().begin(), a.v().end()));
  };
  load_adam(s.actor_adam(), out.optimizer.actor(), "actor_adam");
  load_adam(s.critic_adam(), out.optimizer.critic(), "critic_adam");
  return out;
}

}  // namespace crl::lm
