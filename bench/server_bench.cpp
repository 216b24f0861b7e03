// Load test of `crl serve` beside a Python baseline in the same run (issue 6; DESIGN.md rule 12).
//
// Both servers run as child processes on loopback: build/crl serve (Boost.Beast, C++) and
// bench/baselines/python_env_server.py (a threaded standard-library http.server serving the memory chain
// written in Python, JSON bodies). Each load runs S concurrent sessions (one keep-alive connection and one
// client thread each) that step memory-chain episodes (text view: 96 execution turns + 3 compaction requests
// answered with summaries) to completion with the oracle's text actions, and checks every episode ends
// completed with reward 1 (failed = any HTTP error or any other ending).
//   BM_CrlServerSingleStep<Json|Protobuf>/S   one step per request
//   BM_CrlServerSingleStepJsonSynthetic/S     the synthetic suite (text view, C = 3072) instead of the chain
//   BM_CrlServerBatchStep/S                   4 client threads, each stepping its S/4 episodes in one batch
//   BM_PythonBaselineSingleStep/S             the baseline, one step per request
//   .../1                                     one session: the latency of a step without queueing
// Counters: steps_per_s, p50_us / p99_us (per request: a batch request for batch steps), failed episodes, and
// server_cpu_us_per_step (the server process's CPU time per step, from /proc: robust to a busy machine).
// Environment: CRL_BENCH_EPISODES (episodes per session, default 2), CRL_BENCH_SERVER_THREADS (default 2).
#include <benchmark/benchmark.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "proto/server.pb.h"
#include "server/router.h"
#include "tests/server/http_client.h"
#include "wire/wire_codec.h"

namespace {

using crl::server::testing::HttpClient;
using crl::server::testing::Reply;
using nlohmann::json;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::max(1, std::atoi(v)) : fallback;
}

// A child process whose first stdout line is "listening on HOST:PORT".
class ChildServer {
 public:
  explicit ChildServer(std::vector<std::string> argv) {
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
    std::string line;
    char c;
    while (read(out[0], &c, 1) == 1 && c != '\n') line += c;
    stdout_ = out[0];
    const size_t colon = line.rfind(':');
    if (line.rfind("listening on ", 0) != 0 || colon == std::string::npos) {
      std::fprintf(stderr, "server %s did not start: %s\n", argv[0].c_str(), line.c_str());
      std::abort();
    }
    port_ = static_cast<uint16_t>(std::stoi(line.substr(colon + 1)));
  }
  ~ChildServer() {
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    close(stdout_);
  }
  uint16_t port() const { return port_; }
  // CPU seconds (user + system, all threads) the server has used so far: the cost of serving, independent of
  // what else runs on the machine.
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

ChildServer& crl_server() {
  static ChildServer server({CRL_BINARY_DIR "/crl", "serve", "--port", "0", "--threads",
                             std::to_string(env_int("CRL_BENCH_SERVER_THREADS", 2)), "--max-sessions",
                             "1024"});
  return server;
}

ChildServer& python_server() {
  static ChildServer server({"/usr/bin/python3", CRL_SOURCE_DIR "/bench/baselines/python_env_server.py"});
  return server;
}

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

char fact_in(const std::string& text) {
  static const std::regex fact("FACT ([0-9])");
  char last = '0';
  for (auto it = std::sregex_iterator(text.begin(), text.end(), fact); it != std::sregex_iterator(); ++it) {
    last = (*it)[1].str()[0];
  }
  return last;
}

std::string chain_create(const std::string& task, int seed) {
  return R"({"env":"memory_chain","task_id":")" + task + R"(","seed":)" + std::to_string(seed) +
         R"(,"budget":{"capacity":2560,"reserve":768}})";
}

// What the oracle answers to a crl step answer (or to the create answer).
std::string crl_action(const json& r, char fact) {
  const std::string kind = r["kind"] == "compaction_request" ? "summary" : "assistant";
  std::string text = "continue";
  if (kind == "summary") {
    text = std::string("FACT ") + fact;
  } else if (r["append_text"].get<std::string>().find("QUESTION") != std::string::npos) {
    text = std::string("answer ") + fact;
  }
  return R"({"kind":")" + kind + R"(","text":")" + text + R"("})";
}

// One memory-chain episode against crl serve, one step per request (JSON). Returns true if completed,
// reward 1.
bool play_crl_json(HttpClient& client, const std::string& task, int seed, std::vector<double>& latencies,
                   int64_t& steps) {
  Reply reply = client.call("POST", "/v1/episodes", chain_create(task, seed));
  if (reply.status != 200) return false;
  json r = json::parse(reply.body);
  const std::string id = r["episode_id"];
  const char fact = fact_in(r["prompt_text"]);
  const std::string path = "/v1/episodes/" + id + "/step";
  while (r["kind"] != "done") {
    const std::string body = R"({"turn_id":)" + std::to_string(r["next_turn_id"].get<int>()) +
                             R"(,"action":)" + crl_action(r, fact) + "}";
    reply = timed(latencies, [&] { return client.call("POST", path, body); });
    if (reply.status != 200) return false;
    r = json::parse(reply.body);
    ++steps;
  }
  const bool ok = r["status"] == "completed" && r["reward"].get<double>() == 1.0;
  return client.call("DELETE", "/v1/episodes/" + id).status == 200 && ok;
}

// The same episode in binary protobuf.
bool play_crl_protobuf(HttpClient& client, const std::string& task, int seed, std::vector<double>& latencies,
                       int64_t& steps) {
  crl::proto::CreateEpisodeRequest create;
  create.set_env("memory_chain");
  create.set_task_id(task);
  create.set_seed(static_cast<uint64_t>(seed));
  create.mutable_budget()->set_capacity(2560);
  create.mutable_budget()->set_reserve(768);
  const std::string pb = "application/x-protobuf";
  Reply reply = client.call("POST", "/v1/episodes", create.SerializeAsString(), pb);
  crl::proto::StepResponse r;
  if (reply.status != 200 || !r.ParseFromString(reply.body)) return false;
  const std::string path = "/v1/episodes/" + r.episode_id() + "/step";
  const char fact = fact_in(r.prompt_text());
  crl::proto::StepRequest step;
  while (r.kind() != "done") {
    step.set_turn_id(r.next_turn_id());
    const bool summary = r.kind() == "compaction_request";
    step.mutable_action()->set_kind(summary ? "summary" : "assistant");
    step.mutable_action()->set_text(summary ? std::string("FACT ") + fact
                                    : r.append_text().find("QUESTION") != std::string::npos
                                        ? std::string("answer ") + fact
                                        : "continue");
    reply = timed(latencies, [&] { return client.call("POST", path, step.SerializeAsString(), pb); });
    if (reply.status != 200 || !r.ParseFromString(reply.body)) return false;
    ++steps;
  }
  const bool ok = r.status() == "completed" && r.reward() == 1.0;
  return client.call("DELETE", "/v1/episodes/" + r.episode_id()).status == 200 && ok;
}

// A synthetic-suite episode (text view; byte tokens, so C = 3072, T_comp = 1024: about 2 compactions) against
// crl serve in JSON: `next` until END, then a submission; a summary whenever one is asked. The submission is
// not the answer (the client does not solve the task), so success means the episode ended completed with no
// error.
bool play_crl_synthetic_json(HttpClient& client, const std::string& task, int seed,
                             std::vector<double>& latencies, int64_t& steps) {
  const int index = static_cast<int>(std::hash<std::string>{}(task) % 60);
  Reply reply =
      client.call("POST", "/v1/episodes",
                  R"({"env":"synthetic","split":"dev","index":)" + std::to_string(index) + R"(,"seed":)" +
                      std::to_string(seed) + R"(,"budget":{"capacity":3072,"reserve":1024}})");
  if (reply.status != 200) return false;
  json r = json::parse(reply.body);
  const std::string id = r["episode_id"];
  const std::string path = "/v1/episodes/" + id + "/step";
  bool end_seen = false;
  while (r["kind"] != "done") {
    const bool summary = r["kind"] == "compaction_request";
    const std::string action = summary
                                   ? R"({"kind":"summary","text":"Read records with next; nothing kept."})"
                               : end_seen ? R"({"kind":"assistant","text":"submit 0000"})"
                                          : R"({"kind":"assistant","text":"next"})";
    const std::string body =
        R"({"turn_id":)" + std::to_string(r["next_turn_id"].get<int>()) + R"(,"action":)" + action + "}";
    reply = timed(latencies, [&] { return client.call("POST", path, body); });
    if (reply.status != 200) return false;
    r = json::parse(reply.body);
    end_seen = end_seen || r["append_text"].get<std::string>().find("user\nEND") != std::string::npos;
    ++steps;
  }
  const bool ok = r["status"] == "completed";
  return client.call("DELETE", "/v1/episodes/" + id).status == 200 && ok;
}

// The same episode against the Python baseline.
bool play_python(HttpClient& client, const std::string& task, int seed, std::vector<double>& latencies,
                 int64_t& steps) {
  Reply reply = client.call("POST", "/episodes",
                            R"({"seed":)" + std::to_string(seed) + R"(,"task_id":")" + task + "\"}");
  if (reply.status != 200) return false;
  json r = json::parse(reply.body);
  const std::string id = r["episode_id"];
  const char fact = fact_in(r["prompt"]);
  const std::string path = "/episodes/" + id + "/step";
  while (r["kind"] != "done") {
    std::string kind = r["kind"] == "compaction_request" ? "summary" : "assistant";
    std::string text = "continue";
    if (kind == "summary") {
      text = std::string("FACT ") + fact;
    } else if (r.contains("append") && r["append"].get<std::string>().find("QUESTION") != std::string::npos) {
      text = std::string("answer ") + fact;
    }
    const std::string body = R"({"turn_id":)" + std::to_string(r["next_turn_id"].get<int>()) +
                             R"(,"kind":")" + kind + R"(","text":")" + text + R"("})";
    reply = timed(latencies, [&] { return client.call("POST", path, body); });
    if (reply.status != 200) return false;
    r = json::parse(reply.body);
    ++steps;
  }
  const bool ok = r["reward"].get<double>() == 1.0;
  return client.call("DELETE", "/episodes/" + id).status == 200 && ok;
}

using PlayFn = bool (*)(HttpClient&, const std::string&, int, std::vector<double>&, int64_t&);

// S sessions, each a thread with its own connection, playing `episodes` episodes one after another.
double run_sessions(uint16_t port, int sessions, int episodes, PlayFn play, Load& load) {
  const auto begin = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int s = 0; s < sessions; ++s) {
    threads.emplace_back([&, s] {
      std::vector<double> latencies;
      int64_t steps = 0;
      try {
        HttpClient client(port);
        for (int e = 0; e < episodes; ++e) {
          const bool ok =
              play(client, "s" + std::to_string(s) + "-e" + std::to_string(e), 7 + s, latencies, steps);
          (ok ? load.completed : load.failed)++;
        }
      } catch (const std::exception& error) {
        std::fprintf(stderr, "session %d: %s\n", s, error.what());
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

// S episodes stepped by 4 client threads in batches: each round, one POST /v1/batch/step per thread holding
// one step of each of its live episodes.
double run_batched(uint16_t port, int sessions, int episodes, Load& load) {
  const int client_threads = std::min(4, sessions);
  const auto begin = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < client_threads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<double> latencies;
      int64_t steps = 0;
      try {
        HttpClient client(port);
        for (int round = 0; round < episodes; ++round) {
          struct Live {
            std::string id;
            char fact;
            json last;
          };
          std::vector<Live> live;
          for (int s = t; s < sessions; s += client_threads) {
            const Reply reply =
                client.call("POST", "/v1/episodes",
                            chain_create("b" + std::to_string(s) + "-" + std::to_string(round), 7 + s));
            if (reply.status != 200) {
              load.failed++;
              continue;
            }
            json r = json::parse(reply.body);
            live.push_back({r["episode_id"], fact_in(r["prompt_text"]), r});
          }
          while (!live.empty()) {
            std::string body = R"({"steps":[)";
            for (size_t i = 0; i < live.size(); ++i) {
              body += (i ? "," : "") + std::string(R"({"episode_id":")") + live[i].id + R"(","turn_id":)" +
                      std::to_string(live[i].last["next_turn_id"].get<int>()) + R"(,"action":)" +
                      crl_action(live[i].last, live[i].fact) + "}";
            }
            body += "]}";
            const Reply reply = timed(latencies, [&] { return client.call("POST", "/v1/batch/step", body); });
            const json results = json::parse(reply.body)["results"];
            std::vector<Live> next;
            for (size_t i = 0; i < live.size(); ++i) {
              if (results[i]["http_status"] != 200) {
                load.failed++;
                continue;
              }
              ++steps;
              live[i].last = results[i]["response"];
              if (live[i].last["kind"] != "done") {
                next.push_back(std::move(live[i]));
              } else {
                bool ok =
                    live[i].last["status"] == "completed" && live[i].last["reward"].get<double>() == 1.0;
                ok = ok && client.call("DELETE", "/v1/episodes/" + live[i].id).status == 200;
                (ok ? load.completed : load.failed)++;
              }
            }
            live = std::move(next);
          }
        }
      } catch (const std::exception& error) {
        std::fprintf(stderr, "batch client %d: %s\n", t, error.what());
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

// The same batched load in binary protobuf (what a high-throughput trainer client sends): one
// BatchStepRequest per round and thread, parsed with the generated classes.
double run_batched_protobuf(uint16_t port, int sessions, int episodes, Load& load) {
  const int client_threads = std::min(4, sessions);
  const std::string pb = "application/x-protobuf";
  const auto begin = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < client_threads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<double> latencies;
      int64_t steps = 0;
      try {
        HttpClient client(port);
        for (int round = 0; round < episodes; ++round) {
          struct Live {
            char fact;
            crl::proto::StepResponse last;
          };
          std::vector<Live> live;
          for (int s = t; s < sessions; s += client_threads) {
            crl::proto::CreateEpisodeRequest create;
            create.set_env("memory_chain");
            create.set_task_id("p" + std::to_string(s) + "-" + std::to_string(round));
            create.set_seed(static_cast<uint64_t>(7 + s));
            create.mutable_budget()->set_capacity(2560);
            create.mutable_budget()->set_reserve(768);
            const Reply reply = client.call("POST", "/v1/episodes", create.SerializeAsString(), pb);
            Live l;
            if (reply.status != 200 || !l.last.ParseFromString(reply.body)) {
              load.failed++;
              continue;
            }
            l.fact = fact_in(l.last.prompt_text());
            live.push_back(std::move(l));
          }
          crl::proto::BatchStepRequest batch;
          crl::proto::BatchStepResponse results;
          while (!live.empty()) {
            batch.clear_steps();
            for (const Live& l : live) {
              crl::proto::StepRequest* step = batch.add_steps();
              step->set_episode_id(l.last.episode_id());
              step->set_turn_id(l.last.next_turn_id());
              const bool summary = l.last.kind() == "compaction_request";
              step->mutable_action()->set_kind(summary ? "summary" : "assistant");
              step->mutable_action()->set_text(summary ? std::string("FACT ") + l.fact
                                               : l.last.append_text().find("QUESTION") != std::string::npos
                                                   ? std::string("answer ") + l.fact
                                                   : "continue");
            }
            const Reply reply = timed(latencies, [&] {
              return client.call("POST", "/v1/batch/step", batch.SerializeAsString(), pb);
            });
            if (reply.status != 200 || !results.ParseFromString(reply.body) ||
                results.results_size() != static_cast<int>(live.size())) {
              throw std::runtime_error("batch step failed: HTTP " + std::to_string(reply.status));
            }
            std::vector<Live> next;
            for (size_t i = 0; i < live.size(); ++i) {
              const crl::proto::BatchStepResult& result = results.results(static_cast<int>(i));
              if (result.http_status() != 200) {
                load.failed++;
                continue;
              }
              ++steps;
              live[i].last = result.response();
              if (live[i].last.kind() != "done") {
                next.push_back(std::move(live[i]));
              } else {
                bool ok = live[i].last.status() == "completed" && live[i].last.reward() == 1.0;
                ok = ok && client.call("DELETE", "/v1/episodes/" + live[i].last.episode_id()).status == 200;
                (ok ? load.completed : load.failed)++;
              }
            }
            live = std::move(next);
          }
        }
      } catch (const std::exception& error) {
        std::fprintf(stderr, "batch client %d: %s\n", t, error.what());
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

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

void report(benchmark::State& state, Load& load, double seconds, int expected_episodes, double server_cpu_s) {
  state.counters["server_cpu_us_per_step"] =
      server_cpu_s * 1e6 / static_cast<double>(std::max<int64_t>(1, load.steps));
  state.SetIterationTime(seconds);
  state.SetItemsProcessed(load.steps);
  state.counters["steps_per_s"] = static_cast<double>(load.steps) / seconds;
  state.counters["p50_us"] = percentile(load.latencies_us, 0.50);
  state.counters["p99_us"] = percentile(load.latencies_us, 0.99);
  state.counters["episodes"] = load.completed.load();
  state.counters["failed"] = expected_episodes - load.completed.load();
}

void single_step(benchmark::State& state, ChildServer& server, PlayFn play) {
  const int sessions = static_cast<int>(state.range(0));
  const int episodes = env_int("CRL_BENCH_EPISODES", 2);
  {
    Load warmup;
    run_sessions(server.port(), std::min(sessions, 4), 1, play, warmup);
  }
  for (auto _ : state) {
    Load load;
    const double cpu = server.cpu_seconds();
    const double seconds = run_sessions(server.port(), sessions, episodes, play, load);
    report(state, load, seconds, sessions * episodes, server.cpu_seconds() - cpu);
  }
}

void BM_CrlServerSingleStepJson(benchmark::State& state) {
  single_step(state, crl_server(), play_crl_json);
}
void BM_CrlServerSingleStepProtobuf(benchmark::State& state) {
  single_step(state, crl_server(), play_crl_protobuf);
}
void BM_CrlServerSingleStepJsonSynthetic(benchmark::State& state) {
  single_step(state, crl_server(), play_crl_synthetic_json);
}
void BM_PythonBaselineSingleStep(benchmark::State& state) {
  single_step(state, python_server(), play_python);
}

using BatchLoadFn = double (*)(uint16_t port, int sessions, int episodes, Load& load);

void batch_step(benchmark::State& state, BatchLoadFn run) {
  const int sessions = static_cast<int>(state.range(0));
  const int episodes = env_int("CRL_BENCH_EPISODES", 2);
  {
    Load warmup;
    run(crl_server().port(), 4, 1, warmup);
  }
  for (auto _ : state) {
    Load load;
    const double cpu = crl_server().cpu_seconds();
    const double seconds = run(crl_server().port(), sessions, episodes, load);
    report(state, load, seconds, sessions * episodes, crl_server().cpu_seconds() - cpu);
  }
}
void BM_CrlServerBatchStep(benchmark::State& state) {
  batch_step(state, run_batched);
}
void BM_CrlServerBatchStepProtobuf(benchmark::State& state) {
  batch_step(state, run_batched_protobuf);
}

// The server's CPU cost per step without sockets: route() on an in-process service (decode, step, encode).
void route_steps(benchmark::State& state, crl::wire::WireFormat format) {
  using namespace crl::server;
  using namespace crl::wire;
  EpisodeService service({});
  const std::string type(content_type(format));
  auto call = [&](std::string_view method, const std::string& target, const std::string& body) {
    return route(service, HttpCall{method, target, type, type, body, false});
  };
  auto encode = [&](const google::protobuf::Message& m) { return encode_message(m, format); };
  auto decode = [&](const HttpAnswer& a, google::protobuf::Message& m) { decode_message(a.body, format, m); };
  crl::proto::CreateEpisodeRequest create;
  create.set_env("memory_chain");
  create.set_task_id("route");
  create.mutable_budget()->set_capacity(2560);
  create.mutable_budget()->set_reserve(768);
  crl::proto::StepResponse r;
  crl::proto::StepRequest step;
  int64_t steps = 0;
  for (auto _ : state) {
    if (r.kind().empty() || r.kind() == "done") {
      state.PauseTiming();
      if (!r.episode_id().empty()) call("DELETE", "/v1/episodes/" + r.episode_id(), "");
      decode(call("POST", "/v1/episodes", encode(create)), r);
      state.ResumeTiming();
    }
    step.set_turn_id(r.next_turn_id());
    const bool summary = r.kind() == "compaction_request";
    step.mutable_action()->set_kind(summary ? "summary" : "assistant");
    step.mutable_action()->set_text(summary ? "FACT 1" : "continue");
    const HttpAnswer answer = call("POST", "/v1/episodes/" + r.episode_id() + "/step", encode(step));
    decode(answer, r);
    ++steps;
  }
  state.SetItemsProcessed(steps);
}
void BM_RouteStepJson(benchmark::State& state) {
  route_steps(state, crl::wire::WireFormat::kJson);
}
void BM_RouteStepProtobuf(benchmark::State& state) {
  route_steps(state, crl::wire::WireFormat::kProtobuf);
}
BENCHMARK(BM_RouteStepJson)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RouteStepProtobuf)->Unit(benchmark::kMicrosecond);

// The Python baseline first, so that the C++ server's numbers are not taken while a cold interpreter starts.
BENCHMARK(BM_PythonBaselineSingleStep)
    ->Arg(64)
    ->Arg(1)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CrlServerSingleStepJson)
    ->Arg(64)
    ->Arg(1)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CrlServerSingleStepProtobuf)
    ->Arg(64)
    ->Arg(1)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CrlServerSingleStepJsonSynthetic)
    ->Arg(64)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CrlServerBatchStep)->Arg(64)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CrlServerBatchStepProtobuf)
    ->Arg(64)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
