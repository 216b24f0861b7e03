#pragma once
// The OpenAI Responses API's conversation state for one session: what `previous_response_id` continues.
//
// A harness that chains its calls (Codex CLI, the OpenAI Agents SDK with previous_response_id) sends only
// what it adds (a function_call_output, the user's next words) and names the response it follows; the API
// continues from that response's input and output items, without that response's `instructions` (a
// chained call brings its own). The gateway renders whole conversations, so the session keeps the
// conversation as of its newest response: its messages after the instructions, each with its key
// (chat_messages.h), and the answer as the assistant message a harness would copy back (its text and calls;
// reasoning is not part of it, as Responses harnesses' reasoning items are skipped).
//
// One line, not a tree. A response is a point on that line (its id and how many messages reach through its
// answer). Every call, chained or not, moves the line to its own conversation: a stateless call (its whole
// conversation as input) too, so that a harness may chain after a first stateless call, as Codex does. A
// call that continues an earlier point cuts the line there and the points after it are gone: the session
// records one rollout, and such a call is an edited history (a new segment) for it anyway. A stateless
// call whose messages start with the line's copies only what it adds (the keys are compared), so the
// stateless path copies no O(context) text per call.
//
// A chained call's turn borrows the line's messages (moved, not copied) for the call and returns them
// (record() after a success, take_back() after a failure). `store: false` changes nothing: the session
// records every call for training either way, and Codex sends store: false with previous_response_id.
//
// Memory: the conversation's text once more per Responses session, bounded by kMaxBytes; past it the line is
// dropped and a chained call is refused (400 previous_response_not_found, saying why) until a stateless
// call starts a new one.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/gateway/chat_messages.h"
#include "server/gateway/chat_turn.h"

namespace crl::server::gateway {

class ResponseChain {
 public:
  static constexpr size_t kMaxBytes = 16u << 20;

  // A call that continues `previous`: turn.messages (its `lead` instruction messages, then its input)
  // become the lead, the line's messages through `previous`'s answer, then the input; turn.keys likewise.
  // Throws GatewayError 400 previous_response_not_found naming the id when it is not on the line.
  void continue_from(std::string_view previous, size_t lead, ChatTurn& turn);
  // After a call was answered with `reply` as response `id`: the line becomes the turn's messages after
  // its `lead` and the answer, and `id` its newest point (a chained turn's messages are taken back).
  void record(const std::string& id, size_t lead, ChatTurn& turn, const AssistantReply& reply);
  // After a chained call failed: its borrowed messages back, the line as it was (nothing when none is lent).
  void take_back(ChatTurn& turn);
  void clear();

  size_t messages() const { return messages_.size(); }
  size_t points() const { return points_.size(); }
  size_t bytes() const { return ends_.empty() ? 0 : ends_.back(); }

 private:
  struct Point {
    std::string id;
    size_t messages;  // the line's messages through this response's answer
  };
  // Appends a message and its key to the line.
  void push(Message message, uint64_t key);
  // Cuts the line to its first `count` messages and the points within them.
  void cut(size_t count);
  void drop_points_past(size_t count);  // the points that reach past the first `count` messages
  void clear_line();

  std::vector<Message> messages_;
  std::vector<uint64_t> keys_;
  std::vector<size_t> ends_;  // text bytes through each message
  std::vector<Point> points_;
  std::string dropped_;  // why the line was dropped ("" when it was not)
  bool lent_ = false;
  size_t lent_lead_ = 0, lent_count_ = 0;  // where the borrowed messages sit in the turn, and how many
};

}  // namespace crl::server::gateway
