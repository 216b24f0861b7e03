// The SGLang and OpenAI-compatible adapters: request bodies, answers in the servers' real shapes, malformed
// answers, finish reasons, and the request seed derived from the stream key.
#include "policies/llm/llm_api.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/error.h"

namespace crl::llm {
namespace {

using json = nlohmann::json;

struct Prompt {
  TokenArena arena;
  PromptView view;
  explicit Prompt(const std::vector<TokenId>& ids) {
    const size_t cut = ids.size() / 2;
    const Span a = arena.append(std::span<const TokenId>(ids).subspan(0, cut), Provenance::kPrompt);
    const Span b = arena.append(std::span<const TokenId>(ids).subspan(cut), Provenance::kPrompt);
    view = PromptView(&arena, {a, b});
  }
};

TEST(LlmApi, SglangRequestCarriesIdsSamplingAndSeed) {
  Prompt prompt({257, 115, 10, 104, 105, 258});
  GenerateCall call{&prompt.view, 64, 1234567890123ull, "r/execute/3"};
  SamplingParams sampling;
  sampling.stop_token_ids = {258};
  std::string body;
  write_request(ApiKind::kSglang, call, sampling, body);
  const json j = json::parse(body);
  EXPECT_EQ(j["input_ids"], json({257, 115, 10, 104, 105, 258}));
  EXPECT_EQ(j["sampling_params"]["max_new_tokens"], 64);
  EXPECT_EQ(j["sampling_params"]["temperature"], 1.0);
  EXPECT_EQ(j["sampling_params"]["top_p"], 1.0);
  EXPECT_EQ(j["sampling_params"]["stop_token_ids"], json({258}));
  EXPECT_EQ(j["sampling_params"]["sampling_seed"], 1234567890123ull);
  EXPECT_EQ(j["sampling_params"]["no_stop_trim"], true);
  EXPECT_EQ(j["return_logprob"], true);
  EXPECT_EQ(j["rid"], "r/execute/3");
}

// The body in pieces (write_request_parts) is write_request's, byte for byte: with the id text given, the
// ids piece is that text (not a copy); without it, the ids end the head.
TEST(LlmApi, RequestPartsJoinToTheWholeBody) {
  Prompt prompt({257, 115, 10, 104, 105, 258});
  SamplingParams sampling;
  sampling.stop_token_ids = {258};
  sampling.stop = {"\nObservation:"};
  sampling.model = "m";
  const std::string ids_text = "[257,115,10,104,105,258]";
  for (const ApiKind kind : {ApiKind::kSglang, ApiKind::kOpenAi}) {
    for (const bool cached : {false, true}) {
      GenerateCall call{&prompt.view, 64, 1234567890123ull, "r/execute/3"};
      if (cached) call.prompt_ids_json = ids_text;
      std::string whole;
      write_request(kind, call, sampling, whole);
      RequestParts parts;
      write_request_parts(kind, call, sampling, parts);
      EXPECT_EQ(parts.head + std::string(parts.ids) + parts.tail, whole);
      if (cached) {
        EXPECT_EQ(parts.ids.data(), ids_text.data());
      } else {
        EXPECT_TRUE(parts.ids.empty());
      }
    }
  }
}

// The request id is written as nlohmann writes it, byte for byte, whatever it holds (quotes, backslashes,
// control bytes, non-ASCII UTF-8); invalid UTF-8 is refused, never sent as a broken body.
TEST(LlmApi, RequestIdsAreWrittenAsJsonStrings) {
  Prompt prompt({1, 2});
  SamplingParams sampling;
  for (const std::string& rid : {std::string("r/execute/3"), std::string("a\"b\\c\n\t\x01\x1f\x7f"),
                                 std::string("\xc3\xa9t\xc3\xa9/summarize/0"), std::string()}) {
    for (const ApiKind kind : {ApiKind::kSglang, ApiKind::kOpenAi}) {
      GenerateCall call{&prompt.view, 8, 1, rid};
      std::string body;
      write_request(kind, call, sampling, body);
      const std::string field = kind == ApiKind::kSglang ? "\"rid\":" : "\"user\":";
      EXPECT_NE(body.find(field + json(rid).dump()), std::string::npos) << body;
      EXPECT_EQ(json::parse(body)[kind == ApiKind::kSglang ? "rid" : "user"], rid);
    }
  }
  GenerateCall broken{&prompt.view, 8, 1, "r\xff"};
  std::string body;
  EXPECT_ANY_THROW(write_request(ApiKind::kSglang, broken, sampling, body));
}

TEST(LlmApi, OpenAiRequestUsesATokenIdPrompt) {
  Prompt prompt({1, 2, 3});
  GenerateCall call{&prompt.view, 16, 42, "x"};
  SamplingParams sampling;
  sampling.model = "Qwen/Qwen2.5-0.5B-Instruct";
  sampling.temperature = 0.5;
  std::string body;
  write_request(ApiKind::kOpenAi, call, sampling, body);
  const json j = json::parse(body);
  EXPECT_EQ(j["model"], "Qwen/Qwen2.5-0.5B-Instruct");
  EXPECT_EQ(j["prompt"], json({1, 2, 3}));
  EXPECT_EQ(j["max_tokens"], 16);
  EXPECT_EQ(j["temperature"], 0.5);
  EXPECT_EQ(j["logprobs"], 1);
  EXPECT_EQ(j["return_token_ids"], true);
  EXPECT_EQ(j["seed"], 42);
}

// Stop strings go upstream in each API's own field, only when given (the ids answered keep the matched
// string: no_stop_trim / include_stop_str_in_output).
TEST(LlmApi, StopStringsAreSentInBothApisOnlyWhenGiven) {
  Prompt prompt({1, 2, 3});
  GenerateCall call{&prompt.view, 16, 42, "x"};
  SamplingParams sampling;
  std::string body;
  write_request(ApiKind::kSglang, call, sampling, body);
  EXPECT_FALSE(json::parse(body)["sampling_params"].contains("stop"));
  write_request(ApiKind::kOpenAi, call, sampling, body);
  EXPECT_FALSE(json::parse(body).contains("stop"));
  sampling.stop = {"\nObservation:", "END \"q\""};
  write_request(ApiKind::kSglang, call, sampling, body);
  EXPECT_EQ(json::parse(body)["sampling_params"]["stop"], json({"\nObservation:", "END \"q\""}));
  write_request(ApiKind::kOpenAi, call, sampling, body);
  EXPECT_EQ(json::parse(body)["stop"], json({"\nObservation:", "END \"q\""}));
  EXPECT_EQ(json::parse(body)["include_stop_str_in_output"], true);
}

// An answer of SGLang's /generate as the server writes it (meta_info abridged to the fields we read and a
// few we ignore).
constexpr const char* kSglangAnswer = R"({"text":"next","output_ids":[110,101,120,116,151645],
  "meta_info":{"id":"abc","finish_reason":{"type":"stop","matched":151645},"prompt_tokens":321,
  "weight_version":"default","completion_tokens":5,"cached_tokens":300,"e2e_latency":0.12,
  "output_token_logprobs":[[-0.125,110,null],[-0.5,101,null],[-0.0009765625,120,null],[-2.0,116,null],[-0.25,151645,null]]}})";

TEST(LlmApi, ReadsSglangAnswersExactly) {
  const GenerateResult r = parse_response(ApiKind::kSglang, kSglangAnswer, 0);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.ids, (std::vector<TokenId>{110, 101, 120, 116, 151645}));
  EXPECT_EQ(r.logprobs, (std::vector<float>{-0.125f, -0.5f, -0.0009765625f, -2.0f, -0.25f}));
  EXPECT_EQ(r.finish_reason, "stop");
  EXPECT_EQ(r.prompt_tokens, 321);
  EXPECT_EQ(r.completion_tokens, 5);
  EXPECT_EQ(r.cached_tokens, 300);
  EXPECT_EQ(r.weight_version, "default");
  // The vocabulary check.
  EXPECT_FALSE(parse_response(ApiKind::kSglang, kSglangAnswer, 1000).ok);
}

TEST(LlmApi, KeepsOnlyAWellFormedWeightVersion) {
  const auto version = [](const std::string& value) {
    const std::string body = R"({"output_ids":[1],"meta_info":{"finish_reason":{"type":"stop"},)"
                             R"("output_token_logprobs":[[-1.0,1,null]],"weight_version":)" +
                             value + "}}";
    const GenerateResult r = parse_response(ApiKind::kSglang, body, 0);
    EXPECT_TRUE(r.ok) << r.error;  // a strange version never fails the call: it is bookkeeping
    return r.weight_version;
  };
  EXPECT_EQ(version("\"v12\""), "v12");
  EXPECT_EQ(version("17"), "17");
  EXPECT_EQ(version("\"a,b\""), "");  // the export joins versions with commas
  EXPECT_EQ(version("\"two words\""), "");
  EXPECT_EQ(version("\"\\n\""), "");
  EXPECT_EQ(version("\"" + std::string(65, 'x') + "\""), "");
  EXPECT_EQ(version("null"), "");
  EXPECT_EQ(version("[1]"), "");
}

TEST(LlmApi, ReadsSglangFinishReasons) {
  for (const std::string type : {"length", "abort"}) {
    const std::string body = R"({"output_ids":[1],"meta_info":{"finish_reason":{"type":")" + type +
                             R"("},"output_token_logprobs":[[-1.0,1,null]]}})";
    const GenerateResult r = parse_response(ApiKind::kSglang, body, 0);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.finish_reason, type);
  }
  EXPECT_FALSE(
      parse_response(
          ApiKind::kSglang,
          R"({"output_ids":[1],"meta_info":{"finish_reason":{"type":"eos"},"output_token_logprobs":[[-1.0,1,null]]}})",
          0)
          .ok);
}

TEST(LlmApi, RejectsInconsistentSglangAnswers) {
  const char* bad[] = {
      R"({"text": "next", "output_ids": [110, 1)",  // truncated JSON
      R"([])",
      R"({"output_ids":[1,2],"meta_info":{"finish_reason":{"type":"stop"},"output_token_logprobs":[[-1.0,1,null]]}})",
      R"({"output_ids":[1],"meta_info":{"finish_reason":{"type":"stop"},"output_token_logprobs":[[-1.0,2,null]]}})",
      R"({"output_ids":[1],"meta_info":{"finish_reason":{"type":"stop"}}})",
      R"({"output_ids":[-1],"meta_info":{"finish_reason":{"type":"stop"},"output_token_logprobs":[[-1.0,-1,null]]}})",
      R"({"output_ids":[1],"meta_info":{"output_token_logprobs":[[-1.0,1,null]]}})",
  };
  for (const char* body : bad) EXPECT_FALSE(parse_response(ApiKind::kSglang, body, 0).ok) << body;
}

// The per-token lists are read as rows of numbers (engine/json_view.h, JsonNumberRows) where they have the
// shape servers write; any other shape is read from the document. Both give the same answer and the same
// errors: SGLang with return_text_in_logprobs (a text where null is), spaces, a server's extra field.
TEST(LlmApi, AnswersReadAsRowsOrFromTheDocumentAreTheSame) {
  const auto sglang = [](const std::string& ids, const std::string& logprobs) {
    return R"({"text":"ab","output_ids":)" + ids + R"(,"meta_info":{"finish_reason":{"type":"stop"},)" +
           R"("output_token_logprobs":)" + logprobs + "}}";
  };
  const GenerateResult rows = parse_response(
      ApiKind::kSglang, sglang("[97,98]", "[[-0.10000000149011612,97,null],[-2.5e-3,98,null]]"), 0);
  ASSERT_TRUE(rows.ok) << rows.error;
  EXPECT_EQ(rows.ids, (std::vector<TokenId>{97, 98}));
  EXPECT_EQ(rows.logprobs, (std::vector<float>{-0.1f, -2.5e-3f}));
  for (const std::string& other : {
           sglang("[ 97 , 98 ]", "[ [ -0.10000000149011612 , 97 , null ] ,\n [-2.5e-3,98,null] ]"),
           sglang("[97,98]", R"([[-0.10000000149011612,97,"a"],[-2.5e-3,98,"b"]])"),
           sglang("[97,98]", "[[-0.10000000149011612,97],[-2.5e-3,98,null,1]]"),
       }) {
    const GenerateResult r = parse_response(ApiKind::kSglang, other, 0);
    ASSERT_TRUE(r.ok) << r.error << "\n" << other;
    EXPECT_EQ(r.ids, rows.ids) << other;
    EXPECT_EQ(r.logprobs, rows.logprobs) << other;
  }
  // Errors name the same token either way (rows: numbers that are not ids; the document: other values).
  const auto error = [&](const std::string& ids, const std::string& logprobs) {
    const GenerateResult r = parse_response(ApiKind::kSglang, sglang(ids, logprobs), 256);
    EXPECT_FALSE(r.ok) << ids << " " << logprobs;
    return r.error;
  };
  const std::string id_error = "output_ids[1] is not a token id of the vocabulary";
  EXPECT_EQ(error("[97,98.0]", "[[-1,97,null],[-1,98,null]]"), id_error);
  EXPECT_EQ(error("[97,300]", "[[-1,97,null],[-1,300,null]]"), id_error);
  EXPECT_EQ(error("[97,\"b\"]", "[[-1,97,null],[-1,98,null]]"), id_error);
  const std::string entry_error = "output_token_logprobs[1] is not [logprob, token_id, text]";
  EXPECT_EQ(error("[97,98]", "[[-1,97,null],[-1,98.5,null]]"), entry_error);
  EXPECT_EQ(error("[97,98]", "[[-1,97,null],[null,98,null]]"), entry_error);
  EXPECT_EQ(error("[97,98]", "[[-1,97,null],[-1]]"), entry_error);
  EXPECT_EQ(error("[97,98]", "[[-1,97,null],[-1,99,null]]"),
            "output_token_logprobs[1] names token 99 but output_ids has 98");
  EXPECT_EQ(error("[97,98]", R"([[-1,97,"a"],[-1,99,"b"]])"),
            "output_token_logprobs[1] names token 99 but output_ids has 98");

  // The OpenAI API's token_ids and token_logprobs likewise (a null log-prob: read from the document).
  const auto openai = [](const std::string& ids, const std::string& logprobs) {
    return R"({"choices":[{"finish_reason":"stop","token_ids":)" + ids + R"(,"logprobs":{"token_logprobs":)" +
           logprobs + "}}]}";
  };
  const GenerateResult o = parse_response(ApiKind::kOpenAi, openai("[97, 98]", "[-0.5 , -0.25]"), 0);
  ASSERT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.ids, (std::vector<TokenId>{97, 98}));
  EXPECT_EQ(o.logprobs, (std::vector<float>{-0.5f, -0.25f}));
  const GenerateResult null_logprob = parse_response(ApiKind::kOpenAi, openai("[97,98]", "[-0.5,null]"), 0);
  EXPECT_EQ(null_logprob.error, "choices[0].logprobs.token_logprobs[1] is not a number");
  const GenerateResult text_id = parse_response(ApiKind::kOpenAi, openai("[97,\"x\"]", "[-0.5,-1]"), 0);
  EXPECT_EQ(text_id.error, "choices[0].token_ids[1] is not a token id of the vocabulary");
}

// Issue 14 items 1 and 5: answers go through the shared JSON reader. A repeated key is not one answer (the
// old reader kept the last value), nesting past the limit fails with a short message naming it, and a number
// out of range fails the call instead of throwing out of the reader.
TEST(LlmApi, RejectsDuplicateKeysDeepNestingAndHugeNumbersInAnswers) {
  const std::string twice =
      R"({"output_ids":[1],"output_ids":[1],"meta_info":{"finish_reason":{"type":"stop"},"output_token_logprobs":[[-1.0,1,null]]}})";
  GenerateResult r = parse_response(ApiKind::kSglang, twice, 0);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("duplicate key \"output_ids\""), std::string::npos) << r.error;
  const std::string deep = "[" + std::string(100000, '[') + std::string(100000, ']') + "]";
  for (ApiKind kind : {ApiKind::kSglang, ApiKind::kOpenAi}) {
    r = parse_response(kind, deep, 0);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("nested deeper than 64"), std::string::npos) << r.error.substr(0, 300);
    EXPECT_LT(r.error.size(), 600u);
    r = parse_response(kind, R"({"choices":[{"finish_reason":"stop","token_ids":[1e400]}]})", 0);
    EXPECT_FALSE(r.ok);
  }
}

// An answer of vLLM's /v1/completions with return_token_ids and logprobs=1.
constexpr const char* kOpenAiAnswer = R"({"id":"cmpl-1","object":"text_completion","created":1,"model":"m",
  "choices":[{"index":0,"text":"next","logprobs":{"text_offset":[0,1,2,3],"token_logprobs":[-0.5,-0.25,-1.5,-0.125],
  "tokens":["n","e","x","t"],"top_logprobs":[{"n":-0.5},{"e":-0.25},{"x":-1.5},{"t":-0.125}]},
  "finish_reason":"length","stop_reason":null,"prompt_token_ids":null,"token_ids":[110,101,120,116]}],
  "usage":{"prompt_tokens":9,"total_tokens":13,"completion_tokens":4,"prompt_tokens_details":null}})";

TEST(LlmApi, ReadsOpenAiAnswersExactly) {
  const GenerateResult r = parse_response(ApiKind::kOpenAi, kOpenAiAnswer, 259);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.ids, (std::vector<TokenId>{110, 101, 120, 116}));
  EXPECT_EQ(r.logprobs, (std::vector<float>{-0.5f, -0.25f, -1.5f, -0.125f}));
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(r.prompt_tokens, 9);
  EXPECT_EQ(r.completion_tokens, 4);
  // Without token ids (a server that ignores return_token_ids) the answer is unusable: never re-tokenise.
  std::string without = kOpenAiAnswer;
  without.replace(without.find("\"token_ids\""), 11, "\"other_ids\"");
  EXPECT_FALSE(parse_response(ApiKind::kOpenAi, without, 0).ok);
}

// vLLM's return_token_ids answers the prompt it ran (prompt_token_ids); given the prompt sent, the reading
// checks that it is that one, whether the list is read as rows of numbers or (any other shape) from the
// document: a server that cut the prompt or a proxy that re-tokenized it fails the call with the position.
TEST(LlmApi, AnOpenAiAnswerMustNameThePromptItWasSent) {
  const Prompt sent({151644, 8948, 198, 2610, 525});
  const auto answer = [](const std::string& prompt_ids) {
    return R"({"choices":[{"index":0,"text":"ok","logprobs":{"text_offset":[0,1],"token_logprobs":[-0.5,-0.25],)"
           R"("tokens":["o","k"],"top_logprobs":[{"o":-0.5},{"k":-0.25}]},"finish_reason":"stop",)"
           R"("stop_reason":null,"token_ids":[111,107],"prompt_logprobs":null,"prompt_token_ids":)" +
           prompt_ids + "}]}";
  };
  const auto error = [&](const std::string& prompt_ids, const PromptView* prompt,
                         std::string_view prompt_text = {}) {
    const GenerateResult r =
        parse_response(ApiKind::kOpenAi, answer(prompt_ids), 0, 0, {prompt, prompt_text});
    EXPECT_EQ(r.ok, r.error.empty());
    if (r.ok) {
      EXPECT_EQ(r.ids, (std::vector<TokenId>{111, 107}));
    }
    return r.error;
  };
  EXPECT_EQ(error("[151644,8948,198,2610,525]", &sent.view), "");
  EXPECT_EQ(error(" [ 151644 , 8948,198,\n2610,525 ] ", &sent.view), "");
  EXPECT_EQ(error("null", &sent.view), "");  // a server before return_token_ids answered them
  const std::string changed =
      "choices[0].prompt_token_ids[3] is not the prompt sent's id 2610 (the server "
      "did not run the prompt it was sent)";
  EXPECT_EQ(error("[151644,8948,198,2611,525]", &sent.view), changed);
  EXPECT_EQ(error("[151644,8948,198,2610.0,525]", &sent.view), changed);     // a float is no id
  EXPECT_EQ(error(R"([151644,8948,198,"2610",525])", &sent.view), changed);  // read from the document
  EXPECT_EQ(error("[151644,8948,198,-2610,525]", &sent.view), changed);
  EXPECT_EQ(error("[8948,198,2610,525]", &sent.view),
            "choices[0].prompt_token_ids has 4 ids where the prompt sent had 5 (the server did not run the "
            "prompt it was sent)");
  EXPECT_EQ(error("[]", &sent.view),
            "choices[0].prompt_token_ids has 0 ids where the prompt sent had 5 (the server did not run the "
            "prompt it was sent)");
  // With the ids' text as sent (the gateway keeps it): an answer that writes them the same way is its
  // bytes compared; any other writing is read and checked id by id.
  const std::string text = "[151644,8948,198,2610,525]";
  EXPECT_EQ(error(text, &sent.view, text), "");
  EXPECT_EQ(error("[151644, 8948, 198, 2610, 525]", &sent.view, text), "");
  EXPECT_EQ(error("[151644,8948,198,2611,525]", &sent.view, text), changed);
  EXPECT_EQ(error("[151644,8948,198,2610,525,1]", &sent.view, text),
            "choices[0].prompt_token_ids has 6 ids where the prompt sent had 5 (the server did not run the "
            "prompt it was sent)");
  EXPECT_NE(error("[151644,8948,198,2610,525]]", &sent.view, text).find("is not accepted JSON"),
            std::string::npos);
  // A text that is not a list is not compared: the ids are read.
  EXPECT_EQ(error("[151644,8948,198,2610,525]", &sent.view, "151644,8948"), "");
  EXPECT_EQ(error("[151644,8948,198,2611,525]", &sent.view, "["), changed);
  // The prompt's length as the server counted it is checked too (SGLang names no ids), where it is given.
  const std::string sglang_answer =
      R"({"text":"ok","output_ids":[111,107],"meta_info":{"finish_reason":{"type":"stop"},"prompt_tokens":)";
  const std::string sglang_rest = R"(,"output_token_logprobs":[[-0.5,111,null],[-0.25,107,null]]}})";
  EXPECT_TRUE(parse_response(ApiKind::kSglang, sglang_answer + "5" + sglang_rest, 0, 0, {&sent.view, {}}).ok);
  EXPECT_EQ(parse_response(ApiKind::kSglang, sglang_answer + "4" + sglang_rest, 0, 0, {&sent.view, {}}).error,
            "meta_info.prompt_tokens is 4 where the prompt sent had 5 ids (the server did not run the prompt "
            "it was sent)");
  EXPECT_TRUE(parse_response(ApiKind::kSglang, sglang_answer + "4" + sglang_rest, 0, 0).ok);
  EXPECT_TRUE(parse_response(ApiKind::kSglang, sglang_answer + "0" + sglang_rest, 0, 0, {&sent.view, {}}).ok);
  std::string short_usage = answer("null");
  short_usage.replace(short_usage.size() - 1, 1, R"(,"usage":{"prompt_tokens":6,"completion_tokens":2}})");
  EXPECT_EQ(
      parse_response(ApiKind::kOpenAi, short_usage, 0, 0, {&sent.view, {}}).error,
      "usage.prompt_tokens is 6 where the prompt sent had 5 ids (the server did not run the prompt it was "
      "sent)");
  // Without the prompt sent (a caller that does not know it) nothing is checked.
  EXPECT_EQ(error("[8948,198,2610,525]", nullptr), "");
  // Not JSON stays not JSON, with or without rows.
  EXPECT_NE(error("[151644,8948,198,2610,525,]", &sent.view).find("is not accepted JSON"), std::string::npos);
  // The answer without the key at all: nothing to check.
  std::string without = answer("[1]");
  without.replace(without.find("\"prompt_token_ids\""), 18, "\"other_prompt_ids\"");
  EXPECT_TRUE(parse_response(ApiKind::kOpenAi, without, 0, 0, {&sent.view, {}}).ok);
}

// Alternatives asked per token: SGLang's top_logprobs_num (sent only when asked), the OpenAI API's logprobs
// (at least the 1 the sampled log-probs need); their answers read as the servers write them.
TEST(LlmApi, TopLogprobsAreAskedOnlyWhenWantedAndReadFromBothApis) {
  Prompt prompt({1, 2, 3});
  GenerateCall call{&prompt.view, 16, 42, "x"};
  SamplingParams sampling;
  std::string body;
  write_request(ApiKind::kSglang, call, sampling, body);
  EXPECT_FALSE(json::parse(body).contains("top_logprobs_num"));
  sampling.top_logprobs = 3;
  write_request(ApiKind::kSglang, call, sampling, body);
  EXPECT_EQ(json::parse(body)["top_logprobs_num"], 3);
  write_request(ApiKind::kOpenAi, call, sampling, body);
  EXPECT_EQ(json::parse(body)["logprobs"], 3);

  const std::string sglang = R"({"output_ids":[110,101],"meta_info":{"finish_reason":{"type":"length"},)"
                             R"("output_token_logprobs":[[-0.5,110,null],[-0.25,101,null]],)"
                             R"("output_top_logprobs":[[[-0.5,110,null],[-1.0,111,"o"]],null]}})";
  GenerateResult r = parse_response(ApiKind::kSglang, sglang, 259, 2);
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(r.top.size(), 2u);
  ASSERT_EQ(r.top[0].size(), 2u);
  EXPECT_EQ(r.top[0][1].id, 111);
  EXPECT_EQ(r.top[0][1].logprob, -1.0f);
  EXPECT_TRUE(r.top[1].empty());
  EXPECT_TRUE(parse_response(ApiKind::kSglang, sglang, 259).top.empty()) << "not asked: not read";

  const std::string openai =
      R"({"choices":[{"finish_reason":"stop","token_ids":[110],"logprobs":{"token_logprobs":[-0.5],)"
      R"("top_logprobs":[{"n":-0.5,"token_id:7":-2.0,"\u00e9":-3.0}]}}]})";
  r = parse_response(ApiKind::kOpenAi, openai, 259, 2);
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(r.top.size(), 1u);
  ASSERT_EQ(r.top[0].size(), 3u) << "the asked 2 and the sampled token";
  EXPECT_EQ(r.top[0][0].text, "n");
  EXPECT_EQ(r.top[0][0].id, -1) << "text only";
  EXPECT_EQ(r.top[0][1].id, 7) << "vLLM's token_id:N names the id";
  EXPECT_EQ(r.top[0][2].text, "\xC3\xA9");

  // Answers that do not hold what was asked fail the call, with the reason.
  const char* bad_sglang[] = {
      R"("output_top_logprobs":[[[-0.5,110,null]]])",                               // one list for two tokens
      R"("output_top_logprobs":[[[-0.5,110,null],[-1,1,null],[-2,2,null]],null])",  // three for two asked
      R"("output_top_logprobs":[[["x",110,null]],null])",                           // not a log-prob
      R"("output_top_logprobs":[[[-0.5,99999,null]],null])",                        // not in the vocabulary
      R"("output_top_logprobs":[7,null])",                                          // not a list
      R"("other":1)",                                                               // missing
  };
  for (const char* top : bad_sglang) {
    const std::string answer = R"({"output_ids":[110,101],"meta_info":{"finish_reason":{"type":"length"},)"
                               R"("output_token_logprobs":[[-0.5,110,null],[-0.25,101,null]],)" +
                               std::string(top) + "}}";
    r = parse_response(ApiKind::kSglang, answer, 259, 2);
    EXPECT_FALSE(r.ok) << top;
    EXPECT_FALSE(r.error.empty());
  }
  const char* bad_openai[] = {R"([{"n":-0.5},{"m":-1}])", R"([{"n":"x"}])",
                              R"([{"a":-1,"b":-2,"c":-3,"d":-4}])", R"([3])", R"(null)"};
  for (const char* top : bad_openai) {
    const std::string answer =
        R"({"choices":[{"finish_reason":"stop","token_ids":[110],"logprobs":{"token_logprobs":[-0.5],)"
        R"("top_logprobs":)" +
        std::string(top) + "}}]}";
    EXPECT_FALSE(parse_response(ApiKind::kOpenAi, answer, 259, 2).ok) << top;
  }
}

// Structured output goes upstream in each API's own field, only when given, never rewritten.
TEST(LlmApi, AJsonSchemaGoesUpstreamInEachApisField) {
  Prompt prompt({1, 2, 3});
  GenerateCall call{&prompt.view, 16, 42, "x"};
  SamplingParams sampling;
  std::string body;
  write_request(ApiKind::kSglang, call, sampling, body);
  EXPECT_FALSE(json::parse(body)["sampling_params"].contains("json_schema"));
  write_request(ApiKind::kOpenAi, call, sampling, body);
  EXPECT_FALSE(json::parse(body).contains("response_format"));
  sampling.json_schema = R"({"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]})";
  write_request(ApiKind::kSglang, call, sampling, body);
  EXPECT_EQ(json::parse(body)["sampling_params"]["json_schema"], sampling.json_schema);
  write_request(ApiKind::kOpenAi, call, sampling, body);
  const json format = json::parse(body)["response_format"];
  EXPECT_EQ(format["type"], "json_schema");
  EXPECT_EQ(format["json_schema"]["schema"], json::parse(sampling.json_schema));
  EXPECT_TRUE(format["json_schema"]["name"].is_string());
}

TEST(LlmApi, ParsesApiNames) {
  EXPECT_EQ(parse_api_kind("sglang", "t"), ApiKind::kSglang);
  EXPECT_EQ(parse_api_kind("openai", "t"), ApiKind::kOpenAi);
  EXPECT_THROW(parse_api_kind("vllm", "t"), Error);
  EXPECT_STREQ(api_path(ApiKind::kSglang), "/generate");
  EXPECT_STREQ(api_path(ApiKind::kOpenAi), "/v1/completions");
}

TEST(LlmApi, SamplingSeedIsAPureFunctionOfTheStreamKey) {
  const StreamKey key{7, 1234, 2, StreamRole::kExecute, 5};
  EXPECT_EQ(sampling_seed(key), sampling_seed(key));
  EXPECT_LT(sampling_seed(key), uint64_t{1} << 63);
  StreamKey other = key;
  other.ordinal = 6;
  EXPECT_NE(sampling_seed(key), sampling_seed(other));
  other = key;
  other.role = StreamRole::kSummarize;
  EXPECT_NE(sampling_seed(key), sampling_seed(other));
  other = key;
  other.sample = 3;
  EXPECT_NE(sampling_seed(key), sampling_seed(other));
  other = key;
  other.seed = 8;
  EXPECT_NE(sampling_seed(key), sampling_seed(other));
}

// The derivation is a published contract (README: SHA-256 of "crl-sampling|seed|task|sample|role|ordinal",
// first 8 bytes big-endian, masked to 63 bits): paired runs and other tools reproduce it. Values from
// Python's hashlib, including the longest line (every field at its maximum: two SHA-256 blocks).
TEST(LlmApi, SamplingSeedMatchesItsPublishedDerivation) {
  EXPECT_EQ(sampling_seed(StreamKey{7, 1234, 2, StreamRole::kExecute, 5}), 0x5168ef8e7c201c3aull);
  EXPECT_EQ(sampling_seed(StreamKey{UINT64_MAX, UINT64_MAX, UINT32_MAX, StreamRole::kSimulation, UINT64_MAX}),
            0x7c55341338beaadbull);
}

}  // namespace
}  // namespace crl::llm
