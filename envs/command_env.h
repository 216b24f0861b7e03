#pragma once
// What the command-driven text environments share (coding_repo, shell: one reply is one command): trimming
// the reply, the truncation reasons every such episode has, and the registry entry of an environment type
// with the usual static param_specs() / config_from(Params) pair.
#include <memory>
#include <string>

#include "envs/registry.h"
#include "envs/trim.h"

namespace crl {

// Why the episode is truncated after this step ("" when it is not): `invalid` invalid commands so far,
// `steps_done` steps before this one.
inline std::string turn_limit_reason(int invalid, int max_invalid, int steps_done, int max_turns) {
  if (invalid >= max_invalid) return "too many invalid commands (" + std::to_string(invalid) + ")";
  if (steps_done + 1 >= max_turns) return "turn limit (" + std::to_string(max_turns) + ")";
  return "";
}

// The registry entry of environment type E, made from its parameters by E(E::config_from(params)).
template <typename E>
EnvRegistry::Entry command_env_entry(std::string name, std::string description) {
  return {std::move(name), std::move(description), E::param_specs(),
          [](const Params& params) -> std::unique_ptr<Env> {
            return std::make_unique<E>(E::config_from(params));
          }};
}

}  // namespace crl
