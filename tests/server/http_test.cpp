// The HTTP transport on loopback (issue 6): JSON and binary protobuf on every endpoint, typed error bodies
// with the right statuses for malformed, oversized, slow, half-closed and excess clients, and the server
// keeps serving after each; concurrent clients on different episodes; the drain answers requests under way.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <thread>

#include "envs/registry.h"
#include "server/http_server.h"
#include "tests/server/http_client.h"
#include "tests/server/test_server.h"
#include "wire/wire_codec.h"

namespace crl::server {

using namespace wire;  // the codec, typed API errors and UTF-8 checks shared with envs/remote
namespace {

using testing::HttpClient;
using testing::raw_exchange;
using testing::Reply;
using testing::TestServer;

template <typename M>
M parse(const Reply& reply) {
  M message;
  decode_message(reply.body, format_from_content_type(reply.content_type), message);
  return message;
}

proto::ErrorBody error_of(const Reply& reply) {
  return parse<proto::ErrorBody>(reply);
}

const char* kCreate =
    R"({"env":"memory_chain","task_id":"h1","seed":3,"params":{"length":"4","reset_points":""}})";

void expect_healthy(uint16_t port) {
  HttpClient client(port);
  const Reply health = client.call("GET", "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(parse<proto::HealthResponse>(health).status(), "ok");
}

TEST(HttpServer, EveryEndpointInJsonAndBinaryProtobuf) {
  TestServer s;
  HttpClient client(s.port());
  EXPECT_EQ(client.call("GET", "/health").status, 200);
  const Reply info = client.call("GET", "/v1/info", "", "", "application/x-protobuf");
  EXPECT_EQ(info.content_type, "application/x-protobuf");
  const auto parsed_info = parse<proto::InfoResponse>(info);
  // Every registered environment is listed, sorted by name.
  std::vector<std::string> listed;
  for (const auto& env : parsed_info.environments()) listed.push_back(env.name());
  EXPECT_EQ(listed, env_registry().names());
  EXPECT_EQ(parsed_info.tokenizer(), "byte");
  EXPECT_FALSE(parsed_info.tokenizer_fingerprint().empty());

  // Create in binary, step in JSON, batch in binary, state / export / delete in both.
  proto::CreateEpisodeRequest create;
  decode_message(kCreate, WireFormat::kJson, create);
  Reply created = client.call("POST", "/v1/episodes", encode_message(create, WireFormat::kProtobuf),
                              "application/x-protobuf");
  ASSERT_EQ(created.status, 200) << created.body;
  EXPECT_EQ(created.content_type, "application/x-protobuf");
  const auto r0 = parse<proto::StepResponse>(created);
  const std::string id = r0.episode_id();
  EXPECT_GT(r0.prompt_ids_size(), 0);
  const Reply step = client.call("POST", "/v1/episodes/" + id + "/step",
                                 R"({"turn_id":0,"action":{"kind":"assistant","text":"continue"}})");
  ASSERT_EQ(step.status, 200) << step.body;
  EXPECT_EQ(step.content_type, "application/json");
  EXPECT_EQ(parse<proto::StepResponse>(step).kind(), "observation");
  // The retry returns the same bytes.
  EXPECT_EQ(client
                .call("POST", "/v1/episodes/" + id + "/step",
                      R"({"turn_id":0,"action":{"kind":"assistant","text":"continue"}})")
                .body,
            step.body);
  proto::BatchStepRequest batch;
  for (uint32_t turn = 1; turn < 3; ++turn) {
    proto::StepRequest* item = batch.add_steps();
    item->set_episode_id(id);
    item->set_turn_id(turn);
    item->mutable_action()->set_kind("assistant");
    item->mutable_action()->set_text("continue");
  }
  const auto batched = parse<proto::BatchStepResponse>(client.call(
      "POST", "/v1/batch/step", encode_message(batch, WireFormat::kProtobuf), "application/x-protobuf"));
  ASSERT_EQ(batched.results_size(), 2);
  EXPECT_EQ(batched.results(1).response().turn(), 3);
  EXPECT_EQ(client.call("GET", "/v1/episodes/" + id + "/export").status, 409);  // still running
  const Reply last = client.call("POST", "/v1/episodes/" + id + "/step",
                                 R"({"turn_id":3,"action":{"kind":"assistant","text":"answer 1"}})");
  EXPECT_EQ(parse<proto::StepResponse>(last).kind(), "done");
  const Reply state = client.call("GET", "/v1/episodes/" + id, "", "", "application/x-protobuf");
  EXPECT_EQ(parse<proto::EpisodeState>(state).current().status(), parse<proto::StepResponse>(last).status());
  const Reply exported = client.call("GET", "/v1/episodes/" + id + "/export");
  ASSERT_EQ(exported.status, 200);
  const auto segments = parse<proto::ExportResponse>(exported);
  ASSERT_EQ(segments.segments_size(), 1);
  EXPECT_EQ(segments.segments(0).kind(), "execution");
  EXPECT_NE(exported.body.find("\"loss_mask\""), std::string::npos);  // .proto field names preserved
  EXPECT_EQ(client.call("DELETE", "/v1/episodes/" + id).status, 200);
  EXPECT_EQ(client.call("DELETE", "/v1/episodes/" + id).status, 404);
}

TEST(HttpServer, MalformedRequestsGetTypedErrorsAndTheServerKeepsServing) {
  TestServer s;
  HttpClient client(s.port());
  struct Case {
    std::string method, target, body, content_type;
    int status;
    std::string code, field;
  };
  const std::vector<Case> cases = {
      {"POST", "/v1/episodes", "{\"env\":", "application/json", 400, "bad_json", ""},
      {"POST", "/v1/episodes", "[1,2]", "application/json", 400, "bad_field", ""},
      {"POST", "/v1/episodes", R"({"env":"memory_chain","seed":"x"})", "application/json", 400, "bad_field",
       "seed"},
      {"POST", "/v1/episodes", R"({"env":"memory_chain","budget":{"tail_k":1.5}})", "application/json", 400,
       "bad_field", "budget.tail_k"},
      {"POST", "/v1/episodes", R"({"env":"memory_chain","colour":"red"})", "application/json", 400,
       "unknown_field", "colour"},
      {"POST", "/v1/episodes", R"({"env":"no_such_env","task_id":"t"})", "application/json", 400,
       "unknown_env", "env"},
      {"POST", "/v1/episodes", "\xff\xff\xff\xff", "application/x-protobuf", 400, "bad_protobuf", ""},
      {"POST", "/v1/episodes", std::string("\x08\x01", 2), "application/x-protobuf", 400, "bad_field", "env"},
      {"POST", "/v1/episodes", std::string("\xf8\x07\x01", 3), "application/x-protobuf", 400, "unknown_field",
       "#127"},
      {"POST", "/v1/episodes", "{}", "text/html", 415, "unsupported_media_type", "Content-Type"},
      {"GET", "/v1/nothing", "", "", 404, "not_found", ""},
      {"PUT", "/v1/info", "", "", 405, "method_not_allowed", ""},
      {"POST", "/v1/episodes/ep-none/step", R"({"turn_id":0,"action":{"kind":"assistant"}})",
       "application/json", 404, "unknown_episode", "episode_id"},
      {"GET", "/v1/episodes/ep-none/export", "", "", 404, "unknown_episode", "episode_id"},
  };
  for (const Case& c : cases) {
    const Reply reply = client.call(c.method, c.target, c.body, c.content_type);
    EXPECT_EQ(reply.status, c.status) << c.target << " " << c.body << ": " << reply.body;
    EXPECT_EQ(reply.content_type,
              c.content_type == "application/x-protobuf" ? "application/x-protobuf" : "application/json");
    const proto::ErrorBody error = error_of(reply);
    EXPECT_EQ(error.code(), c.code) << reply.body;
    EXPECT_EQ(error.field(), c.field) << reply.body;
    EXPECT_FALSE(error.message().empty());
  }
  expect_healthy(s.port());
}

// An answer larger than the socket takes at once (32 MB to a client that waits before reading): the part the
// first send takes and the rest written as the client reads arrive whole and in order, and the connection
// serves its next request.
TEST(HttpServer, AnAnswerLargerThanTheSocketTakesArrivesWhole) {
  std::string big(32u << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + (i * 7 + i / 4093) % 26);
  HttpOptions options;
  options.routes = [&big](const HttpCall& call) -> std::optional<HttpAnswer> {
    if (call.target != "/big") return std::nullopt;
    return HttpAnswer{200, "text/plain", big};
  };
  TestServer s(options);
  const std::string request = "GET /big HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(s.server.port());
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the socket's buffers fill meanwhile
  std::string received;
  std::vector<char> chunk(1 << 20);
  const std::string head_end = "\r\n\r\n";
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10000) <= 0) break;
    const ssize_t n = ::recv(fd, chunk.data(), chunk.size(), 0);
    if (n <= 0) break;
    received.append(chunk.data(), static_cast<size_t>(n));
    const size_t second = received.find("HTTP/1.1 ", received.find(head_end) + head_end.size() + big.size());
    if (second != std::string::npos && received.find("\"ok\"", second) != std::string::npos) break;
  }
  ::close(fd);
  ASSERT_EQ(received.rfind("HTTP/1.1 200", 0), 0u);
  const size_t body = received.find(head_end) + head_end.size();
  ASSERT_GE(received.size(), body + big.size());
  EXPECT_TRUE(received.compare(body, big.size(), big) == 0) << "the body arrived changed";
  EXPECT_EQ(received.find("HTTP/1.1 200", body + big.size()), body + big.size())
      << "no second answer after it";
}

TEST(HttpServer, OversizedBodyGets413AndTheConnectionCloses) {
  HttpOptions http;
  http.max_body_bytes = 4096;
  TestServer s(http);
  const std::string body(10000, ' ');
  const std::string request =
      "POST /v1/episodes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  const std::string answer = raw_exchange(s.port(), request, false, 30.0);
  EXPECT_EQ(answer.rfind("HTTP/1.1 413", 0), 0u) << answer;
  EXPECT_NE(answer.find("payload_too_large"), std::string::npos);
  expect_healthy(s.port());
}

// Expect: 100-continue (curl sends it for large bodies): the server answers 100 Continue after the header,
// then reads the body and answers; a body over the limit is refused before it is sent; any other
// expectation gets 417.
TEST(HttpServer, ExpectContinueIsAnsweredBeforeTheBody) {
  HttpOptions http;
  http.max_body_bytes = 4096;
  TestServer s(http);
  const std::string body =
      R"({"env":"memory_chain","task_id":"h1","seed":3,"params":{"length":"4","reset_points":""}})";
  const std::string header =
      "POST /v1/episodes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n";
  // Only the header: the go-ahead comes (read until it has, an event), and nothing else with it (the server
  // waits for the body).
  const std::string interim = raw_exchange(s.port(), header, false, 30.0, "\r\n\r\n");
  EXPECT_EQ(interim.rfind("HTTP/1.1 100 Continue\r\n\r\n", 0), 0u) << interim;
  EXPECT_EQ(interim.find("HTTP/1.1 200"), std::string::npos) << interim;
  // Header and body: 100 Continue, then the real answer on the same connection.
  const std::string both = raw_exchange(s.port(), header + body, true, 30.0);
  EXPECT_EQ(both.rfind("HTTP/1.1 100 Continue\r\n\r\n", 0), 0u) << both;
  EXPECT_NE(both.find("HTTP/1.1 200 OK"), std::string::npos) << both;
  EXPECT_NE(both.find("episode_id"), std::string::npos) << both;
  // Too large: 413 without a 100 Continue, before any body byte.
  const std::string large =
      "POST /v1/episodes HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1000000\r\n\r\n";
  const std::string refused = raw_exchange(s.port(), large, false, 30.0);
  EXPECT_EQ(refused.rfind("HTTP/1.1 413", 0), 0u) << refused;
  // An expectation this server cannot meet.
  const std::string other =
      "POST /v1/episodes HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\nContent-Length: 2\r\n\r\n{}";
  const std::string failed = raw_exchange(s.port(), other, false, 30.0);
  EXPECT_EQ(failed.rfind("HTTP/1.1 417", 0), 0u) << failed;
  EXPECT_NE(failed.find("expectation_failed"), std::string::npos) << failed;
  expect_healthy(s.port());
}

// The deadline is short enough to keep the test quick and long enough (2 s) not to hit the normal requests on
// a loaded machine; the slow clients run side by side, and every bound is generous.
TEST(HttpServer, SlowClientsTimeOutWith408AndIdleOnesAreClosed) {
  HttpOptions http;
  http.request_timeout_s = 2.0;
  TestServer s(http);
  const auto begin = std::chrono::steady_clock::now();
  auto partial = std::async(std::launch::async, [&] {
    return raw_exchange(s.port(),
                        "POST /v1/episodes HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"env\"", false,
                        60.0);
  });
  auto idle = std::async(std::launch::async, [&] { return raw_exchange(s.port(), "", false, 60.0); });
  auto slow_headers = std::async(std::launch::async, [&] {
    return raw_exchange(s.port(), "GET /health HTTP/1.1\r\nHost: x\r\n", false, 60.0);
  });
  const std::string answer = partial.get();
  EXPECT_EQ(answer.rfind("HTTP/1.1 408", 0), 0u) << answer;
  EXPECT_NE(answer.find("request_timeout"), std::string::npos);
  EXPECT_EQ(idle.get(), "");  // an idle connection is closed without a word...
  EXPECT_EQ(slow_headers.get().rfind("HTTP/1.1 408", 0), 0u);
  // ... and all of them were closed by the server, long before the clients' own 60 s.
  EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(40));
  expect_healthy(s.port());
}

TEST(HttpServer, HalfClosedAndGarbledClients) {
  TestServer s;
  const std::string full = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string answered = raw_exchange(s.port(), full, true, 30.0);  // shut down our side after sending
  EXPECT_EQ(answered.rfind("HTTP/1.1 200", 0), 0u) << answered;
  const std::string cut = "POST /v1/episodes HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{\"env\":";
  const std::string incomplete = raw_exchange(s.port(), cut, true, 30.0);
  EXPECT_EQ(incomplete.rfind("HTTP/1.1 400", 0), 0u) << incomplete;
  EXPECT_NE(incomplete.find("incomplete_request"), std::string::npos);
  const std::string garbage = raw_exchange(s.port(), "HELLO THERE\r\n\r\n", false, 30.0);
  EXPECT_EQ(garbage.rfind("HTTP/1.1 400", 0), 0u) << garbage;
  EXPECT_NE(garbage.find("bad_http"), std::string::npos);
  expect_healthy(s.port());
}

TEST(HttpServer, MoreSessionsThanTheLimitGet429WithRetryAfter) {
  ServiceOptions service;
  service.max_sessions = 2;
  TestServer s({}, service);
  HttpClient client(s.port());
  EXPECT_EQ(client.call("POST", "/v1/episodes", kCreate).status, 200);
  EXPECT_EQ(client.call("POST", "/v1/episodes", kCreate).status, 200);
  const Reply full = client.call("POST", "/v1/episodes", kCreate);
  EXPECT_EQ(full.status, 429);
  EXPECT_EQ(full.retry_after, "1");
  EXPECT_EQ(error_of(full).code(), "too_many_sessions");
  EXPECT_GT(error_of(full).retry_after(), 0.0);
  expect_healthy(s.port());
}

TEST(HttpServer, ConcurrentClientsOnDifferentEpisodesAllFinish) {
  HttpOptions http;
  http.threads = 4;
  TestServer s(http);
  std::atomic<int> finished{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      HttpClient client(s.port());
      const std::string create = R"({"env":"memory_chain","task_id":"c)" + std::to_string(c) +
                                 R"(","params":{"length":"30","reset_points":"10,20"}})";
      auto r = parse<proto::StepResponse>(client.call("POST", "/v1/episodes", create));
      while (r.kind() != "done") {
        const std::string kind = r.kind() == "compaction_request" ? "summary" : "assistant";
        const std::string body = R"({"turn_id":)" + std::to_string(r.next_turn_id()) +
                                 R"(,"action":{"kind":")" + kind + R"(","text":"continue"}})";
        const Reply reply = client.call("POST", "/v1/episodes/" + r.episode_id() + "/step", body);
        ASSERT_EQ(reply.status, 200) << reply.body;
        r = parse<proto::StepResponse>(reply);
      }
      ++finished;
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(finished.load(), 8);
}

TEST(HttpServer, DrainAnswersTheRequestUnderWayThenStops) {
  EpisodeService service({});
  HttpOptions http;
  http.port = 0;
  http.handle_signals = false;
  HttpServer server(http, service);
  std::thread thread([&] { server.run(); });
  const uint16_t port = server.port();
  // An idle keep-alive connection and a half-sent request are open when the drain starts.
  HttpClient idle(port);
  EXPECT_EQ(idle.call("GET", "/health").status, 200);
  std::string answer;
  std::atomic<bool> stop_requested{false};
  std::thread slow([&] {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    const std::string head = "GET /health HTTP/1.1\r\nHost: x\r\n";
    ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
    while (!stop_requested || !server.draining()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ::send(fd, "\r\n", 2, MSG_NOSIGNAL);
    char chunk[4096];
    for (ssize_t n; (n = ::recv(fd, chunk, sizeof(chunk), 0)) > 0;)
      answer.append(chunk, static_cast<size_t>(n));
    ::close(fd);
  });
  // Events, not sleeps: the server has read part of the request, then (in `slow`) the drain has begun.
  for (int i = 0; i < 60000 && server.stats().reading == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(server.stats().reading, 1u);
  server.request_stop();
  stop_requested = true;
  slow.join();
  thread.join();  // run() returned: the drain finished
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  EXPECT_NE(answer.find("Connection: close"), std::string::npos) << answer;
  EXPECT_NE(answer.find("draining"), std::string::npos) << answer;
}

}  // namespace
}  // namespace crl::server
