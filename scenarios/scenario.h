#pragma once
// Scenario files (proto/scenario.proto, protobuf text format): parsing, merging the arms over the base
// setup, and checking every name and value before anything runs.
//
// Errors name the file, the line and column (1-based) and the field: a syntax error or an unknown field
// comes from protobuf's text parser through an error collector; a semantic error (unknown environment,
// policy or parameter, a value out of range) is located through the parser's location tree, e.g.
//   scenarios/x.pbtxt:7:11: field 'arm[1].set.env.name': unknown environment "chain" (registered: ...)
// A field that was not written in the file (a default) is reported with the file alone.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/budget.h"
#include "envs/codec.h"
#include "proto/scenario.pb.h"

namespace crl::scenarios {

struct ArmSpec {
  std::string name;
  std::string description;
  proto::scenario::Setup setup;  // the base setup with the arm's fields merged over it
  int index = 0;                 // position in the file
};

struct ScenarioSpec {
  std::string path;  // as given (used in messages and in the report's command line)
  std::string name;
  std::string description;
  std::string notes;
  std::vector<uint64_t> seeds;
  std::vector<ArmSpec> arms;
  proto::scenario::GatesConfig gates;
  bool has_table = false;  // the file declares an ablation table (report.md, scenarios/ablation_table.h)
  proto::scenario::TableConfig table;
};

// The codec of a setup: its view, with the setup's tokenizer for the text view (checked by parse_scenario).
std::shared_ptr<const Codec> setup_codec(const proto::scenario::Setup& setup, const EnvSpec& env);

// The context budget of a setup (checked by parse_scenario).
Budget budget_of(const proto::scenario::Setup& setup);

// Parses and checks `text`; `path` names it in errors. Throws crl::Error.
ScenarioSpec parse_scenario(const std::string& text, const std::string& path);
// Reads and parses a file. Throws crl::Error (an unreadable file names the path).
ScenarioSpec load_scenario(const std::string& path);

// `spec` with only the arms named in `names` (`crl run --arms`), in the file's order; each keeps its setup
// and its index in the file, so an arm's results are those of the whole file's run (they depend on the arm's
// setup and the seed only). The ablation table keeps the listed ablations that remain and is dropped when
// its reference arm is not selected (or when none of its listed ablations is); gates are kept (a gate whose
// arm is not run fails, naming the arm, as for any run that lacks it). Throws crl::Error naming `option`
// for an empty list, an unknown arm (listing the file's arms) or an arm named twice.
ScenarioSpec select_arms(const ScenarioSpec& spec, const std::vector<std::string>& names,
                         const std::string& option);

// The environment parameters of an arm as a name -> value map (the file's map, sorted).
std::map<std::string, std::string> env_params(const proto::scenario::Setup& setup);
std::map<std::string, std::string> policy_params(const proto::scenario::Setup& setup);

}  // namespace crl::scenarios
