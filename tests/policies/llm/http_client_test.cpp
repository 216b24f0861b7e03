// The LLM HTTP client against the scripted server on loopback: keep-alive reuse, the in-flight limit,
// retries on 5xx and dropped connections only, the deadline, cancellation, connection errors, URL parsing.
#include "policies/llm/http_client.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <thread>

#include "engine/error.h"
#include "tests/policies/llm/scripted_llm_server.h"

namespace crl::llm {
namespace {

namespace asio = boost::asio;
using testing::ScriptedLlmOptions;
using testing::ScriptedLlmServer;

// A valid SGLang body for a tiny prompt ("hi"); `salt` makes distinct bodies (the server counts attempts per
// body).
std::string generate_body(int salt) {
  return R"({"input_ids":[104,105],"sampling_params":{"max_new_tokens":8,"sampling_seed":)" +
         std::to_string(salt) + R"(},"return_logprob":true})";
}

HttpClientOptions options_for(const ScriptedLlmServer& server) {
  HttpClientOptions options;
  options.endpoint = parse_base_url(server.url(), "test");
  options.backoff_s = 0.001;
  options.request_timeout_s = 10;
  return options;
}

// Runs `count` posts concurrently on one io_context and returns the responses in call order.
std::vector<HttpResponse> post_all(const HttpClientOptions& options, int count,
                                   const std::string& path = "/generate", double cancel_after_s = -1) {
  asio::io_context io;
  HttpClient client(io, options);
  std::vector<HttpResponse> out(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    asio::co_spawn(
        io,
        [&, i]() -> asio::awaitable<void> {
          out[static_cast<size_t>(i)] = co_await client.post(path, generate_body(i));
        },
        asio::detached);
  }
  asio::steady_timer timer(io);
  if (cancel_after_s >= 0) {
    timer.expires_after(std::chrono::milliseconds(static_cast<int>(cancel_after_s * 1000)));
    timer.async_wait([&](auto) { client.cancel(); });
  }
  io.run();
  return out;
}

TEST(LlmHttpClient, ParsesBaseUrls) {
  const Endpoint e = parse_base_url("http://127.0.0.1:30000/api/", "test");
  EXPECT_EQ(e.host, "127.0.0.1");
  EXPECT_EQ(e.port, 30000);
  EXPECT_EQ(e.base_path, "/api");
  EXPECT_EQ(parse_base_url("http://localhost", "test").port, 80);
  EXPECT_THROW(parse_base_url("https://x:1", "test"), Error);
  EXPECT_THROW(parse_base_url("http://x:0", "test"), Error);
  EXPECT_THROW(parse_base_url("http://x:70000", "test"), Error);
  EXPECT_THROW(parse_base_url("http://:80", "test"), Error);
}

TEST(LlmHttpClient, ReusesOneKeepAliveConnectionForSequentialRequests) {
  ScriptedLlmServer server;
  HttpClientOptions options = options_for(server);
  options.max_in_flight = 1;
  const auto responses = post_all(options, 5);
  for (const HttpResponse& r : responses) {
    EXPECT_EQ(r.outcome, HttpOutcome::kOk) << r.error;
    EXPECT_EQ(r.status, 200);
    EXPECT_NE(r.body.find("output_ids"), std::string::npos);
  }
  EXPECT_EQ(server.connections(), 1u);
  EXPECT_EQ(server.attempts(), 5u);
}

// post_parts sends head + borrowed + tail as one body: a plain server receives the same request as post()
// with the joined string (same path, fields, Content-Length and body bytes), on one keep-alive connection.
TEST(LlmHttpClient, ABodyInPiecesArrivesAsTheSameRequest) {
  namespace http = boost::beast::http;
  asio::io_context server_io;
  asio::ip::tcp::acceptor acceptor(server_io, {asio::ip::make_address("127.0.0.1"), 0});
  std::vector<http::request<http::string_body>> received;
  std::thread server([&] {
    asio::ip::tcp::socket socket(server_io);
    acceptor.accept(socket);
    boost::beast::flat_buffer buffer;
    for (int i = 0; i < 2; ++i) {
      http::request<http::string_body> request;
      http::read(socket, buffer, request);
      received.push_back(std::move(request));
      http::response<http::string_body> response{http::status::ok, 11};
      response.body() = "{}";
      response.prepare_payload();
      http::write(socket, response);
    }
  });
  HttpClientOptions options;
  options.endpoint = parse_base_url(
      "http://127.0.0.1:" + std::to_string(acceptor.local_endpoint().port()) + "/base/", "test");
  const std::string whole = generate_body(7);
  const std::string ids = "[104,105]";
  const size_t at = whole.find(ids);
  ASSERT_NE(at, std::string::npos);
  asio::io_context io;
  HttpClient client(io, options);
  std::vector<HttpResponse> out;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        const std::vector<std::pair<std::string, std::string>> headers = {{"X-SMG-Routing-Key", "s1"}};
        HttpResponse first = co_await client.post("/generate", whole, headers);
        out.push_back(std::move(first));
        HttpClient::Body pieces;
        pieces.head = whole.substr(0, at);
        pieces.borrowed = ids;
        pieces.tail = whole.substr(at + ids.size());
        HttpResponse second = co_await client.post_parts("/generate", std::move(pieces), headers);
        out.push_back(std::move(second));
      },
      asio::detached);
  io.run();
  server.join();
  ASSERT_EQ(out.size(), 2u);
  ASSERT_EQ(received.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(out[i].outcome, HttpOutcome::kOk) << out[i].error;
    const auto& r = received[i];
    EXPECT_EQ(r.method(), http::verb::post);
    EXPECT_EQ(r.target(), "/base/generate");
    EXPECT_EQ(r[http::field::host], "127.0.0.1:" + std::to_string(acceptor.local_endpoint().port()));
    EXPECT_EQ(r[http::field::content_type], "application/json");
    EXPECT_EQ(r[http::field::accept], "application/json");
    EXPECT_EQ(r["X-SMG-Routing-Key"], "s1");
    EXPECT_EQ(r[http::field::content_length], std::to_string(whole.size()));
    EXPECT_TRUE(r.keep_alive());
    EXPECT_EQ(r.body(), whole);
  }
  EXPECT_EQ(client.stats().connections_opened, 1u);
}

TEST(LlmHttpClient, NeverHasMoreRequestsInFlightThanTheLimit) {
  ScriptedLlmOptions server_options;
  server_options.faults.delay_s = 0.02;
  ScriptedLlmServer server(server_options);
  HttpClientOptions options = options_for(server);
  options.max_in_flight = 3;
  const auto responses = post_all(options, 12);
  for (const HttpResponse& r : responses) EXPECT_EQ(r.outcome, HttpOutcome::kOk) << r.error;
  // One connection per slot at most: a fourth connection would mean a fourth request at once.
  EXPECT_LE(server.connections(), 3u);
  EXPECT_EQ(server.attempts(), 12u);
}

TEST(LlmHttpClient, RetriesServerErrorsWithBackoff) {
  ScriptedLlmOptions server_options;
  server_options.faults.transient_5xx = 2;
  ScriptedLlmServer server(server_options);
  const auto responses = post_all(options_for(server), 4);
  for (const HttpResponse& r : responses) {
    EXPECT_EQ(r.outcome, HttpOutcome::kOk) << r.error;
    EXPECT_EQ(r.attempts, 3);
  }
}

TEST(LlmHttpClient, RetriesDroppedConnections) {
  ScriptedLlmOptions server_options;
  server_options.faults.transient_drops = 2;
  ScriptedLlmServer server(server_options);
  HttpClientOptions options = options_for(server);
  options.max_in_flight = 1;
  const auto responses = post_all(options, 3);
  for (const HttpResponse& r : responses) {
    EXPECT_EQ(r.outcome, HttpOutcome::kOk) << r.error;
    EXPECT_GE(r.attempts, 3);
  }
}

TEST(LlmHttpClient, GivesUpAfterTheRetries) {
  ScriptedLlmOptions server_options;
  server_options.faults.transient_5xx = 100;
  ScriptedLlmServer server(server_options);
  HttpClientOptions options = options_for(server);
  options.max_retries = 2;
  const auto responses = post_all(options, 1);
  EXPECT_EQ(responses[0].outcome, HttpOutcome::kHttpError);
  EXPECT_EQ(responses[0].status, 503);
  EXPECT_EQ(responses[0].attempts, 3);
}

TEST(LlmHttpClient, DoesNotRetryClientErrors) {
  ScriptedLlmServer server;
  const auto responses = post_all(options_for(server), 1, "/no/such/path");
  EXPECT_EQ(responses[0].outcome, HttpOutcome::kHttpError);
  EXPECT_EQ(responses[0].status, 404);
  EXPECT_EQ(responses[0].attempts, 1);
  EXPECT_EQ(server.attempts(), 1u);
}

TEST(LlmHttpClient, EndsAtTheDeadline) {
  ScriptedLlmOptions server_options;
  server_options.faults.delay_s = 5;
  ScriptedLlmServer server(server_options);
  HttpClientOptions options = options_for(server);
  options.request_timeout_s = 0.2;
  const auto responses = post_all(options, 2);
  for (const HttpResponse& r : responses) {
    EXPECT_EQ(r.outcome, HttpOutcome::kTimeout);
    EXPECT_EQ(r.attempts, 1);  // a timeout is never retried
  }
}

TEST(LlmHttpClient, CancelEndsRunningAndWaitingRequests) {
  ScriptedLlmOptions server_options;
  server_options.faults.delay_s = 5;
  ScriptedLlmServer server(server_options);
  HttpClientOptions options = options_for(server);
  options.max_in_flight = 2;  // 2 running, 3 waiting for a slot
  const auto responses = post_all(options, 5, "/generate", 0.1);
  for (const HttpResponse& r : responses) {
    EXPECT_EQ(r.outcome, HttpOutcome::kCancelled);
    EXPECT_LT(r.seconds, 4.0);
  }
}

TEST(LlmHttpClient, ReportsConnectionErrorsWhenNobodyListens) {
  uint16_t port = 0;
  {
    ScriptedLlmServer server;  // take a free port, then close it
    port = server.port();
  }
  HttpClientOptions options;
  options.endpoint = parse_base_url("http://127.0.0.1:" + std::to_string(port), "test");
  options.max_retries = 2;
  options.backoff_s = 0.001;
  const auto responses = post_all(options, 1);
  EXPECT_EQ(responses[0].outcome, HttpOutcome::kConnectionError);
  EXPECT_EQ(responses[0].attempts, 3);
}

}  // namespace
}  // namespace crl::llm
