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
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/server_load.h"

namespace {

using namespace crl::bench;

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

std::unique_ptr<ChildProcess> crl_serve(std::vector<std::string> extra) {
  std::vector<std::string> argv = {CRL_BINARY_DIR "/crl", "serve", "--port",         "0",
                                   "--threads",           "1",     "--max-sessions", "1024"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<ChildProcess>(argv, true);
}

// N tagged backends and HAProxy in front; port() of the returned fleet is HAProxy's.
struct Fleet {
  std::vector<std::unique_ptr<ChildProcess>> backends;
  std::unique_ptr<ChildProcess> haproxy;
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
      std::make_unique<ChildProcess>(std::vector<std::string>{haproxy, "-db", "-f", fleet->config}, false);
  if (!wait_health(fleet->port)) return nullptr;
  return fleet;
}

// Warm-up (one episode per session, not counted), then the measured load.
void measure(benchmark::State& state, uint16_t port, int sessions) {
  const int episodes = env_int("CRL_BENCH_EPISODES", 2);
  {
    Load warmup;
    run_sessions(port, sessions, 1, play_crl_json, warmup);
  }
  for (auto _ : state) {
    Load load;
    const double seconds = run_sessions(port, sessions, episodes, play_crl_json, load);
    report(state, load, seconds, sessions * episodes);
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
