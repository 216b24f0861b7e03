// The viewer in a real browser: headless Chromium loads the page `crl inspect --html` wrote, and the test
// reads the DOM the page rendered (its data-* attributes and text). Screenshots go to build/ui_test/.
// Skips with a message where Chromium is absent (scripts/install_deps.sh installs the `chromium` package).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "engine/file_io.h"
#include "server/http_server.h"
#include "server/router.h"
#include "tests/ui/viewer_fixtures.h"

namespace crl::ui {
namespace {

using testing::kAttack;

// The browser: $CRL_CHROMIUM when set (empty or missing: none), else the first of the usual names on PATH.
std::string chromium() {
  const auto found = [](const std::string& exe) {
    return !exe.empty() && std::system(("command -v '" + exe + "' >/dev/null 2>&1").c_str()) == 0;
  };
  if (const char* exe = std::getenv("CRL_CHROMIUM")) return found(exe) ? exe : "";
  for (const char* exe : {"chromium", "chromium-browser", "google-chrome"}) {
    if (found(exe)) return exe;
  }
  return "";
}

#define REQUIRE_CHROMIUM()                                                      \
  if (chromium().empty())                                                       \
  GTEST_SKIP() << "no Chromium (install the Debian package `chromium`, or set " \
                  "CRL_CHROMIUM); the browser tests of the viewer are skipped"

// Runs headless Chromium on the page (a fresh profile each time) and returns what it printed. Bounded by
// `timeout`, so a hung browser fails the test instead of hanging it.
std::string browse(const std::string& url, const std::string& what) {
  // A profile per test: Chromium locks its profile, and ctest may run the tests in parallel.
  const std::string dir = testing::test_dir(std::string("profile_") +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
  const std::string command = "timeout 120 " + chromium() +
                              " --headless --disable-gpu --no-sandbox --disable-dev-shm-usage"
                              " --no-first-run --hide-scrollbars --window-size=1400,1000 --user-data-dir=" +
                              dir + " " + what + " '" + url + "' 2>/dev/null";
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  std::array<char, 65536> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.append(buffer.data(), n);
  pclose(pipe);
  return out;
}
// The DOM after the page rendered; with `png`, a screenshot of the same load is saved there too.
std::string dom(const std::string& page, const std::string& fragment = "", const std::string& png = "") {
  if (!png.empty()) std::filesystem::remove(png);
  const std::string out = browse("file://" + page + (fragment.empty() ? "" : "#" + fragment),
                                 (png.empty() ? "" : "--screenshot=" + png + " ") + "--dump-dom");
  if (!png.empty()) {
    EXPECT_TRUE(std::filesystem::exists(png)) << png;
  }
  return out;
}
std::string shot(const std::string& name) {
  return std::string(CRL_BINARY_DIR) + "/ui_test/" + name;
}

// The value of a data-* attribute of #app in the dumped DOM ("" when absent).
std::string app_attribute(const std::string& dom, const std::string& name) {
  std::smatch m;
  const std::regex app("<main id=\"app\"[^>]*");
  if (!std::regex_search(dom, m, app)) return "";
  const std::string tag = m.str();
  const std::regex attr("data-" + name + "=\"([^\"]*)\"");
  return std::regex_search(tag, m, attr) ? m[1].str() : "";
}

// The text a reader sees in an element's dumped HTML: tags dropped, entities decoded, line numbers removed.
std::string visible_text(std::string html) {
  html = std::regex_replace(html, std::regex("<span class=\"ln\">[^<]*</span>"), "");
  html = std::regex_replace(html, std::regex("<[^>]*>"), "");
  for (const auto& [entity, c] : {std::pair{"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&amp;", "&"}}) {
    html = std::regex_replace(html, std::regex(entity), c);
  }
  return html;
}

std::string html_of(const std::string& trajectories, const std::string& out,
                    std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"inspect", trajectories, "--html", out};
  args.insert(args.end(), extra.begin(), extra.end());
  EXPECT_EQ(testing::run_quiet(args), 0);
  return out;
}

TEST(ViewerBrowser, RendersSegmentsSummariesAndMasks) {
  REQUIRE_CHROMIUM();
  const std::string dir = testing::test_dir("demo");
  const std::string trajectories = testing::demo_export(dir);
  const std::vector<Trajectory> ts = read_trajectories(trajectories);
  const std::string page = html_of(trajectories, dir + "/view.html");
  const std::string d = dom(page, "", shot("viewer_demo.png"));
  ASSERT_EQ(app_attribute(d, "rendered"), "1") << d.substr(0, 2000);
  EXPECT_EQ(app_attribute(d, "rollout-count"), "2");
  EXPECT_EQ(app_attribute(d, "segment-count"), std::to_string(ts[0].segments.size()));
  EXPECT_EQ(app_attribute(d, "boundary-count"), std::to_string(ts[0].compactions));
  EXPECT_EQ(app_attribute(d, "actor-masked"), std::to_string(testing::actor_tokens(ts[0])));
  // Every summary's text is on the page, in its lane.
  for (const Segment& s : ts[0].segments) {
    if (s.kind != SegmentKind::kSummary) continue;
    ASSERT_FALSE(s.text.empty());
    EXPECT_NE(d.find("<div class=\"summary-text\" title=\""), std::string::npos);
    EXPECT_NE(visible_text(d).find(s.text), std::string::npos) << s.text;
  }
}

TEST(ViewerBrowser, KeyboardMovesBetweenRolloutsAndSegments) {
  REQUIRE_CHROMIUM();
  const std::string dir = testing::test_dir("keys");
  const std::string page = html_of(testing::demo_export(dir), dir + "/view.html");
  std::string d = dom(page, "keys=j,n,n,ArrowRight");
  EXPECT_EQ(app_attribute(d, "rollout"), "1");
  EXPECT_EQ(app_attribute(d, "segment"), "3");
  EXPECT_EQ(app_attribute(d, "rollout-id"), "memory_chain/demo-1/7/1");
  d = dom(page, "keys=j,k,k,n,p,End,3");  // clamped at the first rollout; End = last segment
  EXPECT_EQ(app_attribute(d, "rollout"), "0");
  EXPECT_EQ(app_attribute(d, "segment"), "6");
  EXPECT_EQ(app_attribute(d, "mode"), "value");
}

TEST(ViewerBrowser, HostileEnvironmentTextIsShownAsTextAndNeverRuns) {
  REQUIRE_CHROMIUM();
  const std::string dir = testing::test_dir("hostile");
  const std::string page = html_of(testing::hostile_export(dir), dir + "/view.html");
  const std::string d = dom(page, "", shot("viewer_hostile.png"));
  ASSERT_EQ(app_attribute(d, "rendered"), "1") << "the page did not render: the data element was broken?";
  EXPECT_EQ(app_attribute(d, "segment-count"), "7");
  EXPECT_EQ(d.find("data-pwned"), std::string::npos) << "the attacker's script ran";
  // The summary lane and the observation tokens show the attack as text.
  EXPECT_NE(visible_text(d).find("summary says " + kAttack), std::string::npos);
  const size_t tokens = d.find("<div id=\"tokens-window\"");
  ASSERT_NE(tokens, std::string::npos);
  EXPECT_NE(visible_text(d.substr(tokens)).find(kAttack), std::string::npos);
}

TEST(ViewerBrowser, AdvantagesHeatMap) {
  REQUIRE_CHROMIUM();
  const std::string dir = testing::test_dir("heat");
  const std::string page = html_of(testing::demo_export(dir), dir + "/view.html", {"--compute-advantages"});
  const std::string d = dom(page, "s=6&c=advantage", shot("viewer_advantages.png"));
  EXPECT_EQ(app_attribute(d, "has-advantages"), "1");
  EXPECT_EQ(app_attribute(d, "mode"), "advantage");
  EXPECT_NE(d.find("correction factor"), std::string::npos);
  // Sampled tokens are painted from the heat scale (a CSSOM background; the policy allows no style= text).
  EXPECT_TRUE(std::regex_search(d, std::regex("class=\"tok am\"[^>]*style=\"background: rgb\\(")))
      << d.substr(d.find("tokens-window"), 3000);
}

TEST(ViewerBrowser, HundredThousandTokenRolloutRendersLazily) {
  REQUIRE_CHROMIUM();
  const std::string dir = testing::test_dir("big");
  const std::string trajectories = testing::big_export(dir, 100000);
  const std::string page = html_of(trajectories, dir + "/view.html");
  const std::string d = dom(page, "", shot("viewer_100k.png"));
  ASSERT_EQ(app_attribute(d, "rendered"), "1");
  EXPECT_EQ(app_attribute(d, "segment-tokens"), "100016");
  EXPECT_EQ(app_attribute(d, "actor-masked"),
            std::to_string(testing::actor_tokens(read_trajectories(trajectories)[0])));
  // Far fewer token nodes than tokens: only the lines in view (plus a margin) exist.
  const int nodes = std::stoi(app_attribute(d, "token-nodes"));
  EXPECT_GT(nodes, 0);
  EXPECT_LT(nodes, 10000);
  // A generous bound on the first render (parse + layout of 100k tokens + the visible lines).
  EXPECT_LT(std::stoi(app_attribute(d, "render-ms")), 5000);
  // Deep in the rollout: the lines around token 90000 are rendered, and still only those.
  const std::string deep = dom(page, "t=90000");
  const std::string shown = app_attribute(deep, "lines-shown");
  ASSERT_NE(shown.find('-'), std::string::npos) << shown;
  const int first = std::stoi(shown.substr(0, shown.find('-'))),
            last = std::stoi(shown.substr(shown.find('-') + 1));
  EXPECT_LE(first, 900);  // token 90000 sits on line 900 (100 tokens a line, the prompt on its own line)
  EXPECT_GT(last, 900);
  EXPECT_LT(std::stoi(app_attribute(deep, "token-nodes")), 10000);
  EXPECT_NE(deep.find("response token 89984: id 484"), std::string::npos);
}

// crl serve's /ui: the page fetches a finished episode's export from the server that served it (the
// Content-Security-Policy allows exactly that) and decodes the byte tokenizer's text view.
TEST(ViewerBrowser, ServedPageShowsALiveEpisodesExport) {
  REQUIRE_CHROMIUM();
  server::EpisodeService service(server::ServiceOptions{});
  const auto call = [&](const std::string& target, const std::string& body) {
    const server::HttpAnswer a =
        server::route(service, {"POST", target, "application/json", "", body, false});
    EXPECT_EQ(a.status, 200) << a.body;
    return nlohmann::json::parse(a.body);
  };
  const std::string id = call("/v1/episodes", R"({"env":"memory_chain","task_id":"h1","seed":3,)"
                                              R"("params":{"length":"4","reset_points":""}})")["episode_id"];
  for (int turn = 0; turn < 4; ++turn) {
    const std::string text = turn == 3 ? "answer 0" : "continue";
    call("/v1/episodes/" + id + "/step", R"({"turn_id":)" + std::to_string(turn) +
                                             R"(,"action":{"kind":"assistant","text":")" + text + "\"}}");
  }
  server::HttpOptions http;
  http.port = 0;
  http.handle_signals = false;
  server::HttpServer transport(http, service);
  std::thread thread([&] { transport.run(); });
  // The export arrives after the load event: give the page virtual time to fetch and render it.
  const std::string d =
      browse("http://127.0.0.1:" + std::to_string(transport.port()) + "/ui?episode=" + id,
             "--virtual-time-budget=5000 --screenshot=" + shot("viewer_serve.png") + " --dump-dom");
  transport.request_stop();
  thread.join();
  ASSERT_EQ(app_attribute(d, "rendered"), "1") << d.substr(0, 3000);
  EXPECT_EQ(app_attribute(d, "segment-count"), "1");
  EXPECT_EQ(app_attribute(d, "rollout-id"), "memory_chain/h1/3/0");
  const size_t tokens = d.find("<div id=\"tokens-window\"");
  ASSERT_NE(tokens, std::string::npos);
  EXPECT_NE(visible_text(d.substr(tokens)).find("Memory chain of 4 steps"), std::string::npos);
}

// crl serve --ui: the page lists the live episodes and the ring of recent exports, and a click on an entry
// (?pick=exports:0 clicks the first one) opens its export, here one whose episode was deleted already.
// Without --ui the panel says how to turn the lists on.
std::string element_attribute(const std::string& dom, const std::string& id, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(dom, m, std::regex("<[a-z]+ id=\"" + id + "\"[^>]*"))) return "";
  const std::string tag = m.str();
  return std::regex_search(tag, m, std::regex("data-" + name + "=\"([^\"]*)\"")) ? m[1].str() : "";
}

TEST(ViewerBrowser, ServedPageListsEpisodesAndOpensAKeptExport) {
  REQUIRE_CHROMIUM();
  for (const bool ui : {true, false}) {
    server::ServiceOptions options;
    options.ui = ui;
    server::EpisodeService service(options);
    const auto call = [&](const std::string& method, const std::string& target, const std::string& body) {
      const server::HttpAnswer a =
          server::route(service, {method, target, "application/json", "", body, false});
      EXPECT_EQ(a.status, 200) << a.body;
      return nlohmann::json::parse(a.body);
    };
    const std::string create = R"({"env":"memory_chain","task_id":"h1","seed":3,)"
                               R"("params":{"length":"4","reset_points":""}})";
    const std::string done = call("POST", "/v1/episodes", create)["episode_id"];
    for (int turn = 0; turn < 4; ++turn) {
      const std::string text = turn == 3 ? "answer 0" : "continue";
      call("POST", "/v1/episodes/" + done + "/step",
           R"({"turn_id":)" + std::to_string(turn) + R"(,"action":{"kind":"assistant","text":")" + text +
               "\"}}");
    }
    call("DELETE", "/v1/episodes/" + done, "");
    const std::string running = call("POST", "/v1/episodes", create)["episode_id"];
    server::HttpOptions http;
    http.port = 0;
    http.handle_signals = false;
    server::HttpServer transport(http, service);
    std::thread thread([&] { transport.run(); });
    const std::string d =
        browse("http://127.0.0.1:" + std::to_string(transport.port()) + "/ui?pick=exports:0",
               "--virtual-time-budget=5000 --screenshot=" +
                   shot(ui ? "viewer_serve_lists.png" : "viewer_serve_lists_off.png") + " --dump-dom");
    transport.request_stop();
    thread.join();
    if (!ui) {
      EXPECT_EQ(element_attribute(d, "sessions", "state"), "disabled") << d.substr(0, 3000);
      EXPECT_NE(d.find("crl serve --ui"), std::string::npos);
      EXPECT_EQ(d.find(running), std::string::npos) << "an episode id reached the page";
      continue;
    }
    ASSERT_EQ(element_attribute(d, "sessions", "state"), "loaded") << d.substr(0, 3000);
    EXPECT_EQ(element_attribute(d, "sessions", "live-count"), "1");
    EXPECT_EQ(element_attribute(d, "sessions", "export-count"), "1");
    EXPECT_NE(d.find("data-episode=\"" + running + "\""), std::string::npos);
    EXPECT_NE(d.find("data-episode=\"" + done + "\""), std::string::npos);
    // The click opened the kept export (its episode is gone from the live table).
    ASSERT_EQ(app_attribute(d, "rendered"), "1") << d.substr(0, 3000);
    EXPECT_EQ(app_attribute(d, "source"), "export:" + done);
    EXPECT_EQ(app_attribute(d, "segment-count"), "1");
    EXPECT_EQ(app_attribute(d, "rollout-id"), "memory_chain/h1/3/0");
  }
}

}  // namespace
}  // namespace crl::ui
