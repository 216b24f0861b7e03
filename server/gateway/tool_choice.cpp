#include "server/gateway/tool_choice.h"

#include <optional>

#include "engine/error.h"
#include "engine/json_reader.h"
#include "server/gateway/gateway_error.h"

namespace crl::server::gateway {

using nlohmann::ordered_json;

namespace {

// "none" | "auto" | "required" (the OpenAI spellings), else nullopt.
std::optional<ToolChoiceMode> mode_named(std::string_view value) {
  if (value == "none") return ToolChoiceMode::kNone;
  if (value == "auto") return ToolChoiceMode::kAuto;
  if (value == "required") return ToolChoiceMode::kRequired;
  return std::nullopt;
}

// The function name of a named choice (`at` is its path in errors).
std::string function_name(JsonView name, const std::string& at) {
  if (!name.is_string() || name.string().empty())
    throw bad_request("bad_field", at + " must name a function", at);
  return std::string(name.string());
}

// The OpenAI APIs' shared shape: a mode string, or {"type": "function", ...} whose name `name_of` finds.
ToolChoice read_openai_shape(JsonView request, JsonView (*name_of)(JsonView), const char* name_path) {
  ToolChoice out;
  const JsonView choice = request.find("tool_choice");
  const char* expected = "tool_choice must be none, auto, required or a named function";
  if (choice.is_string()) {
    const auto mode = mode_named(choice.string());
    if (!mode) {
      throw bad_request("bad_field", std::string(expected) + ", not " + quote(text_prefix(choice.string())),
                        "tool_choice");
    }
    out.mode = *mode;
  } else if (choice.is_object()) {
    const std::string_view type = choice.find("type").is_string() ? choice.find("type").string() : "";
    if (type != "function") {
      throw bad_request("bad_field",
                        "tool_choice.type must be function (the gateway serves function tools only), not " +
                            quote(text_prefix(type)),
                        "tool_choice.type");
    }
    out.mode = ToolChoiceMode::kNamed;
    out.name = function_name(name_of(choice), name_path);
  } else if (!choice.is_none()) {
    throw bad_request("bad_field", expected, "tool_choice");
  }
  if (const JsonView parallel = request.find("parallel_tool_calls"); !parallel.is_none()) {
    if (!parallel.is_bool())
      throw bad_request("bad_field", "parallel_tool_calls must be true or false", "parallel_tool_calls");
    out.parallel = parallel.boolean();
  }
  return out;
}

}  // namespace

ToolChoice read_openai_tool_choice(JsonView request) {
  return read_openai_shape(
      request, [](JsonView choice) { return choice.find("function").find("name"); },
      "tool_choice.function.name");
}

ToolChoice read_responses_tool_choice(JsonView request) {
  return read_openai_shape(
      request, [](JsonView choice) { return choice.find("name"); }, "tool_choice.name");
}

ToolChoice read_anthropic_tool_choice(JsonView request) {
  ToolChoice out;
  const JsonView choice = request.find("tool_choice");
  if (choice.is_none()) return out;
  if (!choice.is_object())
    throw bad_request("bad_field", "tool_choice must be an object with a type", "tool_choice");
  const JsonView type = choice.find("type");
  const std::string_view kind = type.is_string() ? type.string() : "";
  if (kind == "auto") {
    out.mode = ToolChoiceMode::kAuto;
  } else if (kind == "any") {
    out.mode = ToolChoiceMode::kRequired;
  } else if (kind == "none") {
    out.mode = ToolChoiceMode::kNone;
  } else if (kind == "tool") {
    out.mode = ToolChoiceMode::kNamed;
    out.name = function_name(choice.find("name"), "tool_choice.name");
  } else {
    throw bad_request("bad_field",
                      "tool_choice.type must be auto, any, tool or none, not " + quote(text_prefix(kind)),
                      "tool_choice.type");
  }
  if (const JsonView off = choice.find("disable_parallel_tool_use"); !off.is_none()) {
    if (!off.is_bool()) {
      throw bad_request("bad_field", "tool_choice.disable_parallel_tool_use must be true or false",
                        "tool_choice.disable_parallel_tool_use");
    }
    out.parallel = !off.boolean();
  }
  return out;
}

std::string forced_calls_schema(const ToolChoice& choice, const ordered_json& tools) {
  ordered_json alternatives = ordered_json::array();
  ordered_json defs = ordered_json::object();
  if (tools.is_array()) {
    for (const ordered_json& tool : tools) {
      const auto function = tool.find("function");
      if (function == tool.end() || !function->is_object()) continue;
      const auto name = function->find("name");
      if (name == function->end() || !name->is_string()) continue;
      if (choice.mode == ToolChoiceMode::kNamed && name->get_ref<const std::string&>() != choice.name)
        continue;
      const auto given = function->find("parameters");
      const bool has_schema = given != function->end() && given->is_object() && !given->empty();
      ordered_json parameters =
          has_schema ? *given : ordered_json{{"type", "object"}, {"properties", ordered_json::object()}};
      if (const auto local = parameters.find("$defs"); local != parameters.end() && local->is_object()) {
        for (const auto& [key, schema] : local->items()) {
          if (const auto seen = defs.find(key); seen != defs.end() && *seen != schema) {
            throw bad_request("bad_tools",
                              "two tools define $defs." + key +
                                  " differently: a forced tool_choice needs one schema per name",
                              "tool_choice");
          }
          defs[key] = schema;
        }
      }
      alternatives.push_back({{"type", "object"},
                              {"properties",
                               {{"name", {{"type", "string"}, {"enum", ordered_json::array({*name})}}},
                                {"parameters", std::move(parameters)}}},
                              {"required", ordered_json::array({"name", "parameters"})}});
    }
  }
  if (alternatives.empty()) {
    if (choice.mode == ToolChoiceMode::kNamed) {
      throw bad_request("bad_field",
                        "tool_choice names " + quote(choice.name) + ", which is not among the tools",
                        "tool_choice");
    }
    throw bad_request("bad_field", "tool_choice required needs tools", "tool_choice");
  }
  ordered_json schema = {{"type", "array"}, {"minItems", 1}};
  if (!choice.parallel) schema["maxItems"] = 1;
  schema["items"] = alternatives.size() == 1 ? std::move(alternatives[0])
                                             : ordered_json{{"anyOf", std::move(alternatives)}};
  if (!defs.empty()) schema["$defs"] = std::move(defs);
  return schema.dump();
}

}  // namespace crl::server::gateway
