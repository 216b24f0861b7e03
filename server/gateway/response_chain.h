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
// One line per conversation, not a tree. A response is a point on its conversation's line (its id and how
// many messages reach through its answer). Every call, chained or not, moves its conversation's line to its
// own conversation: a stateless call (its whole conversation as input) too, so that a harness may chain
// after a first stateless call, as Codex does. A call that continues an earlier point cuts its line there
// and the points after it are gone: the session records one rollout, and such a call is an edited history
// (a new segment) for it anyway. A stateless call whose messages start with a line's copies only what it
// adds (the keys are compared), so the stateless path copies no O(context) text per call.
//
// Which line a stateless call moves: the one it shares at least its first two messages with (or its one),
// as the session's threads are told apart (gateway_session.h, select_thread); else it starts a line. So a
// harness that runs several conversations through one session (sub-agents) can chain each of them. At most
// kMaxLines lines: past that, the least recently used one is dropped (its responses can no longer be
// continued; sent whole, its conversation goes on).
//
// A chained call's turn borrows the line's messages (moved, not copied) for the call and returns them
// (record() after a success, take_back() after a failure); the loan is the turn's (ChatTurn::borrowed), so
// calls of several conversations may each hold one at once (a session's threads' calls overlap while they
// wait for the upstream). A call that continues a line lent to another (a retry that comes while its first
// try is in flight) waits until the line is back; a lent line is never dropped. `store: false` changes
// nothing: the session records every call for training either way, and Codex sends store: false with
// previous_response_id.
//
// Memory: the conversations' text once more per Responses session, bounded by kMaxBytes in all; a line past
// it alone is dropped and a chained call of it is refused (400 previous_response_not_found, saying why)
// until a stateless call starts a new one; past it with the others, the least recently used others go.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/fiber_mutex.h"
#include "server/gateway/chat_messages.h"
#include "server/gateway/chat_turn.h"

namespace crl::server::gateway {

class ResponseChain {
 public:
  static constexpr size_t kMaxBytes = 16u << 20;
  static constexpr size_t kMaxLines = 16;

  // A call that continues `previous`: turn.messages (its `lead` instruction messages, then its input)
  // become the lead, the line's messages through `previous`'s answer, then the input; turn.keys likewise.
  // Throws GatewayError 400 previous_response_not_found naming the id when it is on no line, and Lent when
  // its line is lent to another call (nothing borrowed): the caller waits for `loan` (without the session's
  // lock: the other call returns the line under it) and calls again.
  struct Lent {
    std::shared_ptr<FiberMutex> loan;
  };
  void continue_from(std::string_view previous, size_t lead, ChatTurn& turn);
  // After a call was answered with `reply` as response `id`: its line becomes the turn's messages after
  // its `lead` and the answer, and `id` its newest point (a chained turn's messages are taken back).
  void record(const std::string& id, size_t lead, ChatTurn& turn, const AssistantReply& reply);
  // After a chained call failed: its borrowed messages back, the line as it was (nothing when none is lent,
  // or the line was cleared meanwhile).
  void take_back(ChatTurn& turn);
  void clear();

  // The newest line's messages and points (0 when there is none), and all lines' text bytes.
  size_t messages() const { return lines_.empty() ? 0 : lines_.back().messages.size(); }
  size_t points() const { return lines_.empty() ? 0 : lines_.back().points.size(); }
  size_t bytes() const;
  size_t lines() const { return lines_.size(); }

 private:
  struct Point {
    std::string id;
    size_t messages;  // the line's messages through this response's answer
  };
  struct Line {
    uint64_t serial = 0;  // what a loan names it by (lines move as they are used)
    // Set, and held, while its messages are lent to a chained call (ChatTurn::borrowed): another call that
    // continues the line waits for it.
    std::shared_ptr<FiberMutex> loan;
    std::vector<Message> messages;
    std::vector<uint64_t> keys;
    std::vector<size_t> ends;  // text bytes through each message
    std::vector<Point> points;
    size_t bytes() const { return ends.empty() ? 0 : ends.back(); }
    // Appends a message and its key.
    void push(Message message, uint64_t key);
    // Cuts the line to its first `count` messages and the points within them.
    void cut(size_t count);
    void drop_points_past(size_t count);  // the points that reach past the first `count` messages
  };
  // Moves line `i` to the back (the most recently used); returns it.
  Line& use(size_t i);
  // The index of the line a loan names (lines_.size() when it is gone).
  size_t find(uint64_t serial) const;
  // Drops the least recently used line that is not lent (the newest one kept when `keep_newest`); false
  // when there is none.
  bool drop_least_recent(bool keep_newest);
  Line& new_line();

  std::vector<Line> lines_;  // the least recently used first
  std::string dropped_;      // why the last line past kMaxBytes was dropped ("" when none was)
  uint64_t serials_ = 0;
};

}  // namespace crl::server::gateway
