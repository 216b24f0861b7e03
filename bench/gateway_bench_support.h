#pragma once
// What bench/gateway_bench.cpp (one call at a time, the gateway's handler in process),
// gateway_codec_bench.cpp and bench/gateway_load_bench.cpp (many harnesses at once) share: the context size,
// percentiles, CPU clocks and a harness's own /generate body. Both files build into bench_gateway.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace crl::gateway_bench {

using json = nlohmann::json;

inline constexpr size_t kContext = 8000;  // tokens of context (byte tokenizer: one per byte)

inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

// CPU seconds all this process's threads have used.
inline double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Calls `read(task directory)` for each of this process's threads whose name starts with `prefix`
// (/proc/self/task/*/comm): the server's threads are named crl-io and crl-worker (server/thread_name.h).
template <typename Read>
void for_each_named_thread(std::string_view prefix, Read&& read) {
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name.rfind(prefix, 0) == 0) read(task.path());
  }
}

// CPU seconds of those threads (their time on CPU from schedstat).
inline double named_threads_cpu_seconds(std::string_view prefix) {
  double total = 0;
  for_each_named_thread(prefix, [&](const std::filesystem::path& task) {
    std::ifstream schedstat(task / "schedstat");
    uint64_t ns = 0;
    schedstat >> ns;
    total += static_cast<double>(ns) * 1e-9;
  });
  return total;
}

// The same threads' CPU split into user space and kernel (utime and stime of /proc/self/task/*/stat, in
// clock ticks: 10 ms each, so read over seconds of load, not per call). The kernel's part of a proxy is
// mostly loopback TCP, which no user-space work removes.
struct UserSys {
  double user = 0, sys = 0;
  double faults =
      0;  // page faults (minor and major): a first touch of fresh memory, ~10 us each on a PVM guest
};
inline UserSys named_threads_user_sys_seconds(std::string_view prefix) {
  UserSys total;
  const double tick = 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  for_each_named_thread(prefix, [&](const std::filesystem::path& task) {
    std::ifstream stat_file(task / "stat");
    const std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
    const size_t close = stat.rfind(')');  // the name may hold spaces and parentheses: fields follow the last
    if (close == std::string::npos || close + 2 > stat.size()) return;
    std::istringstream fields(stat.substr(close + 2));
    std::string skip;
    for (int field = 3; field < 10; ++field) fields >> skip;  // state .. flags
    uint64_t minflt = 0, cminflt = 0, majflt = 0, cmajflt = 0, utime = 0, stime = 0;
    fields >> minflt >> cminflt >> majflt >> cmajflt >> utime >> stime;
    total.user += static_cast<double>(utime) * tick;
    total.sys += static_cast<double>(stime) * tick;
    total.faults += static_cast<double>(minflt + majflt);
  });
  return total;
}

// Context switches of the same threads (/proc/self/task/*/status): voluntary (the thread blocked: waiting for
// a request, an answer, a lock or a wake-up from another thread) and involuntary (preempted). A blocking
// proxy's floor is two voluntary ones per call: one waiting for the harness's request, one for the upstream's
// answer.
struct ContextSwitches {
  double voluntary = 0, involuntary = 0;
};
inline ContextSwitches named_threads_context_switches(std::string_view prefix) {
  ContextSwitches total;
  for_each_named_thread(prefix, [&](const std::filesystem::path& task) {
    std::ifstream status(task / "status");
    std::string line;
    while (std::getline(status, line)) {
      const auto count = [&line](std::string_view key) {
        return static_cast<double>(std::strtoull(line.c_str() + key.size(), nullptr, 10));
      };
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0)
        total.voluntary += count("voluntary_ctxt_switches:");
      if (line.rfind("nonvoluntary_ctxt_switches:", 0) == 0)
        total.involuntary += count("nonvoluntary_ctxt_switches:");
    }
  });
  return total;
}

// CPU seconds this thread has used (the gateway's work on a call runs on the thread that routes it).
inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// A harness's own SGLang /generate body with the ids of an 8k-token context (byte tokenizer ids).
inline std::string direct_generate_body() {
  json ids = json::array();
  for (size_t i = 0; i < kContext; ++i) ids.push_back(97 + static_cast<int>(i % 26));
  return json{{"input_ids", ids},
              {"sampling_params", {{"max_new_tokens", 64}, {"temperature", 1.0}, {"stop_token_ids", {258}}}},
              {"return_logprob", true},
              {"rid", "bench"}}
      .dump();
}

}  // namespace crl::gateway_bench
