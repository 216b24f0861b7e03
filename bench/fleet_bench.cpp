// A fleet of `crl serve` behind HAProxy, and the cost of session snapshots (issue 19, Benchmarks), with the
// baselines in the same run (DESIGN.md rule 12).
//
// Every server is a child process on loopback (build/crl serve, `haproxy -f` on a configuration from `crl
// deploy haproxy`). A load is S concurrent sessions (one keep-alive connection and one client thread each)
// playing memory-chain episodes (96 execution turns + 3 compaction requests) to completion with the oracle's
// text actions in JSON, one step per request; any error or any ending other than completed with reward 1
// counts as failed.
//   BM_FleetDirect/S              one crl serve, no HAProxy: the baseline
//   BM_FleetHaproxy/N/S           N = 1, 2, 3 backends behind HAProxy (creates balanced round robin, steps
//                                 routed by the backend tag in the episode id)
//   BM_SnapshotStep/E/S           one crl serve with --snapshot-dir (a fresh temporary folder) and
//                                 --snapshot-every E (E = 0: no --snapshot-dir at all, the baseline; E = 1:
//                                 a snapshot after every step: serialize, write, fsync, rename, fsync dir)
// Counters: steps_per_s, p50_us / p99_us (per step request), failed episodes. Skipped with a message where
// haproxy is absent. Environment: CRL_BENCH_EPISODES (episodes per session, default 2).
#include <benchmark/benchmark.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/server/http_client.h"

namespace {

using crl::server::testing::HttpClient;
using crl::server::testing::Reply;
using nlohmann::json;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::max(1, std::atoi(v)) : fallback;
}

// A child process; with `port_from_stdout`, its first stdout line is "listening on HOST:PORT".
class Child {
 public:
  Child(std::vector<std::string> argv, bool port_from_stdout) {
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
  ~Child() {
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    close(stdout_);
  }
  uint16_t port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int stdout_ = -1;
  uint16_t port_ = 0;
};

uint16_t free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string haproxy_binary() {
  for (const char* p : {"/usr/sbin/haproxy", "/usr/bin/haproxy", "/usr/local/sbin/haproxy"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

std::unique_ptr<Child> crl_serve(std::vector<std::string> extra) {
  std::vector<std::string> argv = {CRL_BINARY_DIR "/crl", "serve", "--port",         "0",
                                   "--threads",           "1",     "--max-sessions", "1024"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<Child>(argv, true);
}

// N tagged backends and HAProxy in front; port() of the returned fleet is HAProxy's.
struct Fleet {
  std::vector<std::unique_ptr<Child>> backends;
  std::unique_ptr<Child> haproxy;
  uint16_t port = 0;
  std::string config;
  ~Fleet() {
    haproxy.reset();
    backends.clear();
    if (!config.empty()) std::filesystem::remove(config);
  }
};

bool wait_health(uint16_t port) {
  for (int i = 0; i < 200; ++i) {
    try {
      HttpClient client(port);
      if (client.call("GET", "/health", "").status == 200) return true;
    } catch (const std::exception&) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

std::unique_ptr<Fleet> start_fleet(int n, const std::string& haproxy) {
  auto fleet = std::make_unique<Fleet>();
  std::string args;
  for (int i = 0; i < n; ++i) {
    fleet->backends.push_back(crl_serve({"--backend-tag", "b" + std::to_string(i)}));
    args +=
        " --backend b" + std::to_string(i) + "=127.0.0.1:" + std::to_string(fleet->backends.back()->port());
  }
  fleet->port = free_port();
  char name[] = "/tmp/crl_fleet_bench_XXXXXX";
  const int fd = mkstemp(name);
  close(fd);
  fleet->config = name;
  const std::string command =
      std::string(CRL_BINARY_DIR "/crl deploy haproxy --bind 127.0.0.1:") + std::to_string(fleet->port) +
      " --stats-bind 127.0.0.1:" + std::to_string(free_port()) + args + " > " + fleet->config;
  if (std::system(command.c_str()) != 0) return nullptr;
  fleet->haproxy =
      std::make_unique<Child>(std::vector<std::string>{haproxy, "-db", "-f", fleet->config}, false);
  if (!wait_health(fleet->port)) return nullptr;
  return fleet;
}

struct Load {
  std::mutex mutex;
  std::vector<double> latencies_us;
  std::atomic<int64_t> steps{0};
  std::atomic<int> completed{0};
};

char fact_in(const std::string& text) {
  static const std::regex fact("FACT ([0-9])");
  char last = '0';
  for (auto it = std::sregex_iterator(text.begin(), text.end(), fact); it != std::sregex_iterator(); ++it) {
    last = (*it)[1].str()[0];
  }
  return last;
}

// One memory-chain episode, one step per request (JSON); true when it completed with reward 1.
bool play(HttpClient& client, const std::string& task, int seed, std::vector<double>& latencies,
          int64_t& steps) {
  Reply reply = client.call("POST", "/v1/episodes",
                            R"({"env":"memory_chain","task_id":")" + task + R"(","seed":)" +
                                std::to_string(seed) + R"(,"budget":{"capacity":2560,"reserve":768}})");
  if (reply.status != 200) return false;
  json r = json::parse(reply.body);
  const std::string id = r["episode_id"];
  const char fact = fact_in(r["prompt_text"]);
  const std::string path = "/v1/episodes/" + id + "/step";
  while (r["kind"] != "done") {
    const bool summary = r["kind"] == "compaction_request";
    std::string text = "continue";
    if (summary) {
      text = std::string("FACT ") + fact;
    } else if (r["append_text"].get<std::string>().find("QUESTION") != std::string::npos) {
      text = std::string("answer ") + fact;
    }
    const std::string body = R"({"turn_id":)" + std::to_string(r["next_turn_id"].get<int>()) +
                             R"(,"action":{"kind":")" + (summary ? "summary" : "assistant") +
                             R"(","text":")" + text + R"("}})";
    const auto begin = std::chrono::steady_clock::now();
    reply = client.call("POST", path, body);
    latencies.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - begin).count());
    if (reply.status != 200) return false;
    r = json::parse(reply.body);
    ++steps;
  }
  const bool ok = r["status"] == "completed" && r["reward"].get<double>() == 1.0;
  return client.call("DELETE", "/v1/episodes/" + id).status == 200 && ok;
}

double run_sessions(uint16_t port, int sessions, int episodes, Load& load) {
  const auto begin = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int s = 0; s < sessions; ++s) {
    threads.emplace_back([&, s] {
      std::vector<double> latencies;
      int64_t steps = 0;
      try {
        HttpClient client(port);
        for (int e = 0; e < episodes; ++e) {
          if (play(client, "s" + std::to_string(s) + "-e" + std::to_string(e), 7 + s, latencies, steps))
            load.completed++;
        }
      } catch (const std::exception& error) {
        std::fprintf(stderr, "session %d: %s\n", s, error.what());
      }
      load.steps += steps;
      std::lock_guard lock(load.mutex);
      load.latencies_us.insert(load.latencies_us.end(), latencies.begin(), latencies.end());
    });
  }
  for (auto& t : threads) t.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// Warm-up (one episode per session, not counted), then the measured load.
void measure(benchmark::State& state, uint16_t port, int sessions) {
  const int episodes = env_int("CRL_BENCH_EPISODES", 2);
  {
    Load warmup;
    run_sessions(port, sessions, 1, warmup);
  }
  for (auto _ : state) {
    Load load;
    const double seconds = run_sessions(port, sessions, episodes, load);
    state.SetIterationTime(seconds);
    state.SetItemsProcessed(load.steps);
    state.counters["steps_per_s"] = static_cast<double>(load.steps) / seconds;
    state.counters["p50_us"] = percentile(load.latencies_us, 0.50);
    state.counters["p99_us"] = percentile(load.latencies_us, 0.99);
    state.counters["failed"] = sessions * episodes - load.completed.load();
  }
}

void BM_FleetDirect(benchmark::State& state) {
  const auto server = crl_serve({});
  measure(state, server->port(), static_cast<int>(state.range(0)));
}

void BM_FleetHaproxy(benchmark::State& state) {
  const std::string haproxy = haproxy_binary();
  if (haproxy.empty()) {
    state.SkipWithError("haproxy is absent (apt-get install haproxy)");
    return;
  }
  const auto fleet = start_fleet(static_cast<int>(state.range(0)), haproxy);
  if (!fleet) {
    state.SkipWithError("the fleet did not start");
    return;
  }
  measure(state, fleet->port, static_cast<int>(state.range(1)));
}

void BM_SnapshotStep(benchmark::State& state) {
  const int every = static_cast<int>(state.range(0));
  char name[] = "/tmp/crl_snapshot_bench_XXXXXX";
  const std::string dir = mkdtemp(name);
  {
    const auto server = every == 0 ? crl_serve({})
                                   : crl_serve({"--snapshot-dir", dir, "--snapshot-every",
                                                std::to_string(every), "--backend-tag", "b0"});
    measure(state, server->port(), static_cast<int>(state.range(1)));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace

BENCHMARK(BM_FleetDirect)->Arg(8)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FleetHaproxy)
    ->ArgsProduct({{1, 2, 3}, {8}})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SnapshotStep)
    ->ArgsProduct({{0, 1}, {1, 8}})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
