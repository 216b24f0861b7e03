#pragma once
// The policy interface (DESIGN.md): a policy answers a batch of requests, one decision each.
//
// Contract: act() must be a pure function of each request (its prompt, role, budget and stream key) and of
// the policy's parameters. A policy draws random numbers only from Rng(request.stream), never from shared
// state, so a decision does not depend on which other requests share the batch, on thread count, or on
// order. act() may be called concurrently from several threads on the same policy object.
#include <map>
#include <memory>
#include <span>
#include <string>

#include "engine/budget.h"
#include "engine/registry.h"
#include "engine/turn.h"
#include "envs/codec.h"
#include "envs/env.h"

namespace crl {

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string name() const = 0;
  // decisions[i] answers *requests[i]; decisions.size() == requests.size(). A decision must hold at most
  // request.max_new_tokens tokens.
  virtual void act(std::span<const Request* const> requests, std::span<Decision> decisions) const = 0;
};

// What a policy is created for: the environment's spec and the codec of the episodes it will act in.
struct PolicyTarget {
  // A constructor rather than an aggregate, so that the many PolicyTarget{env, codec} call sites stay
  // warning-free (-Wmissing-field-initializers) now that the optional fields below exist.
  PolicyTarget(const EnvSpec* env_spec = nullptr, std::shared_ptr<const Codec> episode_codec = {},
               std::map<std::string, std::string> params = {}, const Budget* episode_budget = nullptr)
      : env(env_spec),
        codec(std::move(episode_codec)),
        env_params(std::move(params)),
        budget(episode_budget) {}
  const EnvSpec* env = nullptr;
  std::shared_ptr<const Codec> codec;
  // Where the caller knows them (the scenario runner): the environment's parameters and the episodes'
  // budget, for a policy that renders its own demonstrations (the language model's SFT, policies/lm).
  // Other policies ignore them; null/empty when unknown.
  std::map<std::string, std::string> env_params;
  const Budget* budget = nullptr;
};

using PolicyRegistry = Registry<Policy, const PolicyTarget&>;
PolicyRegistry& policy_registry();

struct PolicyRegistrar {
  explicit PolicyRegistrar(PolicyRegistry::Entry entry) { policy_registry().add(std::move(entry)); }
};

inline std::unique_ptr<Policy> make_policy(const std::string& name,
                                           const std::map<std::string, std::string>& params,
                                           const PolicyTarget& target, const std::string& where = "") {
  return policy_registry().make(name, params, where, target);
}

}  // namespace crl
