#pragma once
// What the load benchmarks of `crl serve` share (bench/server_bench.cpp, bench/fleet_bench.cpp): a server as
// a child process on loopback, S client sessions playing memory-chain episodes with the oracle's text
// actions, and the counters they report.
#include <benchmark/benchmark.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/server/http_client.h"

namespace crl::bench {

using server::testing::HttpClient;
using server::testing::Reply;

inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::max(1, std::atoi(v)) : fallback;
}

// A child process (stopped with SIGTERM and reaped on destruction); with `port_from_stdout`, its first stdout
// line is "listening on HOST:PORT" and port() is that port.
class ChildProcess {
 public:
  ChildProcess(std::vector<std::string> argv, bool port_from_stdout) {
    int out[2];
    if (pipe(out) != 0) std::abort();
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      close(out[1]);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    close(out[1]);
    stdout_ = out[0];
    if (!port_from_stdout) return;
    std::string line;
    char c;
    while (read(out[0], &c, 1) == 1 && c != '\n') line += c;
    const size_t colon = line.rfind(':');
    if (line.rfind("listening on ", 0) != 0 || colon == std::string::npos) {
      std::fprintf(stderr, "%s did not start: %s\n", argv[0].c_str(), line.c_str());
      std::abort();
    }
    port_ = static_cast<uint16_t>(std::stoi(line.substr(colon + 1)));
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() {
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    close(stdout_);
  }
  uint16_t port() const { return port_; }
  // CPU seconds (user + system, all threads) the process has used so far: the cost of serving, independent
  // of what else runs on the machine.
  double cpu_seconds() const {
    FILE* f = std::fopen(("/proc/" + std::to_string(pid_) + "/stat").c_str(), "r");
    if (f == nullptr) return 0;
    char buffer[1024];
    const size_t n = std::fread(buffer, 1, sizeof(buffer) - 1, f);
    std::fclose(f);
    buffer[n] = 0;
    const char* p = std::strrchr(buffer, ')');  // fields after the command name
    unsigned long utime = 0, stime = 0;
    if (p == nullptr ||
        std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2) {
      return 0;
    }
    return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }

 private:
  pid_t pid_ = -1;
  int stdout_ = -1;
  uint16_t port_ = 0;
};

// What a load measured: the latency of every request, the steps, the episodes that ended as expected.
struct Load {
  std::mutex mutex;
  std::vector<double> latencies_us;
  std::atomic<int64_t> steps{0};
  std::atomic<int> completed{0}, failed{0};
};

// Times one request.
template <typename Fn>
Reply timed(std::vector<double>& latencies, Fn&& fn) {
  const auto begin = std::chrono::steady_clock::now();
  Reply r = fn();
  latencies.push_back(
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - begin).count());
  return r;
}

// The fact of a memory-chain prompt (the last "FACT d" in it).
inline char fact_in(const std::string& text) {
  static const std::regex fact("FACT ([0-9])");
  char last = '0';
  for (auto it = std::sregex_iterator(text.begin(), text.end(), fact); it != std::sregex_iterator(); ++it) {
    last = (*it)[1].str()[0];
  }
  return last;
}

inline std::string chain_create(const std::string& task, int seed) {
  return R"({"env":"memory_chain","task_id":")" + task + R"(","seed":)" + std::to_string(seed) +
         R"(,"budget":{"capacity":2560,"reserve":768}})";
}

// What the oracle answers to a crl step answer (or to the create answer).
inline std::string crl_action(const nlohmann::json& r, char fact) {
  const std::string kind = r["kind"] == "compaction_request" ? "summary" : "assistant";
  std::string text = "continue";
  if (kind == "summary") {
    text = std::string("FACT ") + fact;
  } else if (r["append_text"].get<std::string>().find("QUESTION") != std::string::npos) {
    text = std::string("answer ") + fact;
  }
  return R"({"kind":")" + kind + R"(","text":")" + text + R"("})";
}

// One memory-chain episode against crl serve, one step per request (JSON). Returns true if it completed with
// reward 1 and was deleted.
inline bool play_crl_json(HttpClient& client, const std::string& task, int seed,
                          std::vector<double>& latencies, int64_t& steps) {
  Reply reply = client.call("POST", "/v1/episodes", chain_create(task, seed));
  if (reply.status != 200) return false;
  nlohmann::json r = nlohmann::json::parse(reply.body);
  const std::string id = r["episode_id"];
  const char fact = fact_in(r["prompt_text"]);
  const std::string path = "/v1/episodes/" + id + "/step";
  while (r["kind"] != "done") {
    const std::string body = R"({"turn_id":)" + std::to_string(r["next_turn_id"].get<int>()) +
                             R"(,"action":)" + crl_action(r, fact) + "}";
    reply = timed(latencies, [&] { return client.call("POST", path, body); });
    if (reply.status != 200) return false;
    r = nlohmann::json::parse(reply.body);
    ++steps;
  }
  const bool ok = r["status"] == "completed" && r["reward"].get<double>() == 1.0;
  return client.call("DELETE", "/v1/episodes/" + id).status == 200 && ok;
}

using PlayFn = bool (*)(HttpClient&, const std::string&, int, std::vector<double>&, int64_t&);

// `clients` threads, each with its own keep-alive connection, running body(client, index, latencies, steps);
// what they measured is added to `load`, an exception counts as a failed episode. Returns the wall seconds.
template <typename Body>
double run_clients(uint16_t port, int clients, Load& load, Body body) {
  const auto begin = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      std::vector<double> latencies;
      int64_t steps = 0;
      try {
        HttpClient client(port);
        body(client, c, latencies, steps);
      } catch (const std::exception& error) {
        std::fprintf(stderr, "client %d: %s\n", c, error.what());
        load.failed++;
      }
      load.steps += steps;
      std::lock_guard lock(load.mutex);
      load.latencies_us.insert(load.latencies_us.end(), latencies.begin(), latencies.end());
    });
  }
  for (auto& t : threads) t.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

// S sessions, each a thread with its own connection, playing `episodes` episodes one after another.
inline double run_sessions(uint16_t port, int sessions, int episodes, PlayFn play, Load& load) {
  return run_clients(port, sessions, load, [&](HttpClient& client, int s, auto& latencies, int64_t& steps) {
    for (int e = 0; e < episodes; ++e) {
      const bool ok =
          play(client, "s" + std::to_string(s) + "-e" + std::to_string(e), 7 + s, latencies, steps);
      (ok ? load.completed : load.failed)++;
    }
  });
}

inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// The counters of one measured load; `server_cpu_s` < 0: not measured.
inline void report(benchmark::State& state, Load& load, double seconds, int expected_episodes,
                   double server_cpu_s = -1) {
  if (server_cpu_s >= 0) {
    state.counters["server_cpu_us_per_step"] =
        server_cpu_s * 1e6 / static_cast<double>(std::max<int64_t>(1, load.steps));
  }
  state.SetIterationTime(seconds);
  state.SetItemsProcessed(load.steps);
  state.counters["steps_per_s"] = static_cast<double>(load.steps) / seconds;
  state.counters["p50_us"] = percentile(load.latencies_us, 0.50);
  state.counters["p99_us"] = percentile(load.latencies_us, 0.99);
  state.counters["episodes"] = load.completed.load();
  state.counters["failed"] = expected_episodes - load.completed.load();
}

}  // namespace crl::bench
