#include "envs/registry.h"

namespace crl {

EnvRegistry& env_registry() {
  static EnvRegistry registry("environment");
  return registry;
}

}  // namespace crl
