// Chat templates loaded from files (engine/chat_template.h): --chat-template NAME | PATH.jinja |
// PATH/tokenizer_config.json, the variables a template sees, named template lists, the per-turn strings
// derived for the text codec, and the built-ins staying byte-identical.
#include "engine/chat_template.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/jinja/template_error.h"
#include "tests/temp_dir.h"

namespace crl {
namespace {

using json = nlohmann::json;

// Qwen2.5's ChatML template, abridged (no tools branch): what chatml_template() hard-codes.
const char* kChatml =
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
    "'<|im_end|>\\n' "
    "}}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

TEST(ChatTemplate, BuiltinsStayByteIdentical) {
  EXPECT_EQ(load_chat_template("chatml"), chatml_template());
  EXPECT_EQ(load_chat_template("plain"), plain_template());
  EXPECT_EQ(chatml_template().definition().find("jinja"), std::string::npos);
  ChatRenderRequest r;
  r.messages = json::array({{{"role", "system"}, {"content", "S"}}, {{"role", "user"}, {"content", "U"}}});
  EXPECT_EQ(chatml_template().render(r),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
            "<|im_start|>assistant\n");
  const std::vector<ChatMessage> m = {{ChatRole::kSystem, "S"}, {ChatRole::kUser, "U"}};
  EXPECT_EQ(chatml_template().render(r), render_chat(chatml_template(), m, true));
}

TEST(ChatTemplate, JinjaFileDerivesTheSameTurnsAsTheBuiltin) {
  const test::TempDir dir("chat_template");
  const ChatTemplate t = load_chat_template(dir.write("chatml.jinja", kChatml));
  EXPECT_EQ(t.turns_error, "");
  EXPECT_EQ(t.system_prefix, chatml_template().system_prefix);
  EXPECT_EQ(t.system_suffix, chatml_template().system_suffix);
  EXPECT_EQ(t.user_prefix, chatml_template().user_prefix);
  EXPECT_EQ(t.user_suffix, chatml_template().user_suffix);
  EXPECT_EQ(t.assistant_prefix, chatml_template().assistant_prefix);
  EXPECT_EQ(t.end_of_turn, "<|im_end|>");
  EXPECT_EQ(t.after_end_of_turn, "\n");
  EXPECT_NE(t.definition(), chatml_template().definition());  // the source is part of the fingerprint
}

// Messages already converted to template values render as the same messages in JSON do; the built-ins
// refuse them (they render from JSON only).
TEST(ChatTemplate, ConvertedMessagesRenderAsTheirJson) {
  const test::TempDir dir("chat_template");
  const ChatTemplate t = load_chat_template(dir.write("chatml.jinja", kChatml));
  ChatRenderRequest from_json_request;
  from_json_request.messages = nlohmann::ordered_json::array(
      {{{"role", "system"}, {"content", "s"}}, {{"role", "user"}, {"content", "u"}}});
  ChatRenderRequest converted;
  converted.message_values = jinja::from_json(from_json_request.messages);
  EXPECT_EQ(t.render(converted), t.render(from_json_request));
  EXPECT_EQ(t.render(converted),
            "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nu<|im_end|>\n<|im_start|>assistant\n");
  try {
    chatml_template().render(converted);
    ADD_FAILURE() << "the built-in rendered converted messages";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("message_values"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, TokenizerConfigWithNamedTemplatesAndTokens) {
  const test::TempDir dir("chat_template");
  json config = {{"bos_token", {{"content", "<s>"}, {"lstrip", false}}},
                 {"eos_token", "</s>"},
                 {"chat_template",
                  {{{"name", "default"},
                    {"template",
                     "{{ bos_token }}D{% for m in messages %}[{{ m.content }}]"
                     "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}"
                     "<A>{% endif %}"}},
                   {{"name", "tool_use"}, {"template", "T{{ tools|length }}{{ messages|length }}"}}}}};
  const ChatTemplate t = load_chat_template(dir.write("tokenizer_config.json", config.dump()));
  ChatRenderRequest r;
  r.messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  EXPECT_EQ(t.render(r), "<s>D[hi]</s><A>");
  r.tools = json::array({{{"type", "function"}}});
  EXPECT_EQ(t.render(r), "T11");
  r.tools = nullptr;
  r.add_generation_prompt = false;
  r.extra = {{"eos_token", "!"}};
  EXPECT_EQ(t.render(r), "<s>D[hi]!");
}

TEST(ChatTemplate, BadFilesAndRequestsAreTypedErrors) {
  const test::TempDir dir("chat_template");
  const auto fails = [](const std::string& spec, const std::string& needle) {
    try {
      load_chat_template(spec);
      ADD_FAILURE() << spec;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  fails("llama", "unknown chat template");
  fails(dir.file("missing.jinja"), "missing.jinja");
  fails(dir.write("a.json", "{\"eos_token\": \"x\"}"), "chat_template");
  fails(dir.write("b.json", "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"x\"}]}"),
        "default");
  fails(dir.write("c.json", "{\"chat_template\": 3}"), "chat_template");
  fails(dir.write("d.jinja", "line one\n{% for x in y %}"), "line 2");
  const ChatTemplate t =
      load_chat_template(dir.write("e.jinja", "{{ raise_exception('no ' + messages[0].role) }}"));
  ChatRenderRequest r;
  r.messages = json::array({{{"role", "robot"}, {"content", "x"}}});
  EXPECT_THROW(t.render(r), jinja::TemplateError);
  EXPECT_NE(t.turns_error, "");
  EXPECT_THROW(t.require_turns("--chat-template"), Error);
  r.messages = json::array({{{"content", "x"}}});
  try {
    t.render(r);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "messages[0].role");
  }
}

// A generation prompt that extends the history's assistant header (DeepSeek-R1 opens every answer with
// "<think>\n"; Qwen3 without thinking with an empty think block): the turns open with the whole prompt, what
// the model saw. A prompt unrelated to the history's header still cannot be cut into turns.
TEST(ChatTemplate, AGenerationPromptThatExtendsTheHistorysHeaderOpensTheTurns) {
  const test::TempDir dir("chat_template");
  const std::string r1 =
      "{%- for message in messages %}{{- '<' + message.role + '>' + message.content + '<end>\\n' }}"
      "{%- endfor %}{%- if add_generation_prompt %}{{- '<assistant><think>\\n' }}{%- endif %}";
  const ChatTemplate t = load_chat_template(dir.write("r1.jinja", r1));
  EXPECT_EQ(t.turns_error, "");
  EXPECT_EQ(t.assistant_prefix, "<assistant><think>\n");
  EXPECT_EQ(t.user_prefix, "<user>");
  EXPECT_EQ(t.end_of_turn, "<end>");
  const std::string other =
      "{%- for message in messages %}{{- '<' + message.role + '>' + message.content + '<end>\\n' }}"
      "{%- endfor %}{%- if add_generation_prompt %}{{- '<model>' }}{%- endif %}";
  EXPECT_NE(load_chat_template(dir.write("other.jinja", other)).turns_error.find("generation prompt"),
            std::string::npos);
}

// --default-chat-template-kwargs: variables every render sees (a request's own override them), named in
// the definition; not a JSON object, or a built-in template (which reads none): an error naming the option.
TEST(ChatTemplate, ServerVariablesAndTheirBadValues) {
  const test::TempDir dir("chat_template");
  const std::string source =
      "{%- for message in messages %}{{- message.content }}{%- endfor %}"
      "{%- if add_generation_prompt %}{{- '[' + (mode | default('none')) + ']' }}{%- endif %}";
  const ChatTemplate t = load_chat_template(dir.write("mode.jinja", source));
  const ChatTemplate fast = with_template_variables(t, R"({"mode": "fast"})");
  ChatRenderRequest r;
  r.messages = json::array({{{"role", "user"}, {"content", "x"}}});
  EXPECT_EQ(t.render(r), "x[none]");
  EXPECT_EQ(fast.render(r), "x[fast]");
  r.extra = {{"mode", "slow"}};
  EXPECT_EQ(fast.render(r), "x[slow]");
  EXPECT_NE(fast.definition(), t.definition());
  EXPECT_NE(with_template_variables(t, R"({"mode": "slow"})").definition(), fast.definition());
  const auto fails = [&](const ChatTemplate& chat, const std::string& text, const std::string& needle) {
    try {
      with_template_variables(chat, text);
      ADD_FAILURE() << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--default-chat-template-kwargs"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  fails(t, "[1, 2]", "JSON object");
  fails(t, "{\"mode\": ", "JSON object");
  fails(t, "\"fast\"", "JSON object");
  fails(t, R"({"messages": []})", "the template's input");
  fails(t, R"({"mode": "x", "add_generation_prompt": false})", "add_generation_prompt");
  fails(chatml_template(), R"({"enable_thinking": false})", "reads no variables");
  EXPECT_EQ(with_template_variables(chatml_template(), ""), chatml_template());
}

}  // namespace
}  // namespace crl
