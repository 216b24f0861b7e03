// OpenEnv's session protocol over the episode API, without sockets (server/openenv_session.h); the
// WebSocket transport is tested end to end by openenv_ws_test.py with python3-websockets as the client.
#include "server/openenv_session.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "server/router.h"
#include "tests/fuzz/corpus_replay.h"

namespace crl::server {

int fuzz_openenv_session(const uint8_t* data, size_t size);  // tests/fuzz/openenv_session_fuzz.cpp

namespace {

using nlohmann::json;

json ask(OpenEnvSession& session, const json& message) {
  const OpenEnvReply reply = session.handle(message.dump());
  EXPECT_FALSE(reply.close);
  return json::parse(reply.text);
}

const json kBudget = {{"capacity", 2560}, {"reserve", 768}};

TEST(OpenEnvSession, ResetStepStateCloseOverTheEpisodeApi) {
  EpisodeService service({});
  OpenEnvSession session(service, "memory_chain");
  json a = ask(session, {{"type", "reset"}, {"data", {{"task_id", "oe"}, {"seed", 5}, {"budget", kBudget}}}});
  ASSERT_EQ(a["type"], "observation") << a;
  EXPECT_TRUE(a["data"]["reward"].is_null());
  EXPECT_FALSE(a["data"]["done"]);
  EXPECT_FALSE(a["data"]["observation"]["prompt_ids"].empty());
  EXPECT_EQ(a["data"]["metadata"]["kind"], "observation");
  const std::string id = session.episode_id();
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(a["data"]["metadata"]["episode_id"], id);

  // Play on with "continue" until the first compaction request, answer it with a summary (kind defaulted).
  bool asked = false;
  for (int i = 0; i < 200 && !asked; ++i) {
    a = ask(session, {{"type", "step"}, {"data", {{"text", "continue"}}}});
    ASSERT_EQ(a["type"], "observation") << a;
    asked = a["data"]["metadata"]["compaction_request"].get<bool>();
  }
  ASSERT_TRUE(asked);
  EXPECT_EQ(a["data"]["observation"]["role"], "summarize");
  a = ask(session, {{"type", "step"}, {"data", {{"text", "FACT 1"}}}});
  ASSERT_EQ(a["type"], "observation") << a;
  EXPECT_TRUE(a["data"]["observation"]["prompt_rebuilt"]);
  EXPECT_EQ(a["data"]["metadata"]["compactions"], 1);

  json s = ask(session, {{"type", "state"}});
  ASSERT_EQ(s["type"], "state") << s;
  EXPECT_EQ(s["data"]["episode_id"], id);
  EXPECT_GT(s["data"]["step_count"].get<int>(), 0);

  // The engine sees the same episode.
  EXPECT_EQ(route(service, HttpCall{"GET", "/v1/episodes/" + id, "", "", "", false}).status, 200);
  const OpenEnvReply closed = session.handle(R"({"type":"close"})");
  EXPECT_TRUE(closed.close);
  EXPECT_TRUE(closed.text.empty());
  EXPECT_TRUE(session.episode_id().empty());
  EXPECT_EQ(route(service, HttpCall{"GET", "/v1/episodes/" + id, "", "", "", false}).status, 404);
}

TEST(OpenEnvSession, ResetRestartsAndEndDeletes) {
  EpisodeService service({});
  std::string first;
  {
    OpenEnvSession session(service, "memory_chain");
    ask(session, {{"type", "reset"}, {"data", {{"task_id", "a"}}}});
    first = session.episode_id();
    ask(session, {{"type", "reset"}, {"data", {{"task_id", "b"}, {"episode_id", "my-episode"}}}});
    EXPECT_NE(session.episode_id(), first);
    EXPECT_EQ(route(service, HttpCall{"GET", "/v1/episodes/" + first, "", "", "", false}).status, 404);
    first = session.episode_id();
  }  // the session goes away (its socket closed): its episode is deleted
  EXPECT_EQ(route(service, HttpCall{"GET", "/v1/episodes/" + first, "", "", "", false}).status, 404);
}

TEST(OpenEnvSession, BadMessagesGetOpenEnvErrorCodesAndTheSessionGoesOn) {
  EpisodeService service({});
  OpenEnvSession session(service, "");  // no default environment: a reset must name one
  const auto code = [&](std::string_view raw) {
    const json a = json::parse(session.handle(raw).text);
    EXPECT_EQ(a["type"], "error") << a;
    return a["data"]["code"].get<std::string>();
  };
  EXPECT_EQ(code("{"), "INVALID_JSON");
  EXPECT_EQ(code(R"([1,2])"), "VALIDATION_ERROR");
  EXPECT_EQ(code(R"({"type":1})"), "VALIDATION_ERROR");
  EXPECT_EQ(code(R"({"type":"fly"})"), "UNKNOWN_TYPE");
  // Invalid UTF-8 (which Beast's WebSocket reader refuses in text frames) is refused here too: the JSON
  // reader's message quoted the bytes, and writing that answer threw (a fuzzer's find).
  EXPECT_EQ(code("{\"type\":\"res\xE5t\"}"), "INVALID_JSON");
  EXPECT_EQ(code(R"({"type":"state","x":1})"), "VALIDATION_ERROR");
  EXPECT_EQ(code(R"({"type":"reset","data":"x"})"), "VALIDATION_ERROR");
  EXPECT_EQ(code(R"({"type":"reset","data":{"episode_id":7}})"), "VALIDATION_ERROR");
  EXPECT_EQ(code(R"({"type":"step","data":{"text":"continue"}})"), "SESSION_ERROR");
  EXPECT_EQ(code(R"({"type":"state"})"), "SESSION_ERROR");
  EXPECT_EQ(code(R"({"type":"reset","data":{"task_id":"t"}})"), "VALIDATION_ERROR");  // no env
  EXPECT_EQ(code(R"({"type":"reset","data":{"env":"nope","task_id":"t"}})"), "VALIDATION_ERROR");
  EXPECT_EQ(code(R"({"type":"reset","data":{"env":"memory_chain","task_id":"t","a":{"b":{"c":)" +
                 std::string(100, '[') + "}}}}"),
            "INVALID_JSON");  // too deep or malformed: never a crash
  const json ok =
      json::parse(session.handle(R"({"type":"reset","data":{"env":"memory_chain","task_id":"t"}})").text);
  EXPECT_EQ(ok["type"], "observation") << ok;
  const json bad =
      json::parse(session.handle(R"({"type":"step","data":{"token_ids":[1,2],"logprobs":[0.5]}})").text);
  EXPECT_EQ(bad["data"]["code"], "VALIDATION_ERROR") << bad;
  EXPECT_FALSE(bad["data"]["field"].get<std::string>().empty()) << bad;
  const json good = json::parse(session.handle(R"({"type":"step","data":{"text":"continue"}})").text);
  EXPECT_EQ(good["type"], "observation") << good;
}

TEST(OpenEnvSession, CapacityIsReportedAsCapacityReached) {
  ServiceOptions options;
  options.max_sessions = 1;
  EpisodeService service(options);
  OpenEnvSession a(service, "memory_chain"), b(service, "memory_chain");
  EXPECT_EQ(ask(a, {{"type", "reset"}, {"data", {{"task_id", "a"}}}})["type"], "observation");
  const json full = ask(b, {{"type", "reset"}, {"data", {{"task_id", "b"}}}});
  EXPECT_EQ(full["data"]["code"], "CAPACITY_REACHED") << full;
  EXPECT_EQ(full["data"]["status"], 429);
  EXPECT_GT(full["data"]["retry_after"].get<double>(), 0);
}

TEST(OpenEnvSession, DiscoveryRoutes) {
  EpisodeService service({});
  const HttpAnswer schema = route(service, HttpCall{"GET", "/schema", "", "", "", false});
  ASSERT_EQ(schema.status, 200);
  const json s = json::parse(schema.body);
  EXPECT_TRUE(s.contains("action") && s.contains("observation") && s.contains("state"));
  const HttpAnswer metadata = route(service, HttpCall{"GET", "/metadata", "", "", "", false});
  ASSERT_EQ(metadata.status, 200);
  EXPECT_EQ(json::parse(metadata.body)["name"], "crl");
  EXPECT_EQ(route(service, HttpCall{"GET", "/ws", "", "", "", false}).status, 426);
  EXPECT_EQ(route(service, HttpCall{"POST", "/schema", "", "", "", false}).status, 405);
}

// The fuzz target's seed corpus (tests/fuzz/corpus/openenv_session: sessions played, restarted and closed,
// token actions, bad messages): every answer a typed OpenEnv answer, no internal error, no episode left.
TEST(OpenEnvSession, FuzzSeedCorpusReplays) {
  EXPECT_GE(crl::testing::replay_corpus("openenv_session", fuzz_openenv_session), 5u);
}

}  // namespace
}  // namespace crl::server
