// Reading the request fields of `crl lm serve`'s APIs (policies/lm/serve_request.h).
#include "policies/lm/serve_request.h"

#include <cmath>

#include "engine/json_reader.h"
#include "engine/unicode_data.h"

namespace crl::lm {
namespace {

std::vector<int32_t> id_list(const In& list, const std::string& field, int vocab) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < list.size(); ++i) {
    const In& v = list[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab) {
      throw BadRequest(field, field + "[" + std::to_string(i) + "] must be a token id in [0, " +
                                  std::to_string(vocab - 1) + "], got " + json_preview(v));
    }
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

bool is_id_list(const In& v) {
  if (!v.is_array() || v.empty()) return false;
  for (const In& x : v)
    if (!x.is_number()) return false;
  return true;
}

}  // namespace

bool valid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    char32_t cp;
    i += unicode::decode_utf8(text, i, &cp);
    if (cp == unicode::kInvalid) return false;
  }
  return true;
}

const In* find(const In& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

double number(const In& object, const char* key, double fallback, double lo, double hi) {
  const In* v = find(object, key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) throw BadRequest(key, std::string(key) + " must be a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    throw BadRequest(key, std::string(key) + " must be in [" + json_preview(In(lo)) + ", " +
                              json_preview(In(hi)) + "], got " + json_preview(*v));
  }
  return x;
}

int64_t integer(const In& object, const char* key, int64_t fallback, int64_t lo, int64_t hi) {
  const In* v = find(object, key);
  if (v == nullptr) return fallback;
  if (!v->is_number_integer() || v->get<int64_t>() < lo || v->get<int64_t>() > hi) {
    throw BadRequest(key, std::string(key) + " must be an integer in [" + std::to_string(lo) + ", " +
                              std::to_string(hi) + "], got " + json_preview(*v));
  }
  return v->get<int64_t>();
}

bool boolean(const In& object, const char* key, bool fallback) {
  const In* v = find(object, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) throw BadRequest(key, std::string(key) + " must be true or false");
  return v->get<bool>();
}

// Prompts given as text, ids, or a list of either (OpenAI's `prompt`, SGLang's `text` / `input_ids`).
std::vector<std::vector<int32_t>> prompts(const In& v, const std::string& field, const Tokenizer& tokenizer,
                                          const LmConfig& c, bool& batch) {
  std::vector<std::vector<int32_t>> out;
  batch = false;
  auto encode = [&](const In& text) {
    const std::string s = text.get<std::string>();
    if (!valid_utf8(s)) throw BadRequest(field, field + " is not valid UTF-8");
    const auto ids = tokenizer.encode(s);
    return std::vector<int32_t>(ids.begin(), ids.end());
  };
  if (v.is_string()) {
    out.push_back(encode(v));
  } else if (is_id_list(v)) {
    out.push_back(id_list(v, field, c.vocab));
  } else if (v.is_array() && !v.empty()) {
    batch = true;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string at = field + "[" + std::to_string(i) + "]";
      if (v[i].is_string()) {
        out.push_back(encode(v[i]));
      } else if (is_id_list(v[i])) {
        out.push_back(id_list(v[i], at, c.vocab));
      } else {
        throw BadRequest(field, at + " must be a string or a non-empty list of token ids");
      }
    }
  } else {
    throw BadRequest(field, field + " must be a string, a non-empty list of token ids, or a list of either");
  }
  if (static_cast<int>(out.size()) > kMaxPrompts)
    throw BadRequest(field, "at most " + std::to_string(kMaxPrompts) + " prompts per request");
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].empty()) throw BadRequest(field, field + ": prompt " + std::to_string(i) + " is empty");
    if (static_cast<int>(out[i].size()) > c.max_positions) {
      throw BadRequest(field, "this model's maximum context length is " + std::to_string(c.max_positions) +
                                  " tokens; prompt " + std::to_string(i) + " has " +
                                  std::to_string(out[i].size()));
    }
  }
  return out;
}

std::vector<std::string> stop_strings(const In& object) {
  const In* v = find(object, "stop");
  std::vector<std::string> out;
  if (v == nullptr) return out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array() && v->size() <= kMaxStops) {
    for (const In& s : *v) {
      if (!s.is_string()) throw BadRequest("stop", "stop must be a string or a list of strings");
      out.push_back(s.get<std::string>());
    }
  } else {
    throw BadRequest("stop",
                     "stop must be a string or a list of at most " + std::to_string(kMaxStops) + " strings");
  }
  for (const std::string& s : out)
    if (s.empty() || !valid_utf8(s)) throw BadRequest("stop", "a stop string is empty or not valid UTF-8");
  return out;
}

std::vector<int32_t> stop_ids(const In& object, int vocab) {
  const In* v = find(object, "stop_token_ids");
  if (v == nullptr) return {};
  if (!v->is_array()) throw BadRequest("stop_token_ids", "stop_token_ids must be a list of token ids");
  return id_list(*v, "stop_token_ids", vocab);
}

// top_k: -1 or 0 is off (SGLang's and vLLM's conventions), k >= 1 keeps the k most likely tokens.
int top_k(const In& object) {
  const int64_t k = integer(object, "top_k", -1, INT32_MIN, INT32_MAX);
  if (k < -1)
    throw BadRequest("top_k", "top_k must be -1 or 0 (off) or at least 1, got " + std::to_string(k));
  return static_cast<int>(k);
}

void refuse_constrained_decoding(const In& object, const std::string& prefix) {
  for (const char* key : {"json_schema", "regex", "ebnf", "structural_tag", "guided_json", "guided_regex",
                          "guided_choice", "guided_grammar", "structured_outputs"}) {
    if (find(object, key) != nullptr)
      throw BadRequest(prefix + key,
                       prefix + key + ": constrained decoding is not supported by crl lm serve");
  }
  if (const In* format = find(object, "response_format"); format != nullptr) {
    const In* type = format->is_object() ? find(*format, "type") : nullptr;
    if (type == nullptr || !type->is_string() || type->get<std::string>() != "text") {
      throw BadRequest(prefix + "response_format",
                       prefix +
                           "response_format: only {\"type\": \"text\"} is supported by crl lm serve "
                           "(no constrained decoding)");
    }
  }
}

In object_body(std::string_view body) {
  In j;
  try {
    j = read_json(body, "the request");
  } catch (const Error& e) {
    throw BadRequest("", std::string("the body is not accepted JSON: ") + e.what());
  }
  if (!j.is_object()) throw BadRequest("", "the body must be a JSON object");
  return j;
}

}  // namespace crl::lm
