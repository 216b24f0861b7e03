// The shipped language-model scenario (scenarios/synthetic_tinylm.pbtxt, issue 17): the file parses with
// its arms and one configuration for all of them; a reduced run (tiny model, a few episodes, 2 seeds) through
// `crl run` writes the result files, the same bytes with --threads 1 and 2, and the trained policy's
// checkpoint evaluates with `crl eval` into trajectories whose sampled text tokens carry ids, log-probs,
// values and the LLM path's masks.
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/tokenizer.h"
#include "engine/trajectory_io.h"
#include "envs/codec.h"
#include "envs/registry.h"
#include "policies/lm/demonstrations.h"
#include "proto/scenario.pb.h"
#include "scenarios/checkpoint.h"
#include "scenarios/scenario.h"
#include "tests/crl_cli.h"
#include "tests/temp_dir.h"

namespace crl::scenarios {
namespace {

const char* kFile = "scenarios/synthetic_tinylm.pbtxt";

std::string source(const std::string& relative) {
  return std::string(CRL_SOURCE_DIR) + "/" + relative;
}

// The shipped files name their tokenizers relative to the source root (the folder `crl run` is documented to
// run from; ctest runs there too). Loading one from a test binary started elsewhere needs that folder.
class InSourceRoot {
 public:
  InSourceRoot() : was_(std::filesystem::current_path()) { std::filesystem::current_path(CRL_SOURCE_DIR); }
  ~InSourceRoot() { std::filesystem::current_path(was_); }

 private:
  std::filesystem::path was_;
};

const ArmSpec* arm_named(const ScenarioSpec& spec, const std::string& name) {
  for (const ArmSpec& arm : spec.arms) {
    if (arm.name == name) return &arm;
  }
  return nullptr;
}

TEST(TinyLmScenario, ShippedFileHasTheArmsAndOneConfiguration) {
  const InSourceRoot here;
  const ScenarioSpec spec = load_scenario(source(kFile));
  EXPECT_GE(spec.seeds.size(), 2u);
  for (const char* name : {"sft_only", "joint", "frozen_summary", "summary_masked", "no_cross_gae",
                           "no_token_loss", "full_context"}) {
    EXPECT_NE(arm_named(spec, name), nullptr) << name;
  }
  const ArmSpec* joint = arm_named(spec, "joint");
  ASSERT_NE(joint, nullptr);
  for (const ArmSpec& arm : spec.arms) {
    EXPECT_EQ(arm.setup.view(), "text") << arm.name;
    EXPECT_EQ(arm.setup.policy().name(), "lm") << arm.name;
    EXPECT_EQ(arm.setup.tokenizer(), joint->setup.tokenizer()) << arm.name;
    EXPECT_EQ(policy_params(arm.setup).at("d_model"), policy_params(joint->setup).at("d_model"));
    EXPECT_EQ(policy_params(arm.setup).at("max_positions"), policy_params(joint->setup).at("max_positions"));
    EXPECT_EQ(policy_params(arm.setup).at("sft_steps"), policy_params(joint->setup).at("sft_steps"));
    for (const char* key : {"rope", "sft_tasks", "sft_batch", "sft_lr", "sft_warmup", "sft_cosine",
                            "drill_steps", "drill_mix", "sft_summary_weight", "sft_final_weight"}) {
      EXPECT_EQ(policy_params(arm.setup).at(key), policy_params(joint->setup).at(key))
          << arm.name << " " << key;
    }
    // SFT and RL on the phase3 namespace's training tasks (1,440, the default namespace's kinds), the
    // evaluation on the default namespace's dev split (disjoint records, scenarios/README.md).
    std::map<std::string, std::string> env, eval;
    for (const auto& [k, v] : arm.setup.env().params()) env[k] = v;
    for (const auto& [k, v] : arm.setup.training().eval_env_params()) eval[k] = v;
    EXPECT_EQ(env["namespace"], "phase3") << arm.name;
    EXPECT_EQ(env["split"], "train") << arm.name;
    EXPECT_EQ(eval["namespace"], "default") << arm.name;
    EXPECT_EQ(eval["split"], "dev") << arm.name;
  }
  const auto& l = joint->setup.learner();
  EXPECT_EQ(l.lambda_mode(), proto::scenario::LearnerConfig::ADAPTIVE);
  EXPECT_TRUE(l.correction());
  EXPECT_TRUE(l.token_level_normalization());
  EXPECT_GT(l.warmup_batches(), 0);
  EXPECT_EQ(l.critic_per_actor(), 2);
  EXPECT_EQ(arm_named(spec, "sft_only")->setup.training().episodes(), 0);
  EXPECT_EQ(policy_params(arm_named(spec, "frozen_summary")->setup).at("frozen_summary"), "true");
  EXPECT_TRUE(arm_named(spec, "summary_masked")->setup.learner().summary_loss_masked());
  EXPECT_FALSE(arm_named(spec, "no_cross_gae")->setup.learner().correction());
  EXPECT_FALSE(arm_named(spec, "no_token_loss")->setup.learner().token_level_normalization());
  EXPECT_GT(budget_of(arm_named(spec, "full_context")->setup).capacity, budget_of(joint->setup).capacity);
  ASSERT_TRUE(spec.has_table);
  EXPECT_EQ(spec.table.reference_arm(), "joint");
}

// Every arm's budget is feasible for the oracle on every training task it trains on (SFT demonstrations and
// RL episodes: phase3) and every dev task it is evaluated on: the oracle compacts, keeps the values, and wins
// within max_compactions. And no summary request of its episodes cuts an observation, so the summarizer sees
// whole records: the request at the trigger fits C - summary_cap (the shipped file once had T_comp 256 with a
// 164-token instruction, and every record in every summary request lost its value: scenarios/README.md).
TEST(TinyLmScenario, TheOracleWinsEveryTaskUnderEachArmsBudget) {
  const InSourceRoot here;
  const ScenarioSpec spec = load_scenario(source(kFile));
  const auto codec = make_text_codec(make_tokenizer(source(spec.arms.front().setup.tokenizer())));
  std::set<std::string> seen;
  for (const ArmSpec& arm : spec.arms) {
    const Budget budget = budget_of(arm.setup);
    const std::string key = std::to_string(budget.capacity) + "/" + std::to_string(budget.reserve);
    if (!seen.insert(key).second) continue;
    std::map<std::string, std::string> train, dev;
    for (const auto& [k, v] : arm.setup.env().params()) train[k] = dev[k] = v;
    for (const auto& [k, v] : arm.setup.training().eval_env_params()) dev[k] = v;
    const int tasks = std::stoi(policy_params(arm.setup).at("sft_tasks"));
    for (const auto& [params, count] : {std::pair{train, tasks}, std::pair{dev, 60}}) {
      const auto demos = lm::oracle_demonstrations(params, codec, budget, 0, count, arm.name);
      ASSERT_EQ(demos.size(), static_cast<size_t>(count));
      lm::require_oracle_wins(demos, arm.name);
      for (const Trajectory& t : demos) {
        for (const Segment& s : t.segments) {
          if (s.kind != SegmentKind::kSummary) continue;
          const std::string prompt = codec->decode(s.prompt_ids);
          EXPECT_EQ(prompt.find("observation truncated"), std::string::npos)
              << arm.name << " " << t.task_id << ": a summary request cut an observation";
        }
      }
    }
  }
  EXPECT_EQ(seen.size(), 2u);  // the compaction budget and the full-context one
}

// Bad setups are refused at parse time with the field named: a tokenizer that does not load, a model whose
// positions do not cover the budget's capacity, the lm policy on the symbolic view.
TEST(TinyLmScenario, BadSetupsNameTheField) {
  const std::string head =
      "name: \"t\"\nseeds: [1]\nbase { env { name: \"synthetic\" params { key: \"view\" "
      "value: \"text\" } } budget { capacity: 1024 reserve: 384 per_turn_cap: 48 "
      "summary_cap: 96 } ";
  auto error_of = [](const std::string& text) {
    try {
      parse_scenario(text, "t.pbtxt");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string tok = "tokenizer: \"" + source("data/tokenizers/synthetic_bpe512.json") + "\" ";
  std::string e =
      error_of(head + "view: \"text\" tokenizer: \"missing/tokenizer.json\" policy { name: \"lm\" } }");
  EXPECT_NE(e.find("tokenizer"), std::string::npos) << e;
  EXPECT_NE(e.find("missing/tokenizer.json"), std::string::npos) << e;
  e = error_of(head + "view: \"text\" " + tok +
               "policy { name: \"lm\" params { key: \"max_positions\" value: \"512\" } } }");
  EXPECT_NE(e.find("max_positions"), std::string::npos) << e;
  EXPECT_NE(e.find("1024"), std::string::npos) << e;
  e = error_of(head + "view: \"symbolic\" policy { name: \"lm\" } }");
  EXPECT_NE(e.find("text view"), std::string::npos) << e;
  EXPECT_EQ(error_of(head + "view: \"text\" " + tok + "policy { name: \"lm\" } }"), "no error");
  // A reserve under summary_cap + the summary instruction: every summary request would cut observations.
  std::string cutting = head;
  cutting.replace(cutting.find("reserve: 384"), 12, "reserve: 256");
  e = error_of(cutting + "view: \"text\" " + tok + "policy { name: \"lm\" } }");
  EXPECT_NE(e.find("reserve"), std::string::npos) << e;
  EXPECT_NE(e.find("every summary request would cut"), std::string::npos) << e;
}

// `Setup.reasoning` gives the text view's codec the "<think>" block (envs/codec.h); the symbolic view has
// no text to reason in and is refused with the field named.
TEST(TinyLmScenario, ReasoningIsATextViewSetting) {
  proto::scenario::Setup setup;
  setup.set_view("text");
  setup.set_tokenizer(source("data/tokenizers/synthetic_bpe512.json"));
  const EnvSpec spec = make_env("synthetic", {{"view", "text"}})->spec();
  EXPECT_FALSE(setup_codec(setup, spec)->reasoning().enabled());
  setup.set_reasoning(true);
  const auto codec = setup_codec(setup, spec);
  EXPECT_EQ(codec->reasoning(), think_reasoning());
  EXPECT_EQ(codec->decode_action(codec->encode_action("<think>x</think>\nnext")).text, "next");
  setup.set_view("symbolic");
  try {
    setup_codec(setup, make_env("synthetic", {{"view", "symbolic"}})->spec());
    ADD_FAILURE() << "a symbolic setup with reasoning was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("reasoning"), std::string::npos) << e.what();
  }
}

// The shipped file with a tiny model and a few episodes, as scenario text (arms unchanged).
std::string reduced_text() {
  proto::scenario::Scenario file;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(read_file(source(kFile)), &file));
  file.clear_seeds();
  file.add_seeds(7);
  file.add_seeds(17);
  auto* base = file.mutable_base();
  base->set_tokenizer(source(base->tokenizer()));
  auto& params = *base->mutable_policy()->mutable_params();
  params["d_model"] = "16";
  params["heads"] = "2";
  params["layers"] = "1";
  params["d_ff"] = "32";
  params["sft_steps"] = "6";
  params["sft_tasks"] = "4";
  params["sft_batch"] = "2";
  params["drill_steps"] = "4";
  params["drill_batch"] = "2";
  params["drill_mix"] = "4";
  auto* t = base->mutable_training();
  t->set_episodes(8);
  t->set_batch_size(4);
  t->set_eval_interval(8);
  t->set_eval_episodes(4);
  t->set_curve_eval_episodes(2);
  base->mutable_learner()->set_warmup_batches(1);
  std::string text;
  google::protobuf::TextFormat::PrintToString(file, &text);
  return text;
}

TEST(TinyLmScenario, AReducedRunIsTheSameBytesOnOneAndTwoThreadsAndRecordsTheTextTokens) {
  const test::TempDir dir("tinylm_scenario_test");
  const std::string scenario = dir.file("tinylm.pbtxt");
  write_file_atomic(scenario, reduced_text());
  const std::string one = dir.file("one"), two = dir.file("two");
  const auto a = test::crl({"run", scenario, "--out", one, "--threads", "1", "--progress", "never"});
  ASSERT_EQ(a.code, 0) << a.err;
  const auto b = test::crl({"run", scenario, "--out", two, "--threads", "2", "--progress", "never"});
  ASSERT_EQ(b.code, 0) << b.err;
  for (const char* name : {"summary.json", "curves.csv", "curves.svg", "report.md"}) {
    ASSERT_TRUE(std::filesystem::exists(one + "/" + name)) << name;
    std::string a_text = read_file(one + "/" + name), b_text = read_file(two + "/" + name);
    // The report names the command, whose --out differs; nothing else may.
    for (size_t at = b_text.find(two); at != std::string::npos; at = b_text.find(two, at + one.size()))
      b_text.replace(at, two.size(), one);
    EXPECT_EQ(a_text, b_text) << name;
  }
  const std::string report = read_file(one + "/report.md");
  EXPECT_NE(report.find("| joint (reference) |"), std::string::npos) << report;
  // Summary metrics on the generated text, per type (the text view's breakdown).
  const std::string summary = read_file(one + "/summary.json");
  EXPECT_NE(summary.find("\"recall\""), std::string::npos) << summary;
  // And over training (Fig. 4): every curve point's summaries, measured on the generated text.
  EXPECT_NE(report.find("## Summaries over training"), std::string::npos) << report;
  EXPECT_EQ(read_file(one + "/summaries.svg"), read_file(two + "/summaries.svg"));

  // The trained joint policy, evaluated from its final checkpoint: the tokens it sampled are recorded with
  // log-probs, values and masks, and it wrote summaries as text.
  const std::string ckpt = checkpoint_path(one, "joint", 7, 8);
  ASSERT_TRUE(std::filesystem::exists(ckpt)) << ckpt;
  // Trained in the setup's tokenizer (Setup.tokenizer), not the byte default.
  EXPECT_EQ(read_checkpoint(ckpt).policy().lm().tokenizer_fingerprint(),
            make_tokenizer(source("data/tokenizers/synthetic_words1024.json"))->fingerprint());
  const std::string traj = dir.file("eval.jsonl");
  const auto e = test::crl({"eval", "--checkpoint", ckpt, "--episodes", "3", "--sample", "--trajectories",
                            traj, "--progress", "never"});
  ASSERT_EQ(e.code, 0) << e.err;
  const std::vector<Trajectory> trajectories = read_trajectories(traj);
  ASSERT_EQ(trajectories.size(), 3u);
  int64_t sampled = 0, summary_tokens = 0;
  const auto vocab =
      static_cast<TokenId>(make_tokenizer(source("data/tokenizers/synthetic_words1024.json"))->vocab_size());
  for (const Trajectory& tr : trajectories) {
    for (const Segment& s : tr.segments) {
      for (size_t k = 0; k < s.response_ids.size(); ++k) {
        const bool mine = s.response_provenance[k] == Provenance::kSampled;
        EXPECT_EQ(s.actor_mask[k], mine ? 1 : 0);
        EXPECT_EQ(s.critic_mask[k], mine ? 1 : 0);
        if (!mine) {
          EXPECT_EQ(s.logprobs[k], 0.0f);
          continue;
        }
        ++sampled;
        EXPECT_LE(s.logprobs[k], 0.0f);
        EXPECT_GE(s.response_ids[k], 0);
        EXPECT_LT(s.response_ids[k], vocab);
        summary_tokens += s.kind == SegmentKind::kSummary;
      }
    }
  }
  EXPECT_GT(sampled, 10);
  EXPECT_GT(summary_tokens, 0);
}

// Setup.init_checkpoint: every seed of the arm starts from the file's policy state (a base model trained
// elsewhere, e.g. by `crl lm train`), not from its own initialisation, its optimizer state included unless
// Setup.fresh_optimizer; files that do not fit are refused at parse time with the field named.
TEST(TinyLmScenario, AnInitCheckpointIsEverySeedsStartingState) {
  const test::TempDir dir("tinylm_init");
  proto::scenario::Scenario file;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(reduced_text(), &file));
  proto::scenario::Arm only = file.arm(0);
  only.set_name("base");
  file.clear_arm();
  file.clear_table();
  *file.add_arm() = only;
  file.mutable_base()->mutable_training()->set_episodes(0);  // evaluate and checkpoint the starting state
  const auto run = [&](const proto::scenario::Scenario& f, const std::string& out) {
    std::string text;
    google::protobuf::TextFormat::PrintToString(f, &text);
    const std::string path = dir.file(out + ".pbtxt");
    write_file_atomic(path, text);
    return test::crl({"run", path, "--out", dir.file(out), "--threads", "2", "--progress", "never"});
  };
  const auto plain = run(file, "plain");
  ASSERT_EQ(plain.code, 0) << plain.err;
  // A different state of the same shape: the seed-7 start with every parameter moved.
  proto::checkpoint::Checkpoint base = read_checkpoint(checkpoint_path(dir.file("plain"), "base", 7, 0));
  auto& parameters = *base.mutable_policy()->mutable_lm()->mutable_parameters();
  for (float& x : parameters) x += 0.25f;
  // And an optimizer that has trained: its state carries over unless the setup asks for a fresh one.
  auto* adam = base.mutable_policy()->mutable_lm()->mutable_actor_adam();
  adam->set_steps(7);
  for (float& m : *adam->mutable_m()) m = 0.5f;
  const std::string init = dir.file("init.ckpt");
  write_checkpoint(init, base);

  file.mutable_base()->set_init_checkpoint(init);
  const auto started = run(file, "started");
  ASSERT_EQ(started.code, 0) << started.err;
  for (const uint64_t seed : {7u, 17u}) {
    const auto got = read_checkpoint(checkpoint_path(dir.file("started"), "base", seed, 0));
    ASSERT_EQ(got.policy().lm().parameters_size(), parameters.size());
    EXPECT_TRUE(std::equal(parameters.begin(), parameters.end(), got.policy().lm().parameters().begin()))
        << "seed " << seed << " did not start from the file";
    const auto own = read_checkpoint(checkpoint_path(dir.file("plain"), "base", seed, 0));
    EXPECT_FALSE(std::equal(parameters.begin(), parameters.end(), own.policy().lm().parameters().begin()));
    EXPECT_EQ(got.policy().lm().actor_adam().steps(), 7) << "seed " << seed;
    EXPECT_EQ(got.policy().lm().actor_adam().m(0), 0.5f);
  }

  // fresh_optimizer: the same parameters, Adam from scratch (step 0, moments zero).
  file.mutable_base()->set_fresh_optimizer(true);
  const auto fresh = run(file, "fresh");
  ASSERT_EQ(fresh.code, 0) << fresh.err;
  const auto got = read_checkpoint(checkpoint_path(dir.file("fresh"), "base", 7, 0));
  EXPECT_TRUE(std::equal(parameters.begin(), parameters.end(), got.policy().lm().parameters().begin()));
  EXPECT_EQ(got.policy().lm().actor_adam().steps(), 0);
  for (const float m : got.policy().lm().actor_adam().m()) ASSERT_EQ(m, 0.0f);
  file.mutable_base()->clear_fresh_optimizer();

  // Refused: a missing file, another shape, and a second base beside it.
  const auto error_of = [&](const proto::scenario::Scenario& f) {
    std::string text;
    google::protobuf::TextFormat::PrintToString(f, &text);
    try {
      parse_scenario(text, "t.pbtxt");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  proto::scenario::Scenario bad = file;
  bad.mutable_base()->set_init_checkpoint(dir.file("missing.ckpt"));
  std::string e = error_of(bad);
  EXPECT_NE(e.find("init_checkpoint"), std::string::npos) << e;
  EXPECT_NE(e.find("missing.ckpt"), std::string::npos) << e;
  bad = file;
  (*bad.mutable_base()->mutable_policy()->mutable_params())["d_model"] = "32";
  e = error_of(bad);
  EXPECT_NE(e.find("init_checkpoint"), std::string::npos) << e;
  EXPECT_NE(e.find("d_model"), std::string::npos) << e;
  bad = file;
  bad.mutable_base()->clear_init_checkpoint();
  bad.mutable_base()->set_fresh_optimizer(true);
  e = error_of(bad);
  EXPECT_NE(e.find("fresh_optimizer"), std::string::npos) << e;
  EXPECT_NE(e.find("init_checkpoint"), std::string::npos) << e;
  bad = file;
  bad.mutable_base()->mutable_pretrain()->set_episodes(4);
  e = error_of(bad);
  EXPECT_NE(e.find("init_checkpoint"), std::string::npos) << e;
  EXPECT_NE(e.find("pretrain"), std::string::npos) << e;
}

}  // namespace
}  // namespace crl::scenarios
