#include "policies/llm/llm_api.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>

#include "engine/error.h"
#include "engine/json_escape.h"
#include "engine/json_reader.h"
#include "engine/json_view.h"
#include "engine/sha256.h"

namespace crl::llm {

using json = nlohmann::json;

ApiKind parse_api_kind(const std::string& name, const std::string& where) {
  if (name == "sglang") return ApiKind::kSglang;
  if (name == "openai") return ApiKind::kOpenAi;
  throw Error(where, "api", "value " + quote(name) + " is not one of sglang, openai");
}

const char* api_kind_name(ApiKind kind) {
  return kind == ApiKind::kSglang ? "sglang" : "openai";
}

const char* api_path(ApiKind kind) {
  return kind == ApiKind::kSglang ? "/generate" : "/v1/completions";
}

uint64_t sampling_seed(const StreamKey& stream) {
  // "crl-sampling|seed|task|sample|role|ordinal", written into a buffer on the stack (one per LLM call).
  char canonical[128] = "crl-sampling";
  char* at = canonical + 12;
  char* const end = canonical + sizeof(canonical);
  for (const uint64_t field : {stream.seed, stream.task, uint64_t{stream.sample},
                               uint64_t{static_cast<uint32_t>(stream.role)}, stream.ordinal}) {
    *at++ = '|';
    at = std::to_chars(at, end, field).ptr;  // 12 + 5 x 21 bytes at most: the buffer holds them
  }
  return sha256_u64(std::string_view(canonical, static_cast<size_t>(at - canonical))) &
         ((uint64_t{1} << 63) - 1);
}

namespace {

void append_ids(std::string& out, const PromptView& prompt) {
  out += '[';
  bool first = true;
  for (const Span& span : prompt.spans()) {
    for (TokenId id : prompt.tokens(span)) {
      if (!first) out += ',';
      first = false;
      append_json_int(out, id);
    }
  }
  out += ']';
}

void append_id_list(std::string& out, const std::vector<TokenId>& ids) {
  out += '[';
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    append_json_int(out, ids[i]);
  }
  out += ']';
}

// A JSON number as a float; false for anything else.
bool read_float(const JsonNumber& value, float& out) {
  out = static_cast<float>(value.as_double());
  return true;
}
bool read_float(JsonView value, float& out) {
  return value.is_number() && read_float(value.number_value(), out);
}

bool read_id(const JsonNumber& value, int vocab_size, TokenId& out) {
  if (!value.is_integer()) return false;
  const int64_t id = value.as_integer();
  if (id < 0 || (vocab_size > 0 && id >= vocab_size) || id > INT32_MAX) return false;
  out = static_cast<TokenId>(id);
  return true;
}
bool read_id(JsonView value, int vocab_size, TokenId& out) {
  return value.is_number() && read_id(value.number_value(), vocab_size, out);
}

enum AnswerList { kIds, kTokenLogprobs, kPromptIds, kTextOffsets };
JsonNumberRows number_rows(std::string_view key, int numbers = 0, int nulls = 0) {
  JsonNumberRows rows;
  rows.key = key;
  rows.bracketed = numbers > 0;
  rows.numbers = std::max(numbers, 1);
  rows.nulls = nulls;
  return rows;
}
// The rows one answer's reading uses: per thread, so that their storage is kept from one answer to the
// next, but at most kMaxKeptCells numbers of it (1 MiB; a 100k-token answer gives back what it grew, as
// JsonDocument bounds its spare nodes).
class ThreadAnswerRows {
 public:
  explicit ThreadAnswerRows(ApiKind kind) {
    thread_local std::vector<JsonNumberRows> sglang = answer_number_rows(ApiKind::kSglang);
    thread_local std::vector<JsonNumberRows> openai = answer_number_rows(ApiKind::kOpenAi);
    rows_ = kind == ApiKind::kSglang ? std::span<JsonNumberRows>(sglang) : std::span<JsonNumberRows>(openai);
  }
  ~ThreadAnswerRows() {
    constexpr size_t kMaxKeptCells = 65536;
    for (JsonNumberRows& r : rows_) {
      r.text = {};  // (views into the answer and the request, which go)
      r.expected = {};
      if (r.cells.capacity() > kMaxKeptCells) r.cells = {};
    }
  }
  ThreadAnswerRows(const ThreadAnswerRows&) = delete;
  ThreadAnswerRows& operator=(const ThreadAnswerRows&) = delete;
  std::span<JsonNumberRows> rows() const { return rows_; }

 private:
  std::span<JsonNumberRows> rows_;
};

// One per-token list of an answer, row after row: the rows the parse took, or the document's array.
class TokenList {
 public:
  TokenList(JsonView array, const JsonNumberRows& rows)
      : array_(array), rows_(rows), taken_(rows.taken(array)) {
    if (!taken_ && array.is_array()) element_ = array.begin();
  }
  bool is_array() const { return taken_ || array_.is_array(); }
  size_t size() const { return taken_ ? rows_.rows() : array_.size(); }
  // The next row's first `n` numbers (a bare list: its element, n = 1); false where that row is not n
  // numbers or an array that starts with them.
  // (Inlined into the reading loops, and the numbers copied one by one: as std::copy of a count known only
  // here, a call to memmove per row was an eighth of reading an answer.)
  [[gnu::always_inline]] bool next(JsonNumber* out, int n) {
    if (taken_) [[likely]] {
      const JsonNumber* row = rows_.cells.data() + at_;
      at_ += static_cast<size_t>(rows_.bracketed ? rows_.numbers : 1);
      for (int k = 0; k < n; ++k) out[k] = row[k];
      return true;
    }
    return next_element(out, n);
  }

 private:
  // The document's next element (out of line: the rows are the rule, and next() stays small enough to be
  // inlined into the reading loops).
  [[gnu::noinline]] bool next_element(JsonNumber* out, int n) {
    const JsonView element = *element_;
    ++element_;
    if (!rows_.bracketed) {
      if (!element.is_number()) return false;
      *out = element.number_value();
      return true;
    }
    if (!element.is_array() || element.size() < static_cast<size_t>(n)) return false;
    JsonView::Iterator field = element.begin();
    for (int k = 0; k < n; ++k, ++field) {
      if (!(*field).is_number()) return false;
      out[k] = (*field).number_value();
    }
    return true;
  }

  JsonView array_;
  const JsonNumberRows& rows_;
  bool taken_;
  JsonView::Iterator element_;
  size_t at_ = 0;
};

int64_t read_count(JsonView object, const char* key) {
  const JsonView it = object.find(key);  // absent unless object is an object
  return it.is_integer() ? it.integer() : 0;
}

// SGLang reports the weights that served a request (meta_info.weight_version, a string; some versions send a
// number). Kept only when it is short printable ASCII without commas (the export joins versions with commas);
// anything else is dropped, since it is bookkeeping, never part of what is trained.
std::string read_weight_version(JsonView meta) {
  const JsonView it = meta.find("weight_version");
  if (!it.exists()) return {};
  if (it.is_integer()) return std::to_string(it.integer());
  if (!it.is_string()) return {};
  const std::string value(it.string());
  if (value.empty() || value.size() > 64) return {};
  for (unsigned char c : value)
    if (c < 0x21 || c > 0x7e || c == ',') return {};
  return value;
}

GenerateResult fail(std::string why) {
  GenerateResult out;
  out.error = std::move(why);
  return out;
}

// A server's alternatives: one entry per sampled token, null (none there) or what `read_position` reads
// into that token's list (false, with `why` set, for an entry it refuses). `path` names the list in errors.
template <class ReadPosition>
bool read_top(JsonView list, size_t tokens, const std::string& path, GenerateResult& out, std::string& why,
              ReadPosition read_position) {
  if (!list.is_array() || list.size() != tokens) {
    why = path + " must list the alternatives of each of the " + std::to_string(tokens) + " sampled tokens";
    return false;
  }
  out.top.resize(tokens);
  size_t i = 0;
  for (const JsonView position : list) {
    if (!position.is_null() && !read_position(position, out.top[i])) {
      why = path + "[" + std::to_string(i) + "] " + why;
      return false;
    }
    ++i;
  }
  return true;
}

// SGLang's output_top_logprobs (top_logprobs_num): lists of at most `asked` [logprob, id, text|null].
bool read_sglang_top(JsonView list, size_t tokens, int vocab_size, int asked, GenerateResult& out,
                     std::string& why) {
  return read_top(list, tokens, "meta_info.output_top_logprobs", out, why,
                  [&](JsonView position, std::vector<TopLogprob>& alternatives) {
                    if (!position.is_array() || position.size() > static_cast<size_t>(asked)) {
                      why = "is not a list of at most " + std::to_string(asked) + " entries";
                      return false;
                    }
                    for (const JsonView entry : position) {
                      TopLogprob top;
                      bool well_formed = entry.is_array() && entry.size() >= 2;
                      if (well_formed) {
                        JsonView::Iterator field = entry.begin();
                        const JsonView logprob = *field;
                        ++field;
                        well_formed = read_float(logprob, top.logprob) && read_id(*field, vocab_size, top.id);
                      }
                      if (!well_formed) {
                        why = "has an entry that is not [logprob, token_id, text] of the vocabulary";
                        return false;
                      }
                      alternatives.push_back(std::move(top));
                    }
                    return true;
                  });
}

// The OpenAI API's top_logprobs (logprobs: K): objects {text: logprob} of at most K + 1 entries (the sampled
// token is added). vLLM's "token_id:N" keys (return_tokens_as_token_ids) also name the id.
bool read_openai_top(JsonView list, size_t tokens, int asked, GenerateResult& out, std::string& why) {
  return read_top(list, tokens, "choices[0].logprobs.top_logprobs", out, why,
                  [&](JsonView position, std::vector<TopLogprob>& alternatives) {
                    if (!position.is_object() || position.size() > static_cast<size_t>(asked) + 1) {
                      why = "is not an object of at most " + std::to_string(asked + 1) + " entries";
                      return false;
                    }
                    for (const JsonView entry : position) {
                      TopLogprob top;
                      top.text = std::string(entry.key());
                      if (!read_float(entry, top.logprob)) {
                        why = "has a value that is not a number";
                        return false;
                      }
                      constexpr std::string_view kIdPrefix = "token_id:";
                      if (top.text.starts_with(kIdPrefix)) {
                        int64_t id = 0;
                        const char* begin = top.text.data() + kIdPrefix.size();
                        const char* end = top.text.data() + top.text.size();
                        const auto [ptr, ec] = std::from_chars(begin, end, id);
                        if (ec == std::errc() && ptr == end && begin != end && id >= 0 && id <= INT32_MAX)
                          top.id = static_cast<TokenId>(id);
                      }
                      alternatives.push_back(std::move(top));
                    }
                    return true;
                  });
}

GenerateResult parse_sglang(JsonView body, std::span<const JsonNumberRows> rows, int vocab_size,
                            int top_logprobs, bool partial) {
  GenerateResult out;
  // A batch answer (a list) holds one item per prompt; we send one prompt.
  const JsonView item = body.is_array() && body.size() == 1 ? *body.begin() : body;
  if (!item.is_object()) return fail("the answer is not a JSON object");
  const JsonView meta = item.find("meta_info");
  if (!meta.is_object()) return fail("meta_info is missing");
  const JsonView finish = meta.find("finish_reason");
  if (!finish.exists()) return fail("meta_info.finish_reason is missing");
  std::string type;
  if (partial && finish.is_null()) {
    // (a streamed answer's event before its last: no finish reason yet)
  } else if (const JsonView finish_type = finish.find("type"); finish_type.is_string()) {
    type = finish_type.string();
  } else if (finish.is_string()) {
    type = finish.string();
  } else {
    return fail("meta_info.finish_reason has no type");
  }
  out.finish_reason = type;
  TokenList ids(item.find("output_ids"), rows[kIds]);
  TokenList logprobs(meta.find("output_token_logprobs"), rows[kTokenLogprobs]);
  if (!ids.is_array()) return fail("output_ids is missing");
  if (!logprobs.is_array())
    return fail("meta_info.output_token_logprobs is missing (send return_logprob: true)");
  if (logprobs.size() != ids.size()) {
    return fail(std::to_string(logprobs.size()) + " output_token_logprobs for " + std::to_string(ids.size()) +
                " output_ids");
  }
  out.ids.resize(ids.size());
  out.logprobs.resize(ids.size());
  for (size_t i = 0; i < out.ids.size(); ++i) {
    JsonNumber id, entry[2];
    if (!ids.next(&id, 1) || !read_id(id, vocab_size, out.ids[i]))
      return fail("output_ids[" + std::to_string(i) + "] is not a token id of the vocabulary");
    TokenId echoed = 0;
    if (!logprobs.next(entry, 2) || !read_float(entry[0], out.logprobs[i]) || !read_id(entry[1], 0, echoed))
      return fail("output_token_logprobs[" + std::to_string(i) + "] is not [logprob, token_id, text]");
    if (echoed != out.ids[i]) {
      return fail("output_token_logprobs[" + std::to_string(i) + "] names token " + std::to_string(echoed) +
                  " but output_ids has " + std::to_string(out.ids[i]));
    }
  }
  std::string why;
  if (top_logprobs > 0 &&
      !read_sglang_top(meta.find("output_top_logprobs"), out.ids.size(), vocab_size, top_logprobs, out, why))
    return fail(why);
  out.prompt_tokens = read_count(meta, "prompt_tokens");
  out.completion_tokens = read_count(meta, "completion_tokens");
  out.cached_tokens = read_count(meta, "cached_tokens");
  out.weight_version = read_weight_version(meta);
  out.ok = true;
  return out;
}

// What every refusal of an answer that names another prompt than the one sent ends with.
constexpr std::string_view kOtherPrompt = " (the server did not run the prompt it was sent)";

// vLLM's return_token_ids answers the prompt's ids too (`prompt_token_ids`, 8,000 at an 8k-token context:
// read as rows, not a node each, they cost a scan instead of most of the answer's reading). When they are
// there they must be the prompt sent: an upstream that cut it (truncate_prompt_tokens, a context limit) or a
// proxy that re-tokenized it ran another prompt than the one the caller records as the policy's. Null or
// absent (a server before return_token_ids answered them): nothing to check. Written back as the request
// wrote them (JsonNumberRows::matched): they are the prompt sent.
std::string check_prompt_echo(JsonView echoed, const JsonNumberRows& rows, const PromptView& sent) {
  if (rows.matched && rows.taken(echoed)) return "";
  TokenList ids(echoed, rows);
  if (!ids.is_array()) return "";
  if (ids.size() != static_cast<size_t>(sent.size())) {
    return "choices[0].prompt_token_ids has " + std::to_string(ids.size()) +
           (ids.size() == 1 ? " id" : " ids") + " where the prompt sent had " + std::to_string(sent.size()) +
           std::string(kOtherPrompt);
  }
  size_t at = 0;
  for (const Span& span : sent.spans()) {
    for (const TokenId want : sent.tokens(span)) {
      JsonNumber id;
      if (!ids.next(&id, 1) || !id.is_integer() || id.as_integer() != want) {
        return "choices[0].prompt_token_ids[" + std::to_string(at) + "] is not the prompt sent's id " +
               std::to_string(want) + std::string(kOtherPrompt);
      }
      ++at;
    }
  }
  return "";
}

// The usage of an OpenAI answer (or of a stream's last chunk), when it has one.
void read_openai_usage(JsonView body, GenerateResult& out) {
  if (const JsonView usage = body.find("usage"); usage.exists()) {
    out.prompt_tokens = read_count(usage, "prompt_tokens");
    out.completion_tokens = read_count(usage, "completion_tokens");
    out.cached_tokens = read_count(usage.find("prompt_tokens_details"), "cached_tokens");
  }
}

GenerateResult parse_openai(JsonView body, std::span<const JsonNumberRows> rows, int vocab_size,
                            int top_logprobs, const PromptView* sent, bool partial) {
  GenerateResult out;
  if (!body.is_object()) return fail("the answer is not a JSON object");
  const JsonView choices = body.find("choices");
  if (partial && choices.is_array() && choices.size() == 0) {  // a stream's usage chunk (include_usage)
    read_openai_usage(body, out);
    out.ok = true;
    return out;
  }
  if (!choices.is_array() || choices.size() == 0) return fail("choices is missing");
  const JsonView choice = *choices.begin();
  if (!choice.is_object()) return fail("choices[0] is not an object");
  const JsonView finish = choice.find("finish_reason");
  if (partial && finish.is_null()) {
    // (a streamed chunk before the last: no finish reason yet)
  } else if (!finish.is_string()) {
    return fail("choices[0].finish_reason is missing");
  } else {
    out.finish_reason = finish.string();
  }
  TokenList ids(choice.find("token_ids"), rows[kIds]);
  // (A streamed chunk without tokens, the last one after a stop string, may carry no log-probs.)
  if (partial && ids.is_array() && ids.size() == 0 && !choice.find("logprobs").is_object()) {
    read_openai_usage(body, out);
    out.ok = true;
    return out;
  }
  if (!ids.is_array())
    return fail("choices[0].token_ids is missing (the server must support return_token_ids)");
  TokenList values(choice.find("logprobs").find("token_logprobs"), rows[kTokenLogprobs]);
  if (!values.is_array()) return fail("choices[0].logprobs.token_logprobs is missing (send logprobs: 1)");
  if (values.size() != ids.size()) {
    return fail(std::to_string(values.size()) + " token_logprobs for " + std::to_string(ids.size()) +
                " token_ids");
  }
  out.ids.resize(ids.size());
  out.logprobs.resize(ids.size());
  for (size_t i = 0; i < out.ids.size(); ++i) {
    JsonNumber id, value;
    if (!ids.next(&id, 1) || !read_id(id, vocab_size, out.ids[i]))
      return fail("choices[0].token_ids[" + std::to_string(i) + "] is not a token id of the vocabulary");
    if (!values.next(&value, 1) || !read_float(value, out.logprobs[i]))
      return fail("choices[0].logprobs.token_logprobs[" + std::to_string(i) + "] is not a number");
  }
  std::string why;
  if (sent != nullptr) {
    why = check_prompt_echo(choice.find("prompt_token_ids"), rows[kPromptIds], *sent);
    if (!why.empty()) return fail(why);
  }
  if (top_logprobs > 0 &&
      !read_openai_top(choice.find("logprobs").find("top_logprobs"), out.ids.size(), top_logprobs, out, why))
    return fail(why);
  read_openai_usage(body, out);
  out.ok = true;
  return out;
}

}  // namespace

namespace {
// A JSON string of an identifier (the request id): ASCII, the common case, written directly (nlohmann's DOM
// and dump cost half the request's tail); anything else through nlohmann, which refuses invalid UTF-8.
void append_identifier(std::string& out, const std::string& text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      out += json(text).dump();
      return;
    }
  }
  append_json_string(out, text);
}

// The body is `head` + the prompt's id list + `tail`; write_request joins them, write_request_parts keeps
// them apart (the same functions write both, so the two bodies are the same bytes).
void write_head(ApiKind kind, const SamplingParams& sampling, std::string& out) {
  if (kind == ApiKind::kSglang) {
    out += "{\"input_ids\":";
    return;
  }
  out += '{';
  if (!sampling.model.empty()) out += "\"model\":" + json(sampling.model).dump() + ",";
  out += "\"prompt\":";
}

void write_tail(ApiKind kind, const GenerateCall& call, const SamplingParams& sampling, std::string& out) {
  if (kind == ApiKind::kSglang) {
    out += ",\"sampling_params\":{\"max_new_tokens\":";
    append_json_int(out, call.max_new_tokens);
    out += ",\"temperature\":";
    append_json_double(out, sampling.temperature);
    out += ",\"top_p\":";
    append_json_double(out, sampling.top_p);
    out += ",\"top_k\":";
    append_json_int(out, sampling.top_k);
    out += ",\"stop_token_ids\":";
    append_id_list(out, sampling.stop_token_ids);
    if (!sampling.stop.empty()) out += ",\"stop\":" + json(sampling.stop).dump();
    if (!sampling.json_schema.empty()) {
      out += ",\"json_schema\":";
      append_json_string(out, sampling.json_schema);
    }
    out += ",\"no_stop_trim\":true,\"skip_special_tokens\":false,\"sampling_seed\":";
    append_json_int(out, static_cast<int64_t>(call.sampling_seed));
    out += "},\"return_logprob\":true,";
    if (sampling.top_logprobs > 0) {
      out += "\"top_logprobs_num\":";
      append_json_int(out, sampling.top_logprobs);
      out += ',';
    }
    if (call.stream) out += "\"stream\":true,";
    out += "\"logprob_start_len\":-1,\"rid\":";
    append_identifier(out, call.rid);
    out += '}';
    return;
  }
  out += ",\"max_tokens\":";
  append_json_int(out, call.max_new_tokens);
  out += ",\"temperature\":";
  append_json_double(out, sampling.temperature);
  out += ",\"top_p\":";
  append_json_double(out, sampling.top_p);
  out += ",\"top_k\":";
  append_json_int(out, sampling.top_k);
  out += ",\"logprobs\":";
  append_json_int(out, std::max(1, sampling.top_logprobs));
  out += ",\"return_token_ids\":true,\"seed\":";
  append_json_int(out, static_cast<int64_t>(call.sampling_seed));
  out += ",\"stop_token_ids\":";
  append_id_list(out, sampling.stop_token_ids);
  if (!sampling.stop.empty()) out += ",\"stop\":" + json(sampling.stop).dump();
  if (!sampling.json_schema.empty()) {
    out += ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"crl\",\"schema\":";
    out += sampling.json_schema;  // JSON text already (checked where it was read)
    out += "}}";
  }
  if (call.stream) out += ",\"stream\":true,\"stream_options\":{\"include_usage\":true}";
  out += ",\"skip_special_tokens\":false,\"include_stop_str_in_output\":true,\"user\":";
  append_identifier(out, call.rid);
  out += '}';
}
}  // namespace

void write_request(ApiKind kind, const GenerateCall& call, const SamplingParams& sampling, std::string& out) {
  out.clear();
  out.reserve((call.prompt_ids_json.empty() ? static_cast<size_t>(call.prompt->size()) * 4
                                            : call.prompt_ids_json.size()) +
              512);
  write_head(kind, sampling, out);
  if (call.prompt_ids_json.empty())
    append_ids(out, *call.prompt);
  else
    out += call.prompt_ids_json;
  write_tail(kind, call, sampling, out);
}

void write_request_parts(ApiKind kind, const GenerateCall& call, const SamplingParams& sampling,
                         RequestParts& out) {
  out.head.clear();
  out.tail.clear();
  out.ids = {};
  out.tail.reserve(512);  // the tail's ~250 bytes written in one block, not grown in five
  write_head(kind, sampling, out.head);
  if (call.prompt_ids_json.empty())
    append_ids(out.head, *call.prompt);
  else
    out.ids = call.prompt_ids_json;
  write_tail(kind, call, sampling, out.tail);
}

std::vector<JsonNumberRows> answer_number_rows(ApiKind kind) {
  // (A node per value made reading an answer cost about 1.7k instructions per token.) SGLang's entries are
  // [logprob, id, text], the text null unless return_text_in_logprobs.
  if (kind == ApiKind::kSglang)
    return {number_rows("output_ids"), number_rows("output_token_logprobs", 2, 1)};
  // vLLM's: the sampled ids, their log-probs, the prompt's ids (return_token_ids) and each token's text
  // offset (logprobs); its alternatives and token texts are a node each still.
  return {number_rows("token_ids"), number_rows("token_logprobs"), number_rows("prompt_token_ids"),
          number_rows("text_offset")};
}

std::span<const std::string_view> answer_unread_arrays(ApiKind kind, int top_logprobs) {
  // vLLM's per-token texts (`tokens`) and, unless alternatives were asked, its `top_logprobs` (an object per
  // token, the sampled token's at least): a string or an object and a number per token, read by no one here
  // (the ids are token_ids, the log-probs token_logprobs), and about two thirds of reading the answer when
  // each was a node (`BM_UpstreamAnswerParseOpenAi`). Checked, not read (engine/json_skim.h).
  static constexpr std::string_view kTexts[] = {"tokens"};
  static constexpr std::string_view kTextsAndAlternatives[] = {"tokens", "top_logprobs"};
  if (kind == ApiKind::kSglang) return {};
  if (top_logprobs > 0) return kTexts;
  return kTextsAndAlternatives;
}

GenerateResult parse_response(ApiKind kind, std::string_view body, int vocab_size, int top_logprobs,
                              SentPrompt sent, bool partial) {
  // The shared reader: an answer nested past kMaxJsonDepth, with a repeated key or not JSON at all fails
  // the call with a short message (never the answer whole).
  // (engine/json_view.h: read_json's limits, without building nlohmann's DOM of the answer.)
  std::optional<JsonDocument> parsed;
  const ThreadAnswerRows kept(kind);
  const std::span<JsonNumberRows> rows = kept.rows();
  // (An id text that is not a list is not compared: the ids are read.)
  if (kind == ApiKind::kOpenAi && sent.ids != nullptr && sent.ids_json.size() >= 2 &&
      sent.ids_json.front() == '[' && sent.ids_json.back() == ']')
    rows[kPromptIds].expected = sent.ids_json;
  const std::span<const std::string_view> unread = answer_unread_arrays(kind, top_logprobs);
  try {
    parsed = JsonDocument::parse(body, "the answer", kMaxJsonDepth, nullptr, rows, unread);
  } catch (const JsonError& e) {
    return fail("the answer is not accepted JSON: " + e.message());
  }
  const JsonView root = parsed->root();
  GenerateResult out = kind == ApiKind::kSglang
                           ? parse_sglang(root, rows, vocab_size, top_logprobs, partial)
                           : parse_openai(root, rows, vocab_size, top_logprobs, sent.ids, partial);
  if (out.ok && out.finish_reason != "stop" && out.finish_reason != "length" &&
      out.finish_reason != "abort" && !(partial && out.finish_reason.empty())) {
    return fail("finish reason " + quote(text_prefix(out.finish_reason)) +
                " is not one of stop, length, abort");
  }
  // The prompt's length as the server counted it (SGLang's meta_info.prompt_tokens, the OpenAI API's
  // usage.prompt_tokens; 0 where it says nothing) is the prompt sent's: a server that cut the prompt
  // (SGLang's --allow-auto-truncate, vLLM's truncate_prompt_tokens) says so here even where it names no ids.
  if (out.ok && sent.ids != nullptr && out.prompt_tokens > 0 && out.prompt_tokens != sent.ids->size()) {
    return fail(std::string(kind == ApiKind::kSglang ? "meta_info" : "usage") + ".prompt_tokens is " +
                std::to_string(out.prompt_tokens) + " where the prompt sent had " +
                std::to_string(sent.ids->size()) + " ids" + std::string(kOtherPrompt));
  }
  return out;
}

}  // namespace crl::llm
