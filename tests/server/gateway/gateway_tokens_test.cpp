// What an answer shows of its tokens when the harness asks. The sampled tokens' log-probs (chat `logprobs:
// true`, the completions' `logprobs: K`, vLLM's `return_tokens_as_token_ids`): one entry per id the
// upstream sampled, its log-prob the upstream's to the bit, so what the harness sees is what the export
// records; in streams on the first chunk with sampled text; stored with the answer for a retry; with
// `top_logprobs` the upstream's most likely alternatives. The ids
// (vLLM's `return_token_ids`): the forwarded window's prompt ids, compacted, and the sampled ids. Bad values
// are a 400 naming the field.
#include <span>

#include "engine/tokenizer.h"
#include "tests/server/gateway/gateway_fixture.h"
#include "wire/utf8.h"

namespace crl::server::gateway::testing {
namespace {

// The bytes of one token of the test bench's tokenizer (bytes, special tokens as their strings).
std::string token_bytes(TokenId id) {
  static const std::shared_ptr<const Tokenizer> tokenizer = make_tokenizer("byte");
  return tokenizer->decode(std::span<const TokenId>(&id, 1));
}

float as_float(const json& number) {
  return static_cast<float>(number.get<double>());
}

// A chat answer's `logprobs` against the upstream call it came from.
void expect_entries(const json& logprobs, const crl::testing::LoggedCall& call, bool token_ids = false) {
  ASSERT_TRUE(logprobs.is_object()) << logprobs;
  const json& content = logprobs["content"];
  ASSERT_EQ(content.size(), call.output.size()) << "one entry per sampled id";
  std::string sampled;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string bytes = token_bytes(call.output[i]);
    const std::string token = token_ids ? "token_id:" + std::to_string(call.output[i]) : bytes;
    std::string shown;
    for (const json& b : content[i]["bytes"]) shown += static_cast<char>(b.get<int>());
    EXPECT_EQ(shown, token) << i;
    if (wire::is_valid_utf8(token)) {
      EXPECT_EQ(content[i]["token"], token) << i;
    } else {
      EXPECT_EQ(content[i]["token"], "\xEF\xBF\xBD") << "a part of a character shows U+FFFD";
    }
    EXPECT_EQ(as_float(content[i]["logprob"]), call.logprobs[i]) << i;
    EXPECT_EQ(content[i]["top_logprobs"], json::array());
    sampled += shown;
  }
  // The entries' bytes joined are the sampled text, special tokens as their strings.
  if (!token_ids) {
    EXPECT_EQ(sampled, make_tokenizer("byte")->decode(call.output));
  }
}

std::vector<json> stream_chunks(const std::string& body) {
  std::vector<json> out;
  for (size_t at = 0; (at = body.find("data: ", at)) != std::string::npos;) {
    const size_t end = body.find("\n\n", at);
    const std::string data = body.substr(at + 6, end - at - 6);
    if (data != "[DONE]") out.push_back(json::parse(data));
    at = end;
  }
  return out;
}

TEST(GatewayLogprobs, ChatAnswersShowEachSampledTokenAsTheExportRecordsIt) {
  for (const llm::ApiKind api : {llm::ApiKind::kSglang, llm::ApiKind::kOpenAi}) {
    SCOPED_TRACE(llm::api_kind_name(api));
    Bench bench(api);
    Harness h(bench.port(), "lp");
    const json first = h.turn({{"logprobs", true}});
    expect_entries(first["choices"][0]["logprobs"], bench.upstream->calls().back());
    EXPECT_EQ(first["choices"][0]["logprobs"]["content"].size(), first["usage"]["completion_tokens"]);
    // The harness's retry gets the stored answer, its entries included, and nothing is sampled twice.
    h.messages.erase(h.messages.end() - 1);
    const json again = h.turn({{"logprobs", true}});
    EXPECT_EQ(again["choices"][0]["logprobs"], first["choices"][0]["logprobs"]);
    EXPECT_EQ(bench.upstream->calls().size(), 1u);
    // Not asked: null, as before.
    h.add("user", "next");
    EXPECT_TRUE(h.turn()["choices"][0]["logprobs"].is_null());
    h.add("user", "again");
    SCOPED_TRACE("token ids");
    const json ids = h.turn({{"logprobs", true}, {"return_tokens_as_token_ids", true}});
    expect_entries(ids["choices"][0]["logprobs"], bench.upstream->calls().back(), true);
    // Sampled bytes that are not UTF-8: U+FFFD in `token`, the token's own bytes in `bytes`.
    SCOPED_TRACE("broken");
    h.add("user", "BROKENUTF8 now");
    const json broken = h.turn({{"logprobs", true}});
    expect_entries(broken["choices"][0]["logprobs"], bench.upstream->calls().back());
    // Turns across several compactions: every answer is its execution call's, and the export holds them.
    for (int t = 0; t < 24; ++t) {
      SCOPED_TRACE(t);
      h.add("user", "turn " + std::to_string(t) + " " + std::string(60, 'x'));
      const json answer = h.turn({{"logprobs", true}});
      expect_entries(answer["choices"][0]["logprobs"], bench.upstream->calls().back());
    }
    EXPECT_GE(h.state()["compactions"].get<int>(), 2);
    ASSERT_EQ(h.reward(1.0).status, 200);
    check_exact(h.export_json(), bench.upstream->calls());
  }
}

// Exactly one chunk carries the entries: the first with sampled text (the content, else the first tool
// call), and they are the non-streamed answer's.
TEST(GatewayLogprobs, AStreamCarriesTheEntriesOnItsFirstChunkWithSampledText) {
  Bench bench;
  const auto carried = [](const std::vector<json>& chunks) {
    std::vector<size_t> out;
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (!chunks[i]["choices"].empty() && !chunks[i]["choices"][0]["logprobs"].is_null()) out.push_back(i);
    }
    return out;
  };
  Harness h(bench.port(), "lp-stream");
  const auto reply = h.post({{"messages", h.messages}, {"stream", true}, {"logprobs", true}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  std::vector<json> chunks = stream_chunks(reply.body);
  std::vector<size_t> with = carried(chunks);
  ASSERT_EQ(with.size(), 1u) << reply.body;
  EXPECT_EQ(chunks[with[0]]["choices"][0]["delta"]["content"], "ack m0 0");
  expect_entries(chunks[with[0]]["choices"][0]["logprobs"], bench.upstream->calls().back());

  Harness tool(bench.port(), "lp-tool");
  tool.messages[1]["content"] = "please call the tool";
  const auto called = tool.post({{"messages", tool.messages}, {"stream", true}, {"logprobs", true}});
  ASSERT_EQ(called.status, 200) << called.body;
  chunks = stream_chunks(called.body);
  with = carried(chunks);
  ASSERT_EQ(with.size(), 1u) << called.body;
  EXPECT_EQ(chunks[with[0]]["choices"][0]["delta"]["tool_calls"][0]["index"], 0) << called.body;
  expect_entries(chunks[with[0]]["choices"][0]["logprobs"], bench.upstream->calls().back());
}

// The completions' legacy shape for `logprobs: 0`: tokens, their log-probs, the characters before each,
// and the sampled token alone as each position's top entry; in a stream, on the text chunk.
TEST(GatewayLogprobs, PlainCompletionsShowTokensOffsetsAndTheSampledToken) {
  Bench bench;
  TextHarness h(bench.port(), "lp-plain");
  const json answer = h.turn({{"logprobs", 0}});
  const crl::testing::LoggedCall call = bench.upstream->calls().back();
  const json& logprobs = answer["choices"][0]["logprobs"];
  ASSERT_TRUE(logprobs.is_object()) << answer;
  ASSERT_EQ(logprobs["tokens"].size(), call.output.size());
  std::string joined;
  for (size_t i = 0; i < call.output.size(); ++i) {
    EXPECT_EQ(logprobs["tokens"][i], token_bytes(call.output[i]));
    EXPECT_EQ(as_float(logprobs["token_logprobs"][i]), call.logprobs[i]);
    EXPECT_EQ(logprobs["text_offset"][i], joined.size()) << "ASCII: one character per byte";
    EXPECT_EQ(logprobs["top_logprobs"][i],
              json({{token_bytes(call.output[i]), logprobs["token_logprobs"][i]}}));
    joined += token_bytes(call.output[i]);
  }
  EXPECT_TRUE(joined.starts_with(answer["choices"][0]["text"].get<std::string>())) << joined;

  h.prompt += "\nObservation: 3\nThought:";
  const auto streamed =
      h.post({{"prompt", h.prompt}, {"stream", true}, {"logprobs", 0}, {"return_tokens_as_token_ids", true}});
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const std::vector<json> chunks = stream_chunks(streamed.body);
  ASSERT_GE(chunks.size(), 2u);
  const json& shown = chunks[0]["choices"][0]["logprobs"];
  const crl::testing::LoggedCall second = bench.upstream->calls().back();
  ASSERT_EQ(shown["tokens"].size(), second.output.size()) << streamed.body;
  for (size_t i = 0; i < second.output.size(); ++i)
    EXPECT_EQ(shown["tokens"][i], "token_id:" + std::to_string(second.output[i]));
  EXPECT_TRUE(chunks[1]["choices"][0]["logprobs"].is_null()) << "the finish chunk: null";
}

// top_logprobs (chat) and logprobs: K (completions) ask the upstream for K alternatives per sampled token
// (SGLang top_logprobs_num, OpenAI logprobs) on execution calls only; the answer shows the K most likely,
// most likely first (chat) or with the sampled token as one text-keyed object (completions).
TEST(GatewayLogprobs, TopLogprobsAreTheUpstreamsMostLikelyTokens) {
  for (const llm::ApiKind api : {llm::ApiKind::kSglang, llm::ApiKind::kOpenAi}) {
    SCOPED_TRACE(llm::api_kind_name(api));
    Bench bench(api);
    Harness h(bench.port(), "top");
    for (int t = 0; t < 16; ++t) {
      if (t) h.add("user", "turn " + std::to_string(t) + " " + std::string(60, 'y'));
      const json answer = h.turn({{"logprobs", true}, {"top_logprobs", 3}});
      const crl::testing::LoggedCall call = bench.upstream->calls().back();
      EXPECT_EQ(call.top_logprobs, 3);
      const json& content = answer["choices"][0]["logprobs"]["content"];
      ASSERT_EQ(content.size(), call.output.size());
      for (size_t i = 0; i < content.size(); ++i) {
        const json& top = content[i]["top_logprobs"];
        ASSERT_EQ(top.size(), 3u) << content[i];
        for (size_t k = 0; k < 3; ++k) {
          std::string bytes;
          for (const json& b : top[k]["bytes"]) bytes += static_cast<char>(b.get<int>());
          EXPECT_EQ(bytes, token_bytes(call.top[i][k].first)) << i << " " << k;
          EXPECT_EQ(as_float(top[k]["logprob"]), call.top[i][k].second);
          EXPECT_FALSE(top[k].contains("top_logprobs"));
        }
      }
    }
    // Summaries never ask for alternatives (SGLang: no top_logprobs_num; OpenAI: the 1 it always asks).
    int summaries = 0;
    for (const crl::testing::LoggedCall& call : bench.upstream->calls()) {
      if (call.rid.find("/summarize/") == std::string::npos) continue;
      ++summaries;
      EXPECT_EQ(call.top_logprobs, api == llm::ApiKind::kSglang ? 0 : 1);
    }
    EXPECT_GE(summaries, 1);
    ASSERT_EQ(h.reward(1.0).status, 200);
    check_exact(h.export_json(), bench.upstream->calls());

    TextHarness text(bench.port(), "top-plain");
    const json completion = text.turn({{"logprobs", 2}});
    const crl::testing::LoggedCall call = bench.upstream->calls().back();
    const json& logprobs = completion["choices"][0]["logprobs"];
    ASSERT_EQ(logprobs["top_logprobs"].size(), call.output.size());
    for (size_t i = 0; i < call.output.size(); ++i) {
      json expected = json::object();
      for (size_t k = 0; k < 2; ++k) expected[token_bytes(call.top[i][k].first)] = call.top[i][k].second;
      expected[token_bytes(call.output[i])] = call.logprobs[i];
      const json& shown = logprobs["top_logprobs"][i];
      ASSERT_EQ(shown.size(), expected.size()) << shown;
      for (const auto& [token, value] : expected.items())
        EXPECT_EQ(as_float(shown[token]), value.get<float>());
    }
  }
}

// return_token_ids: every answer's prompt_token_ids are the window the upstream was sent (after each
// compaction the rebuilt one, far shorter than the harness's history) and its token_ids what it sampled; a
// retry shows the same, asked or not the first time; streams carry the prompt on their first chunk.
TEST(GatewayTokenIds, AnswersShowTheWindowThePolicySawAndTheSampledIds) {
  Bench bench;
  Harness h(bench.port(), "ids");
  const json ask = {{"return_token_ids", true}};
  const auto expect_ids = [&](const json& answer) {
    const crl::testing::LoggedCall call = bench.upstream->calls().back();
    EXPECT_EQ(ids_of(answer["prompt_token_ids"]), call.prompt);
    EXPECT_EQ(ids_of(answer["choices"][0]["token_ids"]), call.output);
  };
  const json first = h.turn(ask);
  expect_ids(first);
  h.messages.erase(h.messages.end() - 1);
  EXPECT_EQ(h.turn(ask), first) << "a retry answers the stored answer, ids included";
  h.add("user", "next");
  const json plain = h.turn();
  EXPECT_FALSE(plain.contains("prompt_token_ids"));
  EXPECT_FALSE(plain["choices"][0].contains("token_ids"));
  h.messages.erase(h.messages.end() - 1);
  expect_ids(h.turn(ask));  // a retry that asks what the first call did not
  EXPECT_EQ(bench.upstream->calls().size(), 2u);
  size_t shortest = SIZE_MAX;
  for (int t = 0; t < 24; ++t) {
    h.add("user", "turn " + std::to_string(t) + " " + std::string(60, 'x'));
    const json answer = h.turn(ask);
    expect_ids(answer);
    shortest = std::min(shortest, answer["prompt_token_ids"].size());
  }
  EXPECT_GE(h.state()["compactions"].get<int>(), 2);
  EXPECT_LT(shortest, h.messages.dump().size() / 2) << "a compacted window, not the whole history";

  const auto streamed = h.post({{"messages", h.messages}, {"stream", true}, {"return_token_ids", true}});
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const std::vector<json> chunks = stream_chunks(streamed.body);
  ASSERT_GE(chunks.size(), 3u);
  const crl::testing::LoggedCall call = bench.upstream->calls().back();
  EXPECT_EQ(ids_of(chunks[0]["prompt_token_ids"]), call.prompt);
  EXPECT_EQ(ids_of(chunks[1]["choices"][0]["token_ids"]), call.output) << "with the content";
  for (size_t i = 1; i < chunks.size(); ++i) EXPECT_FALSE(chunks[i].contains("prompt_token_ids"));

  TextHarness text(bench.port(), "ids-plain");
  const json completion = text.turn(ask);
  const crl::testing::LoggedCall plain_call = bench.upstream->calls().back();
  EXPECT_EQ(ids_of(completion["choices"][0]["prompt_token_ids"]), plain_call.prompt);
  EXPECT_EQ(ids_of(completion["choices"][0]["token_ids"]), plain_call.output);
  ASSERT_EQ(h.reward(1.0).status, 200);
  std::vector<crl::testing::LoggedCall> calls = bench.upstream->calls();
  std::erase_if(calls, [](const crl::testing::LoggedCall& c) { return !c.rid.starts_with("ids/"); });
  check_exact(h.export_json(), calls);
}

TEST(GatewayLogprobs, BadValuesAre400NamingTheFieldAndNothingIsSampled) {
  Bench bench;
  server::testing::HttpClient client(bench.port());
  const json messages = {{{"role", "user"}, {"content", "x"}}};
  const auto expect_400 = [&](const std::string& path, json body, const std::string& code,
                              const std::string& param) {
    const auto reply = client.call("POST", path, body.dump());
    EXPECT_EQ(reply.status, 400) << body.dump() << " " << reply.body;
    const json error = json::parse(reply.body)["error"];
    EXPECT_EQ(error["code"], code) << reply.body;
    EXPECT_EQ(error["param"], param) << reply.body;
  };
  const std::string chat = "/v1/sessions/lp-bad/v1/chat/completions";
  const std::string plain = "/v1/sessions/lp-bad-plain/v1/completions";
  expect_400(chat, {{"messages", messages}, {"logprobs", "yes"}}, "bad_field", "logprobs");
  expect_400(chat, {{"messages", messages}, {"logprobs", 1}}, "bad_field", "logprobs");
  expect_400(chat, {{"messages", messages}, {"top_logprobs", 5}}, "bad_field",
             "top_logprobs");  // no logprobs
  for (const json& bad : {json(-1), json(21), json(1.5), json("3")})
    expect_400(chat, {{"messages", messages}, {"top_logprobs", bad}}, "bad_field", "top_logprobs");
  expect_400(chat, {{"messages", messages}, {"return_tokens_as_token_ids", 1}}, "bad_field",
             "return_tokens_as_token_ids");
  expect_400(chat, {{"messages", messages}, {"return_token_ids", "yes"}}, "bad_field", "return_token_ids");
  expect_400(plain, {{"prompt", "x"}, {"return_token_ids", 0}}, "bad_field", "return_token_ids");
  expect_400(plain, {{"prompt", "x"}, {"logprobs", 21}}, "bad_field", "logprobs");
  expect_400(plain, {{"prompt", "x"}, {"logprobs", true}}, "bad_field", "logprobs");
  expect_400(plain, {{"prompt", "x"}, {"logprobs", -1}}, "bad_field", "logprobs");
  EXPECT_EQ(bench.upstream->calls().size(), 0u);
  // Absent, null, false and 0 are the same call as before.
  const auto fine = client.call(
      "POST", chat, json{{"messages", messages}, {"logprobs", false}, {"top_logprobs", 0}}.dump());
  EXPECT_EQ(fine.status, 200) << fine.body;
  EXPECT_TRUE(json::parse(fine.body)["choices"][0]["logprobs"].is_null());
}

}  // namespace
}  // namespace crl::server::gateway::testing
