// The gateway's per-call codecs alone, each beside a baseline in the same run: a harness's chat body
// decoded (against nlohmann's DOM), the upstream's answer parsed, a prompt's ids written as text (against
// std::to_chars), and the answers of every API written (plain, and showing their tokens). The rows that
// drive whole calls are bench/gateway_bench.cpp's; both files build into bench_gateway.
#include <benchmark/benchmark.h>

#include <charconv>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench/gateway_bench_support.h"
#include "engine/json_escape.h"
#include "engine/json_reader.h"
#include "engine/json_view.h"
#include "engine/tokenizer.h"
#include "policies/llm/llm_api.h"
#include "server/gateway/anthropic_codec.h"
#include "server/gateway/chat_messages.h"
#include "server/gateway/openai_answer.h"
#include "server/gateway/openai_codec.h"
#include "server/gateway/responses_codec.h"

namespace {

using namespace crl;
using json = nlohmann::json;

using namespace crl::gateway_bench;

// A chat body of an 8k-token context (~8.9 KB, 40 messages), the harness's request.
std::string chat_body_8k() {
  json messages = json::array({{{"role", "system"}, {"content", "You are a bench agent."}},
                               {{"role", "user"}, {"content", std::string(kContext, 'x')}}});
  for (int i = 0; i < 20; ++i) {
    messages.push_back({{"role", "assistant"}, {"content", "ok, next step"}});
    messages.push_back({{"role", "user"}, {"content", "output of the step: fine"}});
  }
  return json{{"messages", messages}}.dump();
}

// Baseline: the shared nlohmann-based reader (engine/json_reader.h) on the body, into a DOM.
void BM_ChatBodyNlohmannDom(benchmark::State& state) {
  const std::string body = chat_body_8k();
  for (auto _ : state) benchmark::DoNotOptimize(read_json(body, "the request body"));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(body.size()));
}
BENCHMARK(BM_ChatBodyNlohmannDom);

// The gateway's decoding of the same body into its messages (server/gateway/openai_codec.h).
void BM_ChatBodyDecode(benchmark::State& state) {
  const std::string body = chat_body_8k();
  for (auto _ : state) benchmark::DoNotOptimize(server::gateway::parse_chat_request(body));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(body.size()));
}
BENCHMARK(BM_ChatBodyDecode);

// The keys of the same body's messages, computed on every call to see whether the harness kept its history
// (server/gateway/chat_messages.h): a pass over every byte, beside the decoding's pass above.
void BM_ChatMessageKeys(benchmark::State& state) {
  const std::string body = chat_body_8k();
  const server::gateway::ChatRequest request = server::gateway::parse_chat_request(body);
  for (auto _ : state) {
    for (const auto& message : request.turn.messages)
      benchmark::DoNotOptimize(server::gateway::message_key(message));
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(body.size()));
}
BENCHMARK(BM_ChatMessageKeys);

// An SGLang answer of N tokens with their log-probs (14: the gateway rows' turn; 256 and 2048: an agent's
// tool call and a long answer), as the gateway's upstream call reads it. The log-probs are float32 values
// written as Python writes the double they widen to (SGLang's way: "-0.10000000149011612", 17 significant
// digits), the digits every real answer carries. Items = tokens.
std::string sglang_answer(int tokens) {
  json ids = json::array(), logprobs = json::array();
  for (int i = 0; i < tokens; ++i) {
    ids.push_back(100 + i);
    logprobs.push_back({static_cast<double>(static_cast<float>(-0.1 - i / 1000.0)), 100 + i, nullptr});
  }
  return json{{"text", "ok, next step<|im_end|>"},
              {"output_ids", ids},
              {"meta_info",
               {{"id", "bench"},
                {"finish_reason", {{"type", "stop"}, {"matched", 258}}},
                {"prompt_tokens", 8000},
                {"completion_tokens", tokens},
                {"cached_tokens", 7900},
                {"output_token_logprobs", logprobs}}}}
      .dump();
}

void BM_UpstreamAnswerParse(benchmark::State& state) {
  const std::string body = sglang_answer(static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(llm::parse_response(llm::ApiKind::kSglang, body, 0));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_UpstreamAnswerParse)->Arg(14)->Arg(256)->Arg(2048);

// The same tokens as vLLM's /v1/completions answers them (return_token_ids, logprobs: 1), in the order vLLM
// writes its fields: per token its text, log-prob, alternatives (the sampled token's, as an object) and text
// offset besides its id, and, since return_token_ids also returns them, the prompt's ids: 8,000 of them (the
// rows' 8k-token context), drawn from a Qwen-sized vocabulary as real prompts' ids are (five or six digits).
std::vector<TokenId> vllm_prompt_ids() {
  std::vector<TokenId> ids;
  for (int i = 0; i < 8000; ++i) ids.push_back((i * 7919 + 151) % 151643);
  return ids;
}

std::string vllm_answer(int tokens) {
  using ordered = nlohmann::ordered_json;
  ordered ids = ordered::array(), logprobs = ordered::array(), texts = ordered::array(),
          tops = ordered::array(), offsets = ordered::array();
  for (int i = 0; i < tokens; ++i) {
    const double logprob = static_cast<float>(-0.1 - i / 1000.0);
    const std::string text = "t" + std::to_string(i % 10);
    ids.push_back(100 + i);
    logprobs.push_back(logprob);
    texts.push_back(text);
    tops.push_back({{text, logprob}});
    offsets.push_back(2 * i);
  }
  const ordered prompt = vllm_prompt_ids();
  ordered choice = {
      {"index", 0},
      {"text", "ok"},
      {"logprobs",
       {{"text_offset", offsets}, {"token_logprobs", logprobs}, {"tokens", texts}, {"top_logprobs", tops}}},
      {"finish_reason", "stop"},
      {"stop_reason", nullptr},
      {"token_ids", ids},
      {"prompt_logprobs", nullptr},
      {"prompt_token_ids", prompt}};
  return ordered{
      {"id", "cmpl-bench"},
      {"object", "text_completion"},
      {"created", 0},
      {"model", "m"},
      {"choices", ordered::array({choice})},
      {"service_tier", nullptr},
      {"system_fingerprint", nullptr},
      {"usage", {{"prompt_tokens", 8000}, {"total_tokens", 8000 + tokens}, {"completion_tokens", tokens}}},
      {"kv_transfer_params", nullptr}}
      .dump();
}

// Second arg: what the reading is given of the prompt sent. 0, nothing (nothing checked: the baseline);
// 1, its ids (the prompt's ids answered back are read and compared one by one: crl rollout's driver); 2,
// its ids and their text as sent (compared as bytes where the answer writes them the same way: the
// gateway, which keeps that text per session).
void BM_UpstreamAnswerParseOpenAi(benchmark::State& state) {
  const std::string body = vllm_answer(static_cast<int>(state.range(0)));
  const std::vector<TokenId> prompt = vllm_prompt_ids();
  TokenArena arena;
  const PromptView view(&arena, {arena.append(prompt, Provenance::kPrompt)});
  const std::string text = json(prompt).dump();
  llm::SentPrompt sent;
  if (state.range(1) >= 1) sent.ids = &view;
  if (state.range(1) == 2) sent.ids_json = text;
  for (auto _ : state) {
    const llm::GenerateResult r = llm::parse_response(llm::ApiKind::kOpenAi, body, 0, 0, sent);
    if (!r.ok) state.SkipWithError(r.error.c_str());
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.counters["answer_bytes"] = static_cast<double>(body.size());
}
BENCHMARK(BM_UpstreamAnswerParseOpenAi)->ArgsProduct({{14, 256, 2048}, {0, 1, 2}});

// Baseline: the same answer read as parse_response read it before its per-token lists were rows of numbers
// (engine/json_view.h, JsonNumberRows): a node per value, the lists then walked from the document.
void BM_UpstreamAnswerParseDocument(benchmark::State& state) {
  const std::string body = sglang_answer(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    const JsonDocument doc = JsonDocument::parse(body, "the answer");
    const JsonView meta = doc.root().find("meta_info");
    std::vector<TokenId> ids;
    std::vector<float> logprobs;
    JsonView::Iterator entry = meta.find("output_token_logprobs").begin();
    for (const JsonView id : doc.root().find("output_ids")) {
      ids.push_back(static_cast<TokenId>(id.integer()));
      logprobs.push_back(static_cast<float>((*(*entry).begin()).number()));
      ++entry;
    }
    benchmark::DoNotOptimize(ids.data());
    benchmark::DoNotOptimize(logprobs.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_UpstreamAnswerParseDocument)->Arg(14)->Arg(256)->Arg(2048);

// A prompt's 8192 ids written as JSON text, as a session's first call writes them (server/gateway/
// prompt_ids_text.h): std::to_chars per id (the baseline, what it used) against put_decimal
// (engine/json_escape.h). Arg: the vocabulary the ids are drawn from (256: the byte tokenizer; 151,669:
// Qwen3's).
template <bool kPutDecimal>
void id_text(benchmark::State& state) {
  std::mt19937 rng(5);
  std::vector<TokenId> ids(8192);
  for (TokenId& id : ids) id = static_cast<TokenId>(rng() % static_cast<uint32_t>(state.range(0)));
  std::string text(ids.size() * 12 + 2, '\0');
  for (auto _ : state) {
    char* out = text.data();
    *out++ = '[';
    for (size_t i = 0; i < ids.size(); ++i) {
      *out = ',';
      out += i != 0;
      out = kPutDecimal ? put_decimal(out, static_cast<uint32_t>(ids[i]))
                        : std::to_chars(out, text.data() + text.size(), ids[i]).ptr;
    }
    *out++ = ']';
    benchmark::DoNotOptimize(out);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(ids.size()));
}
void BM_IdTextToChars(benchmark::State& state) {
  id_text<false>(state);
}
BENCHMARK(BM_IdTextToChars)->Arg(256)->Arg(151669);
void BM_IdTextPutDecimal(benchmark::State& state) {
  id_text<true>(state);
}
BENCHMARK(BM_IdTextPutDecimal)->Arg(256)->Arg(151669);

// The completion the answer benchmarks write: a 14-token turn at an 8k-token context.
server::gateway::Completion bench_completion() {
  server::gateway::Completion c;
  c.id = "chatcmpl-bench-12-0";
  c.created = 1764650000;
  c.reply.content = "ok, next step";
  c.finish_reason = "stop";
  c.prompt_tokens = 8000;
  c.completion_tokens = 14;
  c.cached_tokens = 7900;
  return c;
}

// The answer the harness gets, per API and mode (arg): 0 chat.completion, 1 its server-sent events, 2 an
// Anthropic message, 3 its events (Claude Code streams every call), 4 a Responses API response, 5 its events
// (Codex streams every call).
void BM_AnswerWrite(benchmark::State& state) {
  const server::gateway::Completion c = bench_completion();
  const std::string model = "crl-gateway";
  for (auto _ : state) {
    switch (state.range(0)) {
      case 0:
        benchmark::DoNotOptimize(server::gateway::chat_completion_json(c, model));
        break;
      case 1:
        benchmark::DoNotOptimize(server::gateway::chat_completion_sse(c, model, true));
        break;
      case 2:
        benchmark::DoNotOptimize(server::gateway::anthropic_message_json(c, model));
        break;
      case 3:
        benchmark::DoNotOptimize(server::gateway::anthropic_message_sse(c, model));
        break;
      case 4:
        benchmark::DoNotOptimize(server::gateway::response_json(c, model));
        break;
      default:
        benchmark::DoNotOptimize(server::gateway::response_sse(c, model));
    }
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AnswerWrite)->DenseRange(0, 5);

// A chat answer that shows its tokens (arg), against the plain one in the same run: 0 plain, 1 `logprobs:
// true` (14 entries), 2 with `top_logprobs: 5`, 3 `return_token_ids` with an 8k-token prompt (its id text
// is copied from the session's). The token texts come from the byte tokenizer (one byte per token).
void BM_AnswerWriteWithTokens(benchmark::State& state) {
  server::gateway::Completion c = bench_completion();
  for (int i = 0; i < 14; ++i) {
    c.ids.push_back(static_cast<TokenId>(i < 13 ? c.reply.content[static_cast<size_t>(i)] : 258));
    c.logprobs.push_back(-0.25f - static_cast<float>(i) / 1024.0f);
    if (state.range(0) == 2) {
      c.top.emplace_back();
      for (int k = 0; k < 5; ++k)
        c.top.back().push_back(llm::TopLogprob{97 + k, "", -0.5f - static_cast<float>(k)});
    }
  }
  std::vector<TokenId> prompt(8000);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<TokenId>(1000 + i * 37 % 150000);
  const std::string prompt_text = json(prompt).dump();
  const auto tokenizer = make_tokenizer("byte");
  const std::string model = "crl-gateway";
  server::gateway::LogprobsAsk ask;
  ask.on = state.range(0) == 1 || state.range(0) == 2;
  const bool ids = state.range(0) == 3;
  size_t bytes = 0;
  for (auto _ : state) {
    if (ids) c.prompt_ids = prompt_text;  // the copy the session makes for an answer that asks
    const auto logprobs = server::gateway::token_logprobs(c, ask, *tokenizer);
    const server::gateway::AnswerExtras extras{logprobs ? &*logprobs : nullptr, ids};
    const std::string answer = server::gateway::chat_completion_json(c, model, extras);
    bytes = answer.size();
    benchmark::DoNotOptimize(answer);
  }
  state.counters["answer_bytes"] = static_cast<double>(bytes);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AnswerWriteWithTokens)->DenseRange(0, 3);

}  // namespace
