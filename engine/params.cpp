#include "engine/params.h"

#include <charconv>

#include "engine/error.h"

namespace crl {

std::string param_type_name(ParamType type) {
  switch (type) {
    case ParamType::kInt:
      return "integer";
    case ParamType::kDouble:
      return "number";
    case ParamType::kBool:
      return "boolean (true/false)";
    case ParamType::kString:
      return "string";
  }
  return "?";
}

namespace {
bool parses_as(ParamType type, const std::string& text) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  switch (type) {
    case ParamType::kInt: {
      int64_t v;
      auto [ptr, ec] = std::from_chars(begin, end, v);
      return ec == std::errc() && ptr == end && !text.empty();
    }
    case ParamType::kDouble: {
      double v;
      auto [ptr, ec] = std::from_chars(begin, end, v);
      return ec == std::errc() && ptr == end && !text.empty();
    }
    case ParamType::kBool:
      return text == "true" || text == "false";
    case ParamType::kString:
      return true;
  }
  return false;
}
}  // namespace

Params Params::resolve(const std::vector<ParamSpec>& specs, const std::map<std::string, std::string>& values,
                       const std::string& where) {
  Params params;
  params.where_ = where;
  for (const auto& [name, value] : values) {
    const ParamSpec* spec = nullptr;
    for (const ParamSpec& s : specs) {
      if (s.name == name) spec = &s;
    }
    if (spec == nullptr) {
      std::string known;
      for (const ParamSpec& s : specs) known += (known.empty() ? "" : ", ") + s.name;
      throw Error(where, name, "unknown parameter (known: " + (known.empty() ? "none" : known) + ")");
    }
    if (!parses_as(spec->type, value)) {
      throw Error(where, name, "value " + quote(value) + " is not of type " + param_type_name(spec->type));
    }
    params.values_[name] = value;
  }
  for (const ParamSpec& s : specs) params.values_.try_emplace(s.name, s.default_value);
  return params;
}

const std::string& Params::raw(const std::string& name) const {
  auto it = values_.find(name);
  CRL_CHECK(it != values_.end(), "undeclared parameter " << name);
  return it->second;
}

int64_t Params::get_int(const std::string& name) const {
  int64_t v = 0;
  const std::string& text = raw(name);
  std::from_chars(text.data(), text.data() + text.size(), v);
  return v;
}
int64_t Params::get_int_at_least(const std::string& name, int64_t min) const {
  const int64_t value = get_int(name);
  if (value < min) {
    throw Error(where_, name,
                "value " + std::to_string(value) + " is below the minimum " + std::to_string(min));
  }
  return value;
}

double Params::get_double(const std::string& name) const {
  double v = 0;
  const std::string& text = raw(name);
  std::from_chars(text.data(), text.data() + text.size(), v);
  return v;
}
bool Params::get_bool(const std::string& name) const {
  return raw(name) == "true";
}
const std::string& Params::get_string(const std::string& name) const {
  return raw(name);
}

}  // namespace crl
