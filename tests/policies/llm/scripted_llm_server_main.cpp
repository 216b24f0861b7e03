// The scripted LLM server as a process, for the Python client's tests and manual runs of `crl rollout`:
//   crl_scripted_llm_server [--port P] [--summary keep|drop|seeded] [--delay-ms N] [--transient-5xx N]
//                           [--transient-drops N] [--sticky-every N --sticky-fault
//                           5xx|drop|malformed|hang|400|abort]
// Prints "listening on PORT" on stdout once it accepts connections; serves until stdin closes or SIGTERM.
#include <csignal>
#include <cstring>
#include <iostream>
#include <string>

#include "tests/policies/llm/scripted_llm_server.h"

int main(int argc, char** argv) {
  crl::testing::ScriptedLlmOptions options;
  options.log_calls = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--port")
      options.port = static_cast<uint16_t>(std::stoi(value));
    else if (flag == "--summary")
      options.summary = value == "drop"     ? crl::testing::SummaryMode::kDrop
                        : value == "seeded" ? crl::testing::SummaryMode::kSeeded
                                            : crl::testing::SummaryMode::kKeep;
    else if (flag == "--delay-ms")
      options.faults.delay_s = std::stod(value) / 1000.0;
    else if (flag == "--transient-5xx")
      options.faults.transient_5xx = std::stoi(value);
    else if (flag == "--transient-drops")
      options.faults.transient_drops = std::stoi(value);
    else if (flag == "--sticky-every")
      options.faults.sticky_every = std::stoull(value);
    else if (flag == "--sticky-fault")
      options.faults.sticky_fault = value;
    else {
      std::cerr << "unknown option " << flag << "\n";
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
