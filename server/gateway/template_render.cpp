#include "server/gateway/template_render.h"

#include <algorithm>
#include <set>
#include <utility>

#include "engine/error.h"
#include "server/gateway/gateway_error.h"

namespace crl::server::gateway {

using nlohmann::ordered_json;  // keys in the request's order, as Python's json keeps them

namespace {

// U+E000 and U+E001 (private use) in UTF-8: a sentinel is kOpen DIGITS kClose.
constexpr std::string_view kOpen = "\xEE\x80\x80", kClose = "\xEE\x80\x81";
// The text of the placeholder user turn of next() (private-use characters: never a harness's text).
constexpr std::string_view kPlaceholder =
    "\xEE\x80\x82"
    "crl-placeholder"
    "\xEE\x80\x82";

std::string_view role_name(MessageRole role) {
  switch (role) {
    case MessageRole::kSystem:
      return "system";
    case MessageRole::kUser:
      return "user";
    case MessageRole::kAssistant:
      return "assistant";
    case MessageRole::kTool:
      return "tool";
  }
  return "user";
}

// The special-token strings in a template text: "<...>" or "[...]" runs the tokenizer knows as one token.
void collect_specials(const Tokenizer& tokenizer, std::string_view text, std::set<std::string>& out) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '<' && text[i] != '[') continue;
    const char close = text[i] == '<' ? '>' : ']';
    for (size_t j = i + 1; j < text.size() && j < i + 128; ++j) {
      if (text[j] != close) continue;
      const std::string_view candidate = text.substr(i, j - i + 1);
      if (tokenizer.special_token(candidate)) {
        out.emplace(candidate);
        break;
      }
    }
  }
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

GatewayError template_error(const std::string& message) {
  return GatewayError(400, "invalid_request_error", "template_error", message, "messages");
}

}  // namespace

ordered_json template_message(const Message& message) {
  ordered_json out = {{"role", role_name(message.role)}, {"content", message.content}};
  if (!message.tool_calls.empty()) {
    ordered_json calls = ordered_json::array();
    for (const ToolCall& call : message.tool_calls) {
      ordered_json arguments = ordered_json::parse(call.arguments, nullptr, false);
      if (arguments.is_discarded()) arguments = call.arguments;
      calls.push_back({{"id", call.id},
                       {"type", "function"},
                       {"function", {{"name", call.name}, {"arguments", arguments}}}});
    }
    out["tool_calls"] = std::move(calls);
  }
  if (!message.tool_call_id.empty()) out["tool_call_id"] = message.tool_call_id;
  return out;
}

TemplateRenderer::TemplateRenderer(std::shared_ptr<const Tokenizer> tokenizer, ChatTemplate chat,
                                   std::vector<std::string> also_closing,
                                   std::vector<std::string> also_guarded)
    : tokenizer_(std::move(tokenizer)), chat_(std::move(chat)) {
  closes_.push_back(chat_.end_of_turn + chat_.after_end_of_turn);
  for (const std::string& c : also_closing) closes_.push_back(c + chat_.after_end_of_turn);
  std::set<std::string> specials;
  for (const std::string* s : {&chat_.system_prefix, &chat_.system_suffix, &chat_.user_prefix,
                               &chat_.user_suffix, &chat_.tool_prefix, &chat_.tool_suffix,
                               &chat_.assistant_prefix, &chat_.end_of_turn, &chat_.after_end_of_turn})
    collect_specials(*tokenizer_, *s, specials);
  for (const std::string& g : also_guarded) collect_specials(*tokenizer_, g, specials);
  guarded_.assign(specials.begin(), specials.end());
  // The sentinel's own lead character is guarded too, so message text cannot write a sentinel.
  guarded_.emplace_back(kOpen);
  for (const std::string& g : guarded_) first_byte_[static_cast<unsigned char>(g.front())] = true;
}

void TemplateRenderer::guard_strings(ordered_json& value, std::vector<std::string>& originals) const {
  const auto guard = [&](std::string& text) {
    std::string out;
    size_t from = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      if (!first_byte_[static_cast<unsigned char>(text[i])]) continue;
      for (const std::string& g : guarded_) {
        if (text.compare(i, g.size(), g) != 0) continue;
        out.append(text, from, i - from);
        out += kOpen;
        out += std::to_string(originals.size());
        out += kClose;
        originals.push_back(g);
        i += g.size() - 1;
        from = i + 1;
        break;
      }
    }
    if (from == 0) return;  // nothing guarded: unchanged
    out.append(text, from, std::string::npos);
    text = std::move(out);
  };
  const auto walk = [&](auto&& self, ordered_json& item) -> void {
    if (item.is_string()) {
      guard(item.get_ref<std::string&>());
    } else if (item.is_array() || item.is_object()) {
      for (auto& inner : item) self(self, inner);
    }
  };
  walk(walk, value);
}

void TemplateRenderer::protect(ConvertedMessages& memo, std::span<const Message> messages,
                               const ordered_json& tools) const {
  if (!memo.converted_tools || memo.tools != tools) {
    const uint64_t cuts = memo.one_render_cuts;
    memo = ConvertedMessages{};  // the tools' sentinels are numbered first: everything again
    memo.one_render_cuts = cuts;
    memo.tools = tools;
    memo.converted_tools = true;
    if (tools.is_array() && !tools.empty()) {
      ordered_json guarded = tools;
      guard_strings(guarded, memo.originals);
      memo.tool_values = jinja::from_json(guarded);
    }
  }
  size_t same = 0;
  while (same < memo.messages.size() && same < messages.size() && memo.messages[same] == messages[same])
    ++same;
  if (same < memo.last_count) memo.last_render.clear();  // not a render of these messages any more
  if (same < memo.messages.size()) {  // the harness's list differs from here on (or is shorter)
    memo.originals.resize(memo.originals_before[same]);
    memo.messages.resize(same);
    memo.values.resize(same);
    memo.originals_before.resize(same);
  }
  for (size_t i = same; i < messages.size(); ++i) {
    memo.originals_before.push_back(memo.originals.size());
    ordered_json m = template_message(messages[i]);
    guard_strings(m, memo.originals);
    memo.values.push_back(jinja::from_json(m));
    memo.messages.push_back(messages[i]);
  }
}

std::string TemplateRenderer::render(const ConvertedMessages& memo, size_t count, bool placeholder,
                                     bool with_tools, bool generation_prompt, int64_t now_unix) const {
  jinja::List list(memo.values.begin(), memo.values.begin() + static_cast<std::ptrdiff_t>(count));
  if (placeholder) {
    jinja::Dict turn;
    turn.set("role", jinja::Value("user"));
    turn.set("content", jinja::Value(std::string(kPlaceholder)));
    list.push_back(jinja::Value(std::move(turn)));
  }
  ChatRenderRequest request;
  request.message_values = jinja::Value(std::move(list));
  if (with_tools) request.tool_values = memo.tool_values;
  request.add_generation_prompt = generation_prompt;
  request.now_unix = now_unix;
  try {
    return chat_.render(request);
  } catch (const Error& e) {
    throw template_error("the chat template " + quote(chat_.name) + " refused the messages: " + e.what());
  }
}

std::vector<TokenId> TemplateRenderer::encode(std::string_view text,
                                              const std::vector<std::string>& originals) const {
  std::vector<TextPiece> pieces;
  size_t from = 0;
  for (size_t at = text.find(kOpen); at != std::string_view::npos; at = text.find(kOpen, at + 1)) {
    size_t end = at + kOpen.size();
    size_t index = 0;
    bool digits = false;
    while (end < text.size() && text[end] >= '0' && text[end] <= '9' && index < originals.size()) {
      index = index * 10 + static_cast<size_t>(text[end] - '0');
      digits = true;
      ++end;
    }
    if (!digits || index >= originals.size() || text.compare(end, kClose.size(), kClose) != 0) continue;
    if (at > from) pieces.push_back(TextPiece{text.substr(from, at - from), true});
    pieces.push_back(TextPiece{originals[index], false});
    from = end + kClose.size();
    at = from - 1;
  }
  if (from < text.size()) pieces.push_back(TextPiece{text.substr(from), true});
  return tokenizer_->encode_pieces(pieces);
}

std::optional<std::string> TemplateRenderer::opening(const ConvertedMessages& memo, size_t count,
                                                     bool with_tools, int64_t now_unix) const {
  std::string text;
  try {
    text = render(memo, count, true, with_tools, false, now_unix);
  } catch (const GatewayError&) {
    return std::nullopt;
  }
  const size_t at = text.find(kPlaceholder);
  if (at == std::string::npos || text.find(kPlaceholder, at + 1) != std::string::npos) return std::nullopt;
  text.resize(at);
  return text;
}

FirstPrompt TemplateRenderer::first(std::span<const Message> messages, const ordered_json& tools,
                                    int64_t now_unix, std::vector<TokenId>& system,
                                    std::vector<TokenId>& rest, ConvertedMessages* memo) const {
  ConvertedMessages local;
  ConvertedMessages& m = memo ? *memo : local;
  protect(m, messages, tools);
  const bool has_tools = m.tool_values.is_list();
  const size_t leading = !messages.empty() && messages[0].role == MessageRole::kSystem ? 1 : 0;
  const std::string full = render(m, messages.size(), false, has_tools, true, now_unix);
  const std::optional<std::string_view> cut_body =
      before_generation_prompt(m, messages.size(), full, has_tools, now_unix);
  if (!cut_body) {
    throw template_error("the chat template " + quote(chat_.name) +
                         " does not end this conversation with its assistant header " +
                         quote(chat_.assistant_prefix) +
                         " (the gateway's window needs it, or a render without any generation prompt)");
  }
  const std::string_view body = *cut_body;
  const bool opens_turn = body.size() == full.size();
  // The system part: what the template writes for the leading system message alone (with the tools when
  // that is how the full render starts), kept by every rebuild.
  size_t cut = 0;
  bool opens_user_turn = false;
  if (leading == 1 && chat_.system_opens_user_turn) {
    // Gemma writes the system text at the start of the first user turn: the system part is that turn's
    // opening up to the user's own text, and the session's resume turn continues it (no header).
    const std::optional<std::string> s = opening(m, leading, has_tools, now_unix);
    if (s && !s->empty() && s->size() < body.size() && body.starts_with(*s)) {
      cut = s->size();
      opens_user_turn = true;
    }
  }
  for (const bool with_tools : {true, false}) {
    if (opens_user_turn) break;
    if (with_tools && !has_tools) continue;
    if (!with_tools && leading == 0) continue;
    std::string s;
    try {
      s = render(m, leading, false, with_tools, false, now_unix);
    } catch (const GatewayError&) {
      continue;  // e.g. Llama 3.1 puts the tools into the first user turn: none without one
    }
    if (!s.empty() && s.size() < body.size() && body.starts_with(s)) {
      cut = s.size();
      break;
    }
  }
  if (cut == 0 && leading == 0) {
    // No system message: what the template writes before the first user turn's header (Gemma's <bos>,
    // Llama's <|begin_of_text|>, a default system block) is kept by rebuilds as a system turn would be.
    const std::optional<std::string> s = opening(m, 0, has_tools, now_unix);
    if (s && s->size() > chat_.user_prefix.size() && ends_with(*s, chat_.user_prefix)) {
      const std::string_view preamble = std::string_view(*s).substr(0, s->size() - chat_.user_prefix.size());
      if (body.starts_with(preamble)) cut = preamble.size();
    }
  }
  system = encode(body.substr(0, cut), m.originals);
  rest = encode(body.substr(cut), m.originals);
  m.last_render = full;
  m.last_count = messages.size();
  return FirstPrompt{opens_user_turn, opens_turn};
}

std::optional<std::string_view> TemplateRenderer::before_generation_prompt(
    const ConvertedMessages& m, size_t count, std::string_view full, bool has_tools, int64_t now_unix) const {
  if (ends_with(full, chat_.assistant_prefix))
    return full.substr(0, full.size() - chat_.assistant_prefix.size());
  if (full == render(m, count, false, has_tools, false, now_unix)) return full;
  return std::nullopt;
}

std::optional<TurnsAfterAnswer> TemplateRenderer::next(std::span<const Message> messages, size_t answer,
                                                       const ordered_json& tools, int64_t now_unix,
                                                       ConvertedMessages* memo,
                                                       std::string_view answer_text) const {
  ConvertedMessages local;
  ConvertedMessages& m = memo ? *memo : local;
  protect(m, messages, tools);
  const bool has_tools = m.tool_values.is_list();
  const std::string last = std::exchange(m.last_render, std::string());
  std::string full = render(m, messages.size(), false, has_tools, true, now_unix);
  const std::optional<std::string_view> body =
      before_generation_prompt(m, messages.size(), full, has_tools, now_unix);
  if (!body) return std::nullopt;
  const bool opens_turn = body->size() == full.size();
  std::optional<std::vector<TokenId>> cut =
      cut_after_answer(m, *body, last, answer_text, answer, has_tools, now_unix);
  // Kept for the next call, whichever way this one cut: the next answer follows it (after the header, or
  // right after it when this render opened the turn), so the next call's one-render cut applies either way.
  m.last_render = std::move(full);
  m.last_count = messages.size();
  if (!cut) return std::nullopt;
  return TurnsAfterAnswer{std::move(*cut), opens_turn};
}

std::optional<std::vector<TokenId>> TemplateRenderer::cut_after_answer(
    ConvertedMessages& m, std::string_view body, const std::string& last, std::string_view answer_text,
    size_t answer, bool has_tools, int64_t now_unix) const {
  // One render: the last call's render (the window's text up to the answer, when nothing was compacted)
  // and the answer as sampled, closed, start this render: the cut is what follows.
  if (!last.empty() && m.last_count == answer && !answer_text.empty() &&
      body.size() >= last.size() + answer_text.size() && body.starts_with(last) &&
      body.substr(last.size()).starts_with(answer_text)) {
    ++m.one_render_cuts;
    return encode(body.substr(last.size() + answer_text.size()), m.originals);
  }
  const auto closed = [&](std::string_view render) {
    return std::any_of(closes_.begin(), closes_.end(),
                       [&](const std::string& c) { return ends_with(render, c); });
  };
  // The renders of shorter lists may be refused (a template that wants a user turn last): then no prefix.
  const auto try_render = [&](bool placeholder) -> std::optional<std::string> {
    try {
      return render(m, answer + 1, placeholder, has_tools, false, now_unix);
    } catch (const GatewayError&) {
      return std::nullopt;
    }
  };
  // The window so far ends with the answer's close: its text is the render of the list up to the answer,
  // when that render is a prefix of the full one ...
  const auto as_rendered = [&]() -> std::optional<std::string> {
    std::optional<std::string> before = try_render(false);
    if (!before || before->empty() || !(closed(*before) && body.starts_with(*before))) return std::nullopt;
    return before;
  };
  // ... or else the render with a user turn after the answer, without that turn (a template that writes
  // an answer differently once turns follow it).
  const auto with_placeholder = [&]() -> std::optional<std::string> {
    std::optional<std::string> rendered = try_render(true);
    if (!rendered) return std::nullopt;
    std::string with_turn = std::move(*rendered);
    const std::string turn = chat_.user_prefix + std::string(kPlaceholder) + chat_.user_suffix;
    if (!ends_with(with_turn, turn)) return std::nullopt;
    with_turn.resize(with_turn.size() - turn.size());
    if (!(closed(with_turn) && body.starts_with(with_turn))) return std::nullopt;
    return with_turn;
  };
  std::optional<std::string> before;
  if (rewrites_answers_.load(std::memory_order_relaxed)) {
    before = with_placeholder();
    if (!before) before = as_rendered();
  } else {
    before = as_rendered();
    if (!before) {
      before = with_placeholder();
      if (before) rewrites_answers_.store(true, std::memory_order_relaxed);
    }
  }
  if (!before) return std::nullopt;
  return encode(body.substr(before->size()), m.originals);
}

}  // namespace crl::server::gateway
