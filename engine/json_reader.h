#pragma once
// The one JSON reader of the program: every JSON document it takes in (server requests, remote environment
// answers, LLM server answers, batch files, task files, tokenizer.json, trajectory exports) goes through
// read_json, so the same limits hold everywhere. It drives nlohmann's parser through the SAX interface and
// builds the DOM itself, so that a limit holds before the document exists:
//  * nesting: more than max_depth (default kMaxJsonDepth = 64) levels of arrays and objects is refused when
//    the level after the last allowed one opens. nlohmann builds a DOM of any depth, but every recursive walk
//    over it (dump, our readers, a reflection-based message reader) overflows the stack: a 200 KB request
//    "[[[[..." 100,000 deep crashed the server.
//  * duplicate keys: a key repeated in one object is refused (nlohmann would keep the last one silently,
//    another reader of the same bytes may keep the first: the two would act on different documents).
//  * syntax errors name the byte offset and quote at most a short prefix of what was read.
// Errors are JsonError, a crl::Error with a kind (and a stable code for the HTTP API). json_preview writes
// a value for an error message without ever serializing it whole.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "engine/error.h"

namespace crl {

inline constexpr int kMaxJsonDepth = 64;

enum class JsonErrorKind { kSyntax, kTooDeep, kDuplicateKey };

class JsonError : public Error {
 public:
  JsonError(JsonErrorKind kind, std::string where, std::string field, std::string message)
      : Error(std::move(where), std::move(field), std::move(message)), kind_(kind) {}
  JsonErrorKind kind() const { return kind_; }
  // The API error code: "bad_json" | "json_too_deep" | "duplicate_key".
  std::string_view code() const;

 private:
  JsonErrorKind kind_;
};

// Parses `text` (one JSON value; nothing but whitespace may follow it). `where` names the source in errors
// (a file, "file:line", "the request body", ...); for a duplicate key the error's field is the key's path
// ("steps[0].action.kind"). Throws JsonError.
nlohmann::json read_json(std::string_view text, const std::string& where, int max_depth = kMaxJsonDepth);

// At most about `limit` bytes of `value` as JSON text for an error message ("..." marks a cut): a long
// string or a large array is never written whole. Stops at `limit`, whatever the depth or size.
std::string json_preview(const nlohmann::json& value, size_t limit = 60);

// At most `limit` bytes of `text` (cut on a UTF-8 character boundary, "..." appended when cut).
std::string text_prefix(std::string_view text, size_t limit = 60);

}  // namespace crl
