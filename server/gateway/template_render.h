#pragma once
// A harness's conversation rendered by a real model's Jinja chat template (engine/chat_template.h
// ChatTemplate::render, the `--chat-template PATH/tokenizer_config.json | PATH.jinja` of `crl serve`), so
// that the prompt the gateway forwards is byte for byte the text the template writes for the same messages
// and tools (what SGLang or transformers' apply_chat_template would send).
//
// Message text is never special. Before rendering, every occurrence in the messages and tools of a
// special-token string the template itself writes (its turn strings: "<|im_start|>", "<|im_end|>",
// "<|eot_id|>", ...; for gpt-oss also its message structure: "<|channel|>", "<|call|>", ...) is replaced by a
// private-use sentinel (U+E000 N U+E001, N indexing the original); the rendered text is then encoded as
// pieces: template text (special) and the originals (ordinary text). The text is unchanged; only a harness
// can no longer forge a turn boundary. (A template that tests message text for such a string, e.g. Qwen3's
// `content.startswith('<tool_response>')` on a user turn, sees the sentinel.)
//
// Messages are given to the template the way OpenAI servers (SGLang, vLLM) give them: {role, content},
// assistant turns with `tool_calls: [{id, type: "function", function: {name, arguments}}]` where the
// arguments are the parsed JSON object when they parse (HF templates `tojson` them), tool results with
// `tool_call_id`. JSON objects (tools, tool-call arguments) keep the key order the request wrote
// (nlohmann::ordered_json), as Python's json gives them to Hugging Face and SGLang templates.
//
// The window (gateway_session.h) is written in pieces that must concatenate to the template's render:
//  * first(): the template's render of the messages with the generation prompt, cut into the system part
//    (the render of the leading system message alone, with or without the tools, when it is a prefix: kept
//    by a rebuild), the rest, and the generation prompt, which must be the template's assistant header (the
//    episode writes it: ContextTemplate::turn_header);
//  * next(): what follows a sampled answer: the render of the whole list it is given (the conversation the
//    window holds: the harness's list, or after a rebuild the window's own; with the generation prompt) past
//    the render of the list up to the harness's copy of the answer; when the template rewrites that answer
//    once more turns follow it (Qwen3 drops an empty <think> block from earlier turns), past the render of
//    the list up to the answer plus a placeholder user turn, less that turn. When neither is a prefix,
//    std::nullopt (the caller writes the new messages with the per-turn strings). A render that does not end
//    with the assistant header is taken whole when the template writes no generation prompt there at all
//    (its render without one is the same text): DeepSeek-V3 after tool results ends with
//    "<｜tool▁outputs▁end｜>" and the model answers right after it; the cut then opens the next turn itself
//    (TurnsAfterAnswer::opens_turn, engine/context.h append_observation).
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/chat_template.h"
#include "engine/jinja/value.h"
#include "engine/tokenizer.h"
#include "server/gateway/chat_messages.h"

namespace crl::server::gateway {

// What a session keeps between calls: its messages protected and converted to template values, so that a
// call converts only what is new (at an 8k-token context, converting the whole list was a fifth of a call's
// CPU). Message i is reused while it equals the harness's message i; the tools while they are equal (a
// change converts everything again: their sentinels are numbered first).
struct ConvertedMessages {
  std::vector<Message> messages;         // as the harness sent them
  std::vector<jinja::Value> values;      // each protected and converted (template_message)
  std::vector<size_t> originals_before;  // originals.size() before each message
  std::vector<std::string> originals;    // what sentinel N stands for: the tools' first, then messages'
  nlohmann::ordered_json tools;          // the tools converted, as sent
  jinja::Value tool_values;              // undefined when there are none
  bool converted_tools = false;
  // The last call's render of the whole list with the generation prompt, and how many messages it had
  // (cleared when those messages or the tools change): next() cuts with one render when it extends.
  std::string last_render;
  size_t last_count = 0;
  uint64_t one_render_cuts = 0;  // next() calls that needed no second render (tests, metrics)
};

// What follows a sampled answer (TemplateRenderer::next, MessageRenderer::observation): the ids, and whether
// they end with what opens the next assistant turn, which then has no turn header of its own.
struct TurnsAfterAnswer {
  std::vector<TokenId> ids;
  bool opens_turn = false;
};

// How a first prompt (TemplateRenderer::first, MessageRenderer::first_prompt) ends its parts.
struct FirstPrompt {
  // `system` ends inside the first user turn (a template whose system text opens it,
  // ChatTemplate::system_opens_user_turn): a rebuild's resume turn then continues that turn, without a
  // header.
  bool system_opens_user_turn = false;
  // `rest` ends with what opens the first assistant turn (no generation prompt after these messages).
  bool opens_turn = false;
};

class TemplateRenderer {
 public:
  // `chat` must have a Jinja template (chat.jinja) and its per-turn strings. `also_closing`: other strings
  // that end an answer in the template's render besides its end of turn (gpt-oss's "<|call|>",
  // "<|return|>"): a render up to an answer may end with any of them. `also_guarded`: special-token
  // strings kept out of message text besides the turn strings (gpt-oss's message structure: "<|channel|>",
  // "<|constrain|>", "<|call|>", "<|return|>").
  TemplateRenderer(std::shared_ptr<const Tokenizer> tokenizer, ChatTemplate chat,
                   std::vector<std::string> also_closing = {}, std::vector<std::string> also_guarded = {});

  // Throws GatewayError (400 template_error) when the template refuses the messages (raise_exception) or
  // ends the render neither with its assistant header nor without any generation prompt (as next()).
  // `memo`: the session's converted messages, brought up to `messages` (null: converted for this call only).
  // Without a system message, `system` is what the template writes before the first user turn's header
  // (Gemma's "<bos>", Llama's "<|begin_of_text|>", a default system block), when that is a prefix of the
  // render.
  FirstPrompt first(std::span<const Message> messages, const nlohmann::ordered_json& tools, int64_t now_unix,
                    std::vector<TokenId>& system, std::vector<TokenId>& rest,
                    ConvertedMessages* memo = nullptr) const;
  // The text after the answer messages[answer] (without its close, which the caller writes) up to the
  // generation prompt, as ids; std::nullopt when the template's renders do not extend each other.
  // `answer_text`: the window's text of the answer as sampled, with the close the caller writes after it.
  // When the memo's last render was of messages[0, answer) and this render starts with that render and
  // `answer_text`, the cut is what follows (one render: the template writes the harness's copy of the answer
  // as it was sampled, and the window's text equals the template's render); otherwise the cut is past the
  // render of the list up to the answer (a second render).
  std::optional<TurnsAfterAnswer> next(std::span<const Message> messages, size_t answer,
                                       const nlohmann::ordered_json& tools, int64_t now_unix,
                                       ConvertedMessages* memo = nullptr,
                                       std::string_view answer_text = {}) const;

  // The special-token strings message text is kept from (for tests and the README).
  const std::vector<std::string>& guarded() const { return guarded_; }

 private:
  // Brings `memo` up to `messages` and `tools`: guarded strings replaced by sentinels, then converted.
  void protect(ConvertedMessages& memo, std::span<const Message> messages,
               const nlohmann::ordered_json& tools) const;
  // Replaces the guarded strings in every string of `value` by sentinels numbered from originals.size().
  void guard_strings(nlohmann::ordered_json& value, std::vector<std::string>& originals) const;
  // The render of the first `count` messages and a placeholder user turn, up to the placeholder's text
  // (without the generation prompt); nullopt when the template refuses that list.
  std::optional<std::string> opening(const ConvertedMessages& memo, size_t count, bool with_tools,
                                     int64_t now_unix) const;
  // The template's render of the first `count` converted messages (and a placeholder user turn after them).
  std::string render(const ConvertedMessages& memo, size_t count, bool placeholder, bool with_tools,
                     bool generation_prompt, int64_t now_unix) const;
  // next()'s cut of `full` (this call's render): past `last` and the answer as sampled when they start it,
  // else past a second render of the list up to the answer. `m.last_count` is still the last render's.
  // The text before the next answer in `full` (the render of m's first `count` messages with the generation
  // prompt): less its assistant header, or the whole render when the template writes no generation prompt
  // there (its render without one is the same text), which then opens the turn itself; nullopt otherwise.
  std::optional<std::string_view> before_generation_prompt(const ConvertedMessages& m, size_t count,
                                                           std::string_view full, bool has_tools,
                                                           int64_t now_unix) const;
  // `body`: the render without its generation prompt.
  std::optional<std::vector<TokenId>> cut_after_answer(ConvertedMessages& m, std::string_view body,
                                                       const std::string& last, std::string_view answer_text,
                                                       size_t answer, bool has_tools, int64_t now_unix) const;
  // The rendered text as ids: sentinels become their originals as ordinary text.
  std::vector<TokenId> encode(std::string_view text, const std::vector<std::string>& originals) const;

  std::shared_ptr<const Tokenizer> tokenizer_;
  ChatTemplate chat_;
  std::vector<std::string> guarded_;
  // first_byte_[b]: some guarded string starts with byte b. Message text is scanned for these bytes only
  // (they are rare in text: '<', '[' and the sentinel's lead byte), not compared with every guarded string
  // at every byte (that was a fifth of a call's CPU at an 8k-token context with Qwen3's template).
  std::array<bool, 256> first_byte_{};
  // Set once the render up to an answer was not a prefix of the next render but the render with a
  // placeholder turn was (Qwen3 drops an answer's empty <think> block once turns follow it): next() then
  // tries the placeholder first and skips a render of the whole conversation that would fail again. Either
  // way the cut is checked against the full render; for a template whose renders extend each other both
  // give the same cut.
  mutable std::atomic<bool> rewrites_answers_{false};
  std::vector<std::string> closes_;  // what a render up to an answer ends with: each closing string + after
};

// A message as OpenAI servers hand it to a chat template.
nlohmann::ordered_json template_message(const Message& message);

}  // namespace crl::server::gateway
