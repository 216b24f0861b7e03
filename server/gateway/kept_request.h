#pragma once
// A session's last chat body (OpenAI chat completions, Anthropic messages or OpenAI responses), kept so that
// the next one decodes only what it adds.
//
// Why: a harness resends its whole message list on every call and the list grows at its end, so the JSON
// text of call N+1 starts with the text of call N's messages, byte for byte (the same harness writes the same
// messages the same way), and ends with the same text after them (tools, system, model, max_tokens: what the
// harness sends on every call). Decoding the whole body (a JSON pass over every byte, every message's text
// copied into a Message and hashed into its key) was about a quarter of a turn's instructions at 8k tokens
// without tools and two thirds with eight tools (bench/RESULTS.md, eighth pass), and it grew with the
// context.
//
// How, and why it is exact. The kept body's messages are kept decoded, each with its key, and each element of
// its messages array with the offset one past its last byte and the number of messages decoded through it
// (an OpenAI message is one; an Anthropic turn maps onto one or more, and Anthropic's top-level `system` is a
// lead message before them; a Responses item maps onto one or none: a function_call joins the assistant
// message before it, and the top-level `instructions` is a lead message). A new body is compared with the
// kept one (memcmp); the elements that end inside the common prefix are the kept ones: the same bytes read
// from the same state decode to the same values (a JSON reader's state at a byte depends only on the bytes
// before it). Then, in this order:
//  1. The middle: when the new body also ends with the kept body's text after its last element (the tail:
//     `]` and every field after the list), only the text between is read, as the document
//         {"m":[0 <the middle> ]}
//     and it must be that one array's elements and nothing else (the document's only key, the array closed
//     by the `]` appended). The middle's elements then sit at the depth they have in the body (the messages
//     array is a key of the root object), the root's keys are the kept body's (before the list and in the
//     tail, the same bytes), and the body is the kept one with the elements after the repeated ones replaced
//     by the middle's: valid exactly when they are, and every other field decodes as the kept body's did.
//     The placeholder `0` stands for the repeated elements.
//  2. The rest (OpenAI chat only, when the tail changed: other tools, another max_tokens): the document
//         <the body up to and including the messages array's '['> 0 <the body after the last repeated
//         element>
//     so that everything the reader checks (syntax, duplicate keys, including a key before the array repeated
//     after it, nesting depth) applies to it as to the whole body.
//  3. Otherwise, or when the reader refuses either document, the body is decoded whole, so the error a
//     harness sees names the same byte and field either way; a message's error names its index in the whole
//     list.
// A body of one API is never read against a kept body of another.
//
// An element that decodes to no message of its own may have added to the message before it (a Responses
// function_call item joins the assistant turn before it). So a repeat never ends just before such an
// element: it ends before the element that made the message instead, and that element is read again. And an
// element that would add to a kept message (the first new element is a function_call after a kept
// assistant turn) makes its decoder throw NeedsEarlierMessages: the body decodes whole.
//
// Memory: the body and its decoded messages, about twice the conversation's text per session, dropped when
// the rollout ends. The harness's list keeps growing after compactions while the window does not, so a
// body over kMaxKeptBytes is not kept (such a session decodes every body whole: CPU, not memory). Plain
// completions keep nothing.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/json_view.h"
#include "server/gateway/chat_messages.h"
#include "server/gateway/chat_turn.h"

namespace crl::server::gateway {

// The API whose body is kept.
enum class BodyApi : uint8_t { kOpenAIChat, kAnthropicMessages, kOpenAIResponses };

// Where a body's messages lie, as its decoder found them.
struct MessagesLayout {
  size_t list_open = 0;            // the offset of the messages array's '['
  size_t lead = 0;                 // messages decoded from outside the array, before its (Anthropic's system)
  std::vector<uint32_t> ends;      // one past each element's last byte
  std::vector<uint32_t> produced;  // the messages decoded through each element, the lead included

  // Records the next element of the body `text` (`element` must be an object or array: its raw() is its
  // text), and the messages decoded so far.
  void add(JsonView element, const char* text, size_t messages_so_far);
};

// Decodes messages[index] of a body, appending the messages it maps onto (throws GatewayError naming it).
// `before` is the message decoded just before out's first (a kept one when the middle is decoded alone),
// null when there is none or out holds every message before the element.
using ElementDecoder = void (*)(JsonView element, size_t index, const Message* before,
                                std::vector<Message>& out);
// Thrown by an ElementDecoder whose element adds to `before`: decode_middle answers nullopt then.
struct NeedsEarlierMessages {};
// Decodes a body's tools list into the chat template's (OpenAI) tools (throws GatewayError).
using ToolsDecoder = nlohmann::ordered_json (*)(JsonView tools);

class KeptRequest {
 public:
  static constexpr size_t kMaxKeptBytes = 4u << 20;

  // The first elements of `body`'s messages that repeat the kept body's byte for byte: how many, the
  // messages they decoded to (the lead included), and where the rest of `body` starts (one past the last of
  // them). Nothing repeats when nothing is kept, the kept body is another API's, or no element repeats.
  struct Repeat {
    size_t elements = 0;
    size_t messages = 0;
    size_t rest_at = 0;
  };
  Repeat repeated(std::string_view body, BodyApi api) const;
  // Whether `body` starts with the kept body's first two elements (its one, if it has one), judged by their
  // first and last 128 bytes: the same conversation, as a session's threads are told apart
  // (GatewaySession::kept_request_for, which only picks the body to decode against); false when nothing is
  // kept.
  bool same_conversation(std::string_view body) const;
  size_t elements() const { return valid_ ? layout_.ends.size() : 0; }
  bool lent() const { return lent_; }  // to a call in flight, which gives it back

  // Step 1 above: `body` decoded from the kept one and its middle, and kept; nullopt when `body` does not end
  // with the kept tail or the reader refuses the middle. Throws GatewayError when a new element is bad
  // (nothing kept changes then). The messages are lent (see lend()).
  std::optional<CallRequest> decode_middle(std::string_view body, const Repeat& repeat,
                                           ElementDecoder element);

  // Step 2 above: the document to read for `body`, and the offset in `body` of its byte `i` for i past the
  // placeholder.
  std::string rest_document(std::string_view body, const Repeat& repeat) const;
  size_t messages_open() const { return layout_.list_open; }
  size_t body_offset(const Repeat& repeat, size_t document_offset) const {
    return document_offset - (layout_.list_open + 2) + repeat.rest_at;
  }

  // Keeps `body`, decoded whole: its layout, `decoded`'s fields and its messages (moved out), keyed.
  void keep_whole(std::string_view body, BodyApi api, MessagesLayout layout, CallRequest& decoded);
  // Keeps `body`, decoded after `repeat` (one message per new element; OpenAI): the kept messages before it,
  // then the new ones (`new_ends`: offsets in `body`), and `decoded`'s fields.
  void keep_rest(std::string_view body, const Repeat& repeat, const std::vector<uint32_t>& new_ends,
                 std::vector<Message> new_messages, const std::vector<uint64_t>& new_keys,
                 const CallRequest& decoded);

  // The body's tools (an array): taken from the kept ones when their text is the same bytes (and the same
  // decoder), else decoded, keyed and kept. An agent harness sends the same tools on every call; decoding
  // and keying them was two thirds of a turn's instructions with eight tools (bench/RESULTS.md, eighth pass).
  void see_tools(JsonView tools, ToolsDecoder decode);
  void see_no_tools();
  // The kept tools' text as a member a parse may leave unread (engine/json_view.h) when it repeats, for a
  // body whose tools `decode` reads (see_tools then takes them by their text); nullopt when none are kept.
  std::optional<JsonKnownMember> known_tools(ToolsDecoder decode) const;

  // Keeps only the tools `see_tools` saw (the body's messages are not kept: an `input` string, or a
  // Responses call that continues a response, whose messages the session's response chain holds) and lends
  // them to `turn` (and keys its messages): the next body decodes whole, its tools compared with these.
  void keep_tools_only(ChatTurn& turn);

  // The decoded messages, their keys and the tools are lent to a call and given back after it (a call that
  // throws before giving them back leaves nothing kept: the next body decodes whole).
  void lend(ChatTurn& turn);
  void give_back(ChatTurn& turn);

  void clear();
  // How the last decode went (for tests and benchmarks): the messages it took from the kept body, whether it
  // read the middle alone, and how many tools lists were decoded.
  size_t last_repeated() const { return last_repeated_; }
  bool last_read_middle() const { return last_read_middle_; }
  size_t tools_decoded() const { return tools_decoded_; }

 private:
  // The kept state with the elements after `repeat` replaced by new ones (their ends in `body`, the messages
  // each decoded to), and `body` kept.
  void splice(std::string_view body, const Repeat& repeat, const std::vector<uint32_t>& new_ends,
              const std::vector<uint32_t>& new_counts, std::vector<Message>& new_messages,
              const std::vector<uint64_t>& new_keys);
  void keep_fields(const CallRequest& decoded);
  void lend_tools(ChatTurn& turn);
  void clear_body();  // everything but the tools' cache
  size_t message_count() const { return layout_.produced.empty() ? layout_.lead : layout_.produced.back(); }

  bool valid_ = false;  // body_, layout_, messages_ and fields_ describe the same body
  BodyApi api_ = BodyApi::kOpenAIChat;
  std::string body_;
  MessagesLayout layout_;
  std::vector<Message> messages_;
  std::vector<uint64_t> keys_;  // message_key of each
  CallRequest fields_;          // everything decoded but the messages and the tools
  bool has_tools_ = false;      // the last decoded body has tools
  bool tools_valid_ = false;    // tools_ is the decoding of tools_text_ (and is not lent)
  bool kept_tools_ok_ = false;  // has_tools_ and tools_ are the kept body's (not a refused body's since)
  ToolsDecoder tools_decoder_ = nullptr;
  std::string tools_text_;
  nlohmann::ordered_json tools_;
  uint64_t tools_key_ = 0;
  size_t tools_decoded_ = 0;
  bool lent_ = false;
  bool tools_only_ = false;  // what is lent is only the tools (keep_tools_only)
  size_t last_repeated_ = 0;
  bool last_read_middle_ = false;
};

}  // namespace crl::server::gateway
