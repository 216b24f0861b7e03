#pragma once
// Chat templates: how system / user / assistant / tool turns are written as text for a tokenizer.
//  * "chatml" (as Qwen2/Qwen2.5 use it): "<|im_start|>ROLE\nTEXT<|im_end|>\n"; a tool result is a user turn
//    "<|im_start|>user\n<tool_response>\nTEXT\n</tool_response><|im_end|>\n"; an assistant turn ends with
//    the special token <|im_end|>.
//  * "plain": "TEXT\n\n" for the system, "User: TEXT\n\n", "Tool: TEXT\n\n", and "Assistant: TEXT" ended by
//    the special token <|endoftext|> and "\n\n", for tokenizers without ChatML tokens (o200k_base, GPT-2).
// The end-of-turn string must be a special token of the tokenizer: policies end a turn by sampling it.
// Only the template's own strings produce special-token ids: a turn is encoded as pieces (turn_pieces,
// Tokenizer::encode_pieces) in which the content is ordinary text, whatever special-token strings it holds.
//
// Real models' templates (load_chat_template): the Jinja `chat_template` of a tokenizer_config.json (a
// string, or a list of named templates: "default", and "tool_use" when tools are given), or a .jinja file,
// rendered by engine/jinja/ with Hugging Face's settings and variables (messages, tools,
// add_generation_prompt, bos_token, eos_token, and extra variables such as enable_thinking). render() renders
// whole conversations (the gateway). The per-turn strings above, which the text codec of `rollout` and
// `serve` episodes needs, are derived from the Jinja template by rendering a probe conversation and cutting
// it at the probe texts (turns_error says why when a template cannot be cut into turns). A template that
// writes the system text at the start of the first user turn (Gemma: "<start_of_turn>user\nSYSTEM\n\nUSER")
// is cut too: its system "turn" is that turn's opening (system_prefix ends with the user header) and the
// user turn right after it has no header of its own (system_opens_user_turn). See engine/README.md.
#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "engine/jinja/value.h"
#include "engine/tokenizer.h"

namespace crl {

enum class ChatRole { kSystem, kUser, kAssistant, kTool };
std::string_view chat_role_name(ChatRole role);

struct ChatMessage {
  ChatRole role = ChatRole::kUser;
  std::string content;
};

// A conversation to render with a template's Jinja source: OpenAI-style messages ({role, content,
// tool_calls, ...}), tools (null: none), and extra template variables (an object or null).
// The JSON keeps its keys in insertion order (nlohmann::ordered_json), as Python's json does for Hugging Face
// and SGLang: a template's `tojson` of a tool writes its keys in the order the request wrote them.
struct ChatRenderRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;
  bool add_generation_prompt = true;
  nlohmann::ordered_json extra;
  std::optional<int64_t> now_unix;  // what strftime_now() formats (UTC); absent: the wall clock
  // The messages and tools already as template values, used instead of `messages` and `tools` when
  // `message_values` is a list (a Jinja template only; not checked: the caller built them as OpenAI
  // messages). A caller that renders a growing conversation many times converts each message once
  // (server/gateway/template_render.h); `tool_values` undefined or none: no tools.
  jinja::Value message_values, tool_values;
};

// A Jinja chat template as loaded from a file (the engine/jinja/ template, the named variants, bos/eos).
class JinjaChatSource;

struct ChatTemplate {
  std::string name;
  std::string system_prefix, system_suffix;
  std::string user_prefix, user_suffix;
  std::string tool_prefix, tool_suffix;
  std::string assistant_prefix;   // the header that opens an assistant turn (the generation prompt)
  std::string end_of_turn;        // closes an assistant turn; a special token
  std::string after_end_of_turn;  // written after end_of_turn
  // The system text opens the first user turn (Gemma): system_prefix ends with user_prefix, system_suffix
  // separates the system text from the user's, and the user turn after the system turn is written without
  // user_prefix (user_prefix_after_system()).
  bool system_opens_user_turn = false;

  // What opens the user turn that follows the system turn: "" when the system turn opened it.
  std::string_view user_prefix_after_system() const {
    return system_opens_user_turn ? std::string_view() : std::string_view(user_prefix);
  }

  // A complete turn. An assistant turn includes end_of_turn and after_end_of_turn.
  std::string turn(ChatRole role, std::string_view content) const;
  // The same turn as template text, content, template text (views into this template and `content`).
  std::array<TextPiece, 4> turn_pieces(ChatRole role, std::string_view content) const;
  // Everything that defines the template, for fingerprints (with the Jinja source when there is one).
  std::string definition() const;
  bool operator==(const ChatTemplate&) const = default;

  // Loaded from a file: the Jinja template (null for the built-ins chatml and plain).
  std::shared_ptr<const JinjaChatSource> jinja;
  // Non-empty when the per-turn strings could not be derived from the Jinja template: why.
  std::string turns_error;

  // The whole conversation as text: the Jinja template when there is one (with HF's semantics), otherwise the
  // turns (content only; tools and tool_calls are refused). Throws crl::Error (jinja::TemplateError for
  // template errors and raise_exception, naming the template and line; bad messages naming the field).
  std::string render(const ChatRenderRequest& request) const;
  // Throws crl::Error naming `option` with turns_error when the per-turn strings are not available.
  void require_turns(const std::string& option) const;
};

ChatTemplate chatml_template();
ChatTemplate plain_template();
// "chatml" | "plain"; throws crl::Error for another name.
ChatTemplate chat_template_by_name(std::string_view name);
// What every --chat-template option takes: "chatml" | "plain" | PATH.jinja | PATH/tokenizer_config.json (any
// .json: its chat_template, bos_token, eos_token). Throws crl::Error naming the file and field.
ChatTemplate load_chat_template(std::string_view spec);
// load_chat_template for the text codec of episodes (rollout, serve): also requires the per-turn strings.
// Errors name `option`.
// `variables`: with_template_variables' text (empty: none), applied before the per-turn strings are required.
ChatTemplate load_turn_template(std::string_view spec, const std::string& option = "--chat-template",
                                std::string_view variables = {});
// The template with `variables` set on every render (vLLM's `--default-chat-template-kwargs`, e.g. Qwen3's
// {"enable_thinking": false}): a request's own extra variables still override them, its definition (and
// so every fingerprint) names them, and its per-turn strings are derived again with them (Qwen3's
// generation prompt then holds the empty think block). `variables_text`: a JSON object as text; empty:
// `chat` unchanged. Throws crl::Error naming `option` for text that is not a JSON object, or for a built-in
// template (it reads no variables: they would silently change nothing), and for the template's inputs
// (messages, tools, documents, add_generation_prompt), which are not variables.
ChatTemplate with_template_variables(const ChatTemplate& chat, std::string_view variables_text,
                                     const std::string& option = "--default-chat-template-kwargs");
// The variables with_template_variables set, as compact JSON ("" when none): what snapshots record.
std::string template_variables(const ChatTemplate& chat);
// A Jinja template from its text (`name` is used in error messages); bos/eos may be empty.
ChatTemplate chat_template_from_jinja(const std::string& source, const std::string& name,
                                      const std::string& bos_token = "", const std::string& eos_token = "");

// The turns in order; with add_generation_prompt, the assistant header follows (the model writes next).
std::string render_chat(const ChatTemplate& chat, std::span<const ChatMessage> messages,
                        bool add_generation_prompt);

}  // namespace crl
