#include "server/gateway/kept_request.h"

#include <cstring>

namespace crl::server::gateway {

namespace {
bool same_prefix(std::string_view a, std::string_view b, size_t n) {
  return a.size() >= n && b.size() >= n && std::memcmp(a.data(), b.data(), n) == 0;
}
}  // namespace

KeptRequest::Repeat KeptRequest::repeated(std::string_view body) const {
  if (!valid_ || lent_ || ends_.empty()) return {};
  // The usual call repeats every kept message: one comparison. Otherwise the largest count whose text is a
  // common prefix (a prefix that matches makes every shorter one match: a binary search).
  if (same_prefix(body, body_, ends_.back())) return {ends_.size(), ends_.back()};
  size_t lo = 0, hi = ends_.size() - 1;  // lo messages repeat; more than hi do not
  while (lo < hi) {
    const size_t mid = lo + (hi - lo + 1) / 2;
    if (same_prefix(body, body_, ends_[mid - 1]))
      lo = mid;
    else
      hi = mid - 1;
  }
  if (lo == 0) return {};
  return {lo, ends_[lo - 1]};
}

std::string KeptRequest::rest_document(std::string_view body, const Repeat& repeat) const {
  std::string document;
  document.reserve(messages_open_ + 2 + (body.size() - repeat.rest_at));
  document.append(body.substr(0, messages_open_ + 1));
  document += '0';
  document.append(body.substr(repeat.rest_at));
  return document;
}

void KeptRequest::keep_whole(std::string_view body, size_t messages_open, std::vector<uint32_t> ends,
                             std::vector<Message> messages, std::vector<uint64_t> keys) {
  body_.assign(body);
  messages_open_ = messages_open;
  ends_ = std::move(ends);
  messages_ = std::move(messages);
  keys_ = std::move(keys);
  valid_ = true;
  lent_ = false;
  last_repeated_ = 0;
}

void KeptRequest::keep_rest(std::string_view body, const Repeat& repeat,
                            const std::vector<uint32_t>& new_ends, std::vector<Message> new_messages,
                            const std::vector<uint64_t>& new_keys) {
  // The kept text up to rest_at is body's own (that is what repeated() compared): only the rest is copied.
  body_.resize(repeat.rest_at);
  body_.append(body.substr(repeat.rest_at));
  ends_.resize(repeat.messages);
  ends_.insert(ends_.end(), new_ends.begin(), new_ends.end());
  messages_.resize(repeat.messages);
  for (Message& m : new_messages) messages_.push_back(std::move(m));
  keys_.resize(repeat.messages);
  keys_.insert(keys_.end(), new_keys.begin(), new_keys.end());
  valid_ = true;
  lent_ = false;
  last_repeated_ = repeat.messages;
}

void KeptRequest::see_tools(JsonView tools) {
  has_tools_ = true;
  const std::string_view text = tools.raw();
  if (tools_valid_ && text == tools_text_) return;
  tools_ = tools.to_ordered_json();
  tools_key_ = tools_key(tools_);
  tools_text_.assign(text);
  tools_valid_ = true;
  ++tools_decoded_;
}

void KeptRequest::lend(ChatTurn& turn) {
  lent_ = true;
  turn.messages = std::move(messages_);
  turn.keys = keys_;
  if (has_tools_) {
    turn.tools = std::move(tools_);
    turn.tools_key = tools_key_;
    tools_valid_ = false;  // until it comes back
  } else {
    turn.tools = nullptr;
    turn.tools_key = 0;
  }
}

void KeptRequest::give_back(ChatTurn& turn) {
  if (!lent_) return;
  lent_ = false;
  if (has_tools_) {
    tools_ = std::move(turn.tools);
    tools_valid_ = true;
  }
  if (turn.messages.size() != ends_.size() ||
      body_.size() > kMaxKeptBytes) {  // not what was lent, or too large
    clear();
    return;
  }
  messages_ = std::move(turn.messages);
}

void KeptRequest::clear() {
  valid_ = false;
  lent_ = false;
  body_.clear();
  body_.shrink_to_fit();
  ends_ = {};
  messages_ = {};
  keys_ = {};
  has_tools_ = tools_valid_ = false;
  tools_text_.clear();
  tools_text_.shrink_to_fit();
  tools_ = nullptr;
}

}  // namespace crl::server::gateway
