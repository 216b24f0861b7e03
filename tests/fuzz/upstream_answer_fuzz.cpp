// libFuzzer target for an LLM server's answer as the gateway and the LLM driver read it
// (policies/llm/llm_api.h, parse_response; its per-token lists read as rows of numbers, engine/json_view.h).
//
// Input: one selector byte, then the answer. Bit 0 of the selector picks the API (SGLang's /generate or the
// OpenAI API's /v1/completions), bit 1 a vocabulary (none, or 256 ids), bit 2 whether two alternatives per
// token were asked, bit 3 whether the prompt sent is given (the ids 1, 2, 3: an answer that names another
// prompt is refused). Properties: reading never crashes or throws; it is deterministic; an answer read as
// accepted holds one log-prob per id, each id within the vocabulary; the prompt sent given with its text
// (compared as bytes where the answer writes it back the same way) or without (read id by id) reads alike;
// and the rows and the arrays checked but not read (answer_unread_arrays) change nothing but where the
// values are kept (tests/fuzz/number_rows_check.h: the same acceptance, errors and values as a plain read of
// the same text), the prompt's text expected or not. Bit 4: the body is also read as a streamed answer
// (engine/sse_reader.h into policies/llm/streamed_answer.h), whole and in small pieces: the same outcome,
// and an accepted stream holds one log-prob per id, each in the vocabulary.
//
// Built by scripts/fuzz.sh (clang, -fsanitize=fuzzer,address,undefined; tests/fuzz/CMakeLists.txt) with
// CRL_LIBFUZZER defined; the LLM policy tests compile the same function without it and replay the seed
// corpus (tests/fuzz/corpus/upstream_answer).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "engine/sse_reader.h"
#include "policies/llm/llm_api.h"
#include "policies/llm/streamed_answer.h"
#include "tests/fuzz/number_rows_check.h"

namespace crl::llm {

namespace {
// The body read as a streamed answer (its server-sent events into a StreamedAnswer), whole and in pieces of
// 1-7 bytes: the same outcome either way; an answer read to its end holds one log-prob per id, each in the
// vocabulary.
GenerateResult read_stream(ApiKind kind, std::string_view body, int vocab, int top, SentPrompt sent,
                           bool pieces, std::string& error) {
  SseReader reader(1 << 20);
  StreamedAnswer answer(kind, vocab, top, sent);
  SseEvent event;
  for (size_t at = 0, n = 0; at < body.size(); at += n) {
    n = pieces ? std::min<size_t>(1 + static_cast<unsigned char>(body[at]) % 7, body.size() - at)
               : body.size();
    if (!reader.feed(body.substr(at, n))) {
      error = reader.error();
      return answer.take();
    }
    while (reader.next(event)) {
      if (event.data == "[DONE]") continue;
      if (!answer.add(event.data)) {
        error = answer.error();
        return answer.take();
      }
    }
  }
  if (!answer.finished()) error = "unfinished";
  return answer.take();
}

void check_stream(ApiKind kind, std::string_view body, int vocab, int top, SentPrompt sent) {
  std::string whole_error, pieces_error;
  const GenerateResult whole = read_stream(kind, body, vocab, top, sent, false, whole_error);
  const GenerateResult pieces = read_stream(kind, body, vocab, top, sent, true, pieces_error);
  if (whole_error != pieces_error || whole.ids != pieces.ids || whole.logprobs != pieces.logprobs ||
      whole.finish_reason != pieces.finish_reason)
    std::abort();
  if (whole_error.empty()) {
    if (whole.ids.size() != whole.logprobs.size()) std::abort();
    for (const TokenId id : whole.ids)
      if (id < 0 || (vocab > 0 && id >= vocab)) std::abort();
  }
}
}  // namespace

int fuzz_upstream_answer(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const ApiKind kind = (data[0] & 1) ? ApiKind::kOpenAi : ApiKind::kSglang;
  const int vocab = (data[0] & 2) ? 256 : 0;
  const int top = (data[0] & 4) ? 2 : 0;
  TokenArena arena;
  const std::vector<TokenId> prompt = {1, 2, 3};
  const PromptView view(&arena, {arena.append(prompt, Provenance::kPrompt)});
  constexpr std::string_view kPromptText = "[1,2,3]";
  const SentPrompt sent = (data[0] & 8) ? SentPrompt{&view, kPromptText} : SentPrompt{};
  const SentPrompt scanned = (data[0] & 8) ? SentPrompt{&view, {}} : SentPrompt{};
  GenerateResult first, second;
  try {
    first = parse_response(kind, body, vocab, top, sent);
    second = parse_response(kind, body, vocab, top, scanned);
  } catch (...) {
    std::abort();  // an answer is read or refused, never thrown out of the reader
  }
  if (first.ok != second.ok || first.error != second.error || first.ids != second.ids ||
      first.logprobs != second.logprobs || first.finish_reason != second.finish_reason)
    std::abort();
  if (first.ok) {
    if (first.ids.size() != first.logprobs.size()) std::abort();
    for (const TokenId id : first.ids)
      if (id < 0 || (vocab > 0 && id >= vocab)) std::abort();
  }
  std::vector<JsonNumberRows> rows = answer_number_rows(kind);
  if (data[0] & 8) {
    for (JsonNumberRows& r : rows)
      if (r.key == "prompt_token_ids") r.expected = kPromptText;
  }
  if (!testing::read_with_and_without_rows(body, rows, kMaxJsonDepth, answer_unread_arrays(kind, top))
           .difference.empty())
    std::abort();
  if (data[0] & 16) check_stream(kind, body, vocab, top, sent);
  return 0;
}

}  // namespace crl::llm

#ifdef CRL_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return crl::llm::fuzz_upstream_answer(data, size);
}
#endif
