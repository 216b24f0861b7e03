#pragma once
// Typed parameters for anything created by name (environments, policies). A component declares its
// parameters (name, type, default, help); values arrive as strings (scenario files, HTTP requests, command
// lines) and are checked against the declaration: an unknown name or a value of the wrong type is an error
// that names the component, the parameter and the value (DESIGN.md rule 4).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace crl {

enum class ParamType { kInt, kDouble, kBool, kString };

// What a duration parameter counts, so that a server can bound client-chosen timeouts (server/).
enum class ParamUnit { kNone, kSeconds, kMilliseconds };

struct ParamSpec {
  std::string name;
  ParamType type = ParamType::kInt;
  std::string default_value;
  std::string help;
  // Server configuration only (`crl serve --env-param ENV.KEY=VALUE`): a parameter that chooses host paths,
  // starts host processes or weakens isolation (a sandbox's namespaces or resource limits). A server refuses
  // it in a request; local commands (scenarios, `crl run --param`) set it freely. `crl inspect --envs`
  // shows it.
  bool server_only = false;
  // A duration (a timeout or deadline): a server bounds a client's value by its limit.
  ParamUnit unit = ParamUnit::kNone;
};

class Params {
 public:
  // Checks `values` against `specs` and fills in defaults. `where` names the component for errors.
  static Params resolve(const std::vector<ParamSpec>& specs, const std::map<std::string, std::string>& values,
                        const std::string& where);
  int64_t get_int(const std::string& name) const;
  // The value, checked to be >= `min`; otherwise crl::Error naming the component, the parameter and the
  // value.
  int64_t get_int_at_least(const std::string& name, int64_t min) const;
  double get_double(const std::string& name) const;
  bool get_bool(const std::string& name) const;
  const std::string& get_string(const std::string& name) const;
  const std::map<std::string, std::string>& values() const { return values_; }

 private:
  const std::string& raw(const std::string& name) const;
  std::map<std::string, std::string> values_;
  std::string where_;
};

std::string param_type_name(ParamType type);

}  // namespace crl
