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

struct ParamSpec {
  std::string name;
  ParamType type = ParamType::kInt;
  std::string default_value;
  std::string help;
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
