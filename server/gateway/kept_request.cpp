#include "server/gateway/kept_request.h"

#include <cstring>

namespace crl::server::gateway {

namespace {
bool same_prefix(std::string_view a, std::string_view b, size_t n) {
  return a.size() >= n && b.size() >= n && std::memcmp(a.data(), b.data(), n) == 0;
}

// The middle's document (kept_request.h, step 1): its text before the middle, and the array's '[' in it.
constexpr std::string_view kMiddleOpen = "{\"m\":[0", kMiddleClose = "]}";
constexpr size_t kMiddleList = 5;
}  // namespace

void MessagesLayout::add(JsonView element, const char* text, size_t messages_so_far) {
  const std::string_view raw = element.raw();
  ends.push_back(static_cast<uint32_t>(raw.data() + raw.size() - text));
  produced.push_back(static_cast<uint32_t>(messages_so_far));
}

KeptRequest::Repeat KeptRequest::repeated(std::string_view body, BodyApi api) const {
  const std::vector<uint32_t>& ends = layout_.ends;
  if (!valid_ || lent_ || api != api_ || ends.empty()) return {};
  // The usual call repeats every kept element: one comparison. Otherwise the largest count whose text is a
  // common prefix (a prefix that matches makes every shorter one match: a binary search).
  if (same_prefix(body, body_, ends.back())) return {ends.size(), layout_.produced.back(), ends.back()};
  size_t lo = 0, hi = ends.size() - 1;  // lo elements repeat; more than hi do not
  while (lo < hi) {
    const size_t mid = lo + (hi - lo + 1) / 2;
    if (same_prefix(body, body_, ends[mid - 1]))
      lo = mid;
    else
      hi = mid - 1;
  }
  // The element after the repeat may have added to the last repeated message (kept_request.h): the repeat
  // then ends before the element that made that message.
  const std::vector<uint32_t>& produced = layout_.produced;
  if (lo > 0 && produced[lo] == produced[lo - 1]) {
    const uint32_t count = produced[lo - 1];
    while (lo > 0 && produced[lo - 1] == count) --lo;
  }
  if (lo == 0) return {};
  return {lo, produced[lo - 1], ends[lo - 1]};
}

bool KeptRequest::same_conversation(std::string_view body) const {
  const std::vector<uint32_t>& ends = layout_.ends;
  if (!valid_ || ends.empty()) return false;
  // The first and the last bytes of those elements only (a task of 8k tokens is compared by the decode that
  // follows anyway): two conversations differ in their system prompt or their task, near one end or the
  // other. A wrong pick costs a whole decode, never a wrong one (repeated() compares every byte).
  constexpr size_t kEnd = 128;
  const size_t n = ends[std::min<size_t>(2, ends.size()) - 1];
  if (body.size() < n) return false;
  const size_t head = std::min(n, kEnd), tail = std::min(n, kEnd);
  return std::memcmp(body.data(), body_.data(), head) == 0 &&
         std::memcmp(body.data() + n - tail, body_.data() + n - tail, tail) == 0;
}

std::optional<CallRequest> KeptRequest::decode_middle(std::string_view body, const Repeat& repeat,
                                                      ElementDecoder element) {
  // The tools lent with the answer must be the kept body's (a refused body may have decoded others since).
  if (!kept_tools_ok_) return std::nullopt;
  const std::string_view tail = std::string_view(body_).substr(layout_.ends.back());
  if (body.size() < repeat.rest_at + tail.size() ||
      std::memcmp(body.data() + body.size() - tail.size(), tail.data(), tail.size()) != 0)
    return std::nullopt;
  const std::string_view middle = body.substr(repeat.rest_at, body.size() - tail.size() - repeat.rest_at);
  std::string document;
  document.reserve(kMiddleOpen.size() + middle.size() + kMiddleClose.size());
  document.append(kMiddleOpen).append(middle).append(kMiddleClose);
  std::optional<JsonDocument> doc;
  try {
    doc = JsonDocument::parse(document, "the request body");
  } catch (const JsonError&) {
    return std::nullopt;
  }
  // The document must be the one array the text around the middle opens and closes (so the root has no
  // other key): a middle such as `,1],"k":[2` reads as valid JSON with a second key, and is not a list of
  // elements.
  const JsonView root = doc->root(), list = root.find("m");
  if (!root.is_object() || !list.is_array() || list.raw().data() != document.data() + kMiddleList ||
      list.raw().size() != document.size() - kMiddleClose.size() + 1 - kMiddleList)
    return std::nullopt;
  std::vector<Message> fresh;
  std::vector<uint32_t> ends, counts;
  fresh.reserve(list.size() - 1);
  const Message* kept_before = repeat.messages > 0 ? &messages_[repeat.messages - 1] : nullptr;
  size_t i = 0;
  for (const JsonView item : list) {
    if (i++ == 0) continue;  // the placeholder
    const size_t before = fresh.size();
    try {
      // An element it accepts is an object: raw() is its text.
      element(item, repeat.elements + i - 2, fresh.empty() ? kept_before : nullptr, fresh);
    } catch (const NeedsEarlierMessages&) {
      return std::nullopt;
    }
    counts.push_back(static_cast<uint32_t>(fresh.size() - before));
    const std::string_view raw = item.raw();
    ends.push_back(static_cast<uint32_t>(repeat.rest_at +
                                         (raw.data() + raw.size() - (document.data() + kMiddleOpen.size()))));
  }
  std::vector<uint64_t> keys;
  keys.reserve(fresh.size());
  for (const Message& m : fresh) keys.push_back(message_key(m));
  CallRequest out = fields_;
  splice(body, repeat, ends, counts, fresh, keys);
  last_read_middle_ = true;
  return out;
}

std::string KeptRequest::rest_document(std::string_view body, const Repeat& repeat) const {
  std::string document;
  document.reserve(layout_.list_open + 2 + (body.size() - repeat.rest_at));
  document.append(body.substr(0, layout_.list_open + 1));
  document += '0';
  document.append(body.substr(repeat.rest_at));
  return document;
}

void KeptRequest::keep_fields(const CallRequest& decoded) {
  fields_ = decoded;  // (its messages are moved out or were never there; tools are kept apart)
  fields_.turn.messages.clear();
  fields_.turn.keys.clear();
  fields_.turn.tools = nullptr;
  fields_.turn.tools_key.reset();
  kept_tools_ok_ = true;  // the tools seen last were this body's
  last_read_middle_ = false;
}

void KeptRequest::keep_whole(std::string_view body, BodyApi api, MessagesLayout layout,
                             CallRequest& decoded) {
  // Room for the session's next calls up front: growing by appends reallocated a block of KBs every few
  // turns, and each such allocation set off glibc's consolidation of the small blocks freed since.
  body_.reserve(body.size() + body.size() / 2 + 4096);
  body_.assign(body);
  api_ = api;
  layout_ = std::move(layout);
  messages_ = std::move(decoded.turn.messages);
  decoded.turn.messages.clear();
  const size_t room = 2 * messages_.size() + 64;
  messages_.reserve(room);
  keys_.clear();
  keys_.reserve(room);
  for (const Message& m : messages_) keys_.push_back(message_key(m));
  layout_.ends.reserve(room);
  layout_.produced.reserve(room);
  keep_fields(decoded);
  valid_ = true;
  lent_ = false;
  last_repeated_ = 0;
}

void KeptRequest::keep_rest(std::string_view body, const Repeat& repeat,
                            const std::vector<uint32_t>& new_ends, std::vector<Message> new_messages,
                            const std::vector<uint64_t>& new_keys, const CallRequest& decoded) {
  splice(body, repeat, new_ends, std::vector<uint32_t>(new_ends.size(), 1), new_messages, new_keys);
  keep_fields(decoded);
}

void KeptRequest::splice(std::string_view body, const Repeat& repeat, const std::vector<uint32_t>& new_ends,
                         const std::vector<uint32_t>& new_counts, std::vector<Message>& new_messages,
                         const std::vector<uint64_t>& new_keys) {
  // The kept text up to rest_at is body's own (that is what repeated() compared): only the rest is copied.
  body_.resize(repeat.rest_at);
  body_.append(body.substr(repeat.rest_at));
  layout_.ends.resize(repeat.elements);
  layout_.produced.resize(repeat.elements);
  size_t produced = repeat.messages;
  for (size_t k = 0; k < new_ends.size(); ++k) {
    layout_.ends.push_back(new_ends[k]);
    produced += new_counts[k];
    layout_.produced.push_back(static_cast<uint32_t>(produced));
  }
  messages_.resize(repeat.messages);
  for (Message& m : new_messages) messages_.push_back(std::move(m));
  keys_.resize(repeat.messages);
  keys_.insert(keys_.end(), new_keys.begin(), new_keys.end());
  valid_ = true;
  lent_ = false;
  last_repeated_ = repeat.messages;
}

void KeptRequest::see_tools(JsonView tools, ToolsDecoder decode) {
  has_tools_ = true;
  kept_tools_ok_ = false;  // until the body is kept
  const std::string_view text = tools.raw();
  if (tools_valid_ && tools_decoder_ == decode && text == tools_text_) return;
  tools_valid_ = false;
  tools_ = decode(tools);
  tools_key_ = tools_key(tools_);
  tools_text_.assign(text);
  tools_decoder_ = decode;
  tools_valid_ = true;
  ++tools_decoded_;
}

std::optional<JsonKnownMember> KeptRequest::known_tools(ToolsDecoder decode) const {
  if (!tools_valid_ || tools_decoder_ != decode) return std::nullopt;
  return JsonKnownMember{"tools", tools_text_};
}

void KeptRequest::see_no_tools() {
  has_tools_ = false;
  kept_tools_ok_ = false;  // until the body is kept
}

void KeptRequest::keep_tools_only(ChatTurn& turn) {
  const bool tools = has_tools_;
  clear_body();
  has_tools_ = tools;
  lent_ = tools_only_ = true;
  lend_tools(turn);
  turn.keys.resize(turn.messages.size());  // (a few messages: a chained call's additions, or one user turn)
  for (size_t i = 0; i < turn.messages.size(); ++i) turn.keys[i] = message_key(turn.messages[i]);
}

void KeptRequest::lend(ChatTurn& turn) {
  lent_ = true;
  tools_only_ = false;
  turn.messages = std::move(messages_);
  turn.keys = keys_;
  lend_tools(turn);
}

void KeptRequest::lend_tools(ChatTurn& turn) {
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
  if (tools_only_) {
    tools_only_ = false;
    if (tools_text_.size() > kMaxKeptBytes) clear();  // as a whole body over the limit is not kept
    return;
  }
  if (turn.messages.size() != message_count() ||
      body_.size() > kMaxKeptBytes) {  // not what was lent, or too large
    clear();
    return;
  }
  messages_ = std::move(turn.messages);
}

void KeptRequest::clear_body() {
  valid_ = false;
  lent_ = tools_only_ = false;
  body_.clear();
  body_.shrink_to_fit();
  layout_ = {};
  messages_ = {};
  keys_ = {};
  fields_ = {};
  kept_tools_ok_ = false;
}

void KeptRequest::clear() {
  clear_body();
  has_tools_ = tools_valid_ = false;
  tools_decoder_ = nullptr;
  tools_text_.clear();
  tools_text_.shrink_to_fit();
  tools_ = nullptr;
}

}  // namespace crl::server::gateway
