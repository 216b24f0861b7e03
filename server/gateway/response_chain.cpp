#include "server/gateway/response_chain.h"

#include <algorithm>
#include <iterator>
#include <stdexcept>

#include "engine/error.h"
#include "engine/json_reader.h"
#include "server/gateway/gateway_error.h"

namespace crl::server::gateway {

namespace {

size_t text_bytes(const Message& m) {
  size_t n = m.content.size() + m.tool_call_id.size();
  for (const ToolCall& call : m.tool_calls) n += call.id.size() + call.name.size() + call.arguments.size();
  return n;
}

// The turn's keys, computed where its decoder left them out.
void fill_keys(ChatTurn& turn) {
  if (turn.keys.size() == turn.messages.size()) return;
  turn.keys.resize(turn.messages.size());
  for (size_t i = 0; i < turn.messages.size(); ++i) turn.keys[i] = message_key(turn.messages[i]);
}

}  // namespace

void ResponseChain::push(Message message, uint64_t key) {
  ends_.push_back(bytes() + text_bytes(message));
  messages_.push_back(std::move(message));
  keys_.push_back(key);
}

void ResponseChain::cut(size_t count) {
  messages_.resize(std::min(count, messages_.size()));
  keys_.resize(messages_.size());
  ends_.resize(messages_.size());
  drop_points_past(messages_.size());
}

void ResponseChain::drop_points_past(size_t count) {
  while (!points_.empty() && points_.back().messages > count) points_.pop_back();
}

void ResponseChain::continue_from(std::string_view previous, size_t lead, ChatTurn& turn) {
  if (lent_) throw std::logic_error("ResponseChain::continue_from: the line is lent to another call");
  const auto point =
      std::find_if(points_.rbegin(), points_.rend(), [&](const Point& p) { return p.id == previous; });
  if (point == points_.rend()) {
    std::string why = dropped_;
    if (why.empty()) {
      why = points_.empty() ? "this session has answered no response yet"
                            : "this session's newest response is " + quote(points_.back().id) +
                                  " (a session keeps the responses of its newest conversation; continuing an "
                                  "earlier one drops those after it)";
    }
    // The API's own words first (clients match them), then why.
    throw bad_request("previous_response_not_found",
                      "Previous response with id '" + text_prefix(previous) + "' not found: " + why,
                      "previous_response_id");
  }
  lead = std::min(lead, turn.messages.size());
  fill_keys(turn);
  const size_t count = point->messages;
  if (count > messages_.size()) throw std::logic_error("ResponseChain: a response past the end of the line");
  std::vector<Message> messages;
  std::vector<uint64_t> keys;
  messages.reserve(turn.messages.size() + count);
  keys.reserve(turn.messages.size() + count);
  const auto lead_end = turn.messages.begin() + static_cast<std::ptrdiff_t>(lead);
  std::move(turn.messages.begin(), lead_end, std::back_inserter(messages));
  keys.insert(keys.end(), turn.keys.begin(), turn.keys.begin() + static_cast<std::ptrdiff_t>(lead));
  std::move(messages_.begin(), messages_.begin() + static_cast<std::ptrdiff_t>(count),
            std::back_inserter(messages));
  keys.insert(keys.end(), keys_.begin(), keys_.begin() + static_cast<std::ptrdiff_t>(count));
  std::move(lead_end, turn.messages.end(), std::back_inserter(messages));
  keys.insert(keys.end(), turn.keys.begin() + static_cast<std::ptrdiff_t>(lead), turn.keys.end());
  turn.messages = std::move(messages);
  turn.keys = std::move(keys);
  lent_ = true;
  lent_lead_ = lead;
  lent_count_ = count;
}

void ResponseChain::take_back(ChatTurn& turn) {
  if (!lent_) return;
  lent_ = false;
  const auto from = turn.messages.begin() + static_cast<std::ptrdiff_t>(lent_lead_);
  std::move(from, from + static_cast<std::ptrdiff_t>(lent_count_), messages_.begin());
}

void ResponseChain::record(const std::string& id, size_t lead, ChatTurn& turn, const AssistantReply& reply) {
  lead = std::min(lead, turn.messages.size());
  if (lent_) {
    // A chained call: the line through its point, then its input, all in the turn (the line's own messages
    // moved there by continue_from).
    lent_ = false;
    drop_points_past(lent_count_);
    messages_.clear();
    keys_.clear();
    ends_.clear();
    for (size_t i = lead; i < turn.messages.size(); ++i) push(std::move(turn.messages[i]), turn.keys[i]);
  } else {
    if (!points_.empty() && points_.back().id == id) return;  // a retry answered again: nothing new
    fill_keys(turn);
    // A stateless call: the line's messages it repeats stay, the rest of its own are copied.
    const size_t own = turn.messages.size() - lead;
    size_t same = 0;
    while (same < own && same < keys_.size() && keys_[same] == turn.keys[lead + same]) ++same;
    cut(same);
    for (size_t i = lead + same; i < turn.messages.size(); ++i) push(turn.messages[i], turn.keys[i]);
  }
  push(Message{MessageRole::kAssistant, reply.content, reply.tool_calls, {}}, reply_key(reply));
  if (bytes() > kMaxBytes) {
    dropped_ = "the conversation through response " + quote(id) + " passed " +
               std::to_string(kMaxBytes >> 20) +
               " MiB, past which a session keeps none; send the whole conversation as input";
    clear_line();
    return;
  }
  dropped_.clear();
  points_.push_back(Point{id, messages_.size()});
}

void ResponseChain::clear_line() {
  messages_ = {};
  keys_ = {};
  ends_ = {};
  points_ = {};
}

void ResponseChain::clear() {
  clear_line();
  dropped_.clear();
  lent_ = false;
}

}  // namespace crl::server::gateway
