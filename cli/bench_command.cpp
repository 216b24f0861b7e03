// `crl bench [--filter REGEX] [--out FILE] [--bench-dir DIR] [--list] [--dry-run]`: see cli/bench_command.h.
#include "cli/bench_command.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "cli/command.h"
#include "cli/options.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/json_reader.h"

namespace crl::cli {

namespace fs = std::filesystem;

const std::vector<BenchPlan>& bench_plans() {
  // Measured budget on 2 shared cores: every entry runs in well under a minute except learner (the NumPy
  // baseline at 10M tokens) and server (child processes under load), which are trimmed.
  static const std::vector<BenchPlan> plans = {
      {"engine", ".", 0.1, {}, "context rebuild vs memcpy, event kernel vs std::priority_queue"},
      {"synthetic", ".", 0.1, {}, "synthetic env steps/s vs copying its observations"},
      {"memory_chain", "Step|Episode", 0.1, {}, "the whole-scenario rows take minutes: run them by hand"},
      {"coding", ".", 0.1, {}, "coding_repo steps/s, solver episodes, shell overhead"},
      {"learner",
       "Cpu|Numpy|Cuda",
       0.5,
       {},
       "CPU learner vs the NumPy baseline (CUDA rows skip without a GPU)"},
      {"server",
       "Route|/1$|BatchStep",
       0.1,
       {{"CRL_BENCH_EPISODES", "1"}},
       "one episode per session and the one-session loads: the 64-session loads take minutes"},
      {"remote_env", ".", 0.1, {}, "remote env steps/s: batched rounds vs one request per step"},
      {"wire", ".", 0.1, {}, "the JSON writer on a session's export vs protobuf's own printer"},
      {"simulation", ".", 0.1, {}, "simulated events/s with stubbed policies vs the bare kernel"},
      {"tokenizer", ".", 0.1, {}, "tokenizer vs its reference"},
      {"chat_template",
       ".",
       0.1,
       {},
       "real models' chat templates vs python3-jinja2 rendering the same conversation (skips without it)"},
      {"llm_client", ".", 0.1, {}, "LLM client overhead"},
      {"neural", ".", 0.1, {}, "neural policy (CPU; CUDA rows skip without a GPU)"},
      {"lm",
       ".",
       0.1,
       {},
       "language-model policy: training and KV-cache sampling vs PyTorch, sgemm at its shapes"},
      {"lm_serve",
       ".",
       0.1,
       {},
       "crl lm serve over HTTP: a streamed answer's first bytes vs the whole answer"},
  };
  return plans;
}

BenchPlan bench_plan_for(const std::string& name) {
  for (const BenchPlan& p : bench_plans()) {
    if (p.name == name) return p;
  }
  return BenchPlan{name, ".", 0.1, {}, "not listed: every benchmark, 0.1 s each"};
}

namespace {

std::string number(double v) {
  char buffer[64];
  if (!std::isfinite(v)) return "-";
  const double a = std::fabs(v);
  if (a >= 1e9) {
    std::snprintf(buffer, sizeof(buffer), "%.3g G", v / 1e9);
  } else if (a >= 1e6) {
    std::snprintf(buffer, sizeof(buffer), "%.3g M", v / 1e6);
  } else if (a >= 1e3) {
    std::snprintf(buffer, sizeof(buffer), "%.3g k", v / 1e3);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.3g", v);
  }
  return buffer;
}

double unit_seconds(const std::string& unit) {
  if (unit == "s") return 1.0;
  if (unit == "ms") return 1e-3;
  if (unit == "us") return 1e-6;
  return 1e-9;
}

std::string duration(double seconds) {
  char buffer[64];
  if (seconds >= 1.0) {
    std::snprintf(buffer, sizeof(buffer), "%.3g s", seconds);
  } else if (seconds >= 1e-3) {
    std::snprintf(buffer, sizeof(buffer), "%.3g ms", seconds * 1e3);
  } else if (seconds >= 1e-6) {
    std::snprintf(buffer, sizeof(buffer), "%.3g us", seconds * 1e6);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.3g ns", seconds * 1e9);
  }
  return buffer;
}

std::string begin_marker(const std::string& name) {
  return "<!-- bench:" + name + " -->";
}
std::string end_marker(const std::string& name) {
  return "<!-- /bench:" + name + " -->";
}

}  // namespace

std::string format_bench_table(const std::string& json_text, const std::string& where) {
  nlohmann::json doc;
  try {
    doc = read_json(json_text, where);
  } catch (const JsonError& e) {
    throw Error(where, e.field(), "not Google Benchmark JSON output: " + e.message());
  }
  if (!doc.is_object() || !doc.contains("benchmarks") || !doc["benchmarks"].is_array()) {
    throw Error(where, "benchmarks", "not Google Benchmark JSON output: no \"benchmarks\" array");
  }
  static const std::vector<std::string> kStandard = {"name",
                                                     "family_index",
                                                     "per_family_instance_index",
                                                     "run_name",
                                                     "run_type",
                                                     "repetitions",
                                                     "repetition_index",
                                                     "threads",
                                                     "iterations",
                                                     "real_time",
                                                     "cpu_time",
                                                     "time_unit",
                                                     "items_per_second",
                                                     "bytes_per_second",
                                                     "aggregate_name",
                                                     "aggregate_unit",
                                                     "error_occurred",
                                                     "error_message",
                                                     "label"};
  std::ostringstream out;
  out << "| benchmark | real time | CPU time | iterations | items/s | bytes/s | counters |\n"
         "|---|---|---|---|---|---|---|\n";
  for (const auto& b : doc["benchmarks"]) {
    const std::string name = b.value("name", "?");
    if (b.value("error_occurred", false)) {
      out << "| " << name << " | skipped: " << b.value("error_message", "") << " | | | | | |\n";
      continue;
    }
    const std::string unit = b.value("time_unit", "ns");
    auto time = [&](const char* key) {
      if (!b.contains(key) || !b[key].is_number()) return std::string("-");
      return duration(b[key].get<double>() * unit_seconds(unit));
    };
    auto rate = [&](const char* key) {
      return b.contains(key) && b[key].is_number() ? number(b[key].get<double>()) + "/s" : std::string("-");
    };
    std::string counters;
    for (auto it = b.begin(); it != b.end(); ++it) {
      if (std::find(kStandard.begin(), kStandard.end(), it.key()) != kStandard.end()) continue;
      if (!it.value().is_number()) continue;
      if (!counters.empty()) counters += ", ";
      counters += it.key() + " " + number(it.value().get<double>());
    }
    const std::string label = b.value("label", "");
    if (!label.empty()) counters += (counters.empty() ? "" : "; ") + label;
    out << "| " << name << " | " << time("real_time") << " | " << time("cpu_time") << " | "
        << (b.contains("iterations") ? std::to_string(b["iterations"].get<int64_t>()) : "-") << " | "
        << rate("items_per_second") << " | " << rate("bytes_per_second") << " | " << counters << " |\n";
  }
  return out.str();
}

std::string replace_bench_block(const std::string& markdown, const std::string& name,
                                const std::string& block) {
  const std::string begin = begin_marker(name), end = end_marker(name);
  CRL_CHECK(block.find("<!-- bench:") == std::string::npos && block.find("<!-- /bench:") == std::string::npos,
            "a generated block must not contain markers");
  const size_t b = markdown.find(begin);
  if (b == std::string::npos) {
    std::string out = markdown;
    if (!out.empty() && out.back() != '\n') out += '\n';
    out += "\n## `bench_" + name + "` (generated)\n\n" + begin + "\n" + block + end + "\n";
    return out;
  }
  const size_t e = markdown.find(end, b);
  if (e == std::string::npos) throw Error("RESULTS.md", name, "marker " + begin + " has no " + end);
  return markdown.substr(0, b + begin.size()) + "\n" + block + markdown.substr(e);
}

namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string machine() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  std::ifstream loadavg("/proc/loadavg");
  std::string load = "?";
  loadavg >> load;
  return std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + " x " + model + ", load average " + load +
         " when the binary started";
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%d %H:%M UTC", &tm);
  return buffer;
}

std::string default_bench_dir() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "build/bench" : (self.parent_path() / "bench").string();
}

int bench_command(const std::vector<std::string>& args) {
  std::string filter = ".", out = "bench/RESULTS.md", bench_dir = default_bench_dir();
  bool list = false, dry_run = false;
  po::options_description options;
  options.add_options()("filter", po::value(&filter)->default_value(filter),
                        "regular expression over binary names (engine, simulation, ...)")(
      "out", po::value(&out)->default_value(out), "the results file whose generated tables are rewritten")(
      "bench-dir", po::value(&bench_dir)->default_value(bench_dir), "folder of the bench_* binaries")(
      "list", po::bool_switch(&list), "list the binaries, their filters and whether they are built")(
      "dry-run", po::bool_switch(&dry_run), "print the commands without running them");
  po::variables_map vm;
  int exit_code = 0;
  if (!parse_options("bench",
                     "[--filter REGEX] [--out bench/RESULTS.md] [--bench-dir DIR] [--list] [--dry-run]",
                     options, {}, args, vm, exit_code)) {
    return exit_code;
  }
  std::regex pattern;
  try {
    pattern = std::regex(filter);
  } catch (const std::regex_error& e) {
    throw Error("option --filter", "",
                "value " + quote(filter) + " is not a regular expression: " + e.what());
  }
  // Every built binary: the known ones in plan order, then any other bench_* in name order.
  std::vector<std::string> names;
  for (const BenchPlan& p : bench_plans()) names.push_back(p.name);
  std::vector<std::string> others;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(bench_dir, ec)) {
    const std::string file = entry.path().filename().string();
    if (file.rfind("bench_", 0) != 0 || !entry.is_regular_file()) continue;
    const std::string name = file.substr(6);
    if (std::find(names.begin(), names.end(), name) == names.end()) others.push_back(name);
  }
  std::sort(others.begin(), others.end());
  names.insert(names.end(), others.begin(), others.end());

  if (list) {
    for (const std::string& name : names) {
      const BenchPlan p = bench_plan_for(name);
      const bool built = fs::exists(fs::path(bench_dir) / ("bench_" + name));
      std::cout << (built ? "built    " : "missing  ") << "bench_" << name << "  filter " << quote(p.filter)
                << ", min time " << p.min_time << " s: " << p.why << "\n";
    }
    return 0;
  }
  if (!dry_run && !fs::exists(out)) {
    throw Error("option --out", "",
                "no file " + quote(out) + " (run from the repository root or pass --out)");
  }
  std::string markdown = dry_run ? std::string() : read_file(out);

  int failures = 0, ran = 0;
  const fs::path temp = fs::temp_directory_path() / ("crl_bench_" + std::to_string(getpid()));
  fs::create_directories(temp);
  for (const std::string& name : names) {
    if (!std::regex_search(name, pattern)) continue;
    const fs::path binary = fs::path(bench_dir) / ("bench_" + name);
    if (!fs::exists(binary)) continue;
    const BenchPlan p = bench_plan_for(name);
    const fs::path json = temp / (name + ".json");
    std::ostringstream shown, command;
    for (const auto& [key, value] : p.env) shown << key << "=" << value << " ";
    char min_time[32];
    std::snprintf(min_time, sizeof(min_time), "%g", p.min_time);
    shown << binary.string() << " --benchmark_filter=" << shell_quote(p.filter)
          << " --benchmark_min_time=" << min_time;
    command << shown.str() << " --benchmark_out=" << shell_quote(json.string())
            << " --benchmark_out_format=json";
    std::cout << "== " << shown.str() << "\n" << std::flush;
    if (dry_run) continue;
    const std::string host = machine();  // before the run: its load average is the neighbours'
    const int status = std::system(command.str().c_str());
    ++ran;
    if (status != 0 || !fs::exists(json)) {
      std::cerr << "crl bench: bench_" << name << " failed (status " << status
                << "); its table is unchanged\n";
      ++failures;
      continue;
    }
    const std::string block = "Last `crl bench` run: " + utc_now() + ". Machine: " + machine() +
                              ". Command: `" + shown.str() + "`.\n\n" +
                              format_bench_table(read_file(json.string()), json.string());
    markdown = replace_bench_block(markdown, name, block);
    write_file_atomic(out, markdown);  // after each binary, so an interrupted run keeps what it measured
  }
  fs::remove_all(temp, ec);
  if (!dry_run)
    std::cout << "crl bench: " << ran << " binaries, " << failures << " failed; rewrote " << out << "\n";
  return failures == 0 ? 0 : 1;
}

const CommandRegistrar kBenchCommandRegistrar(
    {"bench", "run the benchmarks and rewrite the tables of bench/RESULTS.md", bench_command});

}  // namespace
}  // namespace crl::cli
