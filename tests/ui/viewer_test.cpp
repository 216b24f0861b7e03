// The viewer's page and data without a browser: script-safe JSON, the Content-Security-Policy, the shape
// checks of --advantages, and GET /ui on the server's router.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "engine/error.h"
#include "engine/file_io.h"
#include "learners/batch.h"
#include "learners/batch_json.h"
#include "learners/diagnostics.h"
#include "learners/learner.h"
#include "server/http_server.h"
#include "server/router.h"
#include "server/ui_page.h"
#include "tests/server/http_client.h"
#include "tests/ui/viewer_fixtures.h"
#include "ui/viewer_data.h"
#include "ui/viewer_page.h"

namespace crl::ui {
namespace {

using nlohmann::json;
using testing::kAttack;

// The text between <script id="crl-data" type="application/json"> and the next "</script>".
std::string embedded_data(const std::string& page) {
  const std::string open = "<script id=\"crl-data\" type=\"application/json\">";
  const size_t begin = page.find(open);
  EXPECT_NE(begin, std::string::npos);
  const size_t end = page.find("</script>", begin);
  return page.substr(begin + open.size(), end - begin - open.size());
}

TEST(ViewerPage, HostileTextCannotLeaveTheDataElement) {
  const json data = {{"summary", kAttack}, {"amp", "a & b <!-- c -->"}};
  const std::string page = viewer_page(data.dump(), PageMode::kFile);
  const std::string embedded = embedded_data(page);
  // The data element ends where it should: its content is the whole document, and parses back to it.
  EXPECT_EQ(json::parse(embedded), data);
  EXPECT_EQ(embedded.find('<'), std::string::npos);
  EXPECT_EQ(embedded.find('>'), std::string::npos);
  // The attack's text appears nowhere in the page as markup.
  EXPECT_EQ(page.find("<script>document"), std::string::npos);
  EXPECT_EQ(page.find("<!--"), std::string::npos);
}

TEST(ViewerPage, StrictPolicyAllowsOnlyThePagesOwnScriptAndStyle) {
  const std::string file = content_security_policy(PageMode::kFile);
  EXPECT_EQ(file.rfind("default-src 'none'; script-src 'sha256-", 0), 0u) << file;
  EXPECT_NE(file.find("connect-src 'none'"), std::string::npos);
  EXPECT_EQ(file.find("unsafe-inline"), std::string::npos);
  EXPECT_EQ(file.find("http"), std::string::npos);
  EXPECT_NE(content_security_policy(PageMode::kServe).find("connect-src 'self'"), std::string::npos);
  const std::string page = viewer_page("null", PageMode::kFile);
  EXPECT_NE(page.find("http-equiv=\"Content-Security-Policy\" content=\"" + file + "\""), std::string::npos);
  // Self-contained: nothing is loaded from anywhere (no src=, href=, url(), @import).
  EXPECT_FALSE(std::regex_search(page, std::regex(R"((src|href)\s*=|url\(|@import)")));
  // One hash per inline element: the two scripts and the style.
  const std::regex hash(R"('sha256-([A-Za-z0-9+/=]{44})')");
  EXPECT_EQ(std::distance(std::sregex_iterator(file.begin(), file.end(), hash), std::sregex_iterator()), 3);
}

// A result.json for the demo's trajectories, as `crl advantages` writes it.
std::string result_for(const std::vector<Trajectory>& trajectories) {
  learners::AdvantagesRequest request;
  request.batch = learners::make_batch(trajectories);
  const learners::Learner learner(request.options);
  const learners::Advantages adv = learner.advantages(request.batch);
  return learners::format_advantages_result(request, adv, learners::compute_diagnostics(request.batch, adv));
}

TEST(ViewerData, AdvantagesAreMappedOntoTheExportsTokens) {
  const std::string dir = testing::test_dir("advantages");
  const std::string trajectories = testing::demo_export(dir);
  const std::vector<Trajectory> ts = read_trajectories(trajectories);
  write_file_atomic(dir + "/result.json", result_for(ts));
  const std::string out = dir + "/view.html";
  ASSERT_EQ(
      testing::run_quiet({"inspect", trajectories, "--html", out, "--advantages", dir + "/result.json"}), 0);
  const json data = json::parse(embedded_data(read_file(out)));
  ASSERT_EQ(data["rollouts"].size(), 2u);
  const json& segments = data["rollouts"][0]["advantages"];
  ASSERT_EQ(segments.size(), ts[0].segments.size());
  for (size_t s = 0; s < ts[0].segments.size(); ++s) {
    EXPECT_EQ(segments[s]["advantages"].size(), ts[0].segments[s].response_ids.size()) << s;
  }
  EXPECT_EQ(data["advantages_source"], dir + "/result.json");
  // Computed here with the default settings: the same numbers.
  ASSERT_EQ(
      testing::run_quiet({"inspect", trajectories, "--html", dir + "/computed.html", "--compute-advantages"}),
      0);
  const json computed = json::parse(embedded_data(read_file(dir + "/computed.html")));
  EXPECT_EQ(computed["rollouts"][1]["advantages"], data["rollouts"][1]["advantages"]);
  // Same input, same bytes.
  ASSERT_EQ(testing::run_quiet({"inspect", trajectories, "--html", dir + "/again.html", "--advantages",
                                dir + "/result.json"}),
            0);
  EXPECT_EQ(read_file(dir + "/again.html"), read_file(out));
}

TEST(ViewerData, MismatchedAdvantagesNameBothCounts) {
  const std::string dir = testing::test_dir("mismatch");
  const std::string trajectories = testing::demo_export(dir);
  json result = json::parse(result_for(read_trajectories(trajectories)));
  const auto inspect = [&](const json& doc) {
    write_file_atomic(dir + "/result.json", doc.dump());
    std::string err;
    EXPECT_EQ(testing::run_quiet({"inspect", trajectories, "--html", dir + "/view.html", "--advantages",
                                  dir + "/result.json"},
                                 &err),
              1);
    return err;
  };
  json tokens = result;
  tokens["rollouts"][0]["segments"][2]["advantages"].erase(0);
  const size_t n = result["rollouts"][0]["segments"][2]["advantages"].size();
  std::string err = inspect(tokens);
  EXPECT_NE(err.find("rollouts[0].segments[2].advantages"), std::string::npos) << err;
  EXPECT_NE(err.find(std::to_string(n - 1) + " values, but segment 2"), std::string::npos) << err;
  EXPECT_NE(err.find("has " + std::to_string(n) + " response tokens"), std::string::npos) << err;

  json segments = result;
  segments["rollouts"][1]["segments"].erase(6);
  err = inspect(segments);
  EXPECT_NE(err.find("6 segments, but rollout \"memory_chain/demo-1/7/1\" of the trajectory file has 7"),
            std::string::npos)
      << err;

  json rollouts = result;
  rollouts["rollouts"].erase(1);
  err = inspect(rollouts);
  EXPECT_NE(err.find("1 rollouts, but the trajectory file"), std::string::npos) << err;
  EXPECT_NE(err.find("has 2"), std::string::npos) << err;

  err = inspect(json{{"rollouts", 3}});
  EXPECT_NE(err.find("rollouts"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/view.html"));  // nothing half-written
}

TEST(ViewerData, ComputedWithAScenarioArmsLearnerSettings) {
  const std::string dir = testing::test_dir("scenario");
  const std::string trajectories = testing::demo_export(dir);
  const std::string scenario = std::string(CRL_SOURCE_DIR) + "/scenarios/memory_chain.pbtxt";
  ASSERT_EQ(testing::run_quiet({"inspect", trajectories, "--html", dir + "/view.html", "--compute-advantages",
                                "--scenario", scenario, "--arm", "frozen"}),
            0);
  const json data = json::parse(embedded_data(read_file(dir + "/view.html")));
  EXPECT_EQ(data["advantages_source"], "computed with the learner settings of " + scenario + " arm frozen");
  std::string err;
  EXPECT_EQ(testing::run_quiet({"inspect", trajectories, "--html", dir + "/other.html",
                                "--compute-advantages", "--scenario", scenario, "--arm", "nope"},
                               &err),
            1);
  EXPECT_NE(err.find("no arm \"nope\" (arms: joint, frozen)"), std::string::npos) << err;
  EXPECT_EQ(testing::run_quiet(
                {"inspect", trajectories, "--html", dir + "/other.html", "--scenario", scenario}, &err),
            1);
  EXPECT_NE(err.find("only choose the settings of --compute-advantages"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/other.html"));
}

TEST(ViewerData, OptionsNeedHtml) {
  std::string err;
  EXPECT_EQ(testing::run_quiet({"inspect", "t.jsonl", "--compute-advantages"}, &err), 2);
  EXPECT_NE(err.find("need --html"), std::string::npos) << err;
}

TEST(ViewerServe, UiRouteServesThePageWithItsPolicy) {
  server::EpisodeService service(server::ServiceOptions{});
  const server::HttpAnswer answer = server::route(service, {"GET", "/ui?episode=ep-1", "", "", "", false});
  EXPECT_EQ(answer.status, 200);
  EXPECT_EQ(answer.content_type, "text/html; charset=utf-8");
  EXPECT_NE(answer.body.find("data-mode=\"serve\""), std::string::npos);
  EXPECT_NE(answer.body.find(content_security_policy(PageMode::kServe)), std::string::npos);
  EXPECT_EQ(server::route(service, {"POST", "/ui", "", "", "", false}).status, 405);

  // Over the wire, the policy also goes out as a header (with frame-ancestors, which only a header can say).
  server::HttpOptions http;
  http.port = 0;
  http.handle_signals = false;
  server::HttpServer transport(http, service);
  std::thread thread([&] { transport.run(); });
  const std::string raw = server::testing::raw_exchange(
      transport.port(), "GET /ui HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", false, 10.0);
  transport.request_stop();
  thread.join();
  EXPECT_EQ(raw.rfind("HTTP/1.1 200", 0), 0u) << raw.substr(0, 200);
  EXPECT_NE(raw.find("Content-Security-Policy: " + server::ui_page_policy() + "\r\n"), std::string::npos)
      << raw.substr(0, 600);
  EXPECT_NE(server::ui_page_policy().find("frame-ancestors 'none'"), std::string::npos);
}

}  // namespace
}  // namespace crl::ui
