// GET /metrics (issue 19 item 4): the exposition parses (a strict line check here, and `promtool check
// metrics` where /usr/bin/promtool exists), counters move as expected after a scripted session, histogram
// buckets are cumulative and agree with _count and _sum.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "server/http_server.h"
#include "tests/server/http_client.h"
#include "tests/server/test_server.h"
#include "tests/temp_dir.h"
#include "wire/wire_codec.h"

namespace crl::server {
namespace {

using testing::HttpClient;
using testing::Reply;
using testing::TestServer;

// Checks the text exposition format line by line (HELP/TYPE before samples, names and labels well formed,
// values numbers, histograms cumulative with +Inf last and _count equal to it). Returns "" or the first
// problem; fills `samples` (series "name{labels}" -> value).
std::string check_exposition(const std::string& text, std::map<std::string, double>& samples) {
  static const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+)");
  static const std::regex type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram))");
  static const std::regex sample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*")*)?\})? (\S+))");
  std::map<std::string, std::string> types;
  std::string current;                        // the family whose samples may follow
  std::map<std::string, double> last_bucket;  // histogram series (labels without le) -> last cumulative count
  std::map<std::string, double> last_le;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  if (text.empty() || text.back() != '\n') return "the exposition must end with a newline";
  while (std::getline(in, line)) {
    ++number;
    const std::string at = "line " + std::to_string(number) + " \"" + line + "\": ";
    std::smatch m;
    if (std::regex_match(line, m, help)) continue;
    if (std::regex_match(line, m, type)) {
      if (types.count(m[1])) return at + "second TYPE for the family";
      types[m[1]] = m[2];
      current = m[1];
      continue;
    }
    if (!std::regex_match(line, m, sample)) return at + "not a sample";
    const std::string name = m[1], labels = m[3], value_text = m[5];
    char* end = nullptr;
    const double value = value_text == "+Inf" ? INFINITY : std::strtod(value_text.c_str(), &end);
    if (value_text != "+Inf" && (end == value_text.c_str() || *end != '\0'))
      return at + "value is not a number";
    std::string family = name;
    const auto& kind = types[current];
    if (kind == "histogram") {
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        if (name == current + suffix) family = current;
      }
    }
    if (family != current) return at + "sample outside its family (no TYPE before it)";
    samples[name + (labels.empty() ? "" : "{" + labels + "}")] = value;
    if (kind == "histogram") {
      std::string base = labels;
      const std::regex le_re(R"((^|,)le="([^"]*)\")");
      std::smatch lm;
      if (name == current + "_bucket") {
        if (!std::regex_search(labels, lm, le_re)) return at + "bucket without le";
        const double le = lm[2] == "+Inf" ? INFINITY : std::stod(lm[2]);
        base = std::regex_replace(labels, le_re, "");
        const std::string key = current + "{" + base + "}";
        if (last_le.count(key) && !(le > last_le[key])) return at + "le not increasing";
        if (last_bucket.count(key) && value < last_bucket[key]) return at + "buckets not cumulative";
        last_le[key] = le;
        last_bucket[key] = value;
      } else if (name == current + "_count") {
        const std::string key = current + "{" + base + "}";
        if (!last_le.count(key) || !std::isinf(last_le[key])) return at + "_count before the +Inf bucket";
        if (value != last_bucket[key]) return at + "_count differs from the +Inf bucket";
      }
    }
  }
  return "";
}

double at(const std::map<std::string, double>& samples, const std::string& series) {
  const auto it = samples.find(series);
  if (it == samples.end()) ADD_FAILURE() << "no series " << series;
  return it == samples.end() ? -1 : it->second;
}

std::map<std::string, double> scrape(uint16_t port) {
  HttpClient client(port);
  const Reply reply = client.call("GET", "/metrics");
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.content_type, kMetricsContentType);
  std::map<std::string, double> samples;
  const std::string problem = check_exposition(reply.body, samples);
  EXPECT_EQ(problem, "") << reply.body;
  return samples;
}

// The checker itself fails on what it must catch (a check that cannot fail proves nothing).
TEST(Metrics, CheckerRejectsBrokenExpositions) {
  std::map<std::string, double> samples;
  const std::string head = "# HELP h_seconds H.\n# TYPE h_seconds histogram\n";
  EXPECT_EQ(check_exposition(head + "h_seconds_bucket{le=\"1\"} 2\nh_seconds_bucket{le=\"+Inf\"} 3\n"
                                    "h_seconds_sum 1\nh_seconds_count 3\n",
                             samples),
            "");
  EXPECT_NE(
      check_exposition(head + "h_seconds_bucket{le=\"1\"} 4\nh_seconds_bucket{le=\"+Inf\"} 3\n", samples),
      "");  // not cumulative
  EXPECT_NE(check_exposition(head + "h_seconds_bucket{le=\"+Inf\"} 3\nh_seconds_count 2\n", samples), "");
  EXPECT_NE(check_exposition("c_total 1\n", samples), "");                               // no TYPE
  EXPECT_NE(check_exposition("# TYPE c_total counter\nc_total\n", samples), "");         // no value
  EXPECT_NE(check_exposition("# TYPE c_total counter\nc_total{a=b} 1\n", samples), "");  // unquoted label
  EXPECT_NE(check_exposition("# TYPE c_total counter\nc_total 1", samples), "");         // no final newline
}

TEST(Metrics, RegistryRendersCumulativeHistogramsInRegistrationOrder) {
  MetricsRegistry r;
  Counter& c = r.counter("b_total", "B.");
  Histogram& h = r.histogram("a_seconds", "A.", {0.5, 1}, "op=\"x\"");
  r.gauge("c_open", "C.", [] { return 3.0; });
  c.add(2);
  h.observe(0.25);
  h.observe(0.5);  // le is inclusive
  h.observe(0.75);
  h.observe(7);
  EXPECT_EQ(r.render(),
            "# HELP b_total B.\n# TYPE b_total counter\nb_total 2\n"
            "# HELP a_seconds A.\n# TYPE a_seconds histogram\n"
            "a_seconds_bucket{op=\"x\",le=\"0.5\"} 2\na_seconds_bucket{op=\"x\",le=\"1\"} 3\n"
            "a_seconds_bucket{op=\"x\",le=\"+Inf\"} 4\na_seconds_sum{op=\"x\"} 8.5\n"
            "a_seconds_count{op=\"x\"} 4\n"
            "# HELP c_open C.\n# TYPE c_open gauge\nc_open 3\n");
}

TEST(Metrics, ExpositionParsesAndCountersMoveAfterAScriptedSession) {
  TestServer s;
  const uint16_t port = s.server.port();
  const auto before = scrape(port);
  EXPECT_EQ(at(before, "crl_sessions_open"), 0);
  EXPECT_EQ(at(before, "crl_sessions_created_total"), 0);

  HttpClient client(port);
  const Reply created = client.call(
      "POST", "/v1/episodes",
      R"({"env":"memory_chain","task_id":"h1","seed":3,"params":{"length":"4","reset_points":""}})");
  ASSERT_EQ(created.status, 200) << created.body;
  proto::StepResponse step;
  wire::decode_message(created.body, wire::WireFormat::kJson, step);
  const std::string id = step.episode_id();
  int steps = 0;
  for (int i = 0; i < 20 && step.status() == "running"; ++i) {
    const std::string kind = step.kind() == "compaction_request" ? "summary" : "assistant";
    const Reply r = client.call("POST", "/v1/episodes/" + id + "/step",
                                R"({"turn_id":)" + std::to_string(step.next_turn_id()) +
                                    R"(,"action":{"kind":")" + kind + R"(","text":"x"}})");
    ASSERT_EQ(r.status, 200) << r.body;
    wire::decode_message(r.body, wire::WireFormat::kJson, step);
    ++steps;
  }
  ASSERT_GT(steps, 0);
  EXPECT_EQ(client.call("GET", "/v1/episodes/ep-0123/export").status, 404);
  EXPECT_EQ(client.call("POST", "/v1/episodes", "{not json").status, 400);

  const auto after = scrape(port);
  EXPECT_EQ(at(after, "crl_sessions_open"), 1);
  EXPECT_EQ(at(after, "crl_sessions_created_total"), 1);
  EXPECT_EQ(at(after, "crl_step_duration_seconds_count"), steps);
  EXPECT_EQ(at(after, "crl_create_duration_seconds_count"), 2);  // the 400 is timed too
  EXPECT_GE(at(after, "crl_step_duration_seconds_sum"), 0);
  EXPECT_GE(at(after, "crl_action_tokens_total"), steps);  // "x" and the template's end token
  EXPECT_GT(at(after, "crl_prompt_tokens_total"), 0);
  // The first scrape's own 200 is counted by the time the second is rendered.
  EXPECT_EQ(at(after, "crl_http_responses_total{code=\"404\"}"), 1);
  EXPECT_EQ(at(after, "crl_http_responses_total{code=\"400\"}"), 1);
  EXPECT_EQ(at(after, "crl_http_responses_total{code=\"200\"}"), 1 + 1 + steps);
  EXPECT_EQ(at(after, "crl_http_responses_by_class_total{class=\"4xx\"}"), 2);
  EXPECT_EQ(at(after, "crl_http_responses_by_class_total{class=\"5xx\"}"), 0);

  EXPECT_EQ(client.call("DELETE", "/v1/episodes/" + id).status, 200);
  const auto deleted = scrape(port);
  EXPECT_EQ(at(deleted, "crl_sessions_open"), 0);
  EXPECT_EQ(at(deleted, "crl_sessions_deleted_total"), 1);
}

// promtool's own parser and lint (names, suffixes, HELP). Skips with a message where promtool is absent
// (Debian package `prometheus`; scripts/install_deps.sh installs it).
TEST(Metrics, PromtoolAcceptsTheExposition) {
  const char* promtool = "/usr/bin/promtool";
  if (std::system((std::string("test -x ") + promtool).c_str()) != 0) {
    GTEST_SKIP() << promtool << " is absent (apt-get install prometheus): promtool check skipped";
  }
  TestServer s;
  HttpClient client(s.server.port());
  ASSERT_EQ(client.call("POST", "/v1/episodes", R"({"env":"memory_chain","task_id":"h1","seed":3})").status,
            200);
  EXPECT_EQ(client.call("GET", "/nope").status, 404);
  const Reply reply = client.call("GET", "/metrics");
  ASSERT_EQ(reply.status, 200);
  crl::test::TempDir dir;
  const std::string file = (dir.path() / "metrics.txt").string();
  std::ofstream(file) << reply.body;
  const std::string out = (dir.path() / "promtool.out").string();
  const int rc =
      std::system((std::string(promtool) + " check metrics < " + file + " > " + out + " 2>&1").c_str());
  std::ifstream in(out);
  const std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << said << "\n" << reply.body;
}

}  // namespace
}  // namespace crl::server
