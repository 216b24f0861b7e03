// The scripted LLM server as a process, for the Python client's tests and manual runs of `crl rollout`:
//   crl_scripted_llm_server [--port P] [--summary keep|drop|seeded] [--delay-ms N] [--transient-5xx N]
//                           [--transient-drops N] [--sticky-every N --sticky-fault
//                           5xx|drop|malformed|hang|400|abort] [--max-model-len N]
// Prints "listening on PORT" on stdout once it accepts connections; serves until stdin closes or SIGTERM (the
// tests' parent closes the pipe; by hand, keep stdin open). A bad value is refused by name (exit 2).
#include <charconv>
#include <csignal>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>

#include "tests/policies/llm/scripted_llm_server.h"

namespace {

constexpr const char* kUsage =
    "usage: crl_scripted_llm_server [--port P] [--summary keep|drop|seeded] [--delay-ms N] [--transient-5xx "
    "N]\n"
    "                               [--transient-drops N] [--sticky-every N --sticky-fault "
    "5xx|drop|malformed|hang|400|abort]\n"
    "                               [--max-model-len N (GET /v1/models; 0: not said)]\n"
    "Serves until its stdin closes or SIGTERM: run it in the foreground, or keep its stdin open in the\n"
    "background (sleep infinity | crl_scripted_llm_server ... &).\n";

// A whole number in [low, high], or nullopt (std::stoi took "12abc" and threw on "abc").
std::optional<long long> whole(const std::string& text, long long low, long long high) {
  long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < low || value > high)
    return std::nullopt;
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  crl::testing::ScriptedLlmOptions options;
  options.log_calls = false;
  const auto refuse = [](const std::string& flag, const std::string& value, const char* expected) {
    std::cerr << "crl_scripted_llm_server: option " << flag << ": value \"" << value << "\" is not "
              << expected << "\n"
              << kUsage;
    return 2;
  };
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (i + 1 >= argc) {
      std::cerr << "crl_scripted_llm_server: option " << flag << " needs a value\n" << kUsage;
      return 2;
    }
    const std::string value = argv[i + 1];
    if (flag == "--port") {
      const auto port = whole(value, 0, 65535);
      if (!port) return refuse(flag, value, "a port (0-65535; 0: any free one)");
      options.port = static_cast<uint16_t>(*port);
    } else if (flag == "--summary") {
      if (value != "keep" && value != "drop" && value != "seeded")
        return refuse(flag, value, "keep|drop|seeded");
      options.summary = value == "drop"     ? crl::testing::SummaryMode::kDrop
                        : value == "seeded" ? crl::testing::SummaryMode::kSeeded
                                            : crl::testing::SummaryMode::kKeep;
    } else if (flag == "--delay-ms") {
      const auto ms = whole(value, 0, 3'600'000);
      if (!ms) return refuse(flag, value, "milliseconds (0-3600000)");
      options.faults.delay_s = static_cast<double>(*ms) / 1000.0;
    } else if (flag == "--transient-5xx" || flag == "--transient-drops") {
      const auto n = whole(value, 0, 1'000'000);
      if (!n) return refuse(flag, value, "a count (0-1000000)");
      (flag == "--transient-5xx" ? options.faults.transient_5xx : options.faults.transient_drops) =
          static_cast<int>(*n);
    } else if (flag == "--max-model-len") {
      const auto n = whole(value, 0, 1'000'000'000);
      if (!n) return refuse(flag, value, "a count of tokens (0-1000000000; 0: not said)");
      options.max_model_len = *n;
    } else if (flag == "--sticky-every") {
      const auto n = whole(value, 0, 1'000'000'000);
      if (!n) return refuse(flag, value, "a count (0-1000000000)");
      options.faults.sticky_every = static_cast<uint64_t>(*n);
    } else if (flag == "--sticky-fault") {
      if (value != "5xx" && value != "drop" && value != "malformed" && value != "hang" && value != "400" &&
          value != "abort") {
        return refuse(flag, value, "5xx|drop|malformed|hang|400|abort");
      }
      options.faults.sticky_fault = value;
    } else {
      std::cerr << "crl_scripted_llm_server: unknown option " << flag << "\n" << kUsage;
      return 2;
    }
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // the server thread inherits the mask
  crl::testing::ScriptedLlmServer server(options);
  std::cout << "listening on " << server.port() << std::endl;
  // Wait for stdin to close (the parent died or closed the pipe) or a signal.
  std::thread([] {
    std::string line;
    while (std::getline(std::cin, line)) {
    }
    kill(getpid(), SIGTERM);
  }).detach();
  int signal = 0;
  sigwait(&signals, &signal);
  return 0;
}
