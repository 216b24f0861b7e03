// `crl serve` as a process (issue 14 item 3): SIGTERM while a rollout waits on a silent LLM server. The
// stuck request is answered 503 drain_deadline at --drain-timeout and the process exits 0 soon after
// (generous bound: deadline + 5 s), without waiting for the blocked worker.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <thread>

#include "tests/server/http_client.h"

namespace crl::server {
namespace {

using namespace std::chrono_literals;

// Accepts connections and reads what comes, never answering; `got_request` turns true with the first bytes.
class SilentServer {
 public:
  SilentServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    ::listen(fd_, 16);
    socklen_t length = sizeof(address);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] {
      std::vector<int> clients;
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 50) > 0) clients.push_back(::accept(fd_, nullptr, nullptr));
        for (int c : clients) {
          pollfd q{c, POLLIN, 0};
          char sink[4096];
          if (::poll(&q, 1, 0) > 0 && ::recv(c, sink, sizeof(sink), MSG_DONTWAIT) > 0) got_request = true;
        }
      }
      for (int c : clients) ::close(c);
    });
  }
  ~SilentServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  uint16_t port() const { return port_; }
  std::atomic<bool> got_request{false};

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Kills the server if the test ends before it exited (a failed assertion must not leave it running).
struct ChildGuard {
  pid_t pid = -1;
  bool reaped = false;
  ~ChildGuard() {
    if (pid > 0 && !reaped) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

// Waits for `pid` to exit, at most `bound`; returns its wait status, or -1 (then it is killed).
int wait_exit(pid_t pid, std::chrono::duration<double> bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(20ms);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

TEST(ServeProcess, SigtermWithAStuckRolloutExitsByTheDrainDeadline) {
  SilentServer llm;
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const double drain_timeout = 1.0;
  std::future<testing::Reply> rollout;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::close(out[0]);
    ::close(out[1]);
    const std::string binary = std::string(CRL_BINARY_DIR) + "/crl";
    ::execl(binary.c_str(), binary.c_str(), "serve", "--port", "0", "--drain-timeout", "1", nullptr);
    ::_exit(127);
  }
  ::close(out[1]);
  ChildGuard child{pid};  // after the future: the server is killed before the future waits for its answer
  // The first line is `listening on HOST:PORT`.
  std::string line;
  for (char c; line.find('\n') == std::string::npos && ::read(out[0], &c, 1) == 1;) line += c;
  const size_t colon = line.rfind(':');
  ASSERT_NE(colon, std::string::npos) << line;
  const auto port = static_cast<uint16_t>(std::stoi(line.substr(colon + 1)));

  rollout = std::async(std::launch::async, [&] {
    testing::HttpClient client(port);
    return client.call("POST", "/v1/rollouts",
                       R"({"episodes":[{"env":"memory_chain","task_id":"m1","params":{"length":"4",)"
                       R"("reset_points":""}}],"llm":{"base_url":"http://127.0.0.1:)" +
                           std::to_string(llm.port()) + R"(","request_timeout_s":60,"max_retries":0}})");
  });
  for (int i = 0; i < 3000 && !llm.got_request; ++i) std::this_thread::sleep_for(20ms);  // an event, bounded
  ASSERT_TRUE(llm.got_request) << "the rollout never reached the LLM server";

  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  const int status = wait_exit(pid, std::chrono::duration<double>(drain_timeout + 5.0));
  child.reaped = true;
  ASSERT_NE(status, -1) << "crl serve did not exit by the drain deadline + 5 s";
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  ASSERT_EQ(rollout.wait_for(60s), std::future_status::ready);
  const testing::Reply reply = rollout.get();
  EXPECT_EQ(reply.status, 503) << reply.body;
  EXPECT_NE(reply.body.find("drain_deadline"), std::string::npos) << reply.body;
  ::close(out[0]);
}

}  // namespace
}  // namespace crl::server
