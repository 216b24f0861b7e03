#pragma once
// Reading the fields of `crl lm serve`'s two APIs (policies/lm/serve.h): typed fields with their ranges, the
// prompt in its four shapes (text, ids, a list of either), stop strings and ids, top_k, and the body itself.
// Each refusal is a BadRequest naming the field, in the wording the API's own server uses where it has one.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer.h"
#include "policies/lm/cpu/config.h"

namespace crl::lm {

using In = nlohmann::json;  // requests (engine/json_reader.h)

// A request the API refuses: the offending field (OpenAI's `param`) and what is wrong.
struct BadRequest : std::runtime_error {
  BadRequest(std::string field, const std::string& message)
      : std::runtime_error(message), field(std::move(field)) {}
  std::string field;
};

constexpr int kMaxPrompts = 64;  // prompts x n per request: bounds the work one request can ask for
constexpr int kMaxStops = 16;

bool valid_utf8(std::string_view text);
// The member `key`, or null when it is absent or null.
const In* find(const In& object, const char* key);
double number(const In& object, const char* key, double fallback, double lo, double hi);
int64_t integer(const In& object, const char* key, int64_t fallback, int64_t lo, int64_t hi);
bool boolean(const In& object, const char* key, bool fallback);
// The prompts of `v` (a string, a list of ids, or a list of either; `batch` says which), as token ids.
std::vector<std::vector<int32_t>> prompts(const In& v, const std::string& field, const Tokenizer& tokenizer,
                                          const LmConfig& c, bool& batch);
std::vector<std::string> stop_strings(const In& object);
std::vector<int32_t> stop_ids(const In& object, int vocab);
int top_k(const In& object);
// Constrained decoding (SGLang's json_schema / regex / ebnf, the OpenAI API's response_format other than
// text, vLLM's guided_* and structured_outputs) is not implemented: a request that asks for it is refused
// (BadRequest naming `prefix` + the field) rather than answered unconstrained.
void refuse_constrained_decoding(const In& object, const std::string& prefix);
// The body as a JSON object (engine/json_reader.h's limits).
In object_body(std::string_view body);

}  // namespace crl::lm
