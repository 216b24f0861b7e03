// `crl lm serve` (policies/lm/serve.h behind the engine's HTTP server): `crl rollout` against it on loopback
// with both APIs, the sampled ids' log-probs equal to the model's forward pass, the APIs' answer and error
// shapes, determinism with a seed, stop strings, and typed errors for a bad checkpoint or tokenizer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "cli/lm_command.h"
#include "cli/tokenize_train.h"
#include "engine/bpe_trainer.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/tokenizer.h"
#include "engine/trajectory_io.h"
#include "policies/lm/checkpoint.h"
#include "policies/lm/cuda/lm_cuda.h"
#include "scenarios/checkpoint.h"
#include "tests/crl_cli.h"
#include "tests/server/http_client.h"
#include "tests/server/test_server.h"
#include "tests/temp_dir.h"

namespace crl {
namespace {

using json = nlohmann::json;

// A tokenizer trained on the synthetic suite and a small random model, written once per process.
struct Fixture {
  crl::test::TempDir dir{"lm_serve"};
  std::string tokenizer, checkpoint;
  lm::LmConfig config;
  Fixture() {
    tokenizer = dir.file("tokenizer.json");
    write_file_atomic(tokenizer,
                      bpe_tokenizer_json(train_bpe(cli::synthetic_corpus("dev"), BpeTrainOptions{})));
    config.vocab = 512;
    config.d_model = 32;
    config.heads = 2;
    config.layers = 2;
    config.d_ff = 64;
    config.max_positions = 1024;
    lm::LmModel model(config);
    model.initialize(5);
    proto::checkpoint::Checkpoint ckpt;
    lm::save_lm_state(model, lm::LmOptimizer(model.layout()), make_tokenizer(tokenizer)->fingerprint(),
                      *ckpt.mutable_policy());
    checkpoint = dir.file("lm.ckpt");
    scenarios::write_checkpoint(checkpoint, ckpt);
  }
};

const Fixture& fixture() {
  static const Fixture f;
  return f;
}

// The in-process server: the service's routes in front of the engine's HTTP server.
struct LmTestServer {
  std::unique_ptr<lm::LmService> service =
      cli::load_lm_service(fixture().checkpoint, fixture().tokenizer, "tiny");
  std::unique_ptr<server::testing::TestServer> http;
  LmTestServer() {
    server::HttpOptions options;
    options.workers = 4;
    cli::serve_lm_routes(*service, options);
    http = std::make_unique<server::testing::TestServer>(options);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(http->port()); }
};

// Every sampled token's behaviour log-prob equals log softmax of the model's forward pass over the segment's
// context (prompt + response), at that position.
void expect_logprobs_match_forward(const lm::LmModel& model, const std::vector<Trajectory>& trajectories) {
  int64_t checked = 0;
  for (const Trajectory& t : trajectories) {
    for (const Segment& s : t.segments) {
      std::vector<int32_t> seq(s.prompt_ids.begin(), s.prompt_ids.end());
      seq.insert(seq.end(), s.response_ids.begin(), s.response_ids.end());
      ASSERT_LE(static_cast<int>(seq.size()), model.config().max_positions);
      lm::PackedBatch batch;
      batch.add_sequence(seq);
      const lm::ForwardResult f = model.forward(batch);
      for (size_t k = 0; k < s.response_ids.size(); ++k) {
        if (!s.actor_mask[k]) continue;
        const size_t at = s.prompt_ids.size() + k - 1;  // the position that predicts response token k
        EXPECT_NEAR(s.logprobs[k], f.logp[at], 2e-4f) << t.task_id << " token " << k;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 100);
}

TEST(LmServe, RolloutAgainstTheServerWithBothApisMatchesTheForwardPass) {
  LmTestServer server;
  std::vector<std::vector<Trajectory>> runs;
  for (const std::string api : {"sglang", "openai"}) {
    const std::string out = fixture().dir.file("rollout-" + api + ".jsonl");
    const auto r = test::crl({"rollout",
                              "--env",
                              "synthetic",
                              "--split",
                              "dev",
                              "--tasks",
                              "2",
                              "--llm",
                              server.url(),
                              "--api",
                              api,
                              "--tokenizer",
                              fixture().tokenizer,
                              "--out",
                              out,
                              "--seed",
                              "7",
                              "--capacity",
                              "1024",
                              "--reserve",
                              "256",
                              "--summary-cap",
                              "64",
                              "--per-turn-cap",
                              "24"});
    ASSERT_EQ(r.code, 0) << r.err << r.out;
    EXPECT_NE(r.out.find("(0 failed)"), std::string::npos) << r.out;
    runs.push_back(read_trajectories(out));
    ASSERT_EQ(runs.back().size(), 2u);
    for (const Trajectory& t : runs.back()) EXPECT_NE(t.status, EpisodeStatus::kFailed) << t.reason;
    expect_logprobs_match_forward(server.service->model(), runs.back());
  }
  // Both APIs map the request's seed to the same stream: the same tokens and log-probs either way.
  for (size_t e = 0; e < 2; ++e) {
    ASSERT_EQ(runs[0][e].segments.size(), runs[1][e].segments.size());
    for (size_t s = 0; s < runs[0][e].segments.size(); ++s) {
      EXPECT_EQ(runs[0][e].segments[s].response_ids, runs[1][e].segments[s].response_ids);
      EXPECT_EQ(runs[0][e].segments[s].logprobs, runs[1][e].segments[s].logprobs);
    }
  }
}

json call(const lm::LmService& service, const std::string& path, const json& body, int status = 200) {
  const auto answer = service.handle("POST", path, body.dump());
  EXPECT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status, status) << answer->body;
  return json::parse(answer->body);
}

TEST(LmServe, CompletionsShapeSeedsStopStringsAndLogprobs) {
  const auto service = cli::load_lm_service(fixture().checkpoint, fixture().tokenizer, "tiny");
  const json req = {{"prompt", "Task: early_fact"},
                    {"max_tokens", 12},
                    {"seed", 3},
                    {"logprobs", 2},
                    {"return_token_ids", true},
                    {"n", 2}};
  const json a = call(*service, "/v1/completions", req);
  EXPECT_EQ(a["object"], "text_completion");
  EXPECT_EQ(a["model"], "tiny");
  ASSERT_EQ(a["choices"].size(), 2u);
  const json& c0 = a["choices"][0];
  EXPECT_EQ(c0["token_ids"].size(), 12u);
  EXPECT_EQ(c0["finish_reason"], "length");
  EXPECT_EQ(c0["logprobs"]["token_logprobs"].size(), 12u);
  EXPECT_EQ(c0["logprobs"]["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(c0["prompt_token_ids"], json(make_tokenizer(fixture().tokenizer)->encode("Task: early_fact")));
  EXPECT_NE(a["choices"][1]["token_ids"], c0["token_ids"]);  // choice i draws from its own stream
  EXPECT_EQ(a["usage"]["completion_tokens"], 24);
  // Same seed, same bytes; another seed, other tokens.
  EXPECT_EQ(service->handle("POST", "/v1/completions", req.dump())->body,
            service->handle("POST", "/v1/completions", req.dump())->body);
  json other = req;
  other["seed"] = 4;
  EXPECT_NE(call(*service, "/v1/completions", other)["choices"][0]["token_ids"], c0["token_ids"]);

  // A stop string spanning several tokens: the text is cut before it, the tokens end at the one completing
  // it, and stop_reason names it; include_stop_str_in_output keeps it. The random model writes arbitrary
  // bytes: look (deterministically) for a sample with three printable ASCII bytes across a token border.
  const auto tok = make_tokenizer(fixture().tokenizer);
  auto as_json_text = [](const std::string& raw) {  // what the answer's JSON makes of raw bytes
    return json::parse(json(raw).dump(-1, ' ', false, json::error_handler_t::replace));
  };
  json stopped_req = req;
  stopped_req["n"] = 1;
  std::string text, stop;
  std::vector<TokenId> ids;
  for (int seed = 0; seed < 200 && stop.empty(); ++seed) {
    stopped_req["seed"] = seed;
    ids =
        call(*service, "/v1/completions", stopped_req)["choices"][0]["token_ids"].get<std::vector<TokenId>>();
    text = tok->decode(ids);
    for (size_t j = 1; j + 1 < ids.size() && stop.empty(); ++j) {
      const size_t border = tok->decode(std::vector<TokenId>(ids.begin(), ids.begin() + j)).size();
      if (border < 1 || border + 2 > text.size()) continue;
      const std::string candidate = text.substr(border - 1, 3);
      bool printable = true;
      for (char ch : candidate) printable = printable && ch >= 0x20 && ch < 0x7f;
      if (printable) stop = candidate;
    }
  }
  ASSERT_FALSE(stop.empty());
  stopped_req["stop"] = stop;
  const json stopped = call(*service, "/v1/completions", stopped_req)["choices"][0];
  EXPECT_EQ(stopped["finish_reason"], "stop");
  EXPECT_EQ(stopped["stop_reason"], stop);
  const size_t at = text.find(stop);
  EXPECT_EQ(stopped["text"], as_json_text(text.substr(0, at)));
  EXPECT_LT(stopped["token_ids"].size(), ids.size());
  EXPECT_GE(stopped["token_ids"].size(), 2u);
  EXPECT_EQ(tok->decode(stopped["token_ids"].get<std::vector<TokenId>>()).find(stop), at);  // it completes it
  stopped_req["include_stop_str_in_output"] = true;
  EXPECT_EQ(call(*service, "/v1/completions", stopped_req)["choices"][0]["text"],
            as_json_text(text.substr(0, at + 3)));
  // Stop token ids.
  json by_id = req;
  by_id["n"] = 1;
  by_id["seed"] = stopped_req["seed"];
  by_id["stop_token_ids"] = {ids[3]};
  const json s = call(*service, "/v1/completions", by_id)["choices"][0];
  EXPECT_EQ(s["finish_reason"], "stop");
  EXPECT_EQ(s["stop_reason"], ids[3]);
  EXPECT_EQ(s["token_ids"].back(), ids[3]);
}

TEST(LmServe, GenerateHasSglangsShape) {
  const auto service = cli::load_lm_service(fixture().checkpoint, fixture().tokenizer, "tiny");
  const json req = {{"input_ids", {1, 2, 3}},
                    {"sampling_params", {{"max_new_tokens", 5}, {"temperature", 0}}},
                    {"return_logprob", true},
                    {"top_logprobs_num", 2},
                    {"rid", "r1"}};
  const json a = call(*service, "/generate", req);
  EXPECT_EQ(a["output_ids"].size(), 5u);
  EXPECT_EQ(a["meta_info"]["id"], "r1");
  EXPECT_EQ(a["meta_info"]["finish_reason"], json({{"type", "length"}, {"length", 5}}));
  EXPECT_EQ(a["meta_info"]["prompt_tokens"], 3);
  EXPECT_EQ(a["meta_info"]["completion_tokens"], 5);
  const json& lp = a["meta_info"]["output_token_logprobs"];
  ASSERT_EQ(lp.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(lp[i].size(), 3u);
    EXPECT_EQ(lp[i][1], a["output_ids"][i]);
    EXPECT_TRUE(lp[i][2].is_null());
    EXPECT_EQ(a["meta_info"]["output_top_logprobs"][i][0][1], a["output_ids"][i]);  // greedy = the best
  }
  // A batch answers a list; a stop id is SGLang's {type: stop, matched: id}.
  json batch = req;
  batch.erase("rid");
  batch["input_ids"] = {{1, 2, 3}, {4, 5}};
  batch["sampling_params"]["stop_token_ids"] = {a["output_ids"][1]};
  const json b = call(*service, "/generate", batch);
  ASSERT_TRUE(b.is_array());
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0]["meta_info"]["finish_reason"], json({{"type", "stop"}, {"matched", a["output_ids"][1]}}));
  const auto first = a["output_ids"].get<std::vector<int>>();
  EXPECT_EQ(b[0]["output_ids"].size(),
            static_cast<size_t>(std::find(first.begin(), first.end(), first[1]) - first.begin()) + 1);
  // Text input and a stop string (trimmed unless no_stop_trim).
  const json t = call(*service, "/generate",
                      {{"text", "next"}, {"sampling_params", {{"max_new_tokens", 8}, {"sampling_seed", 1}}}});
  EXPECT_EQ(t["output_ids"].size(), 8u);
}

// The `data:` payloads of a server-sent event stream, checking its framing: every event is one `data:`
// line and a blank line, and the stream ends with [DONE].
std::vector<json> sse_events(const std::string& body) {
  std::vector<json> events;
  size_t at = 0;
  bool done = false;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << "an event ends with a blank line";
    if (end == std::string::npos) break;
    const std::string event = body.substr(at, end - at);
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    EXPECT_EQ(event.find('\n'), std::string::npos) << "one line per event";
    EXPECT_FALSE(done) << "nothing after [DONE]";
    if (event == "data: [DONE]") {
      done = true;
    } else {
      events.push_back(json::parse(event.substr(6)));
    }
    at = end + 2;
  }
  EXPECT_TRUE(done) << "the stream ends with data: [DONE]";
  return events;
}

std::string stream_body(const lm::LmService& service, const std::string& path, const json& body) {
  const auto answer = service.handle("POST", path, body.dump());
  EXPECT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status, 200) << answer->body;
  EXPECT_EQ(answer->content_type, "text/event-stream");
  EXPECT_TRUE(answer->stream) << "a stream is produced as it is sampled";
  return lm::collect(*answer);
}

// A stream is the non-streamed answer cut into one event per token: OpenAI's deltas join to the same text,
// token ids and log-probs (choices round-robin, finish_reason only on each choice's last event, usage as
// stream_options ask), SGLang's events are the answer so far with the last one the whole answer; the same
// bytes for the same seed; Content-Type text/event-stream over HTTP.
TEST(LmServe, StreamsCutTheAnswerIntoOneEventPerToken) {
  const auto service = cli::load_lm_service(fixture().checkpoint, fixture().tokenizer, "tiny");
  json req = {{"prompt", "Task: early_fact"},
              {"max_tokens", 12},
              {"seed", 3},
              {"logprobs", 1},
              {"return_token_ids", true},
              {"n", 2}};
  const json whole = call(*service, "/v1/completions", req);
  req["stream"] = true;
  req["stream_options"] = {{"include_usage", true}};
  const std::string body = stream_body(*service, "/v1/completions", req);
  EXPECT_EQ(body, stream_body(*service, "/v1/completions", req));
  const std::vector<json> events = sse_events(body);
  ASSERT_EQ(events.size(), 2u * 12u + 1u);
  std::vector<std::string> text(2);
  std::vector<json> ids(2, json::array()), values(2, json::array()), offsets(2, json::array());
  for (size_t e = 0; e < 24; ++e) {
    const json& event = events[e];
    EXPECT_EQ(event["id"], whole["id"]);
    EXPECT_EQ(event["object"], "text_completion");
    EXPECT_EQ(event["model"], "tiny");
    ASSERT_TRUE(event.contains("usage"));
    EXPECT_TRUE(event["usage"].is_null());
    ASSERT_EQ(event["choices"].size(), 1u);
    const json& c = event["choices"][0];
    const size_t k = c["index"].get<size_t>();
    EXPECT_EQ(k, e % 2) << "choices round-robin, token by token";
    text[k] += c["text"].get<std::string>();
    ASSERT_EQ(c["token_ids"].size(), 1u);
    ids[k].push_back(c["token_ids"][0]);
    ASSERT_EQ(c["logprobs"]["token_logprobs"].size(), 1u);
    values[k].push_back(c["logprobs"]["token_logprobs"][0]);
    offsets[k].push_back(c["logprobs"]["text_offset"][0]);
    EXPECT_EQ(c["logprobs"]["top_logprobs"].size(), 1u);
    const bool last = e >= 22;
    EXPECT_EQ(c["finish_reason"], last ? json("length") : json(nullptr)) << e;
    EXPECT_TRUE(c["stop_reason"].is_null());
    EXPECT_EQ(c.contains("prompt_token_ids"), e < 2) << "the prompt's ids in each choice's first event";
    if (e < 2) {
      EXPECT_EQ(c["prompt_token_ids"], whole["choices"][k]["prompt_token_ids"]);
    }
  }
  for (size_t k = 0; k < 2; ++k) {
    const json& c = whole["choices"][k];
    EXPECT_EQ(text[k], c["text"].get<std::string>()) << "the deltas join to the answer's text";
    EXPECT_EQ(ids[k], c["token_ids"]);
    EXPECT_EQ(values[k], c["logprobs"]["token_logprobs"]);
    EXPECT_EQ(offsets[k], c["logprobs"]["text_offset"]);
  }
  EXPECT_TRUE(events.back()["choices"].empty());
  EXPECT_EQ(events.back()["usage"], whole["usage"]);

  // continuous_usage_stats: each event counts its choice's tokens so far.
  req["stream_options"]["continuous_usage_stats"] = true;
  const std::vector<json> counted = sse_events(stream_body(*service, "/v1/completions", req));
  for (size_t e = 0; e < 24; ++e) {
    EXPECT_EQ(counted[e]["usage"]["completion_tokens"], e / 2 + 1);
    EXPECT_EQ(counted[e]["usage"]["prompt_tokens"], whole["usage"]["prompt_tokens"].get<int>() / 2);
  }
  // Without stream_options: no usage at all; max_tokens 0: one empty event per choice.
  req.erase("stream_options");
  req["max_tokens"] = 0;
  const std::vector<json> empty = sse_events(stream_body(*service, "/v1/completions", req));
  ASSERT_EQ(empty.size(), 2u);
  for (const json& event : empty) {
    EXPECT_FALSE(event.contains("usage"));
    EXPECT_EQ(event["choices"][0]["text"], "");
    EXPECT_EQ(event["choices"][0]["finish_reason"], "length");
    EXPECT_TRUE(event["choices"][0]["token_ids"].empty());
  }

  // A stop string: the deltas never show it, the last event says why the choice stopped.
  json stop_req = {{"prompt", "Task: early_fact"}, {"max_tokens", 12}, {"seed", 3}};
  const json plain = call(*service, "/v1/completions", stop_req)["choices"][0];
  const std::string full = plain["text"].get<std::string>();
  std::string stop;
  for (size_t at = 4; at + 2 <= full.size() && stop.empty(); ++at) {
    const std::string candidate = full.substr(at, 2);
    if (candidate[0] >= 0x21 && candidate[0] < 0x7f && candidate[1] >= 0x21 && candidate[1] < 0x7f)
      stop = candidate;
  }
  ASSERT_FALSE(stop.empty()) << full;
  stop_req["stop"] = stop;
  const json cut = call(*service, "/v1/completions", stop_req)["choices"][0];
  stop_req["stream"] = true;
  const std::vector<json> stopped = sse_events(stream_body(*service, "/v1/completions", stop_req));
  ASSERT_EQ(stopped.size(), cut["token_ids"].size());
  std::string joined;
  for (const json& event : stopped) joined += event["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(joined, cut["text"].get<std::string>());
  EXPECT_EQ(stopped.back()["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(stopped.back()["choices"][0]["stop_reason"], stop);

  // SGLang: the answer so far in every event, finish_reason on the last, which is the whole answer.
  json gen = {{"input_ids", {1, 2, 3}},
              {"sampling_params", {{"max_new_tokens", 5}, {"sampling_seed", 2}}},
              {"return_logprob", true},
              {"rid", "r1"}};
  const std::string answer = service->handle("POST", "/generate", gen.dump())->body;
  gen["stream"] = true;
  const std::string gen_body = stream_body(*service, "/generate", gen);
  const std::vector<json> items = sse_events(gen_body);
  ASSERT_EQ(items.size(), 5u);
  const json a = json::parse(answer);
  for (size_t t = 0; t < 5; ++t) {
    EXPECT_EQ(
        items[t]["output_ids"],
        json(std::vector<json>(a["output_ids"].begin(), a["output_ids"].begin() + static_cast<long>(t + 1))));
    EXPECT_EQ(items[t]["meta_info"]["completion_tokens"], t + 1);
    EXPECT_EQ(items[t]["meta_info"]["output_token_logprobs"].size(), t + 1);
    EXPECT_EQ(items[t]["meta_info"]["id"], "r1");
    EXPECT_EQ(items[t]["meta_info"]["finish_reason"].is_null(), t < 4);
    EXPECT_EQ(a["text"].get<std::string>().rfind(items[t]["text"].get<std::string>(), 0), 0u)
        << "the text so far is a prefix of the answer";
    EXPECT_FALSE(items[t].contains("index"));
  }
  EXPECT_NE(gen_body.find("data: " + answer + "\n\ndata: [DONE]\n\n"), std::string::npos)
      << "the last event is the non-streamed answer, byte for byte";
  // A batch: each event names its prompt.
  gen.erase("rid");
  gen["input_ids"] = {{1, 2, 3}, {4, 5}};
  const std::vector<json> both = sse_events(stream_body(*service, "/generate", gen));
  ASSERT_EQ(both.size(), 10u);
  for (size_t e = 0; e < 10; ++e) EXPECT_EQ(both[e]["index"], e % 2);

  // Over HTTP: the Content-Type and the same bytes.
  LmTestServer server;
  server::testing::HttpClient client(server.http->port());
  const auto reply = client.call("POST", "/generate", gen.dump());
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.content_type, "text/event-stream");
  EXPECT_EQ(reply.body, stream_body(*service, "/generate", gen));
}

// A stream is produced as the model samples: one write per sampling round (the events of that round's
// tokens), then the usage and [DONE]; a writer that refuses (the client is gone) stops the sampling at once.
TEST(LmServe, StreamsWriteEachRoundAsItIsSampledAndStopWhenTheClientLeaves) {
  const auto service = cli::load_lm_service(fixture().checkpoint, fixture().tokenizer, "tiny");
  const json req = {{"prompt", "Task: early_fact"},
                    {"max_tokens", 12},
                    {"seed", 3},
                    {"n", 2},
                    {"stream", true},
                    {"stream_options", {{"include_usage", true}}}};
  for (const std::string path : {"/v1/completions", "/generate"}) {
    json body = req;
    if (path == "/generate") {
      body = {{"text", {"Task: early_fact", "Task: ordered_plan"}},
              {"sampling_params", {{"max_new_tokens", 12}, {"sampling_seed", 3}}},
              {"stream", true}};
    }
    const auto answer = service->handle("POST", path, body.dump());
    ASSERT_TRUE(answer && answer->stream);
    std::vector<std::string> pieces;
    answer->stream([&](std::string_view piece) {
      pieces.emplace_back(piece);
      return true;
    });
    ASSERT_EQ(pieces.size(), 13u) << path << ": 12 rounds, then the end";
    std::string joined;
    for (size_t i = 0; i < pieces.size(); ++i) {
      joined += pieces[i];
      if (i < 12) {
        EXPECT_EQ(sse_events(pieces[i] + "data: [DONE]\n\n").size(), 2u) << path << " round " << i;
      }
    }
    EXPECT_EQ(joined, stream_body(*service, path, body)) << path;
    EXPECT_NE(pieces.back().find("data: [DONE]"), std::string::npos);

    // The client is gone after the first round: nothing more is sampled (one more write: the end, refused).
    int writes = 0;
    const auto again = service->handle("POST", path, body.dump());
    again->stream([&](std::string_view) {
      ++writes;
      return false;
    });
    EXPECT_EQ(writes, 2) << path;
  }
}

// Text that may still become a stop string waits in a stream until the tokens that decide it: with a stop
// string that begins like a piece of the answer but never completes, no event's text so far ends with a
// beginning of it, and the deltas still join to the whole answer.
TEST(LmServe, StreamsHoldBackWhatMayBecomeAStopString) {
  const auto service = cli::load_lm_service(fixture().checkpoint, fixture().tokenizer, "tiny");
  json req = {{"prompt", "Task: early_fact"}, {"max_tokens", 16}, {"seed", 3}, {"logprobs", 0}};
  const json plain = call(*service, "/v1/completions", req)["choices"][0];
  const std::string full = plain["text"].get<std::string>();
  ASSERT_GE(full.size(), 8u) << full;
  // The last byte of the text after some token (printable ASCII), then bytes the answer never holds.
  const json& offsets = plain["logprobs"]["text_offset"];
  std::string stop;
  for (size_t t = 1; t + 1 < offsets.size() && stop.empty(); ++t) {
    const size_t end = offsets[t].get<size_t>();
    if (end > 0 && full[end - 1] >= 0x21 && full[end - 1] < 0x7f)
      stop = full.substr(end - 1, 1) + "\x01\x02\x03";
  }
  ASSERT_FALSE(stop.empty()) << full;
  req["stop"] = stop;
  const json cut = call(*service, "/v1/completions", req)["choices"][0];
  ASSERT_EQ(cut["text"], full) << "the stop string never completes";
  ASSERT_EQ(cut["finish_reason"], "length");
  req["stream"] = true;
  const std::vector<json> events = sse_events(stream_body(*service, "/v1/completions", req));
  ASSERT_EQ(events.size(), 16u);
  std::string joined;
  int held = 0;
  for (size_t t = 0; t < events.size(); ++t) {
    joined += events[t]["choices"][0]["text"].get<std::string>();
    if (t + 1 == events.size()) break;
    for (size_t length = 1; length < stop.size(); ++length) {
      EXPECT_FALSE(joined.size() >= length &&
                   joined.compare(joined.size() - length, length, stop, 0, length) == 0)
          << "event " << t << " shows the beginning of the stop string: " << joined;
    }
    // The text the tokens so far decode to (the next token's offset): longer when something was held.
    const size_t so_far = plain["logprobs"]["text_offset"][t + 1].get<size_t>();
    if (joined.size() < so_far) ++held;
  }
  EXPECT_EQ(joined, full);
  EXPECT_GT(held, 0) << "the answer contains the stop string's first two bytes: something was held back";
}

TEST(LmServe, TopKOneIsGreedyOnBothApis) {
  const auto service = cli::load_lm_service(fixture().checkpoint, fixture().tokenizer, "tiny");
  const json greedy =
      call(*service, "/generate",
           {{"input_ids", {1, 2, 3}}, {"sampling_params", {{"max_new_tokens", 12}, {"temperature", 0}}}});
  for (const int seed : {1, 2, 3}) {
    const json k1 =
        call(*service, "/generate",
             {{"input_ids", {1, 2, 3}},
              {"sampling_params", {{"max_new_tokens", 12}, {"top_k", 1}, {"sampling_seed", seed}}}});
    EXPECT_EQ(k1["output_ids"], greedy["output_ids"]) << seed;
    const json c = call(*service, "/v1/completions",
                        {{"prompt", {1, 2, 3}}, {"max_tokens", 12}, {"top_k", 1}, {"seed", seed}});
    EXPECT_EQ(c["choices"][0]["token_ids"], greedy["output_ids"]) << seed;
  }
  // Off (-1, 0) samples as without it: the same bytes as a request without top_k.
  const json plain =
      call(*service, "/generate",
           {{"input_ids", {1, 2, 3}}, {"sampling_params", {{"max_new_tokens", 12}, {"sampling_seed", 4}}}});
  for (const int off : {-1, 0}) {
    const json same =
        call(*service, "/generate",
             {{"input_ids", {1, 2, 3}},
              {"sampling_params", {{"max_new_tokens", 12}, {"sampling_seed", 4}, {"top_k", off}}}});
    EXPECT_EQ(same, plain) << off;
  }
}

TEST(LmServe, GenerateReturnsThePromptsLogprobsFromLogprobStartLen) {
  const auto service = cli::load_lm_service(fixture().checkpoint, fixture().tokenizer, "tiny");
  const std::vector<int> prompt = {7, 3, 11, 5, 2};
  lm::PackedBatch batch;
  batch.add_sequence(std::vector<int32_t>(prompt.begin(), prompt.end()));
  const lm::ForwardResult f = service->model().forward(batch);
  for (const int start : {0, 3}) {
    const json a = call(*service, "/generate",
                        {{"input_ids", prompt},
                         {"sampling_params", {{"max_new_tokens", 2}}},
                         {"return_logprob", true},
                         {"logprob_start_len", start},
                         {"top_logprobs_num", 1},
                         {"return_text_in_logprobs", true}});
    const json& in = a["meta_info"]["input_token_logprobs"];
    ASSERT_EQ(in.size(), prompt.size() - static_cast<size_t>(start)) << a;
    ASSERT_EQ(a["meta_info"]["input_top_logprobs"].size(), in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      const size_t t = static_cast<size_t>(start) + i;
      EXPECT_EQ(in[i][1], prompt[t]);
      EXPECT_TRUE(in[i][2].is_string());
      if (t == 0) {  // SGLang: the first token has no log-prob
        EXPECT_TRUE(in[i][0].is_null());
        EXPECT_TRUE(a["meta_info"]["input_top_logprobs"][i].is_null());
      } else {
        EXPECT_NEAR(in[i][0].get<double>(), f.logp[static_cast<Eigen::Index>(t - 1)], 2e-5) << t;
        EXPECT_GE(a["meta_info"]["input_top_logprobs"][i][0][0].get<double>(), in[i][0].get<double>());
      }
    }
  }
  // The default (-1): no prompt entries; without return_logprob: no logprob fields at all.
  const json d =
      call(*service, "/generate",
           {{"input_ids", prompt}, {"return_logprob", true}, {"sampling_params", {{"max_new_tokens", 1}}}});
  EXPECT_EQ(d["meta_info"]["input_token_logprobs"], json::array());
  EXPECT_EQ(d["meta_info"]["output_token_logprobs"].size(), 1u);
  const json n =
      call(*service, "/generate",
           {{"input_ids", prompt}, {"logprob_start_len", 0}, {"sampling_params", {{"max_new_tokens", 1}}}});
  EXPECT_FALSE(n["meta_info"].contains("input_token_logprobs"));
}

TEST(LmServe, BadRequestsGetTheApisOwnErrorShapes) {
  const auto service = cli::load_lm_service(fixture().checkpoint, fixture().tokenizer, "tiny");
  struct Case {
    json body;
    std::string param, message;
  };
  const std::vector<Case> openai = {
      {json::object(), "prompt", "prompt is missing"},
      {{{"prompt", {1, 99999}}}, "prompt", "must be a token id in [0, 511]"},
      {{{"prompt", json::array()}}, "prompt", "must be a string"},
      {{{"prompt", "x"}, {"max_tokens", -1}}, "max_tokens", "max_tokens must be an integer"},
      {{{"prompt", "x"}, {"temperature", "hot"}}, "temperature", "must be a number"},
      {{{"prompt", "x"}, {"top_p", 0}}, "top_p", "top_p must be in"},
      {{{"prompt", "x"}, {"n", 100}}, "n", "n must be"},
      {{{"prompt", "x"}, {"logprobs", 50}}, "logprobs", "logprobs must be"},
      {{{"prompt", "x"}, {"stop", {1}}}, "stop", "stop must be"},
      {{{"prompt", "x"}, {"stop", ""}}, "stop", "empty"},
      {{{"prompt", "x"}, {"stream_options", {{"include_usage", true}}}}, "stream_options", "stream=True"},
      {{{"prompt", "x"}, {"stream", true}, {"stream_options", 3}}, "stream_options", "must be an object"},
      {{{"prompt", "x"}, {"stream", "yes"}}, "stream", "true or false"},
      {{{"prompt", "x"}, {"echo", true}}, "echo", "not supported"},
      // Constrained decoding is refused, never answered unconstrained.
      {{{"prompt", "x"}, {"response_format", {{"type", "json_object"}}}},
       "response_format",
       "no constrained decoding"},
      {{{"prompt", "x"}, {"guided_json", {{"type", "object"}}}}, "guided_json", "not supported"},
      {{{"prompt", "x"}, {"top_k", -2}}, "top_k", "top_k must be -1 or 0 (off) or at least 1"},
      {{{"prompt", std::vector<int>(1025, 1)}}, "prompt", "maximum context length is 1024"},
  };
  for (const Case& c : openai) {
    const json e = call(*service, "/v1/completions", c.body, 400);
    ASSERT_TRUE(e.contains("error")) << e;
    EXPECT_EQ(e["error"]["type"], "invalid_request_error");
    EXPECT_EQ(e["error"]["param"], c.param) << e;
    EXPECT_NE(e["error"]["message"].get<std::string>().find(c.message), std::string::npos) << e;
    EXPECT_TRUE(e["error"].contains("code"));
  }
  const auto bad_json = service->handle("POST", "/v1/completions", "{\"prompt\": ");
  EXPECT_EQ(bad_json->status, 400);
  EXPECT_NE(bad_json->body.find("not accepted JSON"), std::string::npos);
  const std::vector<json> sglang = {
      json::object(),
      {{"input_ids", {1}}, {"text", "x"}},
      {{"input_ids", {-1}}},
      {{"input_ids", {1}}, {"sampling_params", 3}},
      {{"input_ids", {1}}, {"sampling_params", {{"max_new_tokens", "x"}}}},
      {{"input_ids", {1}}, {"sampling_params", {{"stop_token_ids", {600}}}}},
      {{"input_ids", {{1}, {2}}}, {"rid", "one"}},
      {{"input_ids", {1, 2}}, {"return_logprob", true}, {"logprob_start_len", 2}},
      {{"input_ids", {1, 2}}, {"return_logprob", true}, {"logprob_start_len", -3}},
      {{"input_ids", {1}}, {"sampling_params", {{"top_k", -7}}}},
      {{"input_ids", {1}}, {"sampling_params", {{"json_schema", "{\"type\":\"object\"}"}}}},
      {{"input_ids", {1}}, {"sampling_params", {{"regex", "[a-z]+"}}}},
  };
  for (const json& body : sglang) {
    const json e = call(*service, "/generate", body, 400);
    ASSERT_TRUE(e.contains("error") && e["error"].contains("message")) << body << " -> " << e;
    EXPECT_EQ(e["error"].size(), 1u);  // SGLang's {"error": {"message": ...}}
  }
  EXPECT_EQ(service->handle("GET", "/v1/completions", "")->status, 405);
  EXPECT_EQ(service->handle("POST", "/v1/episodes", "{}")->status, 404);  // not the episode server
  EXPECT_FALSE(service->handle("GET", "/health", "").has_value());        // the transport answers it
  // Over HTTP: the same shapes, /health from the engine's server.
  LmTestServer server;
  server::testing::HttpClient client(server.http->port());
  const auto reply = client.call("POST", "/v1/completions", "[1, 2");
  EXPECT_EQ(reply.status, 400);
  EXPECT_NE(reply.body.find("\"invalid_request_error\""), std::string::npos) << reply.body;
  EXPECT_EQ(client.call("GET", "/health").status, 200);
  EXPECT_EQ(client.call("POST", "/v1/episodes", "{\"env\":\"synthetic\"}").status, 404);
  EXPECT_EQ(json::parse(client.call("GET", "/v1/models").body)["data"][0]["id"], "tiny");
}

TEST(LmServe, BadCheckpointOrTokenizerIsATypedError) {
  auto error_of = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  // Another tokenizer than the one the checkpoint records.
  EXPECT_NE(error_of([] { cli::load_lm_service(fixture().checkpoint, "byte", "x"); }).find("fingerprint"),
            std::string::npos);
  const crl::test::TempDir dir;
  const std::string cut = dir.write("cut.ckpt", read_file(fixture().checkpoint).substr(0, 100));
  EXPECT_NE(error_of([&] { cli::load_lm_service(cut, fixture().tokenizer, "x"); }).find("cut.ckpt"),
            std::string::npos);
  // A tokenizer larger than the model: refused at start, not at the first out-of-range id.
  const auto r = test::crl(
      {"lm", "init", "--out", dir.file("small.ckpt"), "--vocab", "300", "--tokenizer", fixture().tokenizer});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("more than --vocab 300"), std::string::npos) << r.err;
  ASSERT_EQ(test::crl({"lm", "init", "--out", dir.file("small.ckpt"), "--vocab", "300", "--d-model", "16",
                       "--heads", "2", "--layers", "1", "--d-ff", "16", "--max-positions", "64"})
                .code,
            0);
  EXPECT_NE(error_of([&] {
              cli::load_lm_service(dir.file("small.ckpt"), fixture().tokenizer, "x");
            }).find("more than the model's vocabulary of 300"),
            std::string::npos);
  EXPECT_EQ(test::crl({"lm", "serve"}).code, 1);
  EXPECT_EQ(test::crl({"lm", "bogus"}).code, 2);
  const auto bad_backend = test::crl({"lm", "serve", "--checkpoint", fixture().checkpoint, "--tokenizer",
                                      fixture().tokenizer, "--backend", "tpu", "--port", "0"});
  EXPECT_EQ(bad_backend.code, 1);
  EXPECT_NE(bad_backend.err.find("expected cpu or cuda"), std::string::npos) << bad_backend.err;
}

// --backend cuda: refused at start without a device (the server never listens); with one, the answers
// are the CPU's tokens with log-probs to float rounding.
TEST(LmServe, TheCudaBackendSamplesOnTheDeviceOrIsRefusedAtStart) {
  std::string why;
  if (!lm::lm_cuda_available(&why)) {
    try {
      cli::load_lm_service(fixture().checkpoint, fixture().tokenizer, "x", lm::LmBackend::kCuda);
      ADD_FAILURE() << "the cuda backend started without a device";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--backend"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
    }
    GTEST_SKIP() << "no CUDA device (" << why << "): the start-up refusal was checked, not the answers";
  }
  const auto cpu = cli::load_lm_service(fixture().checkpoint, fixture().tokenizer, "tiny");
  const auto gpu =
      cli::load_lm_service(fixture().checkpoint, fixture().tokenizer, "tiny", lm::LmBackend::kCuda);
  const json req = {
      {"prompt", "Task: early_fact"}, {"max_tokens", 16}, {"seed", 5}, {"logprobs", 0}, {"n", 3}};
  const json a = call(*cpu, "/v1/completions", req), b = call(*gpu, "/v1/completions", req);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(b["choices"][k]["token_ids"], a["choices"][k]["token_ids"]);
    const json& x = a["choices"][k]["logprobs"]["token_logprobs"];
    const json& y = b["choices"][k]["logprobs"]["token_logprobs"];
    ASSERT_EQ(x.size(), y.size());
    for (size_t t = 0; t < x.size(); ++t) EXPECT_NEAR(y[t].get<double>(), x[t].get<double>(), 1e-3);
  }
}

}  // namespace
}  // namespace crl
