#pragma once
// A session's last chat-completions body, kept so that the next one decodes only what it adds.
//
// Why: a harness resends its whole message list on every call and the list grows at its end, so the JSON
// text of call N+1 starts with the text of call N's messages, byte for byte (the same harness writes the same
// messages the same way). Decoding the whole body (a JSON pass over every byte, every message's text copied
// into a Message and hashed into its key) was about a quarter of a turn's instructions at 8k tokens
// (bench/RESULTS.md, eighth pass), and it grew with the context.
//
// How, and why it is exact: the kept body's messages are kept decoded, each with its key and the offset one
// past its last byte. A new body is compared with the kept one (memcmp); the messages that end inside the
// common prefix are the kept ones: the same bytes read from the same state decode to the same values (a JSON
// reader's state at a byte depends only on the bytes before it). The rest is read as the document
//     <the body up to and including the messages array's '['> 0 <the body after the last kept message>
// so that everything the reader checks (syntax, duplicate keys, including a key before the array repeated
// after it, nesting depth) applies to it as to the whole body; the placeholder `0` stands for the kept
// messages. A rest that the reader refuses is decoded again whole, so the error a harness sees names the
// same byte and field either way; a message's error names its index in the whole list.
//
// Memory: the body and its decoded messages, about twice the conversation's text per session, dropped when
// the rollout ends. The harness's list keeps growing after compactions while the window does not, so a
// body over kMaxKeptBytes is not kept (such a session decodes every body whole: CPU, not memory). Only the
// OpenAI chat route keeps one (Anthropic bodies and plain completions decode whole).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/json_view.h"
#include "server/gateway/chat_messages.h"
#include "server/gateway/chat_turn.h"

namespace crl::server::gateway {

class KeptRequest {
 public:
  static constexpr size_t kMaxKeptBytes = 4u << 20;

  // The first messages of `body` that repeat the kept body's byte for byte: how many, and where the rest of
  // `body` starts (one past the last of them). {0, 0} when nothing is kept or nothing repeats.
  struct Repeat {
    size_t messages = 0;
    size_t rest_at = 0;
  };
  Repeat repeated(std::string_view body) const;

  // The document to read for `body` given `repeat` (see above), and the offset in `body` of its byte `i`
  // for i past the placeholder.
  std::string rest_document(std::string_view body, const Repeat& repeat) const;
  size_t messages_open() const { return messages_open_; }
  size_t body_offset(const Repeat& repeat, size_t document_offset) const {
    return document_offset - (messages_open_ + 2) + repeat.rest_at;
  }

  // Keeps `body` (decoded whole): where its messages array opens and where each message ends.
  void keep_whole(std::string_view body, size_t messages_open, std::vector<uint32_t> ends,
                  std::vector<Message> messages, std::vector<uint64_t> keys);
  // Keeps `body` (decoded after `repeat`): the kept messages before it, then the new ones (ends in `body`).
  void keep_rest(std::string_view body, const Repeat& repeat, const std::vector<uint32_t>& new_ends,
                 std::vector<Message> new_messages, const std::vector<uint64_t>& new_keys);

  // The body's tools (an array): taken from the kept ones when their text is the same bytes, else decoded
  // (to the chat template's JSON), keyed and kept. An agent harness sends the same tools on every call;
  // decoding and keying them was two thirds of a turn's instructions with eight tools (bench/RESULTS.md,
  // eighth pass).
  void see_tools(JsonView tools);
  void see_no_tools() { has_tools_ = false; }

  // The decoded messages, their keys and the tools are lent to a call and given back after it (a call that
  // throws before giving them back leaves nothing kept: the next body decodes whole).
  void lend(ChatTurn& turn);
  void give_back(ChatTurn& turn);

  void clear();
  // The messages the last decode took from the kept body, and how many tools lists were decoded (for tests
  // and benchmarks).
  size_t last_repeated() const { return last_repeated_; }
  size_t tools_decoded() const { return tools_decoded_; }

 private:
  bool valid_ = false;  // body_ and messages_ describe the same body
  std::string body_;
  size_t messages_open_ = 0;    // the offset of the messages array's '['
  std::vector<uint32_t> ends_;  // one past each message's last byte
  std::vector<Message> messages_;
  std::vector<uint64_t> keys_;  // message_key of each
  bool has_tools_ = false;      // the last decoded body has tools
  bool tools_valid_ = false;    // tools_ is the decoding of tools_text_ (and is not lent)
  std::string tools_text_;
  nlohmann::ordered_json tools_;
  uint64_t tools_key_ = 0;
  size_t tools_decoded_ = 0;
  bool lent_ = false;
  size_t last_repeated_ = 0;
};

}  // namespace crl::server::gateway
