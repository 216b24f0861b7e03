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

void ResponseChain::Line::push(Message message, uint64_t key) {
  ends.push_back(bytes() + text_bytes(message));
  messages.push_back(std::move(message));
  keys.push_back(key);
}

void ResponseChain::Line::cut(size_t count) {
  messages.resize(std::min(count, messages.size()));
  keys.resize(messages.size());
  ends.resize(messages.size());
  drop_points_past(messages.size());
}

void ResponseChain::Line::drop_points_past(size_t count) {
  while (!points.empty() && points.back().messages > count) points.pop_back();
}

size_t ResponseChain::bytes() const {
  size_t total = 0;
  for (const Line& line : lines_) total += line.bytes();
  return total;
}

ResponseChain::Line& ResponseChain::use(size_t i) {
  std::rotate(lines_.begin() + static_cast<std::ptrdiff_t>(i),
              lines_.begin() + static_cast<std::ptrdiff_t>(i) + 1, lines_.end());
  return lines_.back();
}

size_t ResponseChain::find(uint64_t serial) const {
  for (size_t i = 0; i < lines_.size(); ++i) {
    if (lines_[i].serial == serial) return i;
  }
  return lines_.size();
}

bool ResponseChain::drop_least_recent(bool keep_newest) {
  for (auto it = lines_.begin(); it != lines_.end() - (keep_newest ? 1 : 0); ++it) {
    if (!it->loan) {
      lines_.erase(it);
      return true;
    }
  }
  return false;
}

ResponseChain::Line& ResponseChain::new_line() {
  if (lines_.size() >= kMaxLines) drop_least_recent(false);
  lines_.emplace_back();
  lines_.back().serial = ++serials_;
  return lines_.back();
}

namespace {
// A line's loan ends: a call that waits to continue the line goes on.
void end_loan(std::shared_ptr<FiberMutex>& loan) {
  loan->unlock();
  loan.reset();
}
}  // namespace

void ResponseChain::continue_from(std::string_view previous, size_t lead, ChatTurn& turn) {
  if (turn.borrowed.line != 0) throw std::logic_error("ResponseChain::continue_from: the turn has a loan");
  // The point, on the most recently used line that has it (its newest such point).
  size_t line = lines_.size(), at = 0;
  for (size_t l = lines_.size(); l-- > 0 && line == lines_.size();) {
    const std::vector<Point>& points = lines_[l].points;
    for (size_t p = points.size(); p-- > 0;) {
      if (points[p].id == previous) {
        line = l;
        at = p;
        break;
      }
    }
  }
  if (line == lines_.size()) {
    std::string why = dropped_;
    if (why.empty()) {
      why = lines_.empty() || lines_.back().points.empty()
                ? "this session has answered no response yet"
                : "this session's newest response is " + quote(lines_.back().points.back().id) +
                      " (a session keeps the responses of each conversation's newest line, " +
                      std::to_string(kMaxLines) +
                      " conversations at most; continuing an earlier response drops those after it)";
    }
    // The API's own words first (clients match them), then why.
    throw bad_request("previous_response_not_found",
                      "Previous response with id '" + text_prefix(previous) + "' not found: " + why,
                      "previous_response_id");
  }
  const size_t count = lines_[line].points[at].messages;
  if (lines_[line].loan) throw Lent{lines_[line].loan};
  Line& chosen = use(line);
  lead = std::min(lead, turn.messages.size());
  fill_keys(turn);
  if (count > chosen.messages.size())
    throw std::logic_error("ResponseChain: a response past the end of the line");
  std::vector<Message> messages;
  std::vector<uint64_t> keys;
  messages.reserve(turn.messages.size() + count);
  keys.reserve(turn.messages.size() + count);
  const auto lead_end = turn.messages.begin() + static_cast<std::ptrdiff_t>(lead);
  std::move(turn.messages.begin(), lead_end, std::back_inserter(messages));
  keys.insert(keys.end(), turn.keys.begin(), turn.keys.begin() + static_cast<std::ptrdiff_t>(lead));
  std::move(chosen.messages.begin(), chosen.messages.begin() + static_cast<std::ptrdiff_t>(count),
            std::back_inserter(messages));
  keys.insert(keys.end(), chosen.keys.begin(), chosen.keys.begin() + static_cast<std::ptrdiff_t>(count));
  std::move(lead_end, turn.messages.end(), std::back_inserter(messages));
  keys.insert(keys.end(), turn.keys.begin() + static_cast<std::ptrdiff_t>(lead), turn.keys.end());
  turn.messages = std::move(messages);
  turn.keys = std::move(keys);
  chosen.loan = std::make_shared<FiberMutex>();
  chosen.loan->lock();  // (a new lock: never waits)
  turn.borrowed = {chosen.serial, lead, count};
}

void ResponseChain::take_back(ChatTurn& turn) {
  if (turn.borrowed.line == 0) return;
  const ChatTurn::BorrowedLine borrowed = std::exchange(turn.borrowed, {});
  const size_t i = find(borrowed.line);
  if (i == lines_.size()) return;  // cleared meanwhile (the session ended)
  Line& line = lines_[i];
  const auto from = turn.messages.begin() + static_cast<std::ptrdiff_t>(borrowed.at);
  std::move(from, from + static_cast<std::ptrdiff_t>(borrowed.count), line.messages.begin());
  end_loan(line.loan);
}

void ResponseChain::record(const std::string& id, size_t lead, ChatTurn& turn, const AssistantReply& reply) {
  lead = std::min(lead, turn.messages.size());
  const ChatTurn::BorrowedLine borrowed = std::exchange(turn.borrowed, {});
  const size_t lent = borrowed.line != 0 ? find(borrowed.line) : lines_.size();
  if (lent < lines_.size()) {
    // A chained call: its line through its point, then its input, all in the turn (the line's own messages
    // moved there by continue_from).
    Line& line = use(lent);
    end_loan(line.loan);
    line.drop_points_past(borrowed.count);
    line.messages.clear();
    line.keys.clear();
    line.ends.clear();
    for (size_t i = lead; i < turn.messages.size(); ++i) line.push(std::move(turn.messages[i]), turn.keys[i]);
  } else {
    for (const Line& line : lines_) {  // a retry answered again: nothing new
      if (!line.points.empty() && line.points.back().id == id) return;
    }
    fill_keys(turn);
    // A stateless call: the line it shares its first two messages with (or its one), whose messages it
    // repeats stay and the rest of its own are copied; else a new line.
    const size_t own = turn.messages.size() - lead;
    const auto common = [&](const Line& line) {
      size_t same = 0;
      while (same < own && same < line.keys.size() && line.keys[same] == turn.keys[lead + same]) ++same;
      return same;
    };
    size_t chosen = lines_.size(), same = 0;
    for (size_t l = lines_.size(); l-- > 0;) {
      const size_t n = common(lines_[l]);
      if (n > 0 && n >= std::min<size_t>(2, lines_[l].keys.size())) {
        chosen = l;
        same = n;
        break;
      }
    }
    if (chosen == lines_.size() || lines_[chosen].loan) {  // (a lent line is another call's to change)
      new_line();
      same = 0;
    } else {
      use(chosen);
    }
    Line& line = lines_.back();
    line.cut(same);
    for (size_t i = lead + same; i < turn.messages.size(); ++i) line.push(turn.messages[i], turn.keys[i]);
  }
  Line& line = lines_.back();
  line.push(Message{MessageRole::kAssistant, reply.content, reply.tool_calls, {}}, reply_key(reply));
  if (line.bytes() > kMaxBytes) {
    dropped_ = "the conversation through response " + quote(id) + " passed " +
               std::to_string(kMaxBytes >> 20) +
               " MiB, past which a session keeps none; send the whole conversation as input";
    lines_.pop_back();
    return;
  }
  dropped_.clear();
  line.points.push_back(Point{id, line.messages.size()});
  // Past the bound with the others: the least recently used others go.
  while (bytes() > kMaxBytes && drop_least_recent(true)) {
  }
}

void ResponseChain::clear() {
  for (Line& line : lines_) {
    if (line.loan) end_loan(line.loan);  // (its borrower's take_back finds no line: nothing happens)
  }
  lines_ = {};
  dropped_.clear();
}

}  // namespace crl::server::gateway
