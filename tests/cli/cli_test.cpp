// The `crl` command line, called through run_cli() exactly as main() does.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli/command.h"
#include "engine/file_io.h"
#include "tests/crl_cli.h"
#include "tests/temp_dir.h"

namespace crl::cli {
namespace {

using Result = test::CliResult;
using test::crl;

TEST(Cli, VersionHelpAndUnknownCommands) {
  EXPECT_EQ(crl({"--version"}).out, std::string("crl ") + CRL_VERSION + "\n");
  const Result help = crl({"--help"});
  EXPECT_EQ(help.code, 0);
  for (const char* name : {"run", "inspect", "splits", "serve", "rollout", "advantages"}) {
    EXPECT_NE(help.out.find(name), std::string::npos) << name;
  }
  EXPECT_EQ(crl({"frobnicate"}).code, 2);
  EXPECT_EQ(crl({}).code, 2);
}

// Boost reads "-1" into an unsigned option as its wrap-around (serve --port -1 listened on 65535, eval --seed
// -3 ran seed 18446744073709551613): every command refuses it by the option's name before doing anything.
TEST(Cli, NegativeValuesOfUnsignedOptionsAreRefusedByName) {
  // Each case has another bad value too, so that without the check it stops at once instead of running.
  const std::vector<std::vector<std::string>> cases = {
      {"serve", "--host", "not-an-address", "--port", "-1"},
      {"serve", "--host", "not-an-address", "--max-connections", "-1"},
      {"eval", "--checkpoint", "/nonexistent.ckpt", "--seed", "-3"},
      {"rollout", "--env", "nope", "--concurrency", "-1"},
      {"lm", "serve", "--checkpoint", "/nonexistent.ckpt", "--port", "-1"},
  };
  for (const auto& args : cases) {
    const Result r = crl(args);
    EXPECT_EQ(r.code, 2) << args[0] << " " << args[1] << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("'--" + args[args.size() - 2].substr(2) +
                         "' is invalid: expected a whole number of 0 or more"),
              std::string::npos)
        << r.err;
  }
  EXPECT_NE(crl({"serve", "--port", "65536"}).code, 0);  // (out of range: Boost's own refusal)
}

TEST(Cli, EveryCommandHasHelp) {
  for (const Command* command : CommandRegistry::global().all()) {
    const Result r = crl({command->name, "--help"});
    if (command->summary.find("not built yet") != std::string::npos) {
      EXPECT_EQ(r.code, 2) << command->name;
      EXPECT_NE(r.err.find("not built yet"), std::string::npos) << command->name;
    } else {
      EXPECT_EQ(r.code, 0) << command->name;
      EXPECT_NE(r.out.find("usage: crl " + command->name), std::string::npos) << command->name;
    }
  }
}

TEST(Cli, RunDemoPrintsATraceWithThreeCompactions) {
  const Result r = crl({"run"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* part : {"compactions 3", "segment 1: summary", "summary: \"FACT ", "copied_summary",
                           "copied_tail", "[train] sampled", "mean reward 1"}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  }
}

TEST(Cli, RunIsByteIdenticalForOneAndTwoThreadsAndInspectReadsIt) {
  const test::TempDir temp;
  const std::string dir = temp.str();
  const std::string one = dir + "/one.jsonl", two = dir + "/two.pb", three = dir + "/three.pb";
  const std::vector<std::string> common = {
      "run", "--episodes", "12", "--trace",        "false", "--view",        "symbolic", "--capacity",
      "256", "--reserve",  "16", "--per-turn-cap", "4",     "--summary-cap", "4"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    return crl(args);
  };
  ASSERT_EQ(with({"--threads", "1", "--out", one}).code, 0);
  ASSERT_EQ(with({"--threads", "1", "--out", two}).code, 0);
  ASSERT_EQ(with({"--threads", "2", "--out", three}).code, 0);
  EXPECT_EQ(read_file(two), read_file(three));
  const Result inspect = crl({"inspect", one});
  ASSERT_EQ(inspect.code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("segment 0: summary"), std::string::npos);
  EXPECT_NE(inspect.out.find("summary: \"V"), std::string::npos) << "symbols decoded by name";
  const Result one_rollout = crl({"inspect", one, "--rollout", "memory_chain/demo-3/7/3"});
  ASSERT_EQ(one_rollout.code, 0) << one_rollout.err;
  EXPECT_EQ(one_rollout.out.find("demo-4"), std::string::npos);
}

TEST(Cli, BadInputGetsOneLineErrors) {
  struct Case {
    std::vector<std::string> args;
    int code;
    std::string mentions;
  };
  const test::TempDir temp;
  const std::string dir = temp.str();
  write_file_atomic(dir + "/garbage.jsonl", "{not json\n");
  const std::vector<Case> cases = {
      {{"run", "--bogus"}, 2, "--bogus"},
      {{"run", "--episodes", "x"}, 2, "episodes"},
      {{"run", "--episodes", "0"}, 1, "--episodes"},
      {{"run", "--env", "nope"}, 1, "unknown environment \"nope\""},
      {{"run", "--param", "length"}, 1, "KEY=VALUE"},
      {{"run", "--param", "length=x"}, 1, "length"},
      {{"run", "--capacity", "100"}, 1, "reserve"},
      {{"run", "--view", "pixels"}, 1, "pixels"},
      {{"run", "--policy", "nobody"}, 1, "unknown policy"},
      // Issue 14 item 5: episode i plays task i; past the split it aliased task i mod 60.
      {{"run", "--env", "synthetic", "--episodes", "61"}, 1, "split \"dev\" (namespace default) (60)"},
      // Issue 14 item 6: a budget whose first compaction cannot fit (exit 2, like unusable options).
      {{"run", "--capacity", "800", "--reserve", "256"}, 2, "smallest capacity that works is"},
      {{"inspect", dir + "/missing.jsonl"}, 1, "missing.jsonl"},
      {{"inspect", dir + "/garbage.jsonl"}, 1, "garbage.jsonl:1"},
      {{"inspect"}, 2, "FILE"},
      {{"serve", "--workers", "8", "--max-workers", "4"}, 1, "--max-workers"},
      {{"serve", "--max-workers", "-1"}, 1, "must be 0 (one per request in flight) or in 32 (--workers)"},
      // The gateway's tool-call format: a name it does not know, a format the built-in template does not
      // write (a gpt-oss template: ToolCallFormat.AutoFindsTheFormatTheTemplateWritesCallsIn). A bad --host
      // too: were the option accepted, serve would stop there instead of serving.
      {{"serve", "--host", "not-an-address", "--llm", "http://127.0.0.1:1", "--tool-call-parser", "mistral"},
       1,
       "option --tool-call-parser: value \"mistral\" is not one of auto, hermes"},
      {{"serve", "--host", "not-an-address", "--llm", "http://127.0.0.1:1", "--tool-call-parser",
        "qwen3_coder"},
       1,
       "needs a model's chat template"},
      // Template variables need a model's template, and must be a JSON object.
      {{"serve", "--host", "not-an-address", "--default-chat-template-kwargs",
        R"({"enable_thinking": false})"},
       1,
       "option --default-chat-template-kwargs: the built-in chat template \"chatml\" reads no variables"},
      {{"serve", "--host", "not-an-address", "--default-chat-template-kwargs", "[1]"},
       1,
       "option --default-chat-template-kwargs: must be a JSON object"},
      // A keep-alive period past a day overflowed the clock's duration (every beat at once).
      {{"serve", "--host", "not-an-address", "--stream-keepalive", "1e20"},
       1,
       "option --stream-keepalive: value must be between 0 and 86400 seconds"},
      {{"serve", "--host", "not-an-address", "--stream-upstream", "yes"},
       1,
       "option --stream-upstream: value \"yes\" is not one of on, off"},
      {{"tokenize"}, 2, "give TEXT"},  // (it printed an empty encoding)
      // A `crl lm train` model is not a run's checkpoint (it failed on a tabular-vs-lm mismatch).
      {{"eval", "--checkpoint",
        std::string(CRL_SOURCE_DIR) + "/data/checkpoints/synthetic_tinylm_reasoning_base.ckpt"},
       1,
       "records no run setup"},
      // A seed twice was one run counted twice in the means over seeds.
      {{"run", std::string(CRL_SOURCE_DIR) + "/scenarios/toy.pbtxt", "--out", dir + "/toy", "--seeds", "7,7"},
       1,
       "seed 7 is given twice"},
  };
  for (const Case& c : cases) {
    const Result r = crl(c.args);
    EXPECT_EQ(r.code, c.code) << c.args[0] << " " << (c.args.size() > 1 ? c.args[1] : "") << "\n" << r.err;
    EXPECT_NE(r.err.find(c.mentions), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
  }
}

// Issue 14 item 4: server-only parameters are marked in the listing.
TEST(Cli, InspectEnvsMarksServerOnlyParameters) {
  const Result r = crl({"inspect", "--envs"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* line : {"    namespaces (boolean (true/false), default \"true\", server-only)",
                           "    tasks_dir (string, default \"data/shell_tasks\", server-only)",
                           "    command_timeout_sec (number, default \"30\"):", "text budget: C 3072"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  }
}

}  // namespace
}  // namespace crl::cli
