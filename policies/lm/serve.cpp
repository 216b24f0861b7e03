// OpenAI /v1/completions and SGLang /generate over the language model (policies/lm/serve.h).
#include "policies/lm/serve.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "engine/error.h"
#include "engine/json_reader.h"
#include "engine/json_text.h"
#include "engine/sse.h"
#include "engine/unicode_data.h"
#include "policies/lm/cpu/sampler.h"
#include "policies/lm/cuda/lm_cuda.h"
#include "policies/lm/serve_request.h"

namespace crl::lm {
namespace {

using Json = nlohmann::ordered_json;  // answers: keys in the order the APIs document them

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

// `end`, moved back before a character whose bytes are not all there yet (its lead byte is among the last
// three before `end` and asks for more bytes than follow it): a stream shows a split character only once the
// token that completes it is sampled. Bytes that can never form a character are shown as they come.
size_t whole_characters(std::string_view text, size_t end) {
  size_t lead = end;
  while (lead > 0 && end - lead < 3 && (static_cast<unsigned char>(text[lead - 1]) & 0xC0) == 0x80) --lead;
  if (lead == 0) return end;
  const auto c = static_cast<unsigned char>(text[lead - 1]);
  const size_t needs = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  return needs > end - (lead - 1) ? lead - 1 : end;
}

// What a stream shows of an answer that is not finished, its text `text` so far: whole characters only
// (whole_characters), and not a tail that may still turn into a stop string (it waits for the tokens that
// decide; vLLM holds such text back the same way), so that nothing past a stop string is ever shown.
size_t shown_so_far(std::string_view text, const std::vector<std::string>& stops) {
  size_t cut = text.size();
  for (const std::string& stop : stops) {
    for (size_t length = std::min(stop.size() - 1, text.size()); length > 0; --length) {
      if (text.substr(text.size() - length) == std::string_view(stop).substr(0, length)) {
        cut = std::min(cut, text.size() - length);
        break;
      }
    }
  }
  return whole_characters(text, cut);
}

// Appends the events of one sampling round (a SampleObserver's call) for each sequence that sampled in it,
// in index order: `event(k, finished)`. Then writes them; false when the client is gone.
template <typename Event>
bool write_round(const BodyWriter& write, int step, std::span<const SampleResult> results,
                 std::span<const char> finished, const Event& event) {
  std::string events;
  for (size_t k = 0; k < results.size(); ++k) {
    if (results[k].tokens.size() == static_cast<size_t>(step) + 1)
      append_sse_data(events, event(k, finished[k] != 0));
  }
  return write(events);
}

// OpenAI's `stream` and `stream_options`.
struct StreamOptions {
  bool stream = false, include_usage = false, continuous_usage = false;
};

}  // namespace

LmService::LmService(LmModel model, std::shared_ptr<const Tokenizer> tokenizer, std::string model_name,
                     LmBackend backend)
    : model_(std::move(model)),
      tokenizer_(std::move(tokenizer)),
      name_(std::move(model_name)),
      backend_(backend) {
  require_backend(backend_, "--backend", "backend");
  if (tokenizer_->vocab_size() > model_.config().vocab) {
    throw Error("--tokenizer", "vocab",
                "the tokenizer " + quote(tokenizer_->name()) + " has " +
                    std::to_string(tokenizer_->vocab_size()) +
                    " tokens, more than the model's vocabulary of " + std::to_string(model_.config().vocab));
  }
}

std::vector<SampleResult> LmService::run(std::span<const SampleRequest> requests,
                                         const SamplingParams& params, const SampleObserver& observer) const {
  return backend_ == LmBackend::kCuda ? cuda_sample(model_, requests, params, observer)
                                      : sample(model_, requests, params, observer);
}

std::string collect(const ServeAnswer& answer) {
  std::string body = answer.body;
  if (answer.stream) {
    answer.stream([&body](std::string_view piece) {
      body += piece;
      return true;
    });
  }
  return body;
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
      return ServeAnswer{200, json_text(Json{{"object", "list"}, {"data", Json::array({model})}})};
    }
    if (path == "/get_model_info" && method == "GET") {
      return ServeAnswer{200, json_text(Json{{"model_path", name_},
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
      return ServeAnswer{405, json_text(Json{{"error", error}})};
    }
    if (path == "/health" || path == "/metrics") return std::nullopt;  // the engine's server answers them
    const Json error = {{"message", "no route " + std::string(path) +
                                        " (served: POST /v1/completions, POST /generate, GET /v1/models, "
                                        "GET /get_model_info, GET /health)"},
                        {"type", "invalid_request_error"},
                        {"param", nullptr},
                        {"code", "not_found"}};
    return ServeAnswer{404, json_text(Json{{"error", error}})};
  } catch (const std::exception& e) {  // never escapes: an internal failure is a 500 in OpenAI's shape
    const Json error = {{"message", std::string("internal error: ") + e.what()},
                        {"type", "internal_error"},
                        {"param", nullptr},
                        {"code", nullptr}};
    return ServeAnswer{500, json_text(Json{{"error", error}})};
  }
}

// The OpenAI request, read and checked before anything is sampled (a bad request is a 400, never a stream).
struct LmService::CompletionJob {
  std::vector<std::vector<int32_t>> prompt_ids;
  std::vector<SampleRequest> requests;
  SamplingParams p;
  int n = 1, logprobs = -1;
  uint64_t seed = 0;
  bool include_stop = false, return_prompt_ids = false;
  StreamOptions streaming;
};

ServeAnswer LmService::completions(std::string_view body) const {
  const LmConfig& c = model_.config();
  auto job = std::make_shared<CompletionJob>();
  SamplingParams& p = job->p;
  try {
    const In req = object_body(body);
    const In* prompt = find(req, "prompt");
    if (prompt == nullptr) throw BadRequest("prompt", "prompt is missing");
    bool batch = false;
    job->prompt_ids = prompts(*prompt, "prompt", *tokenizer_, c, batch);
    p.max_new_tokens = static_cast<int>(integer(req, "max_tokens", 16, 0, INT32_MAX));
    p.max_new_tokens = std::min(p.max_new_tokens, c.max_positions);  // the context ends it sooner anyway
    p.temperature = static_cast<float>(number(req, "temperature", 1.0, 0.0, 1e6));
    p.top_p = static_cast<float>(number(req, "top_p", 1.0, 1e-9, 1.0));
    job->n = static_cast<int>(integer(req, "n", 1, 1, 16));
    job->seed = static_cast<uint64_t>(integer(req, "seed", 0, INT64_MIN, INT64_MAX));
    p.stop_strings = stop_strings(req);
    p.stop_ids = stop_ids(req, c.vocab);
    job->logprobs = static_cast<int>(integer(req, "logprobs", -1, 0, 20));
    p.top_logprobs = std::max(0, job->logprobs);
    job->include_stop = boolean(req, "include_stop_str_in_output", false);
    job->return_prompt_ids = boolean(req, "return_token_ids", false);
    p.top_k = top_k(req);
    if (boolean(req, "echo", false)) throw BadRequest("echo", "echo is not supported");
    refuse_constrained_decoding(req, "");
    StreamOptions& streaming = job->streaming;
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
    if (static_cast<int>(job->prompt_ids.size()) * job->n > kMaxPrompts)
      throw BadRequest("n", "prompts x n must be at most " + std::to_string(kMaxPrompts));
    p.tokenizer = tokenizer_.get();
    for (const auto& ids : job->prompt_ids) {
      for (int i = 0; i < job->n; ++i) {
        job->requests.push_back(
            SampleRequest{ids, StreamKey{job->seed, 0, static_cast<uint32_t>(i), StreamRole::kExecute, 0}});
      }
    }
    check_sampling(c, job->requests, p);
  } catch (const std::invalid_argument& e) {
    return ServeAnswer{400, json_text(Json{{"error",
                                            {{"message", e.what()},
                                             {"type", "invalid_request_error"},
                                             {"param", nullptr},
                                             {"code", nullptr}}}})};
  } catch (const BadRequest& e) {
    const Json error = {{"message", e.what()},
                        {"type", "invalid_request_error"},
                        {"param", e.field.empty() ? Json(nullptr) : Json(e.field)},
                        {"code", nullptr}};
    return ServeAnswer{400, json_text(Json{{"error", error}})};
  }
  if (job->streaming.stream) {
    ServeAnswer answer{200, "", kSseContentType};
    answer.stream = [this, job](const BodyWriter& write) { stream_completions(*job, write); };
    return answer;
  }
  const std::vector<SampleResult> results = run(job->requests, p);
  Json choices = Json::array();
  int64_t completion_tokens = 0;
  for (size_t k = 0; k < results.size(); ++k) {
    const SampleResult& r = results[k];
    completion_tokens += static_cast<int64_t>(r.tokens.size());
    const std::vector<size_t> ends = token_ends(*tokenizer_, r.tokens);
    Json choice = {{"index", k},
                   {"text", final_text(*job, r)},
                   {"logprobs", logprobs_json(*job, r, ends, 0, r.tokens.size())},
                   {"finish_reason", r.finish == FinishReason::kStop ? "stop" : "length"},
                   {"stop_reason", stop_reason(*job, r)},
                   {"token_ids", r.tokens}};
    if (job->return_prompt_ids) choice["prompt_token_ids"] = job->prompt_ids[k / static_cast<size_t>(job->n)];
    choices.push_back(choice);
  }
  const Json answer = {{"id", "cmpl-" + std::to_string(job->seed)},
                       {"object", "text_completion"},
                       {"created", 0},
                       {"model", name_},
                       {"choices", choices},
                       {"usage", usage_json(prompt_tokens(*job), completion_tokens)}};
  return ServeAnswer{200, json_text(answer)};
}

// A choice's final text: cut at its stop string (which stays with include_stop_str_in_output).
std::string LmService::final_text(const CompletionJob& job, const SampleResult& r) {
  std::string text = r.text;
  if (r.stop_string >= 0) {
    text.resize(static_cast<size_t>(r.stop_offset) +
                (job.include_stop ? job.p.stop_strings[static_cast<size_t>(r.stop_string)].size() : 0));
  }
  return text;
}

// vLLM's stop_reason: the stop string, the stop token's id, or null.
nlohmann::ordered_json LmService::stop_reason(const CompletionJob& job, const SampleResult& r) {
  if (r.stop_string >= 0) return job.p.stop_strings[static_cast<size_t>(r.stop_string)];
  if (r.finish == FinishReason::kStop) return r.tokens.back();
  return nullptr;
}

int64_t LmService::prompt_tokens(const CompletionJob& job) {
  int64_t total = 0;
  for (const auto& ids : job.prompt_ids) total += static_cast<int64_t>(ids.size()) * job.n;
  return total;
}

nlohmann::ordered_json LmService::usage_json(int64_t prompt, int64_t completion) {
  return Json{
      {"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
}

// The logprobs object of tokens [from, to) of a choice (text_offset: where each starts in the choice's text,
// from `ends`, token_ends() of its tokens so far), or null without `logprobs`.
nlohmann::ordered_json LmService::logprobs_json(const CompletionJob& job, const SampleResult& r,
                                                const std::vector<size_t>& ends, size_t from,
                                                size_t to) const {
  if (job.logprobs < 0) return nullptr;
  Json tokens = Json::array(), values = Json::array(), offsets = Json::array(), tops = Json::array();
  for (size_t t = from; t < to; ++t) {
    tokens.push_back(piece_text(*tokenizer_, r.tokens[t]));
    values.push_back(r.logprobs[t]);
    offsets.push_back(t == 0 ? 0 : ends[t - 1]);
    if (job.logprobs > 0) {
      Json top = Json::object();
      for (const auto& [id, value] : r.top[t]) top[piece_text(*tokenizer_, id)] = value;
      tops.push_back(top);
    }
  }
  return Json{{"text_offset", offsets},
              {"token_logprobs", values},
              {"tokens", tokens},
              {"top_logprobs", job.logprobs > 0 ? tops : Json(nullptr)}};
}

// The OpenAI stream (vLLM's chunks), written round by round as the tokens are sampled.
void LmService::stream_completions(const CompletionJob& job, const BodyWriter& write) const {
  const size_t choices = job.requests.size();
  const std::string id = "cmpl-" + std::to_string(job.seed);
  std::vector<size_t> sent(choices, 0);            // bytes of each choice's text already sent
  std::vector<std::vector<size_t>> ends(choices);  // token_ends() of each choice's tokens so far
  int64_t completion_tokens = 0;
  // The event of choice k's newest token (or, without tokens, its only event).
  const auto event = [&](size_t k, const SampleResult& r, bool finished) {
    const size_t count = r.tokens.size();
    if (count > ends[k].size()) {
      const int32_t token = r.tokens[count - 1];
      ends[k].push_back((ends[k].empty() ? 0 : ends[k].back()) +
                        tokenizer_->decode(std::span<const int32_t>(&token, 1)).size());
      ++completion_tokens;
    }
    const std::string text = finished ? final_text(job, r) : r.text;
    const size_t upto = std::max(sent[k], finished ? text.size() : shown_so_far(text, job.p.stop_strings));
    const size_t t = count == 0 ? 0 : count - 1;
    Json choice = {{"index", k},
                   {"text", text.substr(sent[k], upto - sent[k])},
                   {"logprobs", count == 0 ? Json(nullptr) : logprobs_json(job, r, ends[k], t, t + 1)},
                   {"finish_reason",
                    finished ? Json(r.finish == FinishReason::kStop ? "stop" : "length") : Json(nullptr)},
                   {"stop_reason", finished ? stop_reason(job, r) : Json(nullptr)},
                   {"token_ids", count == 0 ? Json::array() : Json::array({r.tokens[t]})}};
    sent[k] = upto;
    const std::vector<int32_t>& prompt = job.prompt_ids[k / static_cast<size_t>(job.n)];
    if (job.return_prompt_ids && t == 0) choice["prompt_token_ids"] = prompt;
    Json out = {{"id", id},
                {"object", "text_completion"},
                {"created", 0},
                {"model", name_},
                {"choices", Json::array({choice})}};
    if (job.streaming.include_usage) {
      out["usage"] = job.streaming.continuous_usage
                         ? usage_json(static_cast<int64_t>(prompt.size()), static_cast<int64_t>(count))
                         : Json(nullptr);
    }
    return json_text(out);
  };
  const std::vector<SampleResult> results =
      run(job.requests, job.p,
          [&](int step, std::span<const SampleResult> so_far, std::span<const char> finished) {
            return write_round(write, step, so_far, finished,
                               [&](size_t k, bool done) { return event(k, so_far[k], done); });
          });
  std::string events;
  for (size_t k = 0; k < results.size(); ++k) {  // max_tokens 0: one event per choice, its only one
    if (results[k].tokens.empty()) append_sse_data(events, event(k, results[k], true));
  }
  if (job.streaming.include_usage) {
    append_sse_data(events, json_text(Json{{"id", id},
                                           {"object", "text_completion"},
                                           {"created", 0},
                                           {"model", name_},
                                           {"choices", Json::array()},
                                           {"usage", usage_json(prompt_tokens(job), completion_tokens)}}));
  }
  append_sse_data(events, "[DONE]");
  write(events);
}

ServeAnswer LmService::generate(std::string_view body) const {
  const LmConfig& c = model_.config();
  std::vector<std::vector<int32_t>> prompt_ids;
  std::vector<SampleRequest> requests;
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
    refuse_constrained_decoding(sp, "sampling_params.");
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
    for (size_t i = 0; i < prompt_ids.size(); ++i) {
      if (start >= static_cast<int>(prompt_ids[i].size()))
        throw BadRequest("logprob_start_len", "logprob_start_len (" + std::to_string(start) +
                                                  ") is higher than the number of input tokens (" +
                                                  std::to_string(prompt_ids[i].size()) +
                                                  "). Request with a lower logprob_start_len.");
      requests.push_back(SampleRequest{
          prompt_ids[i], StreamKey{seed, 0, static_cast<uint32_t>(i), StreamRole::kExecute, 0}, start});
    }
    check_sampling(c, requests, p);
  } catch (const BadRequest& e) {
    return ServeAnswer{400, json_text(Json{{"error", {{"message", e.what()}}}})};
  } catch (const std::invalid_argument& e) {
    return ServeAnswer{400, json_text(Json{{"error", {{"message", e.what()}}}})};
  }
  // Item k of the answer, its result `r` so far (`done`: final; else a stream's partial answer, no
  // finish_reason yet).
  const auto item = [=, this](size_t k, const SampleResult& r, bool done) {
    const size_t count = r.tokens.size();
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
    if (!done) text.resize(shown_so_far(text, p.stop_strings));
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
    // SGLang's stream, written round by round as the tokens are sampled.
    ServeAnswer answer{200, "", kSseContentType};
    answer.stream = [this, item, batch, requests = std::move(requests), p](const BodyWriter& write) {
      const auto event = [&](size_t k, const SampleResult& r, bool done) {
        Json out = item(k, r, done);
        if (batch) out["index"] = k;
        return json_text(out);
      };
      const std::vector<SampleResult> results = run(
          requests, p, [&](int step, std::span<const SampleResult> so_far, std::span<const char> finished) {
            return write_round(write, step, so_far, finished,
                               [&](size_t k, bool done) { return event(k, so_far[k], done); });
          });
      std::string events;
      for (size_t k = 0; k < results.size(); ++k) {  // max_new_tokens 0: one event per item, its only one
        if (results[k].tokens.empty()) append_sse_data(events, event(k, results[k], true));
      }
      append_sse_data(events, "[DONE]");
      write(events);
    };
    return answer;
  }
  const std::vector<SampleResult> results = run(requests, p);
  Json items = Json::array();
  for (size_t k = 0; k < results.size(); ++k) items.push_back(item(k, results[k], true));
  return ServeAnswer{200, json_text(batch ? items : items[0])};
}

}  // namespace crl::lm
