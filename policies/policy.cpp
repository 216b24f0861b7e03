#include "policies/policy.h"

namespace crl {

PolicyRegistry& policy_registry() {
  static PolicyRegistry registry("policy");
  return registry;
}

}  // namespace crl
