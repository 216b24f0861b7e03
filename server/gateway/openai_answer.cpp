#include "server/gateway/openai_answer.h"

#include <map>

#include "engine/json_escape.h"
#include "engine/json_text.h"
#include "engine/sse.h"
#include "server/gateway/answer_writer.h"
#include "wire/utf8.h"

namespace crl::server::gateway {

using json = nlohmann::json;

namespace {

// The answers are written by hand (answer_writer.h): these are their pieces.

// `key` then the ids as a JSON list.
void put_ids(std::string& out, std::string_view key, std::span<const TokenId> ids) {
  out += key;
  out += '[';
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    append_json_int(out, ids[i]);
  }
  out += ']';
}

// "prompt_token_ids":[..] from the text the session kept (Completion::prompt_ids), then a ',' (a chat
// answer's top level, before "usage") or after one (a completions choice, after "logprobs").
void put_prompt_ids(std::string& out, const Completion& c, bool top_level = true) {
  if (!top_level) out += ',';
  out += "\"prompt_token_ids\":";
  out += c.prompt_ids.empty() ? std::string_view("[]") : std::string_view(c.prompt_ids);
  if (top_level) out += ',';
}

void put_usage(std::string& out, const Completion& c) {
  out += "\"usage\":{\"completion_tokens\":";
  append_json_int(out, c.completion_tokens);
  out += ",\"prompt_tokens\":";
  append_json_int(out, c.prompt_tokens);
  out += ",\"prompt_tokens_details\":{\"cached_tokens\":";
  append_json_int(out, c.cached_tokens);
  out += "},\"total_tokens\":";
  append_json_int(out, c.prompt_tokens + c.completion_tokens);
  out += '}';
}

// "created":N,"id":ID,"model":MODEL,"object":OBJECT,
void put_header(std::string& out, const Completion& c, const std::string& model, std::string_view object) {
  out += "\"created\":";
  append_json_int(out, c.created);
  out += ",\"id\":";
  put_string(out, c.id);
  out += ",\"model\":";
  put_string(out, model);
  out += ",\"object\":";
  put_string(out, object);
  out += ',';
}

}  // namespace

std::optional<TokenLogprobs> token_logprobs(const Completion& c, LogprobsAsk ask,
                                            const Tokenizer& tokenizer) {
  if (!ask.on) return std::nullopt;
  TokenLogprobs out;
  out.tokens.reserve(c.ids.size());
  for (const TokenId id : c.ids) {
    out.tokens.push_back(ask.token_ids ? "token_id:" + std::to_string(id)
                                       : tokenizer.decode(std::span<const TokenId>(&id, 1)));
  }
  out.logprobs = c.logprobs;
  out.top.resize(c.top.size());
  for (size_t i = 0; i < c.top.size(); ++i) {
    for (const llm::TopLogprob& top : c.top[i]) {
      std::string token;
      if (top.id >= 0 && ask.token_ids)
        token = "token_id:" + std::to_string(top.id);
      else if (top.id >= 0)
        token = tokenizer.decode(std::span<const TokenId>(&top.id, 1));
      else
        token = top.text;  // the OpenAI API's text: its id is unknown
      out.top[i].push_back(Alternative{std::move(token), top.logprob});
    }
  }
  return out;
}

namespace {

// {"bytes":[..],"logprob":X,"token":T (without the closing brace; `bytes` false: without "bytes"): one
// token of a logprobs list.
void put_token(std::string& out, const std::string& token, float logprob, bool bytes) {
  out += '{';
  if (bytes) {
    out += "\"bytes\":[";
    for (size_t b = 0; b < token.size(); ++b) {
      if (b) out += ',';
      append_json_int(out, static_cast<unsigned char>(token[b]));
    }
    out += "],";
  }
  out += "\"logprob\":";
  put_logprob(out, logprob);
  out += ",\"token\":";
  put_string(out, token);
}

}  // namespace

void put_token_logprobs(std::string& out, const TokenLogprobs& logprobs, bool bytes) {
  out += '[';
  for (size_t i = 0; i < logprobs.tokens.size(); ++i) {
    if (i) out += ',';
    put_token(out, logprobs.tokens[i], logprobs.logprobs[i], bytes);
    out += ",\"top_logprobs\":[";
    if (i < logprobs.top.size()) {
      for (size_t k = 0; k < logprobs.top[i].size(); ++k) {
        if (k) out += ',';
        put_token(out, logprobs.top[i][k].token, logprobs.top[i][k].logprob, bytes);
        out += '}';
      }
    }
    out += "]}";
  }
  out += ']';
}

namespace {

// Chat's logprobs: null, or {"content":[..]} (put_token_logprobs' list).
void put_chat_logprobs(std::string& out, const TokenLogprobs* logprobs) {
  if (!logprobs) {
    out += "null";
    return;
  }
  out += "{\"content\":";
  put_token_logprobs(out, *logprobs, true);
  out += '}';
}

// Characters of a token as written (an ill-formed sequence is one U+FFFD): Python's len() of the string.
int64_t written_characters(const std::string& token) {
  const auto count = [](std::string_view text) {
    int64_t n = 0;
    for (const char ch : text) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
    return n;
  };
  return wire::is_valid_utf8(token) ? count(token) : count(wire::valid_utf8(token));
}

// The completions' logprobs: null, or {"text_offset":[..],"token_logprobs":[..],"tokens":[..],
// "top_logprobs":[{T:X},..]} (the sampled token alone in each top_logprobs entry, as for `logprobs: 0`).
void put_text_logprobs(std::string& out, const TokenLogprobs* logprobs) {
  if (!logprobs) {
    out += "null";
    return;
  }
  const size_t n = logprobs->tokens.size();
  out += "{\"text_offset\":[";
  int64_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ',';
    append_json_int(out, offset);
    offset += written_characters(logprobs->tokens[i]);
  }
  out += "],\"token_logprobs\":[";
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ',';
    put_logprob(out, logprobs->logprobs[i]);
  }
  out += "],\"tokens\":[";
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ',';
    put_string(out, logprobs->tokens[i]);
  }
  out += "],\"top_logprobs\":[";
  std::map<std::string_view, float>
      top;  // sorted and one entry per text, as nlohmann and Python dicts have it
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ',';
    top.clear();
    top.emplace(logprobs->tokens[i], logprobs->logprobs[i]);  // the sampled token, always there
    if (i < logprobs->top.size()) {
      for (const Alternative& alternative : logprobs->top[i])
        top.emplace(alternative.token, alternative.logprob);
    }
    out += '{';
    bool first = true;
    for (const auto& [token, logprob] : top) {
      if (!first) out += ',';
      first = false;
      put_string(out, token);
      out += ':';
      put_logprob(out, logprob);
    }
    out += '}';
  }
  out += "]}";
}

// A whole answer's start, up to its one choice's "logprobs": value (the keys in nlohmann's sorted order).
std::string open_choice(const Completion& c, const std::string& model) {
  std::string out;
  out.reserve(256 + c.reply.content.size() + c.id.size() + model.size());
  out += "{\"choices\":[{\"finish_reason\":";
  put_string(out, c.finish_reason);
  out += ",\"index\":0,\"logprobs\":";
  return out;
}

}  // namespace

std::string chat_completion_json(const Completion& c, const std::string& model, const AnswerExtras& extras) {
  std::string out = open_choice(c, model);
  put_chat_logprobs(out, extras.logprobs);
  out += ",\"message\":{\"content\":";
  if (!c.reply.tool_calls.empty() && c.reply.content.empty())
    out += "null";
  else
    put_string(out, c.reply.content);
  if (!c.reply.reasoning.empty()) {
    out += ",\"reasoning_content\":";
    put_string(out, c.reply.reasoning);
  }
  out += ",\"role\":\"assistant\"";
  if (!c.reply.tool_calls.empty()) {
    out += ",\"tool_calls\":[";
    for (size_t i = 0; i < c.reply.tool_calls.size(); ++i) {
      const ToolCall& call = c.reply.tool_calls[i];
      if (i) out += ',';
      out += "{\"function\":{\"arguments\":";
      put_string(out, call.arguments);
      out += ",\"name\":";
      put_string(out, call.name);
      out += "},\"id\":";
      put_string(out, call.id);
      out += ",\"type\":\"function\"}";
    }
    out += ']';
  }
  out += '}';
  if (extras.token_ids) put_ids(out, ",\"token_ids\":", c.ids);
  out += "}],";
  put_header(out, c, model, "chat.completion");
  if (extras.token_ids) put_prompt_ids(out, c);
  put_usage(out, c);
  out += '}';
  return out;
}

namespace {

// One chunk of a stream: data: {"choices":[{CHOICE}],"created":..,"id":..,"model":..,"object":..[,"usage":
// null]} (the choice's members are written by `choice`, sorted as the rest).
// With `prompt_ids`, the chunk also carries "prompt_token_ids" (a chat stream's first chunk).
template <class Choice>
void put_chunk(std::string& out, const Completion& c, const std::string& model, std::string_view object,
               bool include_usage, Choice choice, bool prompt_ids = false) {
  out += "data: {\"choices\":[{";
  choice();
  out += "}],";
  put_header(out, c, model, object);
  if (prompt_ids) put_prompt_ids(out, c);
  if (include_usage)
    out += "\"usage\":null";
  else
    out.pop_back();  // the header's ','
  out += "}\n\n";
}

// The usage chunk that ends a stream when asked: no choices, the usage.
void put_usage_chunk(std::string& out, const Completion& c, const std::string& model,
                     std::string_view object) {
  out += "data: {\"choices\":[],";
  put_header(out, c, model, object);
  put_usage(out, c);
  out += "}\n\n";
}

}  // namespace

namespace {
constexpr std::string_view kChatChunk = "chat.completion.chunk";

// A chat stream's first chunk: the role, no text.
void put_role_chunk(std::string& out, const Completion& c, const std::string& model, bool include_usage,
                    bool prompt_ids) {
  put_chunk(
      out, c, model, kChatChunk, include_usage,
      [&] {
        out += "\"delta\":{\"content\":\"\",\"role\":\"assistant\"}";
        out += ",\"finish_reason\":null,\"index\":0,\"logprobs\":null";
      },
      prompt_ids);
}

// A chat chunk of text: `key` is reasoning_content or content; `carried` writes the logprobs' value (and
// what rides with it).
template <typename Carried>
void put_text_chunk(std::string& out, const Completion& c, const std::string& model, bool include_usage,
                    std::string_view key, std::string_view text, Carried carried) {
  if (text.empty()) return;
  put_chunk(out, c, model, kChatChunk, include_usage, [&] {
    out += "\"delta\":{\"";
    out += key;
    out += "\":";
    put_string(out, text);
    out += "},\"finish_reason\":null,\"index\":0,\"logprobs\":";
    carried();
  });
}
}  // namespace

void chat_completion_delta(std::string& out, const Completion& header, const std::string& model,
                           bool include_usage, bool open, std::string_view reasoning,
                           std::string_view content) {
  if (open) put_role_chunk(out, header, model, include_usage, false);
  const auto none = [&] { out += "null"; };
  put_text_chunk(out, header, model, include_usage, "reasoning_content", reasoning, none);
  put_text_chunk(out, header, model, include_usage, "content", content, none);
}

std::string chat_completion_sse(const Completion& c, const std::string& model, bool include_usage,
                                const AnswerExtras& extras, const StreamShown& shown) {
  // By hand (answer_writer.h), as chat_completion_json.
  std::string out;
  out.reserve(1024 + 2 * c.reply.content.size());
  // The log-prob entries and the sampled ids ride on the first chunk with sampled text (openai_codec.h).
  bool pending = true;
  const auto carried = [&] {
    put_chat_logprobs(out, pending ? extras.logprobs : nullptr);
    if (pending && extras.token_ids) put_ids(out, ",\"token_ids\":", c.ids);
    pending = false;
  };
  if (!shown.opened) put_role_chunk(out, c, model, include_usage, extras.token_ids);
  // The reasoning, then the content: what the stream has not shown yet of each (all of it when nothing
  // was shown live).
  put_text_chunk(out, c, model, include_usage, "reasoning_content",
                 rest_of(c.reply.reasoning, shown.reasoning), carried);
  put_text_chunk(out, c, model, include_usage, "content", rest_of(c.reply.content, shown.content), carried);
  for (size_t i = 0; i < c.reply.tool_calls.size(); ++i) {
    const ToolCall& call = c.reply.tool_calls[i];
    put_chunk(out, c, model, kChatChunk, include_usage, [&] {
      out += "\"delta\":{\"tool_calls\":[{\"function\":{\"arguments\":";
      put_string(out, call.arguments);
      out += ",\"name\":";
      put_string(out, call.name);
      out += "},\"id\":";
      put_string(out, call.id);
      out += ",\"index\":";
      append_json_int(out, static_cast<int64_t>(i));
      out += ",\"type\":\"function\"}]}";
      out += ",\"finish_reason\":null,\"index\":0,\"logprobs\":";
      carried();
    });
  }
  put_chunk(out, c, model, kChatChunk, include_usage, [&] {
    out += "\"delta\":{},\"finish_reason\":";
    put_string(out, c.finish_reason);
    out += ",\"index\":0,\"logprobs\":";
    carried();
  });
  if (include_usage) put_usage_chunk(out, c, model, kChatChunk);
  append_sse_data(out, "[DONE]");
  return out;
}

std::string text_completion_json(const Completion& c, const std::string& model, const AnswerExtras& extras) {
  std::string out = open_choice(c, model);
  put_text_logprobs(out, extras.logprobs);
  if (extras.token_ids) put_prompt_ids(out, c, false);
  out += ",\"text\":";
  put_string(out, c.reply.content);
  if (extras.token_ids) put_ids(out, ",\"token_ids\":", c.ids);
  out += "}],";
  put_header(out, c, model, "text_completion");
  put_usage(out, c);
  out += '}';
  return out;
}

void text_completion_delta(std::string& out, const Completion& header, const std::string& model,
                           bool include_usage, std::string_view text) {
  if (text.empty()) return;
  put_chunk(out, header, model, "text_completion", include_usage, [&] {
    out += "\"finish_reason\":null,\"index\":0,\"logprobs\":null,\"text\":";
    put_string(out, text);
  });
}

std::string text_completion_sse(const Completion& c, const std::string& model, bool include_usage,
                                const AnswerExtras& extras, const StreamShown& shown) {
  // By hand (answer_writer.h), as text_completion_json; the first chunk (the text's, else the finish chunk)
  // carries the log-prob entries and the ids.
  std::string out;
  out.reserve(768 + 2 * c.reply.content.size());
  constexpr std::string_view kObject = "text_completion";
  bool first = true;
  const auto text = [&](std::string_view text) {
    out += ",\"index\":0,\"logprobs\":";
    put_text_logprobs(out, first ? extras.logprobs : nullptr);
    if (first && extras.token_ids) put_prompt_ids(out, c, false);
    out += ",\"text\":";
    put_string(out, text);
    if (first && extras.token_ids) put_ids(out, ",\"token_ids\":", c.ids);
    first = false;
  };
  if (const std::string_view rest = rest_of(c.reply.content, shown.content); !rest.empty()) {
    put_chunk(out, c, model, kObject, include_usage, [&] {
      out += "\"finish_reason\":null";
      text(rest);
    });
  }
  put_chunk(out, c, model, kObject, include_usage, [&] {
    out += "\"finish_reason\":";
    put_string(out, c.finish_reason);
    text("");
  });
  if (include_usage) put_usage_chunk(out, c, model, kObject);
  append_sse_data(out, "[DONE]");
  return out;
}

std::string openai_error_json(const GatewayError& e) {
  const json out = {{"error",
                     {{"message", e.what()},
                      {"type", e.type()},
                      {"param", e.param().empty() ? json(nullptr) : json(e.param())},
                      {"code", e.code()}}}};
  return json_text(out);
}

}  // namespace crl::server::gateway
