// Chat templates read from files: the Jinja `chat_template` of a tokenizer_config.json or a .jinja file,
// rendered with Hugging Face's variables, and the per-turn strings derived from it (engine/chat_template.h).
#include <ctime>
#include <utility>
#include <vector>

#include "engine/chat_template.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/jinja/template.h"
#include "engine/jinja/template_error.h"
#include "engine/json_reader.h"

namespace crl {

class JinjaChatSource {
 public:
  std::string name;
  // The named variants ("default" for a single template), in file order, with their sources.
  std::vector<std::pair<std::string, jinja::Template>> templates;
  std::vector<std::string> sources;
  std::string bos_token, eos_token;
  // Variables set on every render before the request's own (which override them): vLLM's
  // --default-chat-template-kwargs (with_template_variables). An object, or null.
  nlohmann::ordered_json variables;

  const jinja::Template& pick(bool with_tools) const {
    if (with_tools) {
      for (const auto& [n, t] : templates) {
        if (n == "tool_use") return t;
      }
    }
    for (const auto& [n, t] : templates) {
      if (n == "default") return t;
    }
    throw Error(name, "chat_template", "has no template named \"default\"");
  }
};

std::string jinja_chat_definition(const JinjaChatSource& source) {
  std::string out = "|jinja|bos:" + source.bos_token + "|eos:" + source.eos_token;
  for (size_t k = 0; k < source.templates.size(); ++k) {
    const std::string& text = source.sources[k];
    out += "|" + source.templates[k].first + "|" + std::to_string(text.size()) + ":" + text;
  }
  if (source.variables.is_object()) {  // (absent otherwise: a template's definition is unchanged)
    const std::string vars = source.variables.dump();
    out += "|variables|" + std::to_string(vars.size()) + ":" + vars;
  }
  return out;
}

namespace {

// Takes the request's own (ordered) JSON: a `const nlohmann::json&` parameter made every render copy the
// whole conversation into a converted temporary.
void check_messages(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) throw Error("chat request", "messages", "must be an array of message objects");
  for (size_t k = 0; k < messages.size(); ++k) {
    const auto& m = messages[k];
    const std::string field = "messages[" + std::to_string(k) + "]";
    if (!m.is_object()) throw Error("chat request", field, "must be an object with a role");
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      throw Error("chat request", field + ".role", "must be a string");
  }
}

std::string render_jinja(const JinjaChatSource& source, const ChatRenderRequest& request) {
  const bool converted = request.message_values.is_list();
  bool with_tools;
  if (converted) {
    with_tools = request.tool_values.is_list() && !request.tool_values.as_list().empty();
  } else {
    check_messages(request.messages);
    with_tools = !request.tools.is_null() && !(request.tools.is_array() && request.tools.empty());
    if (!request.tools.is_null() && !request.tools.is_array())
      throw Error("chat request", "tools", "must be an array or null");
  }
  if (!request.extra.is_null() && !request.extra.is_object())
    throw Error("chat request", "extra", "template variables must be an object");
  jinja::Dict vars;
  // Hugging Face's apply_chat_template: the special tokens, then messages, tools (None when absent),
  // documents, add_generation_prompt, then the caller's extra variables (which may override).
  if (!source.bos_token.empty()) vars.set("bos_token", jinja::Value(source.bos_token));
  if (!source.eos_token.empty()) vars.set("eos_token", jinja::Value(source.eos_token));
  if (converted) {
    vars.set("messages", request.message_values);
    vars.set("tools", request.tool_values.is_undefined() ? jinja::Value::none() : request.tool_values);
  } else {
    vars.set("messages", jinja::from_json(request.messages));
    vars.set("tools", request.tools.is_null() ? jinja::Value::none() : jinja::from_json(request.tools));
  }
  vars.set("documents", jinja::Value::none());
  vars.set("add_generation_prompt", jinja::Value(request.add_generation_prompt));
  if (source.variables.is_object()) {
    for (const auto& [k, v] : source.variables.items()) vars.set(k, jinja::from_json(v));
  }
  if (request.extra.is_object()) {
    for (const auto& [k, v] : request.extra.items()) vars.set(k, jinja::from_json(v));
  }
  const int64_t now = request.now_unix ? *request.now_unix : static_cast<int64_t>(std::time(nullptr));
  return source.pick(with_tools).render(vars, now);
}

// The special token a turn ends with: the leading "<...>" of the text after an assistant's content.
size_t special_token_length(const std::string& s) {
  if (s.empty() || s[0] != '<') return 0;
  for (size_t k = 1; k < s.size(); ++k) {
    if (s[k] == '>') return k + 1;
    if (s[k] == '<' || s[k] == ' ' || s[k] == '\n') return 0;
  }
  return 0;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Cuts a probe conversation (system, user, assistant, user) into the per-turn strings. Returns the reason
// when the template does not render turns that can be concatenated (then turns_error holds it).
std::string derive_turns(ChatTemplate& t) {
  const std::string S = "CRLPROBESYSTEM", U1 = "CRLPROBEUSERONE", A1 = "CRLPROBEASSISTANT",
                    U2 = "CRLPROBEUSERTWO", T1 = "CRLPROBETOOL";
  ChatRenderRequest probe;
  probe.now_unix = 0;
  probe.messages = nlohmann::json::array({{{"role", "system"}, {"content", S}},
                                          {{"role", "user"}, {"content", U1}},
                                          {{"role", "assistant"}, {"content", A1}},
                                          {{"role", "user"}, {"content", U2}}});
  std::string without, with;
  try {
    probe.add_generation_prompt = false;
    without = render_jinja(*t.jinja, probe);
    probe.add_generation_prompt = true;
    with = render_jinja(*t.jinja, probe);
  } catch (const Error& e) {
    return std::string("rendering a system/user/assistant/user conversation failed: ") + e.what();
  }
  if (with.compare(0, without.size(), without) != 0 || with.size() == without.size())
    return "the generation prompt is not appended to the conversation";
  t.assistant_prefix = with.substr(without.size());
  size_t at[4];
  const std::string* probes[4] = {&S, &U1, &A1, &U2};
  size_t from = 0;
  for (int k = 0; k < 4; ++k) {
    at[k] = without.find(*probes[k], from);
    if (at[k] == std::string::npos || without.find(*probes[k], at[k] + 1) != std::string::npos)
      return "the text of each message does not appear once, in order";
    from = at[k] + probes[k]->size();
  }
  const auto between = [&](int k) {
    const size_t b = at[k] + probes[k]->size();
    return without.substr(b, at[k + 1] - b);
  };
  t.system_prefix = without.substr(0, at[0]);
  const std::string system_user = between(0), user_assistant = between(1), assistant_user = between(2);
  t.user_suffix = without.substr(at[3] + U2.size());
  // An assistant turn in the history opens with the generation prompt, or the generation prompt extends
  // its header: Qwen3 with enable_thinking false writes "<|im_start|>assistant\n<think>\n\n</think>\n\n",
  // DeepSeek-R1 "<｜Assistant｜><think>\n", while earlier answers open with the header alone. A sampled turn
  // is the generation prompt and what the model wrote after it, so the turns written here open with the
  // whole generation prompt: what the model saw when it wrote them (not the template's re-render of them).
  const bool opens_with_prompt = user_assistant.compare(0, t.user_suffix.size() + t.assistant_prefix.size(),
                                                        t.user_suffix + t.assistant_prefix) == 0;
  const bool prompt_extends_header =
      user_assistant.size() > t.user_suffix.size() && user_assistant.starts_with(t.user_suffix) &&
      t.assistant_prefix.starts_with(std::string_view(user_assistant).substr(t.user_suffix.size()));
  if (!opens_with_prompt && !prompt_extends_header)
    return "an assistant turn in the history does not open with the generation prompt";
  const size_t end = special_token_length(assistant_user);
  if (end == 0) return "no special token closes an assistant turn";
  t.end_of_turn = assistant_user.substr(0, end);
  std::string rest = assistant_user.substr(end);
  size_t ws = 0;
  while (ws < rest.size() && (rest[ws] == '\n' || rest[ws] == ' ')) ++ws;
  t.after_end_of_turn = rest.substr(0, ws);
  t.user_prefix = rest.substr(ws);
  if (ends_with(system_user, t.user_prefix)) {
    t.system_suffix = system_user.substr(0, system_user.size() - t.user_prefix.size());
  } else if (!t.user_prefix.empty() && ends_with(t.system_prefix, t.user_prefix) &&
             system_user.find(t.end_of_turn) == std::string::npos) {
    // Gemma: "<bos><start_of_turn>user\nSYSTEM\n\nUSER<end_of_turn>\n": the system text opens the first
    // user turn, and what separates it from the user's text ("\n\n") is the system turn's suffix.
    t.system_suffix = system_user;
    t.system_opens_user_turn = true;
  } else {
    return "the system text is neither a turn of its own nor the opening of the first user turn";
  }
  // Tool results: a tool message between the assistant and the next user turn, when the template renders
  // one there; otherwise tool results are written as user turns.
  t.tool_prefix = t.user_prefix;
  t.tool_suffix = t.user_suffix;
  try {
    probe.add_generation_prompt = false;
    const nlohmann::json tool_message = {{"role", "tool"}, {"content", T1}};  // one object, not two pairs
    probe.messages.insert(probe.messages.begin() + 3, tool_message);
    const std::string tool = render_jinja(*t.jinja, probe);
    const size_t a = tool.find(A1), k = tool.find(T1), u = tool.find(U2);
    const std::string close = t.end_of_turn + t.after_end_of_turn;
    if (a != std::string::npos && k != std::string::npos && u != std::string::npos && a < k && k < u) {
      const std::string before = tool.substr(a + A1.size(), k - a - A1.size());
      const std::string after = tool.substr(k + T1.size(), u - k - T1.size());
      if (before.compare(0, close.size(), close) == 0 && ends_with(after, t.user_prefix)) {
        t.tool_prefix = before.substr(close.size());
        t.tool_suffix = after.substr(0, after.size() - t.user_prefix.size());
      }
    }
  } catch (const Error&) {
    // The template wants tool results to answer tool calls: keep the user-turn form.
  }
  return "";
}

}  // namespace

std::string render_with_jinja(const JinjaChatSource& source, const ChatRenderRequest& request) {
  return render_jinja(source, request);
}

ChatTemplate chat_template_from_jinja(const std::string& source, const std::string& name,
                                      const std::string& bos_token, const std::string& eos_token) {
  auto jinja = std::make_shared<JinjaChatSource>();
  jinja->name = name;
  jinja->bos_token = bos_token;
  jinja->eos_token = eos_token;
  jinja->templates.emplace_back("default", jinja::Template::parse(source, name));
  jinja->sources.push_back(source);
  ChatTemplate t;
  t.name = name;
  t.jinja = jinja;
  t.turns_error = derive_turns(t);
  return t;
}

namespace {

// tokenizer_config.json writes a special token as a string or as {"content": ..., ...} (an AddedToken).
std::string token_field(const nlohmann::json& config, const char* field, const std::string& file) {
  const auto it = config.find(field);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  throw Error(file, field, "must be a string or an object with a string \"content\"");
}

}  // namespace

ChatTemplate load_chat_template(std::string_view spec_view) {
  const std::string spec(spec_view);
  if (spec == "chatml" || spec == "plain") return chat_template_by_name(spec);
  const auto has_suffix = [&](const char* s) { return ends_with(spec, s); };
  if (!has_suffix(".jinja") && !has_suffix(".json"))
    throw Error("--chat-template", "name",
                "unknown chat template " + quote(spec) +
                    " (expected chatml, plain, PATH.jinja or PATH/tokenizer_config.json)");
  const std::string text = read_file(spec);  // throws naming the file
  if (has_suffix(".jinja")) return chat_template_from_jinja(text, spec);
  const nlohmann::json config = read_json(text, spec);
  if (!config.is_object()) throw Error(spec, "", "must be a JSON object (a tokenizer_config.json)");
  const auto field = config.find("chat_template");
  if (field == config.end() || field->is_null())
    throw Error(spec, "chat_template", "is missing: this tokenizer_config.json has no chat template");
  const std::string bos = token_field(config, "bos_token", spec),
                    eos = token_field(config, "eos_token", spec);
  if (field->is_string()) return chat_template_from_jinja(field->get<std::string>(), spec, bos, eos);
  if (!field->is_array() || field->empty())
    throw Error(spec, "chat_template", "must be a string or a non-empty list of {name, template}");
  auto jinja = std::make_shared<JinjaChatSource>();
  jinja->name = spec;
  jinja->bos_token = bos;
  jinja->eos_token = eos;
  for (size_t k = 0; k < field->size(); ++k) {
    const auto& entry = (*field)[k];
    const std::string where = "chat_template[" + std::to_string(k) + "]";
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
        !entry.contains("template") || !entry["template"].is_string())
      throw Error(spec, where, "must be an object with string fields \"name\" and \"template\"");
    const std::string name = entry["name"].get<std::string>();
    const std::string source = entry["template"].get<std::string>();
    jinja->templates.emplace_back(name, jinja::Template::parse(source, spec + " (" + name + ")"));
    jinja->sources.push_back(source);
  }
  ChatTemplate t;
  t.name = spec;
  t.jinja = jinja;
  jinja->pick(false);  // throws when there is no "default"
  t.turns_error = derive_turns(t);
  return t;
}

ChatTemplate with_template_variables(const ChatTemplate& chat, std::string_view variables_text,
                                     const std::string& option) {
  if (variables_text.empty()) return chat;
  nlohmann::ordered_json variables;
  try {
    variables = nlohmann::ordered_json::parse(variables_text);
  } catch (const nlohmann::json::exception& e) {
    throw Error("option " + option, "",
                "must be a JSON object of template variables, got " + quote(text_prefix(variables_text, 80)) +
                    ": " + e.what());
  }
  if (!variables.is_object())
    throw Error("option " + option, "",
                "must be a JSON object of template variables, got " + quote(text_prefix(variables_text, 80)));
  for (const char* input : {"messages", "tools", "documents", "add_generation_prompt"}) {
    if (variables.contains(input))
      throw Error("option " + option, input,
                  std::string("is the template's input, not a variable: it cannot be set here"));
  }
  if (!chat.jinja)
    throw Error("option " + option, "",
                "the built-in chat template " + quote(chat.name) +
                    " reads no variables; give a model's template with --chat-template "
                    "PATH/tokenizer_config.json or PATH.jinja");
  auto source = std::make_shared<JinjaChatSource>(*chat.jinja);
  source->variables = std::move(variables);
  ChatTemplate t;
  t.name = chat.name;
  t.jinja = std::move(source);
  t.turns_error = derive_turns(t);
  return t;
}

std::string template_variables(const ChatTemplate& chat) {
  return chat.jinja && chat.jinja->variables.is_object() ? chat.jinja->variables.dump() : "";
}

ChatTemplate load_turn_template(std::string_view spec, const std::string& option,
                                std::string_view variables) {
  ChatTemplate t;
  try {
    t = load_chat_template(spec);
  } catch (const Error& e) {
    throw Error("option " + option + (e.where().empty() ? "" : ": " + e.where()), e.field(), e.message());
  }
  t = with_template_variables(t, variables);
  t.require_turns("option " + option + (variables.empty() ? "" : " (with --default-chat-template-kwargs)"));
  return t;
}

}  // namespace crl
