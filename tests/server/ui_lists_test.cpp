// The viewer's lists (`crl serve --ui`, server/ui_routes.h): off by default (404 ui_disabled saying how to
// turn them on); on, GET /v1/episodes lists the live episodes newest first with paging, and the ring of
// recently finished exports keeps the last --keep-exports episodes for GET /v1/exports[/{id}], after DELETE
// and after the idle reaper. Hostile queries are typed 400s.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/episode_service.h"
#include "server/router.h"

namespace crl::server {
namespace {

using json = nlohmann::json;

struct Answer {
  int status;
  json body;
};

Answer call(EpisodeService& service, const std::string& method, const std::string& target,
            const std::string& body = "") {
  const HttpAnswer a = route(service, {method, target, "application/json", "", body, false});
  return Answer{a.status, json::parse(a.body)};
}

std::string create(EpisodeService& service, const std::string& task) {
  const Answer a = call(service, "POST", "/v1/episodes",
                        R"({"env":"memory_chain","task_id":")" + task +
                            R"(","seed":3,"params":{"length":"4","reset_points":""}})");
  EXPECT_EQ(a.status, 200) << a.body.dump();
  return a.body["episode_id"];
}

void finish(EpisodeService& service, const std::string& id) {
  for (int turn = 0; turn < 4; ++turn) {
    const std::string text = turn == 3 ? "answer 0" : "continue";
    const Answer a = call(service, "POST", "/v1/episodes/" + id + "/step",
                          R"({"turn_id":)" + std::to_string(turn) +
                              R"(,"action":{"kind":"assistant","text":")" + text + "\"}}");
    ASSERT_EQ(a.status, 200) << a.body.dump();
  }
}

ServiceOptions ui_options(size_t keep = 32) {
  ServiceOptions o;
  o.ui = true;
  o.keep_exports = keep;
  return o;
}

TEST(UiLists, OffByDefaultEveryListRouteIsA404SayingHowToEnableIt) {
  EpisodeService service(ServiceOptions{});
  const std::string id = create(service, "h1");
  finish(service, id);
  for (const std::string& target :
       std::vector<std::string>{"/v1/episodes", "/v1/episodes?limit=5", "/v1/exports", "/v1/exports/" + id}) {
    const Answer a = call(service, "GET", target);
    EXPECT_EQ(a.status, 404) << target;
    EXPECT_EQ(a.body["code"], "ui_disabled") << target;
    EXPECT_NE(a.body["message"].get<std::string>().find("crl serve --ui"), std::string::npos);
    EXPECT_EQ(a.body.dump().find(id), std::string::npos) << "an id leaked: " << a.body.dump();
  }
  // The trainer protocol is unchanged: POST creates, the episode's own routes answer.
  EXPECT_EQ(call(service, "GET", "/v1/episodes/" + id + "/export").status, 200);
  EXPECT_EQ(call(service, "PUT", "/v1/episodes").status, 405);
}

TEST(UiLists, LiveEpisodesNewestFirstWithStatusStepsAndPaging) {
  EpisodeService service(ui_options());
  const std::string a = create(service, "h1"), b = create(service, "h2"), c = create(service, "h3");
  finish(service, b);
  call(service, "POST", "/v1/episodes/" + c + "/step",
       R"({"turn_id":0,"action":{"kind":"assistant","text":"continue"}})");
  Answer all = call(service, "GET", "/v1/episodes");
  ASSERT_EQ(all.status, 200) << all.body.dump();
  ASSERT_EQ(all.body["total"], 3);
  ASSERT_EQ(all.body["episodes"].size(), 3u);
  std::map<std::string, json> by_id;
  for (const json& e : all.body["episodes"]) by_id[e["episode_id"]] = e;
  EXPECT_EQ(by_id[a]["status"], "running");
  EXPECT_EQ(by_id[a]["task_id"], "h1");
  EXPECT_EQ(by_id[a]["env"], "memory_chain");
  EXPECT_EQ(by_id[b]["status"], "done");
  EXPECT_EQ(by_id[b]["steps"], 4);
  EXPECT_EQ(by_id[c]["steps"], 1);
  EXPECT_GT(by_id[a]["created_unix_s"].get<double>(), 1.6e9);
  // Newest first; pages partition the list.
  const json& items = all.body["episodes"];
  for (size_t i = 1; i < items.size(); ++i) {
    EXPECT_GE(items[i - 1]["created_unix_s"].get<double>(), items[i]["created_unix_s"].get<double>());
  }
  const Answer first = call(service, "GET", "/v1/episodes?limit=2");
  const Answer rest = call(service, "GET", "/v1/episodes?offset=2&limit=2");
  ASSERT_EQ(first.body["episodes"].size(), 2u);
  ASSERT_EQ(rest.body["episodes"].size(), 1u);
  EXPECT_EQ(first.body["episodes"][0], items[0]);
  EXPECT_EQ(first.body["episodes"][1], items[1]);
  EXPECT_EQ(rest.body["episodes"][0], items[2]);
  EXPECT_EQ(call(service, "GET", "/v1/episodes?offset=99").body["episodes"].size(), 0u);
  // A deleted episode leaves the live list.
  call(service, "DELETE", "/v1/episodes/" + a);
  EXPECT_EQ(call(service, "GET", "/v1/episodes").body["total"], 2);
}

TEST(UiLists, HostileQueriesAreTyped400s) {
  EpisodeService service(ui_options());
  for (const std::string& q :
       std::vector<std::string>{"limit=0", "limit=1001", "limit=-1", "limit=abc", "limit=", "offset=1e3",
                                "limit=99999999999999999999999", "offset=-5"}) {
    const Answer a = call(service, "GET", "/v1/episodes?" + q);
    EXPECT_EQ(a.status, 400) << q;
    EXPECT_EQ(a.body["code"], "bad_query") << q;
    EXPECT_EQ(call(service, "GET", "/v1/exports?" + q).status, 400) << q;
  }
  EXPECT_EQ(call(service, "POST", "/v1/exports").status, 405);
  EXPECT_EQ(call(service, "DELETE", "/v1/exports/x").status, 405);
  const Answer missing = call(service, "GET", "/v1/exports/ep-00000000000000000000000000000000");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.body["code"], "unknown_export");
}

TEST(UiLists, FinishedExportsOutliveDeleteAndTheReaperInABoundedRing) {
  ServiceOptions o = ui_options(/*keep=*/2);
  EpisodeService service(o);
  std::vector<std::string> ids;
  std::vector<json> exports;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(create(service, "h" + std::to_string(i)));
    finish(service, ids.back());
    exports.push_back(call(service, "GET", "/v1/episodes/" + ids.back() + "/export").body);
    EXPECT_EQ(call(service, "DELETE", "/v1/episodes/" + ids.back()).status, 200);
  }
  const Answer list = call(service, "GET", "/v1/exports");
  ASSERT_EQ(list.status, 200);
  EXPECT_EQ(list.body["total"], 2);  // the oldest went
  ASSERT_EQ(list.body["episodes"].size(), 2u);
  EXPECT_EQ(list.body["episodes"][0]["episode_id"], ids[2]);
  EXPECT_EQ(list.body["episodes"][1]["episode_id"], ids[1]);
  EXPECT_EQ(list.body["episodes"][0]["task_id"], "h2");
  EXPECT_EQ(list.body["episodes"][0]["steps"], 4);
  EXPECT_EQ(list.body["episodes"][0]["segments"], exports[2]["segments"].size());
  EXPECT_EQ(call(service, "GET", "/v1/exports/" + ids[0]).body["code"], "unknown_export");
  // The kept export is the one the episode gave before it was deleted.
  EXPECT_EQ(call(service, "GET", "/v1/exports/" + ids[2]).body, exports[2]);
  EXPECT_EQ(call(service, "GET", "/v1/exports/" + ids[1]).body, exports[1]);

  // Reaped without ever being exported by its client: still kept.
  ServiceOptions reap = ui_options();
  reap.idle_timeout_s = 1e-9;
  EpisodeService reaping(reap);
  const std::string id = create(reaping, "r1");
  finish(reaping, id);
  EXPECT_EQ(reaping.reap_idle(), 1u);
  EXPECT_EQ(call(reaping, "GET", "/v1/episodes/" + id).status, 404);
  const Answer kept = call(reaping, "GET", "/v1/exports/" + id);
  ASSERT_EQ(kept.status, 200) << kept.body.dump();
  EXPECT_EQ(kept.body["episode_id"], id);
  EXPECT_FALSE(kept.body["segments"].empty());
}

TEST(UiLists, KeepExportsZeroKeepsNothing) {
  EpisodeService service(ui_options(/*keep=*/0));
  const std::string id = create(service, "h1");
  finish(service, id);
  EXPECT_EQ(call(service, "GET", "/v1/exports").body["total"], 0);
  EXPECT_EQ(call(service, "GET", "/v1/exports/" + id).status, 404);
  EXPECT_EQ(call(service, "GET", "/v1/episodes/" + id + "/export").status, 200);  // unaffected
}

}  // namespace
}  // namespace crl::server
