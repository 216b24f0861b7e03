// What an LLM server says it serves (policies/llm/served_models.h): vLLM's and SGLang's model lists read,
// hostile lists survived, the checks `crl serve` and `crl rollout` make at start (a window larger than the
// model's context, a model the server does not serve), over real HTTP against the stand-in, and the commands
// refusing both by option name before anything is served or written.
#include "policies/llm/served_models.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cmath>
#include <filesystem>
#include <thread>

#include "engine/error.h"
#include "tests/crl_cli.h"
#include "tests/policies/llm/scripted_llm_server.h"
#include "tests/temp_dir.h"

namespace crl::llm {
namespace {

// vLLM 0.11's answer with a LoRA adapter (--lora-modules), as it writes it.
constexpr const char* kVllmModelList =
    R"({"object":"list","data":[{"id":"Qwen/Qwen3-8B","object":"model","created":1764000000,"owned_by":"vllm",)"
    R"("root":"/models/qwen3-8b","parent":null,"max_model_len":40960,"permission":[{"id":"modelperm-1",)"
    R"("object":"model_permission","created":1764000000,"allow_create_engine":false,"allow_sampling":true,)"
    R"("allow_logprobs":true,"allow_search_indices":false,"allow_view":true,"allow_fine_tuning":false,)"
    R"("organization":"*","group":null,"is_blocking":false}]},{"id":"sql-lora","object":"model",)"
    R"("created":1764000000,"owned_by":"vllm","root":"/adapters/sql","parent":"Qwen/Qwen3-8B",)"
    R"("max_model_len":40960,"permission":[]}]})";
// SGLang's (its ModelCard: no parent, max_model_len from --context-length or the model's config).
constexpr const char* kSglangModelList =
    R"({"object":"list","data":[{"id":"meta-llama/Llama-3.1-8B-Instruct","object":"model",)"
    R"("created":1764000000,"owned_by":"sglang","root":"meta-llama/Llama-3.1-8B-Instruct",)"
    R"("max_model_len":131072}]})";

// A loopback port nobody listens on (bound, read, closed).
uint16_t free_port() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor probe(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return probe.local_endpoint().port();
}

TEST(ServedModels, ReadsVllmsAndSglangsLists) {
  const ServedModels vllm = read_served_models(kVllmModelList);
  ASSERT_TRUE(vllm.error.empty()) << vllm.error;
  ASSERT_EQ(vllm.models.size(), 2u);
  EXPECT_EQ(vllm.models[0].id, "Qwen/Qwen3-8B");
  EXPECT_EQ(vllm.models[0].max_model_len, 40960);
  EXPECT_FALSE(vllm.models[0].adapter);
  EXPECT_EQ(vllm.models[1].id, "sql-lora");
  EXPECT_TRUE(vllm.models[1].adapter);
  const ServedModels sglang = read_served_models(kSglangModelList);
  ASSERT_EQ(sglang.models.size(), 1u);
  EXPECT_EQ(sglang.models[0].max_model_len, 131072);
}

// A list that is not one is an error to report, never a crash; entries that are not models are skipped, and
// a context that is not a positive whole number is "not said" rather than trusted.
TEST(ServedModels, AHostileListIsReadAsWhatItSays) {
  for (const char* body : {"", "not json", "[]", "{}", R"({"data":{}})", R"({"data":"x"})", "{\"data\":[",
                           R"({"object":"list"})"}) {
    const ServedModels read = read_served_models(body);
    EXPECT_FALSE(read.error.empty()) << body;
    EXPECT_TRUE(read.models.empty()) << body;
  }
  const ServedModels odd = read_served_models(
      R"({"data":[1,null,"m",{"id":7},{"name":"x"},{"id":"a","max_model_len":-5},{"id":"b","max_model_len":"4096"},)"
      R"({"id":"c","max_model_len":4096.5},{"id":"e","max_model_len":0},)"
      R"({"id":"f","max_model_len":99999999999999999999},{"id":"g","max_model_len":8192,"parent":7}]})");
  ASSERT_TRUE(odd.error.empty()) << odd.error;
  // Nesting as deep as the 4 MB a list may take: read (and freed) without recursion.
  const std::string deep = "{\"data\":" + std::string(1u << 20, '[') + std::string(1u << 20, ']') + "}";
  const ServedModels nested = read_served_models(deep);
  EXPECT_TRUE(nested.error.empty()) << nested.error;
  EXPECT_TRUE(nested.models.empty());
  ASSERT_EQ(odd.models.size(), 6u);  // a, b, c, e, f, g
  for (size_t i = 0; i + 1 < odd.models.size(); ++i)
    EXPECT_EQ(odd.models[i].max_model_len, 0) << odd.models[i].id;
  EXPECT_EQ(odd.models[5].max_model_len, 8192);
  EXPECT_FALSE(odd.models[5].adapter);  // a parent that is not a name is no parent
}

ServedModelCheck check_of(const std::string& model, int64_t capacity) {
  return {model, "--llm-model", capacity, "--capacity"};
}

// The message of the crl::Error the check throws ("" and a failure when it accepts).
std::string refusal(const ServedModels& served, const ServedModelCheck& check) {
  try {
    const ServedModelFit fit = check_served_model(served, check);
    ADD_FAILURE() << "accepted: " << fit.line;
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ServedModels, AWindowLargerThanTheModelsContextIsRefusedByOptionName) {
  ServedModels served = read_served_models(kVllmModelList);
  served.url = "http://gpu:8000/v1/models";
  const ServedModelFit fits = check_served_model(served, check_of("", 40960));
  EXPECT_EQ(fits.max_model_len, 40960);
  EXPECT_NE(fits.line.find("\"Qwen/Qwen3-8B\" with a context of 40960 tokens; --capacity 40960 fits"),
            std::string::npos)
      << fits.line;
  const std::string big = refusal(served, check_of("", 40961));
  EXPECT_NE(big.find("option --capacity"), std::string::npos) << big;
  EXPECT_NE(big.find("value 40961 is more than the context of \"Qwen/Qwen3-8B\" (max_model_len 40960 from "
                     "GET http://gpu:8000/v1/models)"),
            std::string::npos)
      << big;
  EXPECT_NE(big.find("vLLM --max-model-len, SGLang --context-length"), std::string::npos) << big;
  // The adapter is checked when the calls name it.
  EXPECT_EQ(check_served_model(served, check_of("sql-lora", 32768)).max_model_len, 40960);
}

TEST(ServedModels, AModelTheServerDoesNotServeIsRefusedWithWhatItServes) {
  ServedModels served = read_served_models(kVllmModelList);
  served.url = "http://gpu:8000/v1/models";
  const std::string unknown = refusal(served, check_of("Qwen/Qwen3-8b", 4096));  // one letter's case
  EXPECT_NE(unknown.find("option --llm-model"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("value \"Qwen/Qwen3-8b\" is not a model the LLM server serves (GET "
                         "http://gpu:8000/v1/models lists \"Qwen/Qwen3-8B\", \"sql-lora\")"),
            std::string::npos)
      << unknown;
}

// What cannot be checked is said, and nothing is refused for it: the calls report their own failures.
TEST(ServedModels, WhatCannotBeCheckedIsAWarningOnly) {
  ServedModels down;
  down.url = "http://gpu:8000/v1/models";
  down.error = "connection error: Connection refused";
  const ServedModelFit unknown = check_served_model(down, check_of("m", 1u << 20));
  EXPECT_EQ(unknown.max_model_len, 0);
  EXPECT_NE(
      unknown.line.find("warning: could not list the LLM server's models (GET http://gpu:8000/v1/models: "
                        "connection error: Connection refused); --capacity and --llm-model not checked"),
      std::string::npos)
      << unknown.line;
  const ServedModels silent = read_served_models(R"({"object":"list","data":[{"id":"m"}]})");
  const ServedModelFit unsaid = check_served_model(silent, check_of("", 1u << 20));
  EXPECT_EQ(unsaid.max_model_len, 0);
  EXPECT_NE(unsaid.line.find("does not say its context length"), std::string::npos) << unsaid.line;
  const ServedModels empty = read_served_models(R"({"object":"list","data":[]})");
  EXPECT_NE(check_served_model(empty, check_of("", 8)).line.find("lists no model"), std::string::npos);
  // Only adapters listed: the calls that name no model get the server's base model, which is not listed.
  const ServedModels adapters = read_served_models(R"({"data":[{"id":"a","parent":"b","max_model_len":8}]})");
  EXPECT_EQ(check_served_model(adapters, check_of("", 4096)).max_model_len, 0);
}

TEST(ServedModels, AskedOverHttp) {
  testing::ScriptedLlmOptions options;
  options.max_model_len = 16384;
  testing::ScriptedLlmServer server(options);
  const ServedModels served = ask_served_models(server.url(), 0, "option --llm");
  ASSERT_TRUE(served.error.empty()) << served.error;
  EXPECT_EQ(served.url, server.url() + "/v1/models");
  ASSERT_EQ(served.models.size(), 1u);
  EXPECT_EQ(served.models[0].id, "scripted");
  EXPECT_EQ(served.models[0].max_model_len, 16384);
  // A server without the route: its status, at once.
  const ServedModels missing = ask_served_models(server.url() + "/prefix", 30, "option --llm");
  EXPECT_EQ(missing.error, "HTTP 404");
  // An OpenAI client's base URL given as the server's: the hint names the root.
  const ServedModels v1 = ask_served_models(server.url() + "/v1/", 0, "option --llm");
  EXPECT_EQ(v1.error,
            "HTTP 404; the URL ends in /v1, and the calls add /v1/... themselves: give the server's "
            "root, " +
                server.url())
      << v1.error;
  // Nobody listening: the connection's error, after the one try.
  const ServedModels down = ask_served_models("http://127.0.0.1:1", 0, "option --llm");
  EXPECT_NE(down.error.find("connection error"), std::string::npos) << down.error;
  EXPECT_THROW(ask_served_models("https://x", 0, "option --llm"), Error);
}

// A scripted LLM server that starts listening on `port` 1.5 s from now (a model server still loading).
class LateServer {
 public:
  explicit LateServer(uint16_t port)
      : starter_([this, port] {
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          testing::ScriptedLlmOptions options;
          options.port = port;
          server_ = std::make_unique<testing::ScriptedLlmServer>(options);
        }) {}
  ~LateServer() {
    if (starter_.joinable()) starter_.join();
  }
  testing::ScriptedLlmServer& started() {
    if (starter_.joinable()) starter_.join();
    return *server_;
  }

 private:
  std::unique_ptr<testing::ScriptedLlmServer> server_;
  std::thread starter_;  // (after server_: it may set it as soon as it runs)
};

// --wait-for-llm: a server that comes up while the command waits is asked again and answers.
TEST(ServedModels, WaitsForAServerThatIsNotUpYet) {
  const uint16_t port = free_port();
  LateServer late(port);
  const ServedModels served =
      ask_served_models("http://127.0.0.1:" + std::to_string(port), 30, "option --llm");
  late.started();
  ASSERT_TRUE(served.error.empty()) << served.error;
  EXPECT_EQ(served.models.at(0).id, "scripted");
}

// --wait-for-llm S > 0: a server that never answers in S seconds is an error naming the option (a launch
// script that waits for a service expects a failure when it never comes up); one that answers anything, even
// without a model list, is not; S outside [0, 86400] is refused.
TEST(ServedModels, WaitingForAServerThatNeverAnswersIsAnErrorNamingTheOption) {
  const std::string url = "http://127.0.0.1:" + std::to_string(free_port());
  try {
    wait_for_served_models(url, 1, "--llm", "--wait-for-llm");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "option --wait-for-llm");
    EXPECT_NE(e.message().find("value 1: the LLM server at " + url + " did not answer GET " + url +
                               "/v1/models in that time (last: "),
              std::string::npos)
        << e.what();
  }
  // 0: asked once, and what came back is the caller's warning.
  const ServedModels once = wait_for_served_models(url, 0, "--llm", "--wait-for-llm");
  EXPECT_FALSE(once.answered);
  EXPECT_FALSE(once.error.empty());
  for (const double bad : {-1.0, 86401.0, std::nan("")}) {
    try {
      wait_for_served_models(url, bad, "--llm", "--wait-for-llm");
      ADD_FAILURE() << "expected an error for " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.where(), "option --wait-for-llm");
      EXPECT_NE(e.message().find("is not between 0 and 86400 seconds"), std::string::npos) << e.what();
    }
  }
  // A server that answers without a list (no such route) answered: a warning, not this error.
  testing::ScriptedLlmServer server;
  const ServedModels v1 = wait_for_served_models(server.url() + "/v1", 5, "--llm", "--wait-for-llm");
  EXPECT_TRUE(v1.answered);
  EXPECT_NE(v1.error.find("HTTP 404"), std::string::npos) << v1.error;
  EXPECT_TRUE(wait_for_served_models(server.url(), 5, "--llm", "--wait-for-llm").answered);
}

std::string temp_path(const std::string& name) {
  static const test::TempDir dir("served_models_test");
  return dir.file(name);
}

// `crl rollout --wait-for-llm`: started before its LLM server (a launch script's order), it waits and runs;
// against a server that never comes up it fails after the wait, naming the option, and writes nothing.
TEST(ServedModels, CrlRolloutWaitsForItsLlmServer) {
  const uint16_t port = free_port();
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  const auto rollout = [&](const std::string& out, const std::string& wait) {
    return test::crl({"rollout", "--env", "synthetic", "--tasks", "1", "--llm", url, "--out", out,
                      "--reserve", "1024", "--summary-cap", "256", "--wait-for-llm", wait});
  };
  const std::string never = temp_path("never_up.jsonl");
  const test::CliResult down = rollout(never, "1");
  EXPECT_EQ(down.code, 1);
  EXPECT_NE(down.err.find("option --wait-for-llm: value 1: the LLM server at " + url + " did not answer"),
            std::string::npos)
      << down.err;
  EXPECT_FALSE(std::filesystem::exists(never)) << "nothing written";

  LateServer late(port);
  const std::string out = temp_path("late.jsonl");
  const test::CliResult waited = rollout(out, "30");
  EXPECT_EQ(waited.code, 0) << waited.err;
  EXPECT_NE(waited.out.find("1 episodes"), std::string::npos) << waited.out;
  EXPECT_TRUE(std::filesystem::exists(out));
  EXPECT_FALSE(late.started().calls().empty());
}

// `crl serve --llm` asks before it listens: a --capacity the model cannot hold and a --llm-model it does not
// serve are refused by name. (--host not-an-address: a check that passes goes on to fail there, so the test
// never serves; the line on stderr says what was checked.)
TEST(ServedModels, CrlServeRefusesAWindowTheServerCannotHold) {
  testing::ScriptedLlmOptions options;
  options.max_model_len = 8192;
  testing::ScriptedLlmServer server(options);
  const std::vector<std::string> serve = {"serve", "--host", "not-an-address", "--llm", server.url()};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = serve;
    args.insert(args.end(), more.begin(), more.end());
    return test::crl(args);
  };
  const test::CliResult big = with({"--capacity", "32768"});
  EXPECT_EQ(big.code, 1);
  EXPECT_NE(
      big.err.find("option --capacity: value 32768 is more than the context of \"scripted\" (max_model_len "
                   "8192 from GET " +
                   server.url() + "/v1/models)"),
      std::string::npos)
      << big.err;
  const test::CliResult named =
      with({"--capacity", "8192", "--reserve", "2048", "--summary-cap", "1024", "--per-turn-cap", "1024",
            "--api", "openai", "--llm-model", "Scripted"});
  EXPECT_EQ(named.code, 1);
  EXPECT_NE(named.err.find("option --llm-model: value \"Scripted\" is not a model the LLM server serves"),
            std::string::npos)
      << named.err;
  const test::CliResult fits = with({"--capacity", "8192", "--reserve", "2048", "--summary-cap", "1024",
                                     "--per-turn-cap", "1024", "--api", "openai", "--llm-model", "scripted"});
  EXPECT_EQ(fits.code, 1);  // the host
  EXPECT_NE(fits.err.find("crl serve: the LLM server serves \"scripted\" with a context of 8192 tokens; "
                          "--capacity 8192 fits"),
            std::string::npos)
      << fits.err;
  EXPECT_NE(fits.err.find("not-an-address"), std::string::npos) << fits.err;
  // The SGLang API names no model: --llm-model is not checked there.
  const test::CliResult sglang = with({"--capacity", "8192", "--reserve", "2048", "--summary-cap", "1024",
                                       "--per-turn-cap", "1024", "--llm-model", "Scripted"});
  EXPECT_NE(sglang.err.find("--capacity 8192 fits"), std::string::npos) << sglang.err;
  const test::CliResult wait = with({"--wait-for-llm", "-1"});
  EXPECT_EQ(wait.code, 1);
  EXPECT_NE(wait.err.find("option --wait-for-llm"), std::string::npos) << wait.err;
  // A server that never answers within --wait-for-llm: the same error as rollout's, before it listens.
  const std::string dead = "http://127.0.0.1:" + std::to_string(free_port());
  const test::CliResult never =
      test::crl({"serve", "--host", "not-an-address", "--llm", dead, "--wait-for-llm", "1"});
  EXPECT_EQ(never.code, 1);
  EXPECT_NE(never.err.find("option --wait-for-llm: value 1: the LLM server at " + dead + " did not answer"),
            std::string::npos)
      << never.err;
}

TEST(ServedModels, CrlRolloutRefusesAWindowTheServerCannotHoldAndWritesNothing) {
  testing::ScriptedLlmOptions options;
  options.max_model_len = 2048;
  testing::ScriptedLlmServer server(options);
  const std::string out = temp_path("never.jsonl");
  const test::CliResult r =
      test::crl({"rollout", "--env", "synthetic", "--tasks", "1", "--llm", server.url(), "--out", out,
                 "--capacity", "4096", "--reserve", "1024", "--summary-cap", "256"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(
      r.err.find("option --capacity: value 4096 is more than the context of \"scripted\" (max_model_len "
                 "2048"),
      std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(out)) << "nothing written";
  EXPECT_TRUE(server.calls().empty()) << "no episode started";
}

}  // namespace
}  // namespace crl::llm
