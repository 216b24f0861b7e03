// `crl inspect FILE`: prints an exported trajectory file (.jsonl or binary) as a readable trace.
// `crl inspect --envs` lists the registered environments and policies with their parameters.
// `crl inspect FILE --html view.html` writes the trajectory viewer (ui/): one self-contained HTML file,
// written atomically, with per-token advantages from `--advantages result.json` or `--compute-advantages`
// (the learner settings of `--scenario S [--arm A]`, else the defaults).
#include <iostream>

#include "cli/command.h"
#include "cli/options.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/trace.h"
#include "engine/trajectory_io.h"
#include "envs/codec.h"
#include "envs/registry.h"
#include "learners/batch.h"
#include "learners/learner.h"
#include "policies/policy.h"
#include "scenarios/runner.h"
#include "scenarios/scenario.h"
#include "ui/viewer_data.h"
#include "ui/viewer_page.h"

namespace crl::cli {
namespace {

// The codec the trajectory was recorded with, when the engine knows it (same fingerprint); else null.
std::shared_ptr<const Codec> codec_for(const Trajectory& t) {
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
  return codec;
}

// Decodes with the codec the trajectory was recorded with, when the engine knows it; else prints ids.
Decoder decoder_for(const Trajectory& t) {
  if (auto codec = codec_for(t)) return [codec](std::span<const TokenId> ids) { return codec->decode(ids); };
  return [](std::span<const TokenId> ids) {
    std::string out;
    for (TokenId id : ids) out += (out.empty() ? "" : " ") + std::to_string(id);
    return out;
  };
}

// The learner settings for --compute-advantages: the scenario's arm (the first arm by default), else the
// learner's defaults.
learners::LearnerOptions learner_settings(const std::string& scenario, const std::string& arm,
                                          std::string& described) {
  if (scenario.empty()) {
    if (!arm.empty()) throw Error("--arm", "arm", "needs --scenario (the file whose arm it names)");
    described = "computed with the default learner settings";
    return {};
  }
  const scenarios::ScenarioSpec spec = scenarios::load_scenario(scenario);
  for (const scenarios::ArmSpec& a : spec.arms) {
    if (!arm.empty() && a.name != arm) continue;
    described = "computed with the learner settings of " + scenario + " arm " + a.name;
    return scenarios::learner_options(a.setup.learner());
  }
  std::string names;
  for (const scenarios::ArmSpec& a : spec.arms) names += (names.empty() ? "" : ", ") + a.name;
  throw Error(scenario, "arm", "no arm " + quote(arm) + " (arms: " + names + ")");
}

// Advantages computed here, in the shape of `crl advantages`'s result (one entry per rollout and segment).
ui::AdvantageTable compute_advantages(const std::vector<Trajectory>& trajectories,
                                      const learners::LearnerOptions& options, std::string described) {
  const learners::Batch batch = learners::make_batch(trajectories);
  const learners::Advantages adv = learners::Learner(options).advantages(batch);
  ui::AdvantageTable table;
  table.source = std::move(described);
  for (int64_t r = 0; r < batch.num_rollouts(); ++r) {
    ui::RolloutAdvantages ro;
    ro.id = batch.rollout_ids[r];
    for (int64_t s = batch.rollout_offsets[r]; s < batch.rollout_offsets[r + 1]; ++s) {
      const auto begin = batch.segment_offsets[s], end = batch.segment_offsets[s + 1];
      ui::SegmentAdvantages seg;
      seg.advantages.assign(adv.advantages.begin() + begin, adv.advantages.begin() + end);
      seg.returns.assign(adv.returns.begin() + begin, adv.returns.begin() + end);
      seg.values.assign(batch.values.begin() + begin, batch.values.begin() + end);
      seg.lambda = adv.lambda[s];
      seg.factor = adv.factor[s];
      seg.n_after = adv.n_after[s];
      ro.segments.push_back(std::move(seg));
    }
    table.rollouts.push_back(std::move(ro));
  }
  return table;
}

struct HtmlOptions {
  std::string out, advantages, scenario, arm;
  bool compute = false;
};

void write_html(const std::string& path, std::vector<Trajectory> trajectories, const HtmlOptions& o) {
  if (!o.advantages.empty() && o.compute) {
    throw Error("--advantages", "advantages",
                "give either --advantages FILE or --compute-advantages, not both");
  }
  if (!o.compute && (!o.scenario.empty() || !o.arm.empty())) {
    throw Error("--scenario", "scenario",
                "--scenario and --arm only choose the settings of --compute-advantages");
  }
  ui::ViewerInput input;
  input.source = path;
  if (!o.advantages.empty()) {
    input.advantages = ui::parse_advantages_result(read_file(o.advantages), o.advantages);
  } else if (o.compute) {
    std::string described;
    const learners::LearnerOptions options = learner_settings(o.scenario, o.arm, described);
    input.advantages = compute_advantages(trajectories, options, described);
  }
  for (const Trajectory& t : trajectories) {
    const auto codec = codec_for(t);
    input.decoders.push_back(
        codec ? ui::TokenDecoder([codec](std::span<const TokenId> ids) { return codec->decode(ids); })
              : ui::TokenDecoder());
    input.decoder_keys.push_back(codec ? codec->fingerprint() : "");
  }
  input.trajectories = std::move(trajectories);
  write_file_atomic(o.out, ui::viewer_page(ui::viewer_data_json(input), ui::PageMode::kFile));
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
  HtmlOptions html;
  po::options_description options;
  options.add_options()("file", po::value(&path), "trajectory file (.jsonl or binary protobuf)")(
      "rollout", po::value(&rollout), "show only this rollout id")("full", po::bool_switch(&full),
                                                                   "print every run of tokens")(
      "envs", po::bool_switch(&envs), "list registered environments and policies");
  options.add_options()                                                                                  //
      ("html", po::value(&html.out), "write the trajectory viewer (one self-contained HTML file) here")  //
      ("advantages", po::value(&html.advantages),
       "with --html: per-token advantages from `crl advantages`'s result.json")                       //
      ("compute-advantages", po::bool_switch(&html.compute), "with --html: compute advantages here")  //
      ("scenario", po::value(&html.scenario),
       "with --compute-advantages: use this scenario's learner settings")  //
      ("arm", po::value(&html.arm),
       "with --scenario: the arm whose learner settings are used (default: the first)");
  po::positional_options_description positional;
  positional.add("file", 1);
  po::variables_map vm;
  int exit_code = 0;
  if (!parse_options("inspect",
                     "FILE [--rollout ID] [--full] [--html view.html [--advantages result.json | "
                     "--compute-advantages [--scenario S --arm A]]] | --envs",
                     options, positional, args, vm, exit_code)) {
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
  if (html.out.empty() && (!html.advantages.empty() || html.compute || !html.scenario.empty())) {
    std::cerr << "crl inspect: --advantages, --compute-advantages and --scenario need --html FILE\n";
    return 2;
  }
  if (!html.out.empty()) {
    std::vector<Trajectory> trajectories;
    for (Trajectory& t : read_trajectories(path)) {
      if (rollout.empty() || t.rollout_id == rollout) trajectories.push_back(std::move(t));
    }
    if (trajectories.empty() && !rollout.empty())
      throw Error(path, "rollout", "no rollout " + quote(rollout) + " in the file");
    const size_t count = trajectories.size();
    write_html(path, std::move(trajectories), html);
    std::cout << "crl inspect: " << count << " rollouts -> " << html.out << "\n";
    return 0;
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

const CommandRegistrar kInspectCommandRegistrar({"inspect", "print a trajectory file as a readable trace",
                                                 inspect_command});

}  // namespace
}  // namespace crl::cli
