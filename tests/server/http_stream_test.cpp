// Streamed answers (HttpAnswer::stream, server/router.h): the head and each piece reach the client while the
// producer still runs (chunked transfer coding), a client that leaves stops the producer, HTTP/1.0 gets the
// whole body, a producer that throws leaves a cut body, keep-alive goes on after a stream, and the drain
// deadline cuts a stream that never ends. Real sockets on loopback, the server's own routes hook.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "tests/server/http_client.h"
#include "tests/server/test_server.h"

namespace crl::server {
namespace {

using namespace std::chrono_literals;

// What the test's producers and the test thread share.
struct Rendezvous {
  std::mutex mutex;
  std::condition_variable changed;
  bool client_has_first = false;  // the test thread read the first piece off the socket
  bool writer_refused = false;    // a write returned false (the client was gone)
  int writes = 0;

  // Waits up to `limit` for `ready`; false on timeout.
  template <typename Ready>
  bool wait(Ready ready, std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, limit, ready);
  }
  template <typename Change>
  void set(Change change) {
    {
      std::lock_guard lock(mutex);
      change();
    }
    changed.notify_all();
  }
};

// POST /stream/handshake: "one\n", then (once the client has read it) "two\n".
// POST /stream/endless: "tick\n" every millisecond until the client is gone (at most 20 s).
// POST /stream/throws: "part\n", then an exception.
HttpOptions streaming_routes(Rendezvous& r, std::atomic<bool>& handshake_timed_out) {
  HttpOptions options;
  options.routes = [&r, &handshake_timed_out](const HttpCall& call) -> std::optional<HttpAnswer> {
    HttpAnswer answer{200, "text/event-stream", "", 0};
    if (call.target == "/stream/handshake") {
      answer.stream = [&r, &handshake_timed_out](const BodyWriter& write) {
        write("one\n");
        if (!r.wait([&] { return r.client_has_first; }, 10000ms)) handshake_timed_out = true;
        write("two\n");
      };
    } else if (call.target == "/stream/endless") {
      answer.stream = [&r](const BodyWriter& write) {
        const auto until = std::chrono::steady_clock::now() + 20s;
        while (std::chrono::steady_clock::now() < until) {
          const bool ok = write("tick\n");
          r.set([&] { ++r.writes; });
          if (!ok) {
            r.set([&] { r.writer_refused = true; });
            return;
          }
          std::this_thread::sleep_for(1ms);
        }
      };
    } else if (call.target == "/stream/throws") {
      answer.stream = [](const BodyWriter& write) {
        write("part\n");
        throw std::runtime_error("the producer failed");
      };
    } else {
      return std::nullopt;
    }
    return answer;
  };
  return options;
}

int connect_to(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  return fd;
}

void send_all(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    ASSERT_GT(n, 0);
    sent += static_cast<size_t>(n);
  }
}

// Reads into `received` until it contains `until` (true), the peer closes or `limit` passes (false).
bool read_until(int fd, std::string& received, const std::string& until, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  char chunk[4096];
  while (received.find(until) == std::string::npos) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    const ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    if (n <= 0) return false;
    received.append(chunk, static_cast<size_t>(n));
  }
  return true;
}

std::string post(const std::string& target, const std::string& version = "HTTP/1.1") {
  return "POST " + target + " " + version + "\r\nHost: x\r\nContent-Type: application/json\r\n" +
         "Content-Length: 2\r\n\r\n{}";
}

TEST(HttpStream, EachPieceReachesTheClientWhileTheProducerRuns) {
  Rendezvous r;
  std::atomic<bool> timed_out{false};
  testing::TestServer server(streaming_routes(r, timed_out));
  const int fd = connect_to(server.port());
  send_all(fd, post("/stream/handshake"));
  std::string received;
  // The producer writes "two" only after this thread has read "one": a transport that held the body until
  // the producer returned would never deliver "one" (and the producer would time out).
  ASSERT_TRUE(read_until(fd, received, "one\n", 5000ms)) << received;
  EXPECT_NE(received.find("Transfer-Encoding: chunked"), std::string::npos) << received;
  EXPECT_NE(received.find("Content-Type: text/event-stream"), std::string::npos) << received;
  EXPECT_EQ(received.find("two"), std::string::npos);
  r.set([&] { r.client_has_first = true; });
  ASSERT_TRUE(read_until(fd, received, "\r\n0\r\n\r\n", 5000ms)) << received;  // the last chunk
  EXPECT_FALSE(timed_out);
  EXPECT_NE(received.find("4\r\none\n\r\n"), std::string::npos) << received;
  EXPECT_NE(received.find("4\r\ntwo\n\r\n"), std::string::npos) << received;
  ::close(fd);

  // Beast's client reads the chunked body whole, and the connection serves the next request after it.
  r.client_has_first = true;
  testing::HttpClient client(server.port());
  for (int i = 0; i < 2; ++i) {
    const testing::Reply reply = client.call("POST", "/stream/handshake", "{}");
    EXPECT_EQ(reply.status, 200);
    EXPECT_EQ(reply.body, "one\ntwo\n");
    EXPECT_TRUE(reply.keep_alive);
  }
  EXPECT_EQ(client.call("GET", "/health").status, 200);
}

TEST(HttpStream, AClientThatLeavesStopsTheProducer) {
  Rendezvous r;
  std::atomic<bool> timed_out{false};
  testing::TestServer server(streaming_routes(r, timed_out));
  const int fd = connect_to(server.port());
  send_all(fd, post("/stream/endless"));
  std::string received;
  ASSERT_TRUE(read_until(fd, received, "tick\n", 5000ms)) << received;
  ::close(fd);
  // The next write after the connection is seen gone (a write that fails) returns false.
  EXPECT_TRUE(r.wait([&] { return r.writer_refused; }, 10000ms)) << r.writes << " writes, never refused";
  testing::HttpClient client(server.port());
  EXPECT_EQ(client.call("GET", "/health").status, 200);
}

TEST(HttpStream, Http10GetsTheWholeBodyAtItsEnd) {
  Rendezvous r;
  r.client_has_first = true;  // nothing to wait for: an HTTP/1.0 client sees nothing before the end
  std::atomic<bool> timed_out{false};
  testing::TestServer server(streaming_routes(r, timed_out));
  const std::string reply =
      testing::raw_exchange(server.port(), post("/stream/handshake", "HTTP/1.0"), false, 5.0);
  EXPECT_EQ(reply.rfind("HTTP/1.0 200", 0), 0u) << reply;
  EXPECT_EQ(reply.find("chunked"), std::string::npos) << reply;
  EXPECT_NE(reply.find("Content-Length: 8\r\n"), std::string::npos) << reply;
  EXPECT_EQ(reply.substr(reply.size() - 8), "one\ntwo\n");
}

TEST(HttpStream, AProducerThatThrowsLeavesACutBody) {
  Rendezvous r;
  std::atomic<bool> timed_out{false};
  testing::TestServer server(streaming_routes(r, timed_out));
  const std::string reply = testing::raw_exchange(server.port(), post("/stream/throws"), false, 5.0);
  EXPECT_NE(reply.find("5\r\npart\n\r\n"), std::string::npos) << reply;
  EXPECT_EQ(reply.find("\r\n0\r\n\r\n"), std::string::npos) << "no last chunk: the client sees a cut body";
  testing::HttpClient client(server.port());
  EXPECT_EQ(client.call("GET", "/health").status, 200) << "the server is alive";
}

TEST(HttpStream, TheDrainDeadlineCutsAStreamThatNeverEnds) {
  Rendezvous r;
  std::atomic<bool> timed_out{false};
  HttpOptions options = streaming_routes(r, timed_out);
  options.drain_timeout_s = 0.3;
  auto server = std::make_unique<testing::TestServer>(options);
  const int fd = connect_to(server->port());
  send_all(fd, post("/stream/endless"));
  std::string received;
  ASSERT_TRUE(read_until(fd, received, "tick\n", 5000ms)) << received;
  const auto start = std::chrono::steady_clock::now();
  server.reset();  // request_stop(), then run() returns
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_TRUE(r.writer_refused) << "the producer was told the client is gone";
  EXPECT_FALSE(read_until(fd, received, "\r\n0\r\n\r\n", 1000ms)) << "cut, not ended";
  ::close(fd);
}

}  // namespace
}  // namespace crl::server
