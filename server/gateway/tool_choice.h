#pragma once
// What a harness's tool_choice asks of a call's answer, read from each API's spelling, and how the gateway
// enforces it. As vLLM and SGLang do, `required` and a named function become constrained decoding: the
// upstream samples the answer under a JSON schema of an array of calls,
//   [{"name": N, "parameters": {...}}, ...]
// (forced_calls_schema; SGLang `sampling_params.json_schema`, the OpenAI API's `response_format`), and the
// gateway reads that array back into the harness's tool calls (tool_call_format.h read_forced_calls) instead
// of the model's own call format. `none` leaves the answer as text (its calls are not read); `auto` reads
// calls in the model's format.
//
//   OpenAI chat  tool_choice "none" | "auto" | "required" | {"type": "function", "function": {"name": N}};
//                parallel_tool_calls (false: at most one call)
//   Responses    tool_choice "none" | "auto" | "required" | {"type": "function", "name": N};
//                parallel_tool_calls
//   Anthropic    tool_choice {"type": "auto" | "any" | "tool" (with "name") | "none",
//                "disable_parallel_tool_use": bool}
// Anything else is a 400 naming the field (allowed_tools, custom and hosted tools: the gateway serves
// function tools only). So is a forced choice with no tools, a name that is not among the tools, a forced
// choice together with response_format / text.format (one grammar per answer), and a forced choice with
// gpt-oss's harmony format (its answers are channel messages; a JSON array would break them).
//
// The recorded ids are what the upstream sampled under that grammar: the window holds the JSON array (not
// the template's rendering of a call), and a trainer that recomputes log-probs without the grammar sees the
// unconstrained distribution, as for response_format. A summary is never constrained.
#include <nlohmann/json.hpp>
#include <string>

#include "engine/json_view.h"

namespace crl::server::gateway {

enum class ToolChoiceMode { kAuto, kNone, kRequired, kNamed };

struct ToolChoice {
  ToolChoiceMode mode = ToolChoiceMode::kAuto;
  std::string name;      // kNamed: the function
  bool parallel = true;  // a forced answer may hold more than one call
  // The answer's tool calls are read (all but `none`).
  bool reads_calls() const { return mode != ToolChoiceMode::kNone; }
  // The answer is constrained to calls (`required`, a named function).
  bool forced() const { return mode == ToolChoiceMode::kRequired || mode == ToolChoiceMode::kNamed; }
  bool operator==(const ToolChoice&) const = default;
};

// A request's tool_choice (and parallel_tool_calls / disable_parallel_tool_use) in each API's spelling;
// absent or null: auto. Throws GatewayError 400 naming the field.
ToolChoice read_openai_tool_choice(JsonView request);
ToolChoice read_responses_tool_choice(JsonView request);
ToolChoice read_anthropic_tool_choice(JsonView request);

// The JSON schema (its text) a forced choice constrains the answer to, for `tools` (the OpenAI list the
// chat template takes): an array of at least one {"name", "parameters"} object, the names those of the
// tools (the named one only), each call's parameters its tool's schema ({"type": "object", "properties":
// {}} for a tool without one), at most one item when !parallel. The tools' `$defs` are gathered at the
// schema's root, where their "#/$defs/..." references point. Throws GatewayError 400 (param tool_choice)
// when there are no tools, the named tool is not among them, or two tools define one `$defs` name
// differently.
std::string forced_calls_schema(const ToolChoice& choice, const nlohmann::ordered_json& tools);

}  // namespace crl::server::gateway
