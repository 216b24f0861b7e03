// libFuzzer target for the gateway's request bodies (server/gateway/openai_codec.h, anthropic_codec.h,
// responses_codec.h) and a session's kept body (kept_request.h), which decodes only what a body adds to the
// last one.
//
// Input: one selector byte, then the bodies of one session's calls, separated by NUL bytes (which no valid
// JSON body holds raw). Bits 0-1 of the selector pick the API (chat completions, Anthropic messages,
// Responses; 3 is chat completions). Each body is decoded through the session's kept body and whole.
// Properties: nothing crashes; a decoder fails only with a GatewayError whose status is 400 or 413; the
// kept decoding gives exactly what the whole decoding gives (every message, the tools, the sampling fields,
// the stream flags, the model, the Responses chain fields), or exactly the same error (status, code, message,
// field); and the keys it lends are the messages' keys.
//
// Built by scripts/fuzz.sh (clang, -fsanitize=fuzzer,address,undefined; tests/fuzz/CMakeLists.txt) with
// CRL_LIBFUZZER defined; the gateway tests compile the same function without it and replay the seed corpus
// (tests/fuzz/corpus/gateway_body).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "server/gateway/anthropic_codec.h"
#include "server/gateway/openai_codec.h"
#include "server/gateway/responses_codec.h"

namespace crl::server::gateway {

namespace {

[[noreturn]] void fail(const std::string& what, std::string_view body) {
  std::fprintf(stderr, "gateway_body: %s\nbody: %.*s\n", what.c_str(),
               static_cast<int>(std::min<size_t>(body.size(), 4000)), body.data());
  std::abort();
}

// What a decode gave: the request, or the error's fields.
struct Outcome {
  std::optional<CallRequest> request;
  int status = 0;
  std::string code, message, param;
};

template <class Decode>
Outcome outcome_of(Decode decode, std::string_view body) {
  Outcome out;
  try {
    out.request = decode();
  } catch (const GatewayError& e) {
    if (e.status() != 400 && e.status() != 413)
      fail("a body refused with status " + std::to_string(e.status()), body);
    out.status = e.status();
    out.code = e.code();
    out.message = e.what();
    out.param = e.param();
  }
  return out;
}

// The first field in which two outcomes differ, or "" when they are the same.
std::string difference(const Outcome& a, const Outcome& b) {
  if (a.request.has_value() != b.request.has_value())
    return "one decoded and the other refused: " + a.message + " | " + b.message;
  if (!a.request) {
    if (a.status != b.status || a.code != b.code || a.message != b.message || a.param != b.param)
      return "different errors: " + a.code + " " + a.message + " (" + a.param + ") | " + b.code + " " +
             b.message + " (" + b.param + ")";
    return "";
  }
  const CallRequest &x = *a.request, &y = *b.request;
  if (x.turn.messages != y.turn.messages) return "messages";
  if (x.turn.tools != y.turn.tools) return "tools";
  if (x.turn.max_tokens != y.turn.max_tokens || x.turn.temperature != y.turn.temperature ||
      x.turn.top_p != y.turn.top_p || x.turn.top_k != y.turn.top_k)
    return "sampling fields";
  if (x.turn.stop != y.turn.stop) return "stop";
  if (x.turn.tool_choice != y.turn.tool_choice) return "tool_choice";
  if (x.turn.json_schema != y.turn.json_schema) return "response format";
  if (x.turn.template_kwargs != y.turn.template_kwargs) return "chat_template_kwargs";
  if (x.turn.top_logprobs != y.turn.top_logprobs || x.logprobs.on != y.logprobs.on ||
      x.logprobs.token_ids != y.logprobs.token_ids)
    return "logprobs";
  if (x.stream != y.stream || x.include_usage != y.include_usage) return "stream";
  if (x.show_reasoning != y.show_reasoning) return "show_reasoning";
  if (x.model != y.model) return "model";
  if (x.previous_response_id != y.previous_response_id || x.instruction_messages != y.instruction_messages)
    return "the Responses chain";
  return "";
}

}  // namespace

int fuzz_gateway_body(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int api = data[0] & 3;
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  KeptRequest kept;
  while (true) {
    const size_t cut = rest.find('\0');
    const std::string_view body = rest.substr(0, cut);
    const Outcome whole = outcome_of(
        [&] {
          if (api == 1) return parse_messages_request(body, false);
          if (api == 2) return parse_responses_request(body);
          return parse_chat_request(body);
        },
        body);
    Outcome incremental = outcome_of(
        [&] {
          if (api == 1) return parse_messages_request(body, kept);
          if (api == 2) return parse_responses_request(body, kept);
          return parse_chat_request(body, kept);
        },
        body);
    const std::string differs = difference(incremental, whole);
    if (!differs.empty()) fail("the kept body's decoding differs from the whole body's: " + differs, body);
    if (incremental.request) {
      ChatTurn& turn = incremental.request->turn;
      if (turn.keys.size() != turn.messages.size()) fail("keys lent for not every message", body);
      for (size_t i = 0; i < turn.keys.size(); ++i) {
        if (turn.keys[i] != message_key(turn.messages[i])) fail("a lent key is not its message's", body);
      }
      if (turn.tools_key && *turn.tools_key != tools_key(turn.tools))
        fail("the tools' key is not theirs", body);
      kept.give_back(turn);  // as after a call
    }
    if (cut == std::string_view::npos) break;
    rest.remove_prefix(cut + 1);
  }
  return 0;
}

}  // namespace crl::server::gateway

#ifdef CRL_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return crl::server::gateway::fuzz_gateway_body(data, size);
}
#endif
