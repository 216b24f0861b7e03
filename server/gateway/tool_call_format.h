#pragma once
// How a model writes its tool calls into the text it samples, and how the gateway reads them back into the
// harness's tool calls: the formats of vLLM's and SGLang's `--tool-call-parser`, under their names
// (`crl serve --tool-call-parser NAME`, default `auto`).
//
//  hermes       Qwen2.5, Qwen3, Hermes, and crl's built-in chatml template: content, then one
//               "<tool_call>\n{\"name\": N, \"arguments\": {...}}\n</tool_call>" per call (chat_messages.h
//               parse_reply: a block that is not a call stays text).
//  llama3_json  Llama 3.1-3.3 with JSON tool calling: the whole answer is the calls, after an optional
//               "<|python_tag|>": {"name": N, "parameters": {...}} ("arguments" also read), several
//               separated by ";", an optional "<|eom_id|>" after them. The template writes no content
//               beside a call, so an answer with text around its JSON is text.
//  deepseek_v3  DeepSeek-V3 and R1: content, then "<｜tool▁calls▁begin｜>", per call
//               "<｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}\n```<｜tool▁call▁end｜>"
//               (calls may be separated by a newline), then "<｜tool▁calls▁end｜>".
//  qwen3_coder  Qwen3-Coder: content, then per call
//  "<tool_call>\n<function=N>\n<parameter=P>\nV\n</parameter>
//               ...</function>\n</tool_call>". Each value V is read by the type the tool's JSON schema
//               gives P: string as written; integer, number and boolean as JSON when V is one (else the
//               string); object and array as JSON when V parses (else the string); "null" is null; a P the
//               schema does not declare is a string.
//  harmony      gpt-oss (vLLM's name: openai; SGLang's: gpt-oss): an answer is several messages, each a
//  header
//               (optional "<|start|>assistant", "<|channel|>C", an optional recipient " to=R", an optional
//               content type) then "<|message|>" and the text up to "<|end|>", "<|call|>" or "<|return|>".
//               A message to "functions.N" is a call of N with its text as the JSON arguments; the
//               "analysis" channel is reasoning, not shown; the other messages ("final", a "commentary"
//               preamble) are the content. The gateway also stops answers on <|call|> and <|return|>
//               (not the template's <|end|>, which closes the analysis) and resumes from a summary's last
//               message (harness_env.h).
//
//  pythonic     Llama 3.2 / 3.3 / 4 with vLLM's pythonic templates: the whole answer is a Python list of
//               calls with keyword arguments, "[get_weather(city='Paris', days=2), now()]" (Llama 4's
//               "<|python_start|>" ... "<|python_end|>" around it also read). Arguments are Python
//               literals: strings ('...' or "...", with \n \t \\ \' \" \uXXXX escapes), integers,
//               floats, True, False, None, lists and dicts of them; they become the call's JSON arguments.
//
// For llama3_json, deepseek_v3, qwen3_coder, pythonic and harmony an answer is either content plus calls that
// all read, or text as a whole (a call with bad JSON or no name makes the answer text, as the harness then
// sees it): a policy gets no tool call for half a call.
//
// `auto` picks the format by how the chat template itself writes an assistant's tool call (a probe call
// rendered once at start): the formats above, or hermes when the template writes none of them (the
// built-in templates, templates without tools). A harmony template takes harmony only, and harmony only a
// harmony template: the stop tokens and the window's closes follow from it.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "engine/chat_template.h"
#include "server/gateway/chat_messages.h"

namespace crl::server::gateway {

enum class ToolCallFormat { kHermes, kLlama3Json, kDeepSeekV3, kQwen3Coder, kHarmony, kPythonic };

// The format's name as --tool-call-parser takes it (vLLM's spelling).
const char* tool_call_format_name(ToolCallFormat format);
// "auto" (the template's own: detect_tool_call_format), a format's name, or vLLM's or SGLang's other name
// for it (qwen25, llama3, deepseekv3, openai, gpt-oss). Throws crl::Error naming the option, the value and
// the names it takes; also when the format needs a model's template and `chat` is a built-in one, and when
// exactly one of the format and the template is harmony.
ToolCallFormat resolve_tool_call_format(std::string_view name, const ChatTemplate& chat);
// The format the template writes a probe tool call in; hermes when it writes none the gateway knows.
ToolCallFormat detect_tool_call_format(const ChatTemplate& chat);

// Splits an answer's sampled text into content and tool calls (ids "call_<id_prefix>_<i>"). `tools` is the
// request's tool list (OpenAI's [{type, function: {name, parameters}}]; null when none): qwen3_coder reads
// parameter values by their declared types.
AssistantReply read_reply(ToolCallFormat format, std::string_view text, const std::string& id_prefix,
                          const nlohmann::ordered_json& tools);
// An answer sampled under a forced tool_choice's grammar (tool_choice.h): a JSON array of {"name": N,
// "parameters": {...}} objects ("arguments" also read), read into calls; anything else (an answer cut by
// max_tokens, an upstream that ignored the grammar) is text as a whole.
AssistantReply read_forced_calls(std::string_view text, const std::string& id_prefix);

}  // namespace crl::server::gateway
