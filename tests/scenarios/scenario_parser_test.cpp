// Scenario files: merging arms over the base, and errors that name the file, line, column and field.
#include <gtest/gtest.h>

#include "engine/error.h"
#include "scenarios/scenario.h"

namespace crl::scenarios {
namespace {

const char* kValid = R"(name: "t"
seeds: [3, 5]
base {
  env {
    name: "memory_chain"
    params { key: "length" value: "40" }
    params { key: "reset_points" value: "10,20,30" }
  }
  learner { actor_lr: 0.25 }
  training { episodes: 100 }
}
arm { name: "a" }
arm {
  name: "b"
  set {
    env { params { key: "fact_arity" value: "3" } }
    learner { lambda_mode: ADAPTIVE }
    policy { params { key: "frozen_summary" value: "true" } }
  }
}
)";

// Parses `text` and returns the error (or fails the test).
Error error_of(const std::string& text) {
  try {
    parse_scenario(text, "x.pbtxt");
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return Error("none");
}

TEST(ScenarioParser, ArmsOverrideTheBase) {
  const ScenarioSpec spec = parse_scenario(kValid, "x.pbtxt");
  EXPECT_EQ(spec.name, "t");
  EXPECT_EQ(spec.seeds, (std::vector<uint64_t>{3, 5}));
  ASSERT_EQ(spec.arms.size(), 2u);
  const auto& a = spec.arms[0].setup;
  const auto& b = spec.arms[1].setup;
  EXPECT_EQ(env_params(a),
            (std::map<std::string, std::string>{{"length", "40"}, {"reset_points", "10,20,30"}}));
  EXPECT_EQ(env_params(b), (std::map<std::string, std::string>{
                               {"fact_arity", "3"}, {"length", "40"}, {"reset_points", "10,20,30"}}));
  EXPECT_EQ(a.learner().lambda_mode(), proto::scenario::LearnerConfig::FIXED);
  EXPECT_EQ(b.learner().lambda_mode(), proto::scenario::LearnerConfig::ADAPTIVE);
  EXPECT_EQ(b.learner().actor_lr(), 0.25);  // kept from the base
  EXPECT_EQ(b.learner().critic_lr(), 0.2);  // the schema default
  EXPECT_EQ(b.training().episodes(), 100);
  EXPECT_EQ(policy_params(b).at("frozen_summary"), "true");
  EXPECT_TRUE(policy_params(a).empty());
}

TEST(ScenarioParser, SyntaxErrorsNameFileLineAndColumn) {
  const Error e = error_of("name: \"t\"\nseeds: [1]\nbase { env { name: \"memory_chain\" }\n");
  EXPECT_EQ(e.where().rfind("x.pbtxt:", 0), 0u) << e.what();
  EXPECT_NE(std::string(e.what()).find("x.pbtxt:4:"), std::string::npos) << e.what();
}

TEST(ScenarioParser, UnknownFieldIsNamedWithItsPosition) {
  const Error e = error_of("name: \"t\"\nseeds: [1]\nbase {\n  enviroment { name: \"memory_chain\" }\n}\n");
  EXPECT_EQ(e.where(), "x.pbtxt:4:3");
  EXPECT_EQ(e.field(), "enviroment");
}

TEST(ScenarioParser, BadValuesAreErrors) {
  Error e = error_of("name: \"t\"\nseeds: [1]\nbase { training { episodes: many } }\n");
  EXPECT_EQ(e.where(), "x.pbtxt:3:29") << e.what();
  e = error_of("name: \"t\"\nseeds: [1]\nbase { learner { lambda_mode: SOMETIMES } }\n");
  EXPECT_EQ(e.field(), "lambda_mode") << e.what();
  EXPECT_NE(e.where().find("x.pbtxt:3:"), std::string::npos);
  e = error_of("name: \"t\"\nseeds: [1]\nbase {\n  learner { gamma: 1.5 }\n}\n");
  EXPECT_EQ(e.where(), "x.pbtxt:4:13");
  EXPECT_EQ(e.field(), "base.learner.gamma");
  e = error_of("name: \"t\"\nseeds: [1]\nbase { training { batch_size: 0 } }\n");
  EXPECT_EQ(e.field(), "base.training.batch_size");
  e = error_of("name: \"t\"\nseeds: [1]\nbase { budget { reserve: 300 } }\n");
  EXPECT_EQ(e.field(), "base.budget.reserve");
  e = error_of("name: \"t\"\nseeds: [1]\nbase { view: \"pictures\" }\n");
  EXPECT_EQ(e.field(), "base.view");
}

TEST(ScenarioParser, UnknownEnvironmentNamesTheFileAndField) {
  const Error e = error_of("name: \"t\"\nseeds: [1]\nbase {\n  env { name: \"memory_chian\" }\n}\n");
  EXPECT_EQ(e.where(), "x.pbtxt:4:9");
  EXPECT_EQ(e.field(), "base.env.name");
  EXPECT_NE(std::string(e.what()).find("memory_chian"), std::string::npos);
  EXPECT_NE(std::string(e.what()).find("memory_chain"), std::string::npos);  // the registered names
}

TEST(ScenarioParser, ArmErrorsPointIntoTheArm) {
  const std::string text =
      "name: \"t\"\nseeds: [1]\narm { name: \"a\" }\narm {\n  name: \"b\"\n  set { env { name: \"nope\" } "
      "}\n}\n";
  const Error e = error_of(text);
  EXPECT_EQ(e.where(), "x.pbtxt:6:15");
  EXPECT_EQ(e.field(), "arm[1].set.env.name");
}

TEST(ScenarioParser, ParameterCombinationsAreCheckedByTheEnvironment) {
  // The default reset points 24, 48, 72 do not fit a 40-step chain.
  const Error e =
      error_of("name: \"t\"\nseeds: [1]\nbase { env { params { key: \"length\" value: \"40\" } } }\n");
  EXPECT_EQ(e.field(), "base.env.params");
  EXPECT_NE(e.message().find("reset_points"), std::string::npos) << e.what();
}

TEST(ScenarioParser, UnknownParametersAndPoliciesAreErrors) {
  Error e = error_of("name: \"t\"\nseeds: [1]\nbase { env { params { key: \"lenght\" value: \"9\" } } }\n");
  EXPECT_EQ(e.field(), "base.env.params");
  EXPECT_NE(e.where().find("x.pbtxt:3:"), std::string::npos);
  EXPECT_NE(e.message().find("lenght"), std::string::npos);
  e = error_of("name: \"t\"\nseeds: [1]\nbase { env { params { key: \"length\" value: \"x\" } } }\n");
  EXPECT_EQ(e.field(), "base.env.params");
  e = error_of("name: \"t\"\nseeds: [1]\nbase { policy { name: \"genius\" } }\n");
  EXPECT_EQ(e.field(), "base.policy.name");
  EXPECT_EQ(e.where(), "x.pbtxt:3:17");
  e = error_of("name: \"t\"\nseeds: [1]\nbase { policy { params { key: \"frozen\" value: \"1\" } } }\n");
  EXPECT_EQ(e.field(), "base.policy.params");
  // The tabular policy needs the symbolic view.
  e = error_of("name: \"t\"\nseeds: [1]\nbase { view: \"text\" }\n");
  EXPECT_EQ(e.field(), "base.policy.name");
}

TEST(ScenarioParser, NamesSeedsAndArmsAreChecked) {
  EXPECT_EQ(error_of("seeds: [1]\n").field(), "name");
  EXPECT_EQ(error_of("name: \"t\"\n").field(), "seeds");
  EXPECT_EQ(error_of("name: \"t\"\nseeds: [1, 1]\n").field(), "seeds[1]");
  const Error e = error_of("name: \"t\"\nseeds: [1]\narm { name: \"a\" }\narm { name: \"a\" }\n");
  EXPECT_EQ(e.field(), "arm[1].name");
  EXPECT_EQ(e.where(), "x.pbtxt:4:7");
}

// `crl run --arms`: the named arms in the file's order, each with its setup and file index; the ablation
// table keeps the ablations that remain and goes when its reference arm (or every listed ablation) does.
TEST(ScenarioParser, SelectingArmsKeepsTheirSetupsAndTrimsTheTable) {
  const std::string text = std::string(kValid) +
                           "arm { name: \"c\" set { learner { correction: false } } }\n"
                           "table { reference_arm: \"a\" ablation_arms: [\"b\", \"c\"] }\n";
  const ScenarioSpec spec = parse_scenario(text, "x.pbtxt");
  ASSERT_TRUE(spec.has_table);

  const ScenarioSpec ac = select_arms(spec, {"c", "a"}, "option --arms");
  ASSERT_EQ(ac.arms.size(), 2u);
  EXPECT_EQ(ac.arms[0].name, "a");  // the file's order, not the option's
  EXPECT_EQ(ac.arms[1].name, "c");
  EXPECT_EQ(ac.arms[1].index, 2);
  EXPECT_FALSE(ac.arms[1].setup.learner().correction());
  EXPECT_EQ(ac.seeds, spec.seeds);
  ASSERT_TRUE(ac.has_table);
  ASSERT_EQ(ac.table.ablation_arms_size(), 1);
  EXPECT_EQ(ac.table.ablation_arms(0), "c");

  EXPECT_FALSE(select_arms(spec, {"b", "c"}, "option --arms").has_table);  // no reference arm
  EXPECT_FALSE(select_arms(spec, {"a"}, "option --arms").has_table);       // no listed ablation
  EXPECT_EQ(select_arms(spec, {"a", "b", "c"}, "option --arms").arms.size(), 3u);

  const auto message = [&](const std::vector<std::string>& names) {
    try {
      select_arms(spec, names, "option --arms");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({"a", "nope"}).find("option --arms"), std::string::npos);
  EXPECT_NE(message({"a", "nope"}).find("arm \"nope\" is not in x.pbtxt (arms: \"a\", \"b\", \"c\")"),
            std::string::npos)
      << message({"a", "nope"});
  EXPECT_NE(message({"b", "b"}).find("names arm \"b\" twice"), std::string::npos);
  EXPECT_NE(message({}).find("names no arm"), std::string::npos);
}

TEST(ScenarioParser, AFileThatCannotBeReadNamesItsPath) {
  try {
    load_scenario("/nonexistent/scenario.pbtxt");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/scenario.pbtxt"), std::string::npos);
  }
}

TEST(ScenarioParser, ShippedScenariosParse) {
  for (const char* name : {"memory_chain", "toy", "memory_chain_ablation"}) {
    const ScenarioSpec spec = load_scenario(std::string(CRL_SOURCE_DIR) + "/scenarios/" + name + ".pbtxt");
    EXPECT_EQ(spec.name, name);
    EXPECT_GE(spec.arms.size(), 2u);
  }
  const ScenarioSpec main = load_scenario(std::string(CRL_SOURCE_DIR) + "/scenarios/memory_chain.pbtxt");
  EXPECT_EQ(main.seeds, (std::vector<uint64_t>{7, 17, 29}));
  EXPECT_EQ(main.arms[0].name, "joint");
  EXPECT_EQ(main.arms[1].name, "frozen");
}

}  // namespace
}  // namespace crl::scenarios
