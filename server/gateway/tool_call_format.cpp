#include "server/gateway/tool_call_format.h"

#include <optional>
#include <vector>

#include "engine/error.h"
#include "server/gateway/python_calls.h"

namespace crl::server::gateway {

using nlohmann::ordered_json;  // arguments keep their keys in the order the model wrote them

namespace {

constexpr std::string_view kSpace = " \n";  // what trim_blanks() removes

bool consume(std::string_view& text, std::string_view prefix) {
  if (!text.starts_with(prefix)) return false;
  text.remove_prefix(prefix.size());
  return true;
}

ToolCall make_call(std::string name, std::string arguments, const std::string& id_prefix, size_t index) {
  ToolCall call;
  call.id = "call_" + id_prefix + "_" + std::to_string(index);
  call.name = std::move(name);
  call.arguments = std::move(arguments);
  return call;
}

AssistantReply text_only(std::string_view text) {
  AssistantReply reply;
  reply.content = std::string(text);
  return reply;
}

// A call written as {"name": N, "parameters" | "arguments": {...}} (llama3_json, a forced tool_choice's
// array) added to `reply`; false when `object` is not one.
bool add_named_call(const ordered_json& object, const std::string& id_prefix, AssistantReply& reply) {
  if (!object.is_object()) return false;
  const auto name = object.find("name");
  auto arguments = object.find("parameters");
  if (arguments == object.end()) arguments = object.find("arguments");
  if (name == object.end() || !name->is_string() || arguments == object.end() || !arguments->is_object())
    return false;
  reply.tool_calls.push_back(
      make_call(name->get<std::string>(), arguments->dump(), id_prefix, reply.tool_calls.size()));
  return true;
}

// llama3_json: the whole answer is ";"-separated {"name", "parameters" | "arguments"} objects.
AssistantReply read_llama3_json(std::string_view text, const std::string& id_prefix) {
  std::string_view rest = trim_blanks(text);
  consume(rest, "<|python_tag|>");
  if (rest.ends_with("<|eom_id|>")) rest.remove_suffix(std::string_view("<|eom_id|>").size());
  rest = trim_blanks(rest);
  if (!rest.starts_with('{')) return text_only(text);
  AssistantReply reply;
  // Each object ends where a parse of the text up to a "}" followed by ";" or the end succeeds: a ";" inside
  // a string argument is no separator.
  size_t start = 0;
  while (start < rest.size()) {
    std::optional<ordered_json> object;
    size_t end = start;
    for (size_t at = rest.find('}', start); at != std::string_view::npos; at = rest.find('}', at + 1)) {
      const std::string_view after = trim_blanks(rest.substr(at + 1));
      if (!after.empty() && after[0] != ';') continue;
      ordered_json parsed = ordered_json::parse(rest.substr(start, at + 1 - start), nullptr, false);
      if (parsed.is_discarded()) continue;
      object = std::move(parsed);
      end = at + 1;
      break;
    }
    if (!object || !add_named_call(*object, id_prefix, reply)) return text_only(text);
    const size_t next = rest.find_first_not_of(kSpace, end);
    if (next == std::string_view::npos) break;
    start = rest.find_first_not_of(kSpace, next + 1);             // past the ";"
    if (start == std::string_view::npos) return text_only(text);  // a trailing ";" promises another call
  }
  return reply;
}

// pythonic: the whole answer is a Python list of calls (python_calls.h), inside Llama 4's python tags
// when it writes them.
AssistantReply read_pythonic(std::string_view text, const std::string& id_prefix) {
  std::string_view rest = trim_blanks(text);
  if (consume(rest, "<|python_start|>")) {
    if (!rest.ends_with("<|python_end|>")) return text_only(text);
    rest.remove_suffix(std::string_view("<|python_end|>").size());
  }
  const std::optional<std::vector<PythonCall>> calls = read_python_calls(rest);
  if (!calls) return text_only(text);
  AssistantReply reply;
  for (const PythonCall& call : *calls)
    reply.tool_calls.push_back(
        make_call(call.name, call.arguments.dump(), id_prefix, reply.tool_calls.size()));
  return reply;
}

// deepseek_v3: content, then the calls block.
AssistantReply read_deepseek_v3(std::string_view text, const std::string& id_prefix) {
  static constexpr std::string_view kCallsBegin = "<｜tool▁calls▁begin｜>",
                                    kCallsEnd = "<｜tool▁calls▁end｜>", kCallBegin = "<｜tool▁call▁begin｜>",
                                    kCallEnd = "<｜tool▁call▁end｜>", kSep = "<｜tool▁sep｜>",
                                    kJsonOpen = "\n```json\n", kJsonClose = "\n```";
  const size_t begin = text.find(kCallsBegin);
  if (begin == std::string_view::npos) return text_only(text);
  AssistantReply reply;
  std::string_view rest = text.substr(begin + kCallsBegin.size());
  for (;;) {
    rest = trim_blanks(rest);
    if (consume(rest, kCallsEnd)) break;
    if (!consume(rest, kCallBegin)) return text_only(text);
    const size_t sep = rest.find(kSep), end = rest.find(kCallEnd);
    if (sep == std::string_view::npos || end == std::string_view::npos || sep > end) return text_only(text);
    if (rest.substr(0, sep) != "function") return text_only(text);
    const std::string_view call = rest.substr(sep + kSep.size(), end - sep - kSep.size());
    rest.remove_prefix(end + kCallEnd.size());
    const size_t open = call.find(kJsonOpen);
    if (open == std::string_view::npos || !call.ends_with(kJsonClose)) return text_only(text);
    const std::string_view name = call.substr(0, open);
    const std::string_view json =
        call.substr(open + kJsonOpen.size(), call.size() - open - kJsonOpen.size() - kJsonClose.size());
    const ordered_json arguments = ordered_json::parse(json, nullptr, false);
    if (name.empty() || name.find_first_of(" \t\r\n") != std::string_view::npos || !arguments.is_object())
      return text_only(text);
    reply.tool_calls.push_back(
        make_call(std::string(name), arguments.dump(), id_prefix, reply.tool_calls.size()));
  }
  if (!trim_blanks(rest).empty() || reply.tool_calls.empty()) return text_only(text);
  reply.content = std::string(trim_blanks(text.substr(0, begin)));
  return reply;
}

// The JSON schema type qwen3_coder reads a parameter's value by ("" when the tool does not declare it).
std::string declared_type(const ordered_json& tools, const std::string& function, const std::string& param) {
  if (!tools.is_array()) return "";
  for (const ordered_json& tool : tools) {
    const auto f = tool.find("function");
    if (f == tool.end() || !f->is_object() || f->value("name", std::string()) != function) continue;
    const auto parameters = f->find("parameters");
    if (parameters == f->end() || !parameters->is_object()) return "";
    const auto properties = parameters->find("properties");
    if (properties == parameters->end() || !properties->is_object()) return "";
    const auto schema = properties->find(param);
    if (schema == properties->end() || !schema->is_object()) return "";
    const auto type = schema->find("type");
    if (type == schema->end()) return "string";
    if (type->is_string()) return type->get<std::string>();
    if (type->is_array()) {  // ["integer", "null"]: the first that is not "null"
      for (const ordered_json& t : *type) {
        if (t.is_string() && t.get<std::string>() != "null") return t.get<std::string>();
      }
    }
    return "string";
  }
  return "";
}

ordered_json typed_value(const std::string& value, const std::string& type) {
  if (value == "null") return nullptr;
  if (type.empty() || type == "string") return value;
  ordered_json parsed = ordered_json::parse(value, nullptr, false);
  if (parsed.is_discarded()) return value;
  const bool fits = (type == "integer" && parsed.is_number_integer()) ||
                    (type == "number" && parsed.is_number()) || (type == "boolean" && parsed.is_boolean()) ||
                    (type == "object" && parsed.is_object()) || (type == "array" && parsed.is_array());
  return fits ? parsed : ordered_json(value);
}

// qwen3_coder: content, then <tool_call><function=N><parameter=P>V</parameter>...</function></tool_call>.
AssistantReply read_qwen3_coder(std::string_view text, const std::string& id_prefix,
                                const ordered_json& tools) {
  static constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>",
                                    kFunction = "<function=", kFunctionEnd = "</function>",
                                    kParam = "<parameter=", kParamEnd = "</parameter>";
  const size_t begin = text.find(kOpen);
  if (begin == std::string_view::npos) return text_only(text);
  AssistantReply reply;
  std::string_view rest = text.substr(begin);
  while (!(rest = trim_blanks(rest)).empty()) {
    if (!consume(rest, kOpen)) return text_only(text);
    rest = trim_blanks(rest);
    if (!consume(rest, kFunction)) return text_only(text);
    const size_t name_end = rest.find('>');
    if (name_end == std::string_view::npos) return text_only(text);
    const std::string name(rest.substr(0, name_end));
    if (name.empty() || name.find_first_of(" \t\r\n<") != std::string::npos) return text_only(text);
    rest.remove_prefix(name_end + 1);
    ordered_json arguments = ordered_json::object();
    for (;;) {
      rest = trim_blanks(rest);
      if (consume(rest, kFunctionEnd)) break;
      if (!consume(rest, kParam)) return text_only(text);
      const size_t param_end = rest.find('>'), value_end = rest.find(kParamEnd);
      if (param_end == std::string_view::npos || value_end == std::string_view::npos || param_end > value_end)
        return text_only(text);
      const std::string param(rest.substr(0, param_end));
      std::string_view value = rest.substr(param_end + 1, value_end - param_end - 1);
      if (value.starts_with('\n')) value.remove_prefix(1);  // the template's line breaks around the value
      if (value.ends_with('\n')) value.remove_suffix(1);
      if (param.empty() || arguments.contains(param)) return text_only(text);
      arguments[param] = typed_value(std::string(value), declared_type(tools, name, param));
      rest.remove_prefix(value_end + kParamEnd.size());
    }
    rest = trim_blanks(rest);
    if (!consume(rest, kClose)) return text_only(text);
    reply.tool_calls.push_back(make_call(name, arguments.dump(), id_prefix, reply.tool_calls.size()));
  }
  reply.content = std::string(trim_blanks(text.substr(0, begin)));
  return reply;
}

// harmony: messages, each a header, "<|message|>" and its text up to its closing token.
AssistantReply read_harmony(std::string_view text, const std::string& id_prefix) {
  static constexpr std::string_view kStart = "<|start|>", kMessage = "<|message|>", kChannel = "<|channel|>";
  static constexpr std::string_view kClosers[] = {"<|end|>", "<|call|>", "<|return|>"};
  AssistantReply reply;
  std::string content, reasoning;
  std::string_view rest = text;
  while (!rest.empty()) {
    consume(rest, kStart);
    const size_t message = rest.find(kMessage);
    if (message == std::string_view::npos) return text_only(text);
    const std::string_view header = rest.substr(0, message);
    rest.remove_prefix(message + kMessage.size());
    size_t end = rest.size(), closer = 0;
    for (const std::string_view c : kClosers) {
      if (const size_t at = rest.find(c); at < end) {
        end = at;
        closer = c.size();
      }
    }
    const std::string_view body = rest.substr(0, end);
    rest.remove_prefix(end + closer);
    const auto holds_structure = [](std::string_view part) {
      return part.find(kStart) != std::string_view::npos || part.find(kMessage) != std::string_view::npos ||
             part.find(kChannel) != std::string_view::npos;
    };
    if (header.find(kStart) != std::string_view::npos || holds_structure(body))
      return text_only(text);  // a text that runs into another message's header: not harmony
    // The header's words: the channel after <|channel|>, the recipient after "to=" (before or after it).
    const auto word_after = [&](std::string_view mark) -> std::string_view {
      const size_t at = header.find(mark);
      if (at == std::string_view::npos) return {};
      const std::string_view tail = header.substr(at + mark.size());
      return tail.substr(0, tail.find_first_of(" <"));
    };
    const std::string_view channel = word_after(kChannel), recipient = word_after("to=");
    if (!recipient.empty()) {
      if (!recipient.starts_with("functions.") || recipient.size() == 10) return text_only(text);
      const ordered_json arguments = ordered_json::parse(trim_blanks(body), nullptr, false);
      if (!arguments.is_object()) return text_only(text);
      reply.tool_calls.push_back(
          make_call(std::string(recipient.substr(10)), arguments.dump(), id_prefix, reply.tool_calls.size()));
    } else {
      std::string& to = channel == "analysis" ? reasoning : content;
      if (!to.empty() && !body.empty()) to += "\n\n";
      to += body;
    }
  }
  reply.content = std::string(trim_blanks(content));
  reply.reasoning = std::string(trim_blanks(reasoning));
  return reply;
}

struct FormatName {
  std::string_view name;
  ToolCallFormat format;
};
constexpr FormatName kNames[] = {
    {"hermes", ToolCallFormat::kHermes},          {"qwen25", ToolCallFormat::kHermes},
    {"llama3_json", ToolCallFormat::kLlama3Json}, {"llama3", ToolCallFormat::kLlama3Json},
    {"deepseek_v3", ToolCallFormat::kDeepSeekV3}, {"deepseekv3", ToolCallFormat::kDeepSeekV3},
    {"qwen3_coder", ToolCallFormat::kQwen3Coder}, {"harmony", ToolCallFormat::kHarmony},
    {"openai", ToolCallFormat::kHarmony},         {"gpt-oss", ToolCallFormat::kHarmony},
    {"pythonic", ToolCallFormat::kPythonic},
};

// The probe conversation in one of the conventions (see render_probe_conversation).
std::string render_probe(const ChatTemplate& chat, bool system, bool content_null, bool arguments_as_text) {
  const ordered_json arguments = {{"crlprobearg", "CRLPROBEVALUE"}};
  ChatRenderRequest probe;
  probe.now_unix = 0;
  probe.add_generation_prompt = true;
  probe.tools = ordered_json::array(
      {{{"type", "function"},
        {"function",
         {{"name", "crlprobe"},
          {"description", "probe"},
          {"parameters", {{"type", "object"}, {"properties", {{"crlprobearg", {{"type", "string"}}}}}}}}}}});
  probe.messages = ordered_json::array();
  if (system) probe.messages.push_back({{"role", "system"}, {"content", "CRLPROBESYSTEM"}});
  probe.messages.push_back({{"role", "user"}, {"content", "CRLPROBEUSER"}});
  probe.messages.push_back(
      {{"role", "assistant"},
       {"content", content_null ? ordered_json(nullptr) : ordered_json("")},
       {"tool_calls", ordered_json::array({{{"id", "call_0"},
                                            {"type", "function"},
                                            {"function",
                                             {{"name", "crlprobe"},
                                              {"arguments", arguments_as_text ? ordered_json(arguments.dump())
                                                                              : arguments}}}}})}});
  probe.messages.push_back({{"role", "tool"}, {"tool_call_id", "call_0"}, {"content", "CRLPROBERESULT"}});
  probe.messages.push_back({{"role", "assistant"}, {"content", "CRLPROBEANSWER"}});
  probe.messages.push_back({{"role", "user"}, {"content", "CRLPROBEUSERTWO"}});
  return chat.render(probe);
}

}  // namespace

const char* tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3Json:
      return "llama3_json";
    case ToolCallFormat::kDeepSeekV3:
      return "deepseek_v3";
    case ToolCallFormat::kQwen3Coder:
      return "qwen3_coder";
    case ToolCallFormat::kHarmony:
      return "harmony";
    case ToolCallFormat::kPythonic:
      return "pythonic";
  }
  return "hermes";
}

namespace {

// A conversation with a system prompt, tools, a tool call, its result, an answer and a user turn, as the
// template renders it ("" for the built-ins, or when the template refuses it in each convention tried).
std::string render_probe_conversation(const ChatTemplate& chat) {
  if (!chat.jinja) return "";
  // The OpenAI servers' conventions vary, and so do templates: the call's message with content null (the
  // API's) or "" (gpt-oss's template tests the content's text), its arguments an object (HF templates
  // `tojson` them) or their JSON text (DeepSeek-V3's concatenates them); a system prompt, or none.
  for (const bool system : {true, false}) {
    for (const auto& [content_null, as_text] :
         {std::pair{true, false}, {true, true}, {false, false}, {false, true}}) {
      try {
        return render_probe(chat, system, content_null, as_text);
      } catch (const Error&) {
      }
    }
  }
  return "";
}

}  // namespace

ToolCallFormat detect_tool_call_format(const ChatTemplate& chat) {
  if (!chat.jinja) return ToolCallFormat::kHermes;  // the built-ins write hermes blocks (chat_messages.h)
  const std::string text = render_probe_conversation(chat);
  if (text.find("to=functions.crlprobe") != std::string::npos) return ToolCallFormat::kHarmony;
  if (text.find("<function=crlprobe>") != std::string::npos) return ToolCallFormat::kQwen3Coder;
  if (text.find("<｜tool▁sep｜>crlprobe") != std::string::npos) return ToolCallFormat::kDeepSeekV3;
  if (text.find("<tool_call>") != std::string::npos) return ToolCallFormat::kHermes;
  if (text.find("crlprobe(crlprobearg=") != std::string::npos) return ToolCallFormat::kPythonic;
  if (text.find("\"name\": \"crlprobe\"") != std::string::npos &&
      text.find("\"parameters\"") != std::string::npos)
    return ToolCallFormat::kLlama3Json;
  return ToolCallFormat::kHermes;
}

ToolCallFormat resolve_tool_call_format(std::string_view name, const ChatTemplate& chat) {
  const ToolCallFormat own = detect_tool_call_format(chat);
  if (name == "auto") return own;
  for (const FormatName& n : kNames) {
    if (n.name != name) continue;
    if ((n.format == ToolCallFormat::kHarmony) != (own == ToolCallFormat::kHarmony)) {
      throw Error("option --tool-call-parser", "",
                  "value " + quote(name) +
                      (own == ToolCallFormat::kHarmony
                           ? " does not go with the chat template " + quote(chat.name) +
                                 ", which writes gpt-oss's harmony format: use auto or harmony"
                           : " needs a chat template in gpt-oss's harmony format; " + quote(chat.name) +
                                 " is not one"));
    }
    if (n.format != ToolCallFormat::kHermes && !chat.jinja) {
      throw Error("option --tool-call-parser", "",
                  "value " + quote(name) +
                      " needs a model's chat template (--chat-template PATH): the built-in " + chat.name +
                      " template writes tool calls as hermes <tool_call> blocks");
    }
    return n.format;
  }
  throw Error(
      "option --tool-call-parser", "",
      "value " + quote(name) +
          " is not one of auto, hermes (or qwen25), llama3_json (or llama3), deepseek_v3 (or deepseekv3), "
          "qwen3_coder, pythonic, harmony (or openai, gpt-oss)");
}

AssistantReply read_reply(ToolCallFormat format, std::string_view text, const std::string& id_prefix,
                          const ordered_json& tools) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return parse_reply(text, id_prefix);
    case ToolCallFormat::kLlama3Json:
      return read_llama3_json(text, id_prefix);
    case ToolCallFormat::kDeepSeekV3:
      return read_deepseek_v3(text, id_prefix);
    case ToolCallFormat::kQwen3Coder:
      return read_qwen3_coder(text, id_prefix, tools);
    case ToolCallFormat::kHarmony:
      return read_harmony(text, id_prefix);
    case ToolCallFormat::kPythonic:
      return read_pythonic(text, id_prefix);
  }
  return parse_reply(text, id_prefix);
}

AssistantReply read_forced_calls(std::string_view text, const std::string& id_prefix) {
  const ordered_json calls = ordered_json::parse(trim_blanks(text), nullptr, false);
  if (!calls.is_array() || calls.empty()) return text_only(text);
  AssistantReply reply;
  for (const ordered_json& call : calls) {
    if (!add_named_call(call, id_prefix, reply)) return text_only(text);
  }
  return reply;
}

}  // namespace crl::server::gateway
