#pragma once
// The environment registry: every environment is created by name (scenarios, `crl serve`, `crl rollout`,
// tests). To add one, copy a folder under envs/, rename it, and define an EnvRegistrar in its source
// (envs/README.md).
#include "engine/registry.h"
#include "envs/env.h"

namespace crl {

using EnvRegistry = Registry<Env>;
EnvRegistry& env_registry();
// Creates a registered environment; `where` locates the request in error messages.
inline std::unique_ptr<Env> make_env(const std::string& name,
                                     const std::map<std::string, std::string>& params = {},
                                     const std::string& where = "") {
  return env_registry().make(name, params, where);
}

struct EnvRegistrar {
  explicit EnvRegistrar(EnvRegistry::Entry entry) { env_registry().add(std::move(entry)); }
};

}  // namespace crl
