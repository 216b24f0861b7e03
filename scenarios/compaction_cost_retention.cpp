#include "scenarios/compaction_cost_retention.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/error.h"
#include "engine/file_io.h"

namespace crl::scenarios {

namespace {

struct TypeRetention {
  std::string type;
  double recall = 0.0;
  double summaries = 0.0;  // summaries_per_episode x episodes
};

const char* kNoMetrics =
    "reports no summary metrics: only environments that measure what a summary kept (the synthetic suite in "
    "the symbolic view) give a retention; an accuracy is not a retention";

Retention combine(const std::vector<TypeRetention>& types, int64_t seeds, const std::string& where,
                  const std::string& arm) {
  Retention out;
  out.seeds = seeds;
  double weighted = 0.0;
  for (const TypeRetention& t : types) {
    weighted += t.recall * t.summaries;
    out.summaries += t.summaries;
  }
  if (!(out.summaries > 0.0)) {
    throw Error(where, "arm " + quote(arm),
                "wrote no summary in its final evaluation (it never compacts), so it measures no retention");
  }
  out.keep_rate = weighted / out.summaries;
  return out;
}

}  // namespace

Retention retention_of_arm(const ScenarioResult& result, const std::string& arm, const std::string& where) {
  std::string arms;
  for (const ArmResult& a : result.arms) {
    arms += (arms.empty() ? "" : ", ") + quote(a.name);
    if (a.name != arm) continue;
    if (a.types.empty()) throw Error(where, "arm " + quote(arm), kNoMetrics);
    std::vector<TypeRetention> types;
    for (const TypeResult& t : a.types) {
      types.push_back({t.type, t.recall, t.summaries_per_episode * static_cast<double>(t.episodes)});
    }
    return combine(types, static_cast<int64_t>(a.seeds.size()), where, arm);
  }
  throw Error(where, "arm " + quote(arm), "is not in the results (arms: " + arms + ")");
}

Retention read_retention(const std::string& results_dir, const std::string& arm) {
  const std::string path = (std::filesystem::path(results_dir) / "summary.json").string();
  if (!std::filesystem::exists(path)) {
    throw Error(path, "",
                "no such file: expected the summary.json of a `crl run` results folder (run the trained "
                "scenario with --out " +
                    results_dir + " first)");
  }
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path, "", std::string("is not valid JSON: ") + e.what());
  }
  if (!doc.is_object() || !doc.contains("arms") || !doc["arms"].is_array()) {
    throw Error(path, "arms", "expected an array of arms (the summary.json of `crl run`)");
  }
  std::string arms;
  for (size_t i = 0; i < doc["arms"].size(); ++i) {
    const nlohmann::json& a = doc["arms"][i];
    const std::string at = "arms[" + std::to_string(i) + "]";
    if (!a.is_object() || !a.contains("name") || !a["name"].is_string()) {
      throw Error(path, at + ".name", "expected the arm's name (a string)");
    }
    const std::string name = a["name"].get<std::string>();
    arms += (arms.empty() ? "" : ", ") + quote(name);
    if (name != arm) continue;
    if (!a.contains("types")) throw Error(path, at, "arm " + quote(arm) + " " + kNoMetrics);
    if (!a["types"].is_object() || a["types"].empty()) {
      throw Error(path, at + ".types", "expected an object of task types with their summary metrics");
    }
    std::vector<TypeRetention> types;
    for (const auto& item : a["types"].items()) {
      // (Not a structured binding: clang before 16 cannot capture one in the lambda below.)
      const std::string& type = item.key();
      const auto& m = item.value();
      const std::string field = at + ".types." + type;
      auto number = [&](const char* key, double lo, double hi) {
        if (!m.is_object() || !m.contains(key) || !m[key].is_number()) {
          throw Error(path, field + "." + key, "expected a number");
        }
        const double v = m[key].get<double>();
        if (!(std::isfinite(v) && v >= lo && v <= hi)) {
          throw Error(path, field + "." + key,
                      "value " + quote(v) + " is outside [" + quote(lo) + ", " + quote(hi) + "]");
        }
        return v;
      };
      TypeRetention t;
      t.type = type;
      t.recall = number("recall", 0.0, 1.0);
      t.summaries = number("summaries_per_episode", 0.0, 1e9) * number("episodes", 0.0, 1e15);
      types.push_back(t);
    }
    const int64_t seeds =
        a.contains("seeds") && a["seeds"].is_array() ? static_cast<int64_t>(a["seeds"].size()) : 0;
    return combine(types, seeds, path, arm);
  }
  throw Error(path, "arms", "arm " + quote(arm) + " is not in the results (arms: " + arms + ")");
}

}  // namespace crl::scenarios
