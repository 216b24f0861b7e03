// `crl inspect FILE`: prints an exported trajectory file (.jsonl or binary) as a readable trace.
// `crl inspect --envs` lists the registered environments and policies with their parameters.
#include <iostream>

#include "cli/command.h"
#include "cli/options.h"
#include "engine/error.h"
#include "engine/trace.h"
#include "engine/trajectory_io.h"
#include "envs/codec.h"
#include "envs/registry.h"
#include "policies/policy.h"

namespace crl::cli {
namespace {

// Decodes with the codec the trajectory was recorded with, when the engine knows it; else prints ids.
Decoder decoder_for(const Trajectory& t) {
  const auto view = t.metadata.find("view");
  std::shared_ptr<const Codec> codec;
  if (view != t.metadata.end() && env_registry().contains(t.env)) {
    try {
      codec = make_codec(view->second, make_env(t.env)->spec());
    } catch (const Error&) {
      codec = nullptr;
    }
  }
  const auto fingerprint = t.metadata.find("codec_fingerprint");
  if (codec && fingerprint != t.metadata.end() && fingerprint->second != codec->fingerprint())
    codec = nullptr;
  if (codec) return [codec](std::span<const TokenId> ids) { return codec->decode(ids); };
  return [](std::span<const TokenId> ids) {
    std::string out;
    for (TokenId id : ids) out += (out.empty() ? "" : " ") + std::to_string(id);
    return out;
  };
}

void list_components() {
  std::cout << "environments (server-only parameters: set with crl serve --env-param, refused in "
               "requests):\n";
  for (const std::string& name : env_registry().names()) {
    const auto& entry = env_registry().entry(name);
    std::cout << "  " << name << ": " << entry.description << "\n";
    try {  // the default text budget of an instance with default parameters
      const Budget b = make_env(name)->spec().text_budget;
      std::cout << "    text budget: C " << b.capacity << ", T_comp " << b.reserve << ", per-turn cap "
                << b.per_turn_cap << ", summary cap " << b.summary_cap << ", k " << b.tail_k
                << ", compactions " << b.max_compactions << "\n";
    } catch (const Error&) {
    }
    for (const ParamSpec& p : entry.params) {
      std::cout << "    " << p.name << " (" << param_type_name(p.type) << ", default "
                << quote(p.default_value) << (p.server_only ? ", server-only" : "") << "): " << p.help
                << "\n";
    }
  }
  std::cout << "policies:\n";
  for (const std::string& name : policy_registry().names()) {
    std::cout << "  " << name << ": " << policy_registry().entry(name).description << "\n";
  }
}

int inspect_command(const std::vector<std::string>& args) {
  std::string path, rollout;
  bool full = false, envs = false;
  po::options_description options;
  options.add_options()("file", po::value(&path), "trajectory file (.jsonl or binary protobuf)")(
      "rollout", po::value(&rollout), "show only this rollout id")("full", po::bool_switch(&full),
                                                                   "print every run of tokens")(
      "envs", po::bool_switch(&envs), "list registered environments and policies");
  po::positional_options_description positional;
  positional.add("file", 1);
  po::variables_map vm;
  int exit_code = 0;
  if (!parse_options("inspect", "FILE [options] | --envs", options, positional, args, vm, exit_code)) {
    return exit_code;
  }
  if (envs) {
    list_components();
    return 0;
  }
  if (path.empty()) {
    std::cerr << "crl inspect: a trajectory FILE is required (see 'crl inspect --help')\n";
    return 2;
  }
  TraceOptions trace_options;
  if (full) trace_options.runs_shown = 0;
  int shown = 0;
  for (const Trajectory& t : read_trajectories(path)) {
    if (!rollout.empty() && t.rollout_id != rollout) continue;
    std::cout << format_trace(t, decoder_for(t), trace_options) << "\n";
    ++shown;
  }
  if (shown == 0 && !rollout.empty())
    throw Error(path, "rollout", "no rollout " + quote(rollout) + " in the file");
  return 0;
}

const CommandRegistrar kRegistrar({"inspect", "print a trajectory file as a readable trace",
                                   inspect_command});

}  // namespace
}  // namespace crl::cli
