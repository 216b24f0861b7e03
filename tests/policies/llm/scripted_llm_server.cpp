#include "tests/policies/llm/scripted_llm_server.h"

// clang-format off
#include <utility>  // first: Boost 1.74's asio/awaitable.hpp uses std::exchange without including it
// clang-format on
#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <nlohmann/json.hpp>
#include <optional>

#include "engine/json_view.h"
#include "engine/rng.h"

namespace crl::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using json = nlohmann::json;
using asio::ip::tcp;
using boost::system::error_code;

namespace {

struct Fact {
  int record = 0;
  std::string value;
};

struct Knowledge {
  std::string type;  // early_fact | latest_update | ordered_plan
  std::string key;
  int read = 0;
  std::map<int, std::string> facts;  // record number -> value
};

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// The ChatML turns of a prompt: (role, content).
std::vector<std::pair<std::string_view, std::string_view>> turns(std::string_view text) {
  std::vector<std::pair<std::string_view, std::string_view>> out;
  const std::string_view open = "<|im_start|>", close = "<|im_end|>";
  size_t at = 0;
  while ((at = text.find(open, at)) != std::string_view::npos) {
    at += open.size();
    const size_t newline = text.find('\n', at);
    if (newline == std::string_view::npos) break;
    const std::string_view role = text.substr(at, newline - at);
    size_t end = text.find(close, newline + 1);
    if (end == std::string_view::npos) end = text.size();
    out.emplace_back(role, text.substr(newline + 1, end - newline - 1));
    at = end;
  }
  return out;
}

// Reads "#NN/16 ref XXX | KIND key=value |" record lines and an earlier summary out of `text`.
void read_text(std::string_view text, Knowledge& k) {
  // The instruction.
  if (text.find("FACT record holding a 4-digit code") != std::string_view::npos) k.type = "early_fact";
  if (const size_t at = text.find("Track the key `"); at != std::string_view::npos) {
    k.type = "latest_update";
    const size_t start = at + 15, end = text.find('`', start);
    if (end != std::string_view::npos) k.key = std::string(text.substr(start, end - start));
  }
  if (text.find("Three MILESTONE records") != std::string_view::npos) k.type = "ordered_plan";
  // An earlier summary of ours.
  if (const size_t at = text.find("task="); at != std::string_view::npos) {
    std::string_view rest = text.substr(at);
    rest = rest.substr(0, rest.find('\n'));
    size_t pos = 0;
    while (pos < rest.size()) {
      size_t space = rest.find(' ', pos);
      if (space == std::string_view::npos) space = rest.size();
      const std::string_view word = rest.substr(pos, space - pos);
      const size_t eq = word.find('=');
      if (eq != std::string_view::npos) {
        const std::string_view name = word.substr(0, eq), value = word.substr(eq + 1);
        if (name == "task") k.type = std::string(value);
        if (name == "key") k.key = std::string(value);
        if (name == "read") k.read = std::max(k.read, std::atoi(std::string(value).c_str()));
        if (name == "facts") {
          size_t p = 0;
          while (p < value.size()) {
            size_t comma = value.find(',', p);
            if (comma == std::string_view::npos) comma = value.size();
            const std::string_view item = value.substr(p, comma - p);
            const size_t colon = item.find(':');
            if (colon != std::string_view::npos) {
              k.facts[std::atoi(std::string(item.substr(0, colon)).c_str())] =
                  std::string(item.substr(colon + 1));
            }
            p = comma + 1;
          }
        }
      }
      pos = space + 1;
    }
  }
  // Records.
  size_t at = 0;
  while ((at = text.find("/16 ref ", at)) != std::string_view::npos) {
    if (at < 3 || text[at - 3] != '#') {
      at += 8;
      continue;
    }
    const int record = std::atoi(std::string(text.substr(at - 2, 2)).c_str());
    const size_t bar = text.find(" | ", at);
    if (bar == std::string_view::npos) break;
    const size_t kind_end = text.find(' ', bar + 3);
    const size_t eq = text.find('=', kind_end);
    const size_t value_end = text.find(" |", eq);
    if (kind_end == std::string_view::npos || eq == std::string_view::npos ||
        value_end == std::string_view::npos)
      break;
    const std::string_view kind = text.substr(bar + 3, kind_end - bar - 3);
    const std::string_view key = text.substr(kind_end + 1, eq - kind_end - 1);
    const std::string value(text.substr(eq + 1, value_end - eq - 1));
    k.read = std::max(k.read, record);
    const bool relevant = (k.type == "early_fact" && kind == "FACT") ||
                          (k.type == "latest_update" && kind == "UPDATE" && key == k.key) ||
                          (k.type == "ordered_plan" && kind == "MILESTONE");
    if (relevant) k.facts[record] = value;
    at = value_end;
  }
}

}  // namespace

std::string scripted_answer(std::string_view prompt_text, SummaryMode mode, uint64_t seed) {
  const auto all = turns(prompt_text);
  std::string_view last_user;
  for (const auto& [role, content] : all) {
    if (role == "user") last_user = content;
  }
  Knowledge k;
  for (const auto& [role, content] : all) {
    if (role != "assistant") read_text(content, k);
  }
  if (last_user.find("Write a summary") != std::string_view::npos) {
    const bool drop = mode == SummaryMode::kDrop || (mode == SummaryMode::kSeeded && seed % 2 == 1);
    std::string out = "task=" + k.type + " key=" + (k.key.empty() ? "-" : k.key) +
                      " read=" + std::to_string(k.read) + " facts=";
    if (!drop) {
      bool first = true;
      for (const auto& [record, value] : k.facts) {
        out += (first ? "" : ",") + std::to_string(record) + ":" + value;
        first = false;
      }
    }
    return out;
  }
  if (!starts_with(last_user, "END")) return "next";
  if (k.facts.empty()) return "submit unknown";
  if (k.type == "early_fact") return "submit " + k.facts.begin()->second;
  if (k.type == "latest_update") return "submit " + k.facts.rbegin()->second;
  std::string plan;
  for (const auto& [record, value] : k.facts) plan += (plan.empty() ? "" : ">") + value;
  return "submit {\"plan\":\"" + plan + "\"}";
}

float scripted_logprob(uint64_t seed, size_t position, TokenId token) {
  const uint64_t h =
      splitmix64(seed ^ splitmix64(position * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(token)));
  return -static_cast<float>(1 + h % 4096) / 1024.0f;
}

std::vector<std::pair<TokenId, float>> scripted_top(TokenId sampled, float logprob, int k) {
  std::vector<std::pair<TokenId, float>> out;
  if (k <= 0) return out;
  out.emplace_back(sampled, logprob);
  for (int j = 1; static_cast<int>(out.size()) < k; ++j) {
    const auto id = static_cast<TokenId>(33 + (static_cast<int64_t>(sampled) + 7 * j) % 90);
    if (std::any_of(out.begin(), out.end(), [&](const auto& entry) { return entry.first == id; })) continue;
    out.emplace_back(id, out.back().second - 0.5f);
  }
  return out;
}

struct ScriptedLlmServer::Impl : std::enable_shared_from_this<Impl> {
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  ScriptedLlmOptions options;
  ScriptedLlmServer* owner = nullptr;
  mutable std::mutex mutex;
  std::vector<LoggedCall> log;
  std::map<size_t, int> seen;  // request body hash -> attempts
  uint64_t completions = 0;
  // On the io thread only: requests read and not yet answered, and the hold's waiting timers.
  uint64_t in_flight = 0;
  bool held_released = false;
  std::vector<asio::steady_timer*> holding;

  struct Answer {
    Answer() = default;
    Answer(int status, std::string body, bool drop = false, double delay_s = 0)
        : status(status), body(std::move(body)), drop(drop), delay_s(delay_s) {}
    int status = 200;
    std::string body;
    bool drop = false;
    double delay_s = 0;
    // A stream (SGLang's "stream": true): its events, each "data: ...\n\n", written one chunk each,
    // stream_event_delay_s apart; the body is unused. `cut_after`: the connection is closed after that many
    // events (the stream_cut fault).
    std::vector<std::string> events;
    bool streamed = false;
    size_t cut_after = SIZE_MAX;
  };

  // vLLM's model list (its ModelCard's fields, in its order; the permission list left empty).
  Answer models() const {
    using ordered = nlohmann::ordered_json;
    ordered card = ordered::object({{"id", options.model_id},
                                    {"object", "model"},
                                    {"created", 1700000000},
                                    {"owned_by", "vllm"},
                                    {"root", options.model_id},
                                    {"parent", nullptr}});
    if (options.max_model_len > 0) card["max_model_len"] = options.max_model_len;
    card["permission"] = ordered::array();
    return Answer{200, ordered{{"object", "list"}, {"data", ordered::array({card})}}.dump()};
  }

  // Where an OpenAI answer's prompt ids go (the answer's other strings are JSON-escaped: a control byte
  // there is written \u0001, never this).
  static constexpr const char* kPromptIdsMark = "\x01prompt_token_ids\x01";

  static Answer bad_request(const std::string& why) {
    return Answer{400,
                  json{{"error", {{"message", why}, {"type", "BadRequestError"}, {"code", 400}}}}.dump()};
  }

  Answer handle(const std::string& target, const std::string& body, const std::string& routing_key = "") {
    const bool sglang = target == "/generate", openai = target == "/v1/completions";
    if (target == "/v1/models") return models();
    if (!sglang && !openai) return Answer{404, R"({"detail":"Not Found"})"};
    Answer answer;
    answer.delay_s = options.faults.delay_s;
    // Attempts are counted per distinct body only when transient faults are asked for (no hashing of every
    // 40 KB body, and no map that grows with every distinct one); otherwise every call is past them.
    int attempt = options.faults.transient_drops + options.faults.transient_5xx + 1;
    if (options.faults.transient_drops > 0 || options.faults.transient_5xx > 0) {
      std::lock_guard lock(mutex);
      attempt = ++seen[std::hash<std::string>{}(body)];
    }
    if (attempt <= options.faults.transient_drops) {
      answer.drop = true;
      return answer;
    }
    if (attempt <= options.faults.transient_drops + options.faults.transient_5xx) {
      answer.status = 503;
      answer.body = R"({"error":"overloaded, retry"})";
      return answer;
    }
    // The body is read with the engine's reader, which builds no value per token id: with nlohmann's DOM
    // and the hash above, a direct call of an 8k-token prompt cost 0.79-0.86 ms of CPU (harness and
    // stand-in), now 0.52-0.55 ms (`BM_GatewayThroughput/N/1`), CPU the gateway's load benchmarks share
    // two cores with. Every other member becomes a small nlohmann value. Unlike SGLang, a body with a
    // repeated key is refused (no client of ours sends one).
    // The prompt's ids as a row of numbers (JsonNumberRows), not a node each: 8,000 of them at an 8k-token
    // context.
    const std::string_view ids_key = sglang ? "input_ids" : "prompt";
    std::optional<JsonDocument> document;
    JsonNumberRows prompt_rows;
    prompt_rows.key = ids_key;
    try {
      document = JsonDocument::parse(body, "the request", kMaxJsonDepth, nullptr, {&prompt_rows, 1});
    } catch (const JsonError&) {
      return bad_request("the body is not a JSON object");
    }
    const JsonView root = document->root();
    if (!root.is_object()) return bad_request("the body is not a JSON object");
    json request = json::object();  // every member but the prompt's ids
    for (const JsonView member : root) {
      if (member.key() != ids_key) request[std::string(member.key())] = member.to_json();
    }
    const JsonView ids = root.find(ids_key);
    LoggedCall call;
    call.api = sglang ? "sglang" : "openai";
    call.routing_key = routing_key;
    const json* params = &request;
    if (sglang) {
      if (!ids.exists()) return bad_request("input_ids is required");
      if (!request.contains("sampling_params") || !request["sampling_params"].is_object())
        return bad_request("sampling_params is required");
      params = &request["sampling_params"];
      if (!request.value("return_logprob", false)) return bad_request("return_logprob must be true");
      if (!params->contains("max_new_tokens"))
        return bad_request("sampling_params.max_new_tokens is required");
      call.max_new_tokens = (*params)["max_new_tokens"].get<int64_t>();
      call.sampling_seed = params->value("sampling_seed", uint64_t{0});
      call.rid = request.value("rid", std::string());
      call.top_logprobs = request.value("top_logprobs_num", 0);
      if (const auto schema = params->find("json_schema"); schema != params->end()) {
        if (!schema->is_string()) return bad_request("sampling_params.json_schema must be a string");
        call.json_schema = schema->get<std::string>();
      }
    } else {
      if (!ids.exists()) return bad_request("prompt is required");
      if (!request.contains("max_tokens")) return bad_request("max_tokens is required");
      if (!request.value("return_token_ids", false)) return bad_request("return_token_ids must be true");
      if (request.value("logprobs", 0) < 1) return bad_request("logprobs must be >= 1");
      call.max_new_tokens = request["max_tokens"].get<int64_t>();
      call.sampling_seed = request.value("seed", uint64_t{0});
      call.rid = request.value("user", std::string());
      call.top_logprobs = request.value("logprobs", 0);
      if (const auto format = request.find("response_format"); format != request.end()) {
        const std::string type = format->value("type", std::string());
        if (type == "json_object") {
          call.json_schema = R"({"type":"object"})";
        } else if (type == "json_schema" && format->contains("json_schema") &&
                   (*format)["json_schema"].contains("schema")) {
          call.json_schema = (*format)["json_schema"]["schema"].dump();
        } else if (type != "text") {
          return bad_request("response_format must be text, json_object or json_schema with a schema");
        }
      }
    }
    if (prompt_rows.taken(ids)) {
      if (prompt_rows.rows() == 0) return bad_request("the prompt must be a non-empty list of token ids");
      call.prompt.reserve(prompt_rows.rows());
      for (const JsonNumber& id : prompt_rows.cells) {
        if (!id.is_integer()) return bad_request("the prompt must be a list of token ids");
        call.prompt.push_back(static_cast<TokenId>(id.as_integer()));
      }
    } else {
      if (!ids.is_array() || ids.size() == 0)
        return bad_request("the prompt must be a non-empty list of token ids");
      call.prompt.reserve(ids.size());
      for (const JsonView id : ids) {
        if (!id.is_integer()) return bad_request("the prompt must be a list of token ids");
        call.prompt.push_back(static_cast<TokenId>(id.integer()));
      }
    }
    if (call.max_new_tokens < 1) return bad_request("max_new_tokens must be >= 1");
    if (const auto stop_ids = params->find("stop_token_ids"); stop_ids != params->end()) {
      if (!stop_ids->is_array()) return bad_request("stop_token_ids must be a list of token ids");
      for (const json& id : *stop_ids) {
        if (!id.is_number_integer()) return bad_request("stop_token_ids must hold token ids");
        call.stop_token_ids.push_back(id.get<TokenId>());
      }
    }
    if (const auto stop = params->find("stop"); stop != params->end()) {
      if (!stop->is_array()) return bad_request("stop must be a list of strings");
      for (const json& s : *stop) {
        if (!s.is_string() || s.get<std::string>().empty()) return bad_request("stop must hold strings");
        call.stop.push_back(s.get<std::string>());
      }
    }

    const FaultOptions& f = options.faults;
    std::string sticky;
    if (f.sticky_every > 0 && call.sampling_seed % f.sticky_every == 0) sticky = f.sticky_fault;
    if (sticky == "5xx") return Answer{500, R"({"error":"internal"})", false, answer.delay_s};
    if (sticky == "400") return bad_request("rejected on purpose");
    if (sticky == "drop") {
      answer.drop = true;
      return answer;
    }
    if (sticky == "malformed")
      return Answer{200, R"({"text": "next", "output_ids": [110, 1)", false, answer.delay_s};
    if (sticky == "hang") answer.delay_s = f.hang_s;

    const Tokenizer& tokenizer = *options.tokenizer;
    std::string text =
        options.script ? options.script(tokenizer.decode(call.prompt), call.sampling_seed)
                       : scripted_answer(tokenizer.decode(call.prompt), options.summary, call.sampling_seed);
    // A stop string ends the text where it first matches and is kept (no_stop_trim,
    // include_stop_str_in_output), with no end-of-turn token after it.
    bool stopped_on_string = false;
    size_t cut = std::string::npos;
    for (const std::string& s : call.stop) {
      const size_t at = text.find(s);
      if (at != std::string::npos && (cut == std::string::npos || at + s.size() < cut)) cut = at + s.size();
    }
    if (cut != std::string::npos) {
      text.resize(cut);
      stopped_on_string = true;
    }
    std::vector<TokenId> output = tokenizer.encode(text);
    std::optional<TokenId> im_end = tokenizer.special_token("<|im_end|>");
    const auto stop_id = std::find_first_of(output.begin(), output.end(), call.stop_token_ids.begin(),
                                            call.stop_token_ids.end());
    if (stop_id != output.end() && !stopped_on_string) {
      output.erase(stop_id + 1, output.end());  // the scripted text went on past a stop token
      im_end = *stop_id;                        // (reported as the matched stop)
    } else if (im_end && !stopped_on_string) {
      output.push_back(*im_end);
    }
    std::string finish = "stop";
    if (static_cast<int64_t>(output.size()) > call.max_new_tokens) {
      output.resize(static_cast<size_t>(call.max_new_tokens));
      finish = "length";
    }
    if (sticky == "abort") finish = "abort";
    call.output = output;
    for (size_t i = 0; i < output.size(); ++i)
      call.logprobs.push_back(scripted_logprob(call.sampling_seed, i, output[i]));
    if (call.top_logprobs > 0) {
      for (size_t i = 0; i < output.size(); ++i)
        call.top.push_back(scripted_top(output[i], call.logprobs[i], call.top_logprobs));
    }
    call.finish_reason = finish;

    const std::string out_text = tokenizer.decode(output);
    uint64_t id = 0;
    {
      std::lock_guard lock(mutex);
      id = ++completions;
    }
    // The prompt's length the server ran (the "truncate" fault: without the prompt's first id, as a server
    // that cut the prompt from the left reports it).
    const size_t ran = call.prompt.size() - (sticky == "truncate" ? 1 : 0);
    if (sglang) {
      // SGLang's answer, or a stream's event: the tokens [from, to) (a stream's default event holds them
      // all so far, from 0; an incremental one only the new), finished or not (finish_reason null).
      const auto sglang_answer = [&](size_t from, size_t to, bool done) {
        json logprobs = json::array();
        for (size_t i = from; i < to; ++i)
          logprobs.push_back(json::array({call.logprobs[i], output[i], nullptr}));
        json tops = json::array();  // SGLang's output_top_logprobs: [[logprob, id, null], ...] per token
        for (size_t i = from; i < to && !call.top.empty(); ++i) {
          json list = json::array();
          for (const auto& [alternative, value] : call.top[i])
            list.push_back(json::array({value, alternative, nullptr}));
          tops.push_back(list);
        }
        json reason = {{"type", finish}};
        if (finish == "stop" && im_end && !stopped_on_string) reason["matched"] = *im_end;
        if (finish == "length") reason["length"] = output.size();
        if (finish == "abort") reason["message"] = "aborted on purpose";
        const std::span<const TokenId> ids(output.data() + from, to - from);
        json out = {{"text", tokenizer.decode(ids)},
                    {"output_ids", ids},
                    {"meta_info",
                     {{"id", call.rid.empty() ? std::to_string(id) : call.rid},
                      {"finish_reason", done ? reason : json(nullptr)},
                      {"prompt_tokens", ran},
                      {"completion_tokens", to},
                      {"cached_tokens", call.prompt.size() / 2},  // a prefix cache hit to report (metrics)
                      {"output_token_logprobs", logprobs},
                      {"e2e_latency", 0.0},
                      {"weight_version", "default"}}}};
        if (call.top_logprobs > 0) out["meta_info"]["output_top_logprobs"] = tops;  // asked only
        return out.dump(-1, ' ', false, json::error_handler_t::replace);
      };
      if (request.value("stream", false)) {
        // SGLang's stream: an event per token (stream_interval 1), then [DONE]; no tokens: one event.
        answer.streamed = true;
        const bool incremental = options.incremental_stream;
        for (size_t n = output.empty() ? 0 : 1; n <= output.size(); ++n) {
          if (sticky == "stream_error" && n == (output.size() + 1) / 2 + 1) {
            answer.events.push_back(R"(data: {"error": {"message": "the scheduler failed on purpose"}})"
                                    "\n\n");
            break;
          }
          answer.events.push_back(
              "data: " + sglang_answer(incremental && n > 0 ? n - 1 : 0, n, n == output.size()) + "\n\n");
        }
        answer.events.push_back("data: [DONE]\n\n");
        if (sticky == "stream_cut") answer.cut_after = (output.size() + 1) / 2;
      } else {
        answer.body = sglang_answer(0, output.size(), true);
        answer.delay_s += options.stream_event_delay_s * static_cast<double>(output.size());
      }
    } else {
      json tokens = json::array(), top = json::array(), offsets = json::array();
      size_t offset = 0;
      for (size_t i = 0; i < output.size(); ++i) {
        const std::string piece = tokenizer.decode(std::span<const TokenId>(&output[i], 1));
        tokens.push_back(piece);
        // vLLM's {text: logprob} of the k most likely (the sampled token among them here).
        json alternatives = json::object();
        for (const auto& [alternative, value] : call.top[i])
          alternatives[tokenizer.decode(std::span<const TokenId>(&alternative, 1))] = value;
        top.push_back(alternatives);
        offsets.push_back(offset);
        offset += piece.size();
      }
      using ordered = nlohmann::ordered_json;
      if (request.value("stream", false)) {
        // vLLM's stream: a chunk per token (its text, log-prob entry and id; the prompt's ids on the first,
        // with return_token_ids), finish_reason null until the last; with stream_options.include_usage a
        // chunk without choices gives the usage; then [DONE].
        answer.streamed = true;
        const std::string model = request.value("model", std::string("scripted"));
        const auto chunk = [&](ordered choices, const json& usage) {
          return "data: " +
                 ordered{{"id", "cmpl-" + std::to_string(id)},
                         {"object", "text_completion"},
                         {"created", 0},
                         {"model", model},
                         {"choices", std::move(choices)},
                         {"usage", usage}}
                     .dump(-1, ' ', false, json::error_handler_t::replace) +
                 "\n\n";
        };
        for (size_t i = 0; i < output.size(); ++i) {
          if (sticky == "stream_error" && i == (output.size() + 1) / 2) {
            answer.events.push_back(
                R"(data: {"error": {"object": "error", "message": "the engine failed on purpose", )"
                R"("type": "InternalServerError", "code": 500}})"
                "\n\n");
            break;
          }
          const bool last = i + 1 == output.size();
          ordered choice = {{"index", 0},
                            {"text", tokens[i]},
                            {"logprobs",
                             {{"text_offset", {offsets[i]}},
                              {"token_logprobs", {call.logprobs[i]}},
                              {"tokens", {tokens[i]}},
                              {"top_logprobs", {top[i]}}}},
                            {"finish_reason", last ? json(finish) : json(nullptr)},
                            {"stop_reason", json(nullptr)},
                            {"token_ids", {output[i]}}};
          if (i == 0) {
            json ran_ids = json::array();
            for (auto at = call.prompt.end() - static_cast<std::ptrdiff_t>(ran); at != call.prompt.end();
                 ++at)
              ran_ids.push_back(*at);
            choice["prompt_token_ids"] = ran_ids;
          }
          answer.events.push_back(chunk(ordered::array({choice}), nullptr));
        }
        const json stream_options = request.value("stream_options", json::object());
        if (stream_options.is_object() && stream_options.value("include_usage", false))
          answer.events.push_back(chunk(ordered::array(), {{"prompt_tokens", ran},
                                                           {"total_tokens", ran + output.size()},
                                                           {"completion_tokens", output.size()},
                                                           {"prompt_tokens_details", nullptr}}));
        answer.events.push_back("data: [DONE]\n\n");
        if (sticky == "stream_cut") answer.cut_after = (output.size() + 1) / 2;
        if (options.log_calls) {
          std::lock_guard lock(mutex);
          log.push_back(std::move(call));
        }
        return answer;
      }
      // vLLM's fields in its order (protocol.py's CompletionResponseChoice and CompletionResponse);
      // return_token_ids answers the prompt's ids too (vLLM 0.10.2 on), the prompt it ran: with the
      // "truncate" fault, without its first id (as truncate_prompt_tokens cuts a prompt from the left).
      ordered choice = {
          {"index", 0},
          {"text", out_text},
          {"logprobs",
           {{"text_offset", offsets},
            {"token_logprobs", call.logprobs},
            {"tokens", tokens},
            {"top_logprobs", top}}},
          {"finish_reason", finish},
          {"stop_reason", finish == "stop" && im_end && !stopped_on_string ? json(*im_end) : json(nullptr)},
          {"token_ids", output},
          {"prompt_logprobs", nullptr},
          {"prompt_token_ids", kPromptIdsMark}};
      answer.body = ordered{
          {"id", "cmpl-" + std::to_string(id)},
          {"object", "text_completion"},
          {"created", 0},
          {"model", request.value("model", std::string("scripted"))},
          {"choices", ordered::array({choice})},
          {"service_tier", nullptr},
          {"system_fingerprint", nullptr},
          {"usage",
           {{"prompt_tokens", ran},
            {"total_tokens", ran + output.size()},
            {"completion_tokens", output.size()},
            {"prompt_tokens_details", nullptr}}},
          {"kv_transfer_params",
           nullptr}}.dump(-1, ' ', false, json::error_handler_t::replace);
      // The prompt's ids written into the mark's place by hand, compact as vLLM writes them: as a DOM, the
      // 8,000 ids of an 8k-token prompt were most of the stand-in's CPU per answer, CPU the gateway's
      // benchmarks share two cores with.
      const std::string mark = json(kPromptIdsMark).dump();
      const size_t at = answer.body.find(mark);
      std::string ids;
      ids.reserve(8 * ran + 2);
      ids += '[';
      char digits[16];
      for (auto id = call.prompt.end() - static_cast<std::ptrdiff_t>(ran); id != call.prompt.end(); ++id) {
        if (ids.size() > 1) ids += ',';
        ids.append(digits, std::to_chars(digits, digits + sizeof digits, *id).ptr);
      }
      ids += ']';
      answer.body.replace(at, mark.size(), ids);
      answer.delay_s += options.stream_event_delay_s * static_cast<double>(output.size());
    }
    if (options.log_calls) {
      std::lock_guard lock(mutex);
      log.push_back(std::move(call));
    }
    return answer;
  }

  // FaultOptions::hold_until_in_flight: waits (at most hold_s) until that many requests are in at once.
  asio::awaitable<void> hold() {
    const int until = options.faults.hold_until_in_flight;
    if (until <= 0 || held_released) co_return;
    if (in_flight >= static_cast<uint64_t>(until)) {
      held_released = true;
      for (asio::steady_timer* timer : holding) timer->cancel();
      holding.clear();
      co_return;
    }
    asio::steady_timer timer(io, std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                     std::chrono::duration<double>(options.faults.hold_s)));
    holding.push_back(&timer);
    error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    std::erase(holding, &timer);
  }

  // A streamed answer: the head (chunked, text/event-stream), then each event as a chunk, the events
  // stream_event_delay_s apart. False when the connection is gone or was cut on purpose.
  asio::awaitable<bool> write_stream(beast::tcp_stream& stream, const Answer& answer, bool keep_alive) {
    http::response<http::empty_body> head{http::status::ok, 11};
    head.set(http::field::content_type, "text/event-stream");
    head.set(http::field::server, "crl-scripted-llm");
    head.keep_alive(keep_alive);
    head.chunked(true);
    http::response_serializer<http::empty_body> serializer(head);
    error_code ec;
    co_await http::async_write_header(stream, serializer, asio::redirect_error(asio::use_awaitable, ec));
    for (size_t i = 0; i < answer.events.size() && !ec; ++i) {
      if (i == answer.cut_after) {
        --in_flight;
        stream.socket().shutdown(tcp::socket::shutdown_both, ec);
        stream.close();
        co_return false;
      }
      if (i > 0 && options.stream_event_delay_s > 0) {
        asio::steady_timer timer(io, std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                         std::chrono::duration<double>(options.stream_event_delay_s)));
        co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
      co_await asio::async_write(stream, http::make_chunk(asio::buffer(answer.events[i])),
                                 asio::redirect_error(asio::use_awaitable, ec));
    }
    if (!ec)
      co_await asio::async_write(stream, http::make_chunk_last(),
                                 asio::redirect_error(asio::use_awaitable, ec));
    if (ec) --in_flight;
    co_return !ec;
  }

  asio::awaitable<void> session(tcp::socket socket) {
    beast::tcp_stream stream(std::move(socket));
    // Beast reads as much as the buffer has room for (at least 512 bytes): an empty buffer read the ~40 KB
    // body of an 8k-token prompt 512 bytes and one epoll wait at a time (74 of each per call, most of the
    // stand-in's CPU per call). 64 KiB of room reads it as a real server does (uvicorn reads 64 KiB).
    beast::flat_buffer buffer;
    buffer.reserve(64 * 1024);
    while (true) {
      http::request<http::string_body> request;
      error_code ec;
      co_await http::async_read(stream, buffer, request, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      ++owner->attempts_;
      ++in_flight;  // every coroutine runs on the one io thread: plain counters
      owner->peak_in_flight_ = std::max<uint64_t>(owner->peak_in_flight_, in_flight);
      Answer answer =
          handle(std::string(request.target()), request.body(), std::string(request["X-SMG-Routing-Key"]));
      co_await hold();
      if (answer.delay_s > 0) {
        asio::steady_timer timer(io, std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                         std::chrono::duration<double>(answer.delay_s)));
        co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
      if (answer.drop) {
        --in_flight;
        stream.socket().shutdown(tcp::socket::shutdown_both, ec);
        stream.close();
        co_return;
      }
      if (answer.streamed) {
        if (!co_await write_stream(stream, answer, request.keep_alive())) co_return;
        --in_flight;
        if (!request.keep_alive()) co_return;
        continue;
      }
      http::response<http::string_body> response{static_cast<http::status>(answer.status), 11};
      response.set(http::field::content_type, "application/json");
      response.set(http::field::server, "crl-scripted-llm");
      response.keep_alive(request.keep_alive());
      response.body() = std::move(answer.body);
      response.prepare_payload();
      co_await http::async_write(stream, response, asio::redirect_error(asio::use_awaitable, ec));
      --in_flight;
      if (ec || !request.keep_alive()) co_return;
    }
  }

  asio::awaitable<void> accept_loop() {
    while (true) {
      error_code ec;
      tcp::socket socket = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      ++owner->connections_;
      socket.set_option(tcp::no_delay(true), ec);
      asio::co_spawn(io, session(std::move(socket)), asio::detached);
    }
  }
};

ScriptedLlmServer::ScriptedLlmServer(ScriptedLlmOptions options) : impl_(std::make_shared<Impl>()) {
  if (!options.tokenizer) options.tokenizer = std::make_shared<ByteTokenizer>();
  impl_->options = std::move(options);
  impl_->owner = this;
  const tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"), impl_->options.port);
  impl_->acceptor.open(endpoint.protocol());
  impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  impl_->acceptor.bind(endpoint);
  impl_->acceptor.listen(asio::socket_base::max_listen_connections);
  port_ = impl_->acceptor.local_endpoint().port();
  asio::co_spawn(impl_->io, impl_->accept_loop(), asio::detached);
  thread_ = std::thread([impl = impl_] { impl->io.run(); });
}

ScriptedLlmServer::~ScriptedLlmServer() {
  impl_->io.stop();
  if (thread_.joinable()) thread_.join();
}

std::vector<LoggedCall> ScriptedLlmServer::calls() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->log;
}

void ScriptedLlmServer::clear_log() {
  std::lock_guard lock(impl_->mutex);
  impl_->log.clear();
  impl_->seen.clear();
}

}  // namespace crl::testing
