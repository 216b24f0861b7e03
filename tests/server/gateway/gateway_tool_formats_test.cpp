// Tool calls in the model's own format through the whole gateway (--tool-call-parser, tool_call_format.h):
// a template that writes calls as Llama 3.1, Qwen3-Coder or DeepSeek-V3 do is recognised (auto), the
// model's answer in that format comes back to the harness as tool_calls, the harness's copy of it and the
// tool's result continue the same window (no history edit), and the export is token-exact. Read as hermes
// (the option set against the template), the same answer is text.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/server/gateway/gateway_fixture.h"
#include "tests/temp_dir.h"

namespace crl::server::gateway::testing {
namespace {

// ChatML turns (the byte tokenizer's special tokens); an assistant's calls written by `call` for each
// tool_calls entry `c`; tool results as "tool" turns.
std::string template_writing_calls(const std::string& call) {
  return "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.tool_calls %}{% for c in m.tool_calls %}" +
         call +
         "{% endfor %}{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
         "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
}

struct Format {
  std::string name, trigger, call_template;
  std::string content;  // the answer's text beside its call
  json arguments;       // the call's arguments as the harness gets them
};

const std::vector<Format>& formats() {
  static const std::vector<Format> all = {
      {"llama3_json",
       "LLAMACALL",
       "<|python_tag|>{\"name\": \"{{ c.function.name }}\", \"parameters\": {{ c.function.arguments | tojson "
       "}}}",
       "",
       {{"cmd", "ls -la"}}},
      {"qwen3_coder",
       "CODERCALL",
       "<tool_call>\n<function={{ c.function.name }}>\n{% for k, v in c.function.arguments | items %}"
       "<parameter={{ k }}>\n{{ v }}\n</parameter>\n{% endfor %}</function>\n</tool_call>",
       "Listing.",
       {{"cmd", "ls -la"}, {"n", 3}}},
      {"deepseek_v3",
       "DEEPSEEKCALL",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>{{ c.function.name }}\n```json\n"
       "{{ c.function.arguments | tojson }}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "",
       {{"cmd", "ls -la"}}},
      {"pythonic",
       "PYTHONCALL",
       "[{{ c.function.name }}({% for k, v in c.function.arguments | items %}{{ k }}={{ v | tojson }}"
       "{% if not loop.last %}, {% endif %}{% endfor %})]",
       "",
       {{"cmd", "ls -la"}, {"n", 3}}},
  };
  return all;
}

const json kShellFormatTools = json::parse(R"([{"type": "function", "function": {"name": "shell",
  "description": "Run a shell command", "parameters": {"type": "object",
  "properties": {"cmd": {"type": "string"}, "n": {"type": "integer"}}, "required": ["cmd"]}}}])");

// Room for DeepSeek's markers (three bytes a character with the byte tokenizer) in one answer.
const Budget kBudget{4000, 600, 2, 400, 64, 1000};

// The gateway with a template (written in `dir`) that writes calls in `format`'s way, reading answers as
// `parser` says.
Bench format_bench(const Format& format, const std::string& parser, const crl::test::TempDir& dir) {
  const std::string file = (dir.path() / (format.name + ".jinja")).string();
  std::ofstream(file) << template_writing_calls(format.call_template);
  GatewayOptions options;
  options.chat_template = file;
  options.tool_call_parser = parser;
  options.budget = kBudget;
  return Bench(llm::ApiKind::kSglang, {}, options);
}

class GatewayToolFormats : public ::testing::TestWithParam<size_t> {};

TEST_P(GatewayToolFormats, TheModelsOwnCallsComeBackAsToolCallsAndTheWindowGoesOn) {
  const Format& format = formats()[GetParam()];
  crl::test::TempDir dir;
  Bench bench = format_bench(format, "auto", dir);  // found from the template
  Harness h(bench.port(), format.name);
  h.add("user", "list the files " + format.trigger);
  const json answer = h.turn({{"tools", kShellFormatTools}});
  ASSERT_TRUE(answered_one_call(answer, "shell", format.arguments));
  const json& message = answer["choices"][0]["message"];
  if (format.content.empty())
    EXPECT_TRUE(message["content"].is_null()) << answer.dump();
  else
    EXPECT_EQ(message["content"], format.content);
  // The harness runs the tool and calls again: its copy of the answer is recognised.
  h.messages.push_back(
      {{"role", "tool"}, {"tool_call_id", message["tool_calls"][0]["id"]}, {"content", "a.txt b.txt"}});
  h.turn({{"tools", kShellFormatTools}});
  h.add("user", "thanks");
  h.turn({{"tools", kShellFormatTools}});
  EXPECT_EQ(h.state()["history_edits"], 0);
  const auto calls = bench.upstream->calls();
  ASSERT_EQ(calls.size(), 3u);
  const auto tokenizer = make_tokenizer("byte");
  EXPECT_NE(tokenizer->decode(calls[1].prompt).find("<|im_start|>tool\na.txt b.txt<|im_end|>"),
            std::string::npos);
  ASSERT_EQ(h.reward(1).status, 200);
  EXPECT_EQ(check_exact(h.export_json(), calls), calls.size());
}

// The option against the template: the same answer read as hermes blocks is text, whole.
TEST_P(GatewayToolFormats, ReadAsHermesTheSameAnswerIsText) {
  const Format& format = formats()[GetParam()];
  crl::test::TempDir dir;
  Bench bench = format_bench(format, "hermes", dir);
  Harness h(bench.port(), format.name + "-as-hermes");
  h.add("user", "list the files " + format.trigger);
  const json answer = h.turn({{"tools", kShellFormatTools}});
  EXPECT_EQ(answer["choices"][0]["finish_reason"], "stop") << answer.dump();
  EXPECT_FALSE(answer["choices"][0]["message"].contains("tool_calls")) << answer.dump();
  EXPECT_NE(answer["choices"][0]["message"]["content"].get<std::string>().find("shell"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Formats, GatewayToolFormats, ::testing::Range<size_t>(0, 4),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return formats()[info.param].name;
                         });

}  // namespace
}  // namespace crl::server::gateway::testing
