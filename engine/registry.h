#pragma once
// A registry of components created by name with typed parameters (environments, policies).
//
// Registration is link-safe (DESIGN.md rule 4): each component's source defines a static Registrar, and the
// libraries holding them are CMake OBJECT libraries linked into every executable. Names are listed sorted,
// never in hash order.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/params.h"

namespace crl {

// Args are extra construction arguments every component of the kind receives (e.g. a policy gets the
// environment it will act in).
template <typename T, typename... Args>
class Registry {
 public:
  using Factory = std::function<std::unique_ptr<T>(const Params&, Args...)>;
  struct Entry {
    std::string name;
    std::string description;
    std::vector<ParamSpec> params;
    Factory factory;
  };

  // `kind` names what is registered ("environment", "policy") in error messages.
  explicit Registry(std::string kind) : kind_(std::move(kind)) {}

  void add(Entry entry) {
    CRL_CHECK(!entries_.count(entry.name), kind_ << " registered twice: " << entry.name);
    entries_.emplace(entry.name, std::move(entry));
  }

  // Creates `name` with `values` checked against its declared parameters. `where` locates the request
  // (a scenario file, an HTTP request) in error messages.
  std::unique_ptr<T> make(const std::string& name, const std::map<std::string, std::string>& values,
                          const std::string& where, Args... args) const {
    const Entry& e = entry(name, where);
    return e.factory(Params::resolve(e.params, values, where.empty() ? kind_ + " " + quote(name) : where),
                     std::forward<Args>(args)...);
  }

  const Entry& entry(const std::string& name, const std::string& where = "") const {
    auto it = entries_.find(name);
    if (it == entries_.end()) {
      std::string known;
      for (const auto& [n, e] : entries_) known += (known.empty() ? "" : ", ") + n;
      throw Error(where, kind_, "unknown " + kind_ + " " + quote(name) + " (registered: " + known + ")");
    }
    return it->second;
  }

  bool contains(const std::string& name) const { return entries_.count(name) > 0; }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [n, e] : entries_) out.push_back(n);
    return out;
  }

 private:
  std::string kind_;
  std::map<std::string, Entry> entries_;
};

}  // namespace crl
