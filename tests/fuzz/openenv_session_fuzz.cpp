// libFuzzer target for OpenEnv's session protocol (server/openenv_session.h): the messages a client sends on
// `/ws` (an OpenEnv trainer at scale, or anyone who can reach the port), one WebSocket session's worth.
//
// Input: the session's text messages, separated by NUL bytes, handled in order by one OpenEnvSession over a
// shared EpisodeService (memory_chain by default, a small budget). Properties: handle() never throws; every
// answer is one JSON object of type observation, state or error, and an error's code is one of OpenEnv's
// codes other than EXECUTION_ERROR (which would be an internal failure: every bad message is the client's,
// VALIDATION_ERROR, INVALID_JSON, UNKNOWN_TYPE, SESSION_ERROR or CAPACITY_REACHED); a close answers
// close and ends the input; and once the session ends no episode is left behind in the service.
//
// Built by scripts/fuzz.sh (clang, -fsanitize=fuzzer,address,undefined; tests/fuzz/CMakeLists.txt) with
// CRL_LIBFUZZER defined; the server tests compile the same function without it and replay the seed corpus
// (tests/fuzz/corpus/openenv_session).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "server/episode_service.h"
#include "server/openenv_session.h"

namespace crl::server {

namespace {

[[noreturn]] void fail(const char* what, std::string_view message, std::string_view answer) {
  std::fprintf(stderr, "openenv_session: %s\n--- message ---\n%.*s\n--- answer ---\n%.*s\n", what,
               static_cast<int>(message.size()), message.data(), static_cast<int>(answer.size()),
               answer.data());
  std::abort();
}

EpisodeService& service() {
  static EpisodeService instance{ServiceOptions{}};
  return instance;
}

void check_answer(std::string_view message, const OpenEnvReply& reply) {
  if (reply.close) return;  // (close's answer is checked by the caller)
  nlohmann::json answer;
  try {
    answer = nlohmann::json::parse(reply.text);
  } catch (const std::exception&) {
    fail("an answer that is not JSON", message, reply.text);
  }
  if (!answer.is_object() || !answer.contains("type") || !answer["type"].is_string())
    fail("an answer without a type", message, reply.text);
  const std::string type = answer["type"];
  if (type == "error") {
    const auto& code = answer["data"]["code"];
    static const char* const kClientCodes[] = {"VALIDATION_ERROR", "INVALID_JSON", "UNKNOWN_TYPE",
                                               "SESSION_ERROR", "CAPACITY_REACHED"};
    bool known = false;
    for (const char* c : kClientCodes) known = known || (code.is_string() && code == c);
    if (!known) fail("an error that is not the client's", message, reply.text);
  } else if (type != "observation" && type != "state") {
    fail("an answer of an unknown type", message, reply.text);
  }
}

}  // namespace

int fuzz_openenv_session(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  {
    OpenEnvSession session(service(), "memory_chain");
    size_t start = 0;
    while (start <= input.size()) {
      size_t end = input.find('\0', start);
      if (end == std::string_view::npos) end = input.size();
      const std::string_view message = input.substr(start, end - start);
      OpenEnvReply reply;
      try {
        reply = session.handle(message);
      } catch (const std::exception& e) {
        fail("handle() threw", message, e.what());
      }
      check_answer(message, reply);
      if (reply.close) break;
      start = end + 1;
    }
  }  // the session ends: its episode is deleted
  const uint32_t left = service().health(false).sessions();
  if (left != 0) fail("episodes left behind after the session ended", input, std::to_string(left));
  return 0;
}

}  // namespace crl::server

#ifdef CRL_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return crl::server::fuzz_openenv_session(data, size);
}
#endif
