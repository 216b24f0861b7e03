// OpenAI /v1/completions and SGLang /generate over the language model (policies/lm/serve.h).
#include "policies/lm/serve.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "engine/error.h"
#include "engine/json_reader.h"
#include "engine/sse.h"
#include "engine/unicode_data.h"
#include "policies/lm/cpu/sampler.h"
#include "policies/lm/cuda/lm_cuda.h"

namespace crl::lm {
namespace {

using In = nlohmann::json;            // requests (engine/json_reader.h)
using Json = nlohmann::ordered_json;  // answers: keys in the order the APIs document them

// A request the API refuses: the offending field (OpenAI's `param`) and what is wrong.
struct BadRequest : std::runtime_error {
  BadRequest(std::string field, const std::string& message)
      : std::runtime_error(message), field(std::move(field)) {}
  std::string field;
};

constexpr int kMaxPrompts = 64;  // prompts x n per request: bounds the work one request can ask for
constexpr int kMaxStops = 16;

bool valid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    char32_t cp;
    i += unicode::decode_utf8(text, i, &cp);
    if (cp == unicode::kInvalid) return false;
  }
  return true;
}

// A token's text for the logprob tables: its UTF-8, or vLLM's "bytes:\xNN..." when the bytes are a part of a
// character.
std::string piece_text(const Tokenizer& tokenizer, int32_t id) {
  const std::string bytes = tokenizer.decode(std::span<const int32_t>(&id, 1));
  if (valid_utf8(bytes)) return bytes;
  static const char* kHex = "0123456789abcdef";
  std::string out = "bytes:";
  for (unsigned char c : bytes) out += std::string("\\x") + kHex[c >> 4] + kHex[c & 15];
  return out;
}

std::string dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// The end of each token's text in the decoded answer (the sampler's text is its tokens' pieces joined).
std::vector<size_t> token_ends(const Tokenizer& tokenizer, const std::vector<int32_t>& tokens) {
  std::vector<size_t> ends;
  size_t end = 0;
  for (const int32_t id : tokens) {
    end += tokenizer.decode(std::span<const int32_t>(&id, 1)).size();
    ends.push_back(end);
  }
  return ends;
}

// What a stream may show of `text` once its tokens up to byte `end` are sampled: at most the answer's
// final text (nothing past a stop string), and only whole characters (the bytes of a character split
// across tokens wait for the token that completes it). `last`: the answer is complete, all of it.
size_t streamable(std::string_view text, size_t end, bool last) {
  if (last || end >= text.size()) return text.size();
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return end;
}

// Calls emit(k, t) for each sampled token t of each choice k in stream order: token 0 of every choice, then
// token 1 of every choice that has one, ...; a choice without tokens (max_tokens 0) gets one call, t = 0.
template <typename Emit>
void in_stream_order(const std::vector<SampleResult>& results, const Emit& emit) {
  size_t steps = 1;
  for (const SampleResult& r : results) steps = std::max(steps, r.tokens.size());
  for (size_t t = 0; t < steps; ++t) {
    for (size_t k = 0; k < results.size(); ++k) {
      if (t < std::max<size_t>(results[k].tokens.size(), 1)) emit(k, t);
    }
  }
}

// OpenAI's `stream` and `stream_options`.
struct StreamOptions {
  bool stream = false, include_usage = false, continuous_usage = false;
};

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

}  // namespace

LmService::LmService(LmModel model, std::shared_ptr<const Tokenizer> tokenizer, std::string model_name,
                     LmBackend backend)
    : model_(std::move(model)),
      tokenizer_(std::move(tokenizer)),
      name_(std::move(model_name)),
      backend_(backend) {
  if (backend_ == LmBackend::kCuda) {
    if (model_.config().rope)
      throw Error("--backend", "cuda",
                  "this model uses rotary positions (rope), which the CUDA twin does not");
    std::string why;
    if (!lm_cuda_available(&why)) throw Error("--backend", "cuda", "no CUDA device: " + why);
  }
  if (tokenizer_->vocab_size() > model_.config().vocab) {
    throw Error("--tokenizer", "vocab",
                "the tokenizer " + quote(tokenizer_->name()) + " has " +
                    std::to_string(tokenizer_->vocab_size()) +
                    " tokens, more than the model's vocabulary of " + std::to_string(model_.config().vocab));
  }
}

std::vector<SampleResult> LmService::run(std::span<const SampleRequest> requests,
                                         const SamplingParams& params) const {
  return backend_ == LmBackend::kCuda ? cuda_sample(model_, requests, params)
                                      : sample(model_, requests, params);
}

std::optional<ServeAnswer> LmService::handle(std::string_view method, std::string_view path,
                                             std::string_view body) const {
  try {
    if (path == "/v1/completions" && method == "POST") return completions(body);
    if (path == "/generate" && method == "POST") return generate(body);
    if (path == "/v1/models" && method == "GET") {
      Json model = {{"id", name_},
                    {"object", "model"},
                    {"created", 0},
                    {"owned_by", "crl"},
                    {"max_model_len", model_.config().max_positions}};
      return ServeAnswer{200, dump(Json{{"object", "list"}, {"data", Json::array({model})}})};
    }
    if (path == "/get_model_info" && method == "GET") {
      return ServeAnswer{200, dump(Json{{"model_path", name_},
                                        {"tokenizer_path", tokenizer_->name()},
                                        {"is_generation", true},
                                        {"max_context_length", model_.config().max_positions}})};
    }
    if (path == "/v1/completions" || path == "/generate" || path == "/v1/models" ||
        path == "/get_model_info") {
      const Json error = {
          {"message", "method " + std::string(method) + " is not allowed on " + std::string(path)},
          {"type", "invalid_request_error"},
          {"param", nullptr},
          {"code", "method_not_allowed"}};
      return ServeAnswer{405, dump(Json{{"error", error}})};
    }
    if (path == "/health" || path == "/metrics") return std::nullopt;  // the engine's server answers them
    const Json error = {{"message", "no route " + std::string(path) +
                                        " (served: POST /v1/completions, POST /generate, GET /v1/models, "
                                        "GET /get_model_info, GET /health)"},
                        {"type", "invalid_request_error"},
                        {"param", nullptr},
                        {"code", "not_found"}};
    return ServeAnswer{404, dump(Json{{"error", error}})};
  } catch (const std::exception& e) {  // never escapes: an internal failure is a 500 in OpenAI's shape
    const Json error = {{"message", std::string("internal error: ") + e.what()},
                        {"type", "internal_error"},
                        {"param", nullptr},
                        {"code", nullptr}};
    return ServeAnswer{500, dump(Json{{"error", error}})};
  }
}

ServeAnswer LmService::completions(std::string_view body) const {
  const LmConfig& c = model_.config();
  std::vector<SampleResult> results;
  std::vector<std::vector<int32_t>> prompt_ids;
  SamplingParams p;
  int n = 1, logprobs = -1;
  uint64_t seed = 0;
  bool include_stop = false, return_prompt_ids = false;
  StreamOptions streaming;
  try {
    const In req = object_body(body);
    const In* prompt = find(req, "prompt");
    if (prompt == nullptr) throw BadRequest("prompt", "prompt is missing");
    bool batch = false;
    prompt_ids = prompts(*prompt, "prompt", *tokenizer_, c, batch);
    p.max_new_tokens = static_cast<int>(integer(req, "max_tokens", 16, 0, INT32_MAX));
    p.max_new_tokens = std::min(p.max_new_tokens, c.max_positions);  // the context ends it sooner anyway
    p.temperature = static_cast<float>(number(req, "temperature", 1.0, 0.0, 1e6));
    p.top_p = static_cast<float>(number(req, "top_p", 1.0, 1e-9, 1.0));
    n = static_cast<int>(integer(req, "n", 1, 1, 16));
    seed = static_cast<uint64_t>(integer(req, "seed", 0, INT64_MIN, INT64_MAX));
    p.stop_strings = stop_strings(req);
    p.stop_ids = stop_ids(req, c.vocab);
    logprobs = static_cast<int>(integer(req, "logprobs", -1, 0, 20));
    p.top_logprobs = std::max(0, logprobs);
    include_stop = boolean(req, "include_stop_str_in_output", false);
    return_prompt_ids = boolean(req, "return_token_ids", false);
    p.top_k = top_k(req);
    if (boolean(req, "echo", false)) throw BadRequest("echo", "echo is not supported");
    streaming.stream = boolean(req, "stream", false);
    if (const In* o = find(req, "stream_options"); o != nullptr) {
      if (!streaming.stream)  // vLLM's check and wording
        throw BadRequest("stream_options", "Stream options can only be defined when `stream=True`.");
      if (!o->is_object()) throw BadRequest("stream_options", "stream_options must be an object");
      streaming.include_usage = boolean(*o, "include_usage", false);
      streaming.continuous_usage = streaming.include_usage && boolean(*o, "continuous_usage_stats", false);
    }
    if (const In* m = find(req, "model"); m != nullptr && !m->is_string())
      throw BadRequest("model", "model must be a string");
    if (static_cast<int>(prompt_ids.size()) * n > kMaxPrompts)
      throw BadRequest("n", "prompts x n must be at most " + std::to_string(kMaxPrompts));
    p.tokenizer = tokenizer_.get();
    std::vector<SampleRequest> requests;
    for (const auto& ids : prompt_ids) {
      for (int i = 0; i < n; ++i) {
        requests.push_back(
            SampleRequest{ids, StreamKey{seed, 0, static_cast<uint32_t>(i), StreamRole::kExecute, 0}});
      }
    }
    results = run(requests, p);
  } catch (const std::invalid_argument& e) {
    return ServeAnswer{400, dump(Json{{"error",
                                       {{"message", e.what()},
                                        {"type", "invalid_request_error"},
                                        {"param", nullptr},
                                        {"code", nullptr}}}})};
  } catch (const BadRequest& e) {
    const Json error = {{"message", e.what()},
                        {"type", "invalid_request_error"},
                        {"param", e.field.empty() ? Json(nullptr) : Json(e.field)},
                        {"code", nullptr}};
    return ServeAnswer{400, dump(Json{{"error", error}})};
  }
  // Each choice's final text (cut at a stop string), stop_reason and finish_reason.
  struct Choice {
    std::string text;
    Json stop_reason;
    const char* finish;
    std::vector<size_t> ends;  // token_ends()
  };
  std::vector<Choice> out(results.size());
  int64_t completion_tokens = 0, prompt_tokens = 0;
  for (const auto& ids : prompt_ids) prompt_tokens += static_cast<int64_t>(ids.size()) * n;
  for (size_t k = 0; k < results.size(); ++k) {
    const SampleResult& r = results[k];
    Choice& c = out[k];
    completion_tokens += static_cast<int64_t>(r.tokens.size());
    c.text = r.text;
    c.stop_reason = nullptr;
    if (r.stop_string >= 0) {
      c.stop_reason = p.stop_strings[r.stop_string];
      c.text.resize(static_cast<size_t>(r.stop_offset) +
                    (include_stop ? p.stop_strings[r.stop_string].size() : 0));
    } else if (r.finish == FinishReason::kStop) {
      c.stop_reason = r.tokens.back();
    }
    c.finish = r.finish == FinishReason::kStop ? "stop" : "length";
    c.ends = token_ends(*tokenizer_, r.tokens);
  }
  // The logprobs object of tokens [from, to) of choice k (text_offset: where each starts in the choice's
  // text), or null without `logprobs`.
  const auto logprobs_of = [&](size_t k, size_t from, size_t to) -> Json {
    if (logprobs < 0) return nullptr;
    const SampleResult& r = results[k];
    Json tokens = Json::array(), values = Json::array(), offsets = Json::array(), tops = Json::array();
    for (size_t t = from; t < to; ++t) {
      tokens.push_back(piece_text(*tokenizer_, r.tokens[t]));
      values.push_back(r.logprobs[t]);
      offsets.push_back(t == 0 ? 0 : out[k].ends[t - 1]);
      if (logprobs > 0) {
        Json top = Json::object();
        for (const auto& [id, value] : r.top[t]) top[piece_text(*tokenizer_, id)] = value;
        tops.push_back(top);
      }
    }
    return Json{{"text_offset", offsets},
                {"token_logprobs", values},
                {"tokens", tokens},
                {"top_logprobs", logprobs > 0 ? tops : Json(nullptr)}};
  };
  const std::string id = "cmpl-" + std::to_string(seed);
  const auto usage = [](int64_t prompt, int64_t completion) {
    return Json{
        {"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
  };
  if (streaming.stream) {
    std::string events;
    std::vector<size_t> sent(results.size(), 0);  // bytes of each choice's text already sent
    in_stream_order(results, [&](size_t k, size_t t) {
      const SampleResult& r = results[k];
      const Choice& c = out[k];
      const size_t count = r.tokens.size();
      const bool last = t + 1 >= count;
      const size_t upto = std::max(sent[k], streamable(c.text, count == 0 ? 0 : c.ends[t], last));
      Json choice = {{"index", k},
                     {"text", c.text.substr(sent[k], upto - sent[k])},
                     {"logprobs", count == 0 ? Json(nullptr) : logprobs_of(k, t, t + 1)},
                     {"finish_reason", last ? Json(c.finish) : Json(nullptr)},
                     {"stop_reason", last ? c.stop_reason : Json(nullptr)},
                     {"token_ids", count == 0 ? Json::array() : Json::array({r.tokens[t]})}};
      sent[k] = upto;
      if (return_prompt_ids && t == 0) choice["prompt_token_ids"] = prompt_ids[k / static_cast<size_t>(n)];
      Json event = {{"id", id},
                    {"object", "text_completion"},
                    {"created", 0},
                    {"model", name_},
                    {"choices", Json::array({choice})}};
      if (streaming.include_usage) {
        event["usage"] = streaming.continuous_usage
                             ? usage(static_cast<int64_t>(prompt_ids[k / static_cast<size_t>(n)].size()),
                                     static_cast<int64_t>(std::min(t + 1, count)))
                             : Json(nullptr);
      }
      append_sse_data(events, dump(event));
    });
    if (streaming.include_usage) {
      append_sse_data(events, dump(Json{{"id", id},
                                        {"object", "text_completion"},
                                        {"created", 0},
                                        {"model", name_},
                                        {"choices", Json::array()},
                                        {"usage", usage(prompt_tokens, completion_tokens)}}));
    }
    append_sse_data(events, "[DONE]");
    return ServeAnswer{200, std::move(events), kSseContentType};
  }
  Json choices = Json::array();
  for (size_t k = 0; k < results.size(); ++k) {
    Json choice = {{"index", k},
                   {"text", out[k].text},
                   {"logprobs", logprobs_of(k, 0, results[k].tokens.size())},
                   {"finish_reason", out[k].finish},
                   {"stop_reason", out[k].stop_reason},
                   {"token_ids", results[k].tokens}};
    if (return_prompt_ids) choice["prompt_token_ids"] = prompt_ids[k / static_cast<size_t>(n)];
    choices.push_back(choice);
  }
  const Json answer = {{"id", id},           {"object", "text_completion"},
                       {"created", 0},       {"model", name_},
                       {"choices", choices}, {"usage", usage(prompt_tokens, completion_tokens)}};
  return ServeAnswer{200, dump(answer)};
}

ServeAnswer LmService::generate(std::string_view body) const {
  const LmConfig& c = model_.config();
  std::vector<SampleResult> results;
  std::vector<std::vector<int32_t>> prompt_ids;
  SamplingParams p;
  bool batch = false, return_logprob = false, no_stop_trim = false, text_in_logprobs = false, stream = false;
  int top_num = 0, start = -1;
  std::vector<std::string> rids;  // SGLang's rid: one per prompt (a list for a batch), else the index
  try {
    const In req = object_body(body);
    const In* ids = find(req, "input_ids");
    const In* text = find(req, "text");
    if ((ids == nullptr) == (text == nullptr))
      throw BadRequest("", "Either text or input_ids should be provided.");
    prompt_ids =
        prompts(ids != nullptr ? *ids : *text, ids != nullptr ? "input_ids" : "text", *tokenizer_, c, batch);
    In sp = In::object();
    if (const In* s = find(req, "sampling_params"); s != nullptr) {
      if (!s->is_object()) throw BadRequest("sampling_params", "sampling_params must be an object");
      sp = *s;
    }
    p.max_new_tokens = static_cast<int>(integer(sp, "max_new_tokens", 128, 0, INT32_MAX));
    p.max_new_tokens = std::min(p.max_new_tokens, c.max_positions);
    p.temperature = static_cast<float>(number(sp, "temperature", 1.0, 0.0, 1e6));
    p.top_p = static_cast<float>(number(sp, "top_p", 1.0, 1e-9, 1.0));
    p.top_k = top_k(sp);
    p.stop_strings = stop_strings(sp);
    p.stop_ids = stop_ids(sp, c.vocab);
    no_stop_trim = boolean(sp, "no_stop_trim", false);
    boolean(sp, "skip_special_tokens", true);
    boolean(sp, "ignore_eos", false);
    const uint64_t seed = static_cast<uint64_t>(integer(sp, "sampling_seed", 0, INT64_MIN, INT64_MAX));
    return_logprob = boolean(req, "return_logprob", false);
    text_in_logprobs = boolean(req, "return_text_in_logprobs", false);
    top_num = static_cast<int>(integer(req, "top_logprobs_num", 0, 0, 20));
    p.top_logprobs = return_logprob ? top_num : 0;
    // SGLang's logprob_start_len: -1 (the default) returns no prompt log-probs; s >= 0 returns those of
    // prompt positions s .. end (input_token_logprobs; position 0 has none: null), only with return_logprob.
    start = static_cast<int>(integer(req, "logprob_start_len", -1, -1, INT32_MAX));
    if (!return_logprob) start = -1;
    stream = boolean(req, "stream", false);
    if (const In* r = find(req, "rid"); r != nullptr) {
      if (r->is_string() && !batch) {
        rids.push_back(r->get<std::string>());
      } else if (r->is_array() && batch && r->size() == prompt_ids.size()) {
        for (const In& x : *r) {
          if (!x.is_string()) throw BadRequest("rid", "rid must be a list of strings");
          rids.push_back(x.get<std::string>());
        }
      } else {
        throw BadRequest("rid", "rid must be a string (a list of one string per prompt for a batch)");
      }
    }
    p.tokenizer = tokenizer_.get();
    std::vector<SampleRequest> requests;
    for (size_t i = 0; i < prompt_ids.size(); ++i) {
      if (start >= static_cast<int>(prompt_ids[i].size()))
        throw BadRequest("logprob_start_len", "logprob_start_len (" + std::to_string(start) +
                                                  ") is higher than the number of input tokens (" +
                                                  std::to_string(prompt_ids[i].size()) +
                                                  "). Request with a lower logprob_start_len.");
      requests.push_back(SampleRequest{
          prompt_ids[i], StreamKey{seed, 0, static_cast<uint32_t>(i), StreamRole::kExecute, 0}, start});
    }
    results = run(requests, p);
  } catch (const BadRequest& e) {
    return ServeAnswer{400, dump(Json{{"error", {{"message", e.what()}}}})};
  } catch (const std::invalid_argument& e) {
    return ServeAnswer{400, dump(Json{{"error", {{"message", e.what()}}}})};
  }
  // Item k of the answer after its first `count` tokens (count < all: a stream's partial answer, no
  // finish_reason yet).
  std::vector<std::vector<size_t>> ends;
  for (const SampleResult& r : results) ends.push_back(token_ends(*tokenizer_, r.tokens));
  const auto item = [&](size_t k, size_t count) {
    const SampleResult& r = results[k];
    const bool done = count == r.tokens.size();
    std::string text = r.text;
    Json finish = nullptr;
    if (r.stop_string >= 0) {
      if (!no_stop_trim) text.resize(static_cast<size_t>(r.stop_offset));
      if (done) finish = {{"type", "stop"}, {"matched", p.stop_strings[r.stop_string]}};
    } else if (done && r.finish == FinishReason::kStop) {
      finish = {{"type", "stop"}, {"matched", r.tokens.back()}};
    } else if (done) {
      finish = {{"type", "length"}, {"length", r.tokens.size()}};
    }
    if (!done) text.resize(streamable(text, count == 0 ? 0 : ends[k][count - 1], false));
    Json meta = {{"id", k < rids.size() ? rids[k] : std::to_string(k)},
                 {"finish_reason", finish},
                 {"prompt_tokens", prompt_ids[k].size()},
                 {"completion_tokens", count},
                 {"cached_tokens", 0}};
    if (return_logprob) {
      // SGLang's entries: [log-prob, id, text or null]; a log-prob without context (prompt position 0) null.
      const auto entry = [&](float value, int32_t id) {
        return Json::array({std::isnan(value) ? Json(nullptr) : Json(value), id,
                            text_in_logprobs ? Json(piece_text(*tokenizer_, id)) : Json(nullptr)});
      };
      const auto top_list = [&](const std::vector<std::pair<int32_t, float>>& top) {
        if (top.empty()) return Json(nullptr);
        Json list = Json::array();
        for (const auto& [id, value] : top) list.push_back(entry(value, id));
        return list;
      };
      Json out = Json::array(), tops = Json::array();
      for (size_t t = 0; t < count; ++t) {
        out.push_back(entry(r.logprobs[t], r.tokens[t]));
        if (top_num > 0) tops.push_back(top_list(r.top[t]));
      }
      Json in = Json::array(), in_tops = Json::array();
      for (size_t t = 0; t < r.prompt_logprobs.size(); ++t) {
        in.push_back(entry(r.prompt_logprobs[t], prompt_ids[k][static_cast<size_t>(start) + t]));
        if (top_num > 0) in_tops.push_back(top_list(r.prompt_top[t]));
      }
      meta["input_token_logprobs"] = in;
      meta["output_token_logprobs"] = out;
      if (top_num > 0) {
        meta["input_top_logprobs"] = in_tops;
        meta["output_top_logprobs"] = tops;
      }
    }
    return Json{{"text", text},
                {"output_ids", std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + count)},
                {"meta_info", meta}};
  };
  if (stream) {
    std::string events;
    in_stream_order(results, [&](size_t k, size_t t) {
      Json event = item(k, std::min(t + 1, results[k].tokens.size()));
      if (batch) event["index"] = k;
      append_sse_data(events, dump(event));
    });
    append_sse_data(events, "[DONE]");
    return ServeAnswer{200, std::move(events), kSseContentType};
  }
  Json items = Json::array();
  for (size_t k = 0; k < results.size(); ++k) items.push_back(item(k, results[k].tokens.size()));
  return ServeAnswer{200, dump(batch ? items : items[0])};
}

}  // namespace crl::lm
