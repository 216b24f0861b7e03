// libFuzzer target for the scenario parser (scenarios/scenario.h): protobuf text format, then the semantic
// checks against the registries (environments, policies, their parameters, ranges).
//
// Input: the bytes of a scenario file. Properties: the parser never crashes, never hangs and fails only with
// crl::Error (a located, one-line message naming the file); whatever parses, parses again from its own
// canonical text form to the same arms and seeds (the merge of arms over the base is a function of the text).
//
// Built by scripts/fuzz.sh (clang, -fsanitize=fuzzer,address,undefined; tests/fuzz/CMakeLists.txt) with
// CRL_LIBFUZZER defined; the scenario tests compile the same function without it and replay the seed corpus
// (tests/fuzz/corpus/scenario_parser).
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/message_differencer.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/error.h"
#include "scenarios/scenario.h"

namespace crl::scenarios {

int fuzz_scenario_parser(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ScenarioSpec spec;
  try {
    spec = parse_scenario(text, "fuzz.pbtxt");
  } catch (const crl::Error& e) {
    const std::string message = e.what();
    if (message.find("fuzz.pbtxt") == std::string::npos) std::abort();  // every error names the file
    return 0;
  }
  // Parse the arms' merged setups again from their text form: the same setups must come back.
  for (const ArmSpec& arm : spec.arms) {
    std::string printed;
    if (!google::protobuf::TextFormat::PrintToString(arm.setup, &printed)) std::abort();
    proto::scenario::Setup again;
    if (!google::protobuf::TextFormat::ParseFromString(printed, &again)) std::abort();
    if (!google::protobuf::util::MessageDifferencer::Equals(again, arm.setup)) std::abort();
  }
  return 0;
}

}  // namespace crl::scenarios

#ifdef CRL_LIBFUZZER
#include <google/protobuf/stubs/logging.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);  // the text parser logs what it reports through its collector
    return true;
  }();
  (void)quiet;
  return crl::scenarios::fuzz_scenario_parser(data, size);
}
#endif
