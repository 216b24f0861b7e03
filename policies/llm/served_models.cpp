#include "policies/llm/served_models.h"

// clang-format off
#include <utility>  // first: Boost 1.74's asio/awaitable.hpp uses std::exchange without including it
// clang-format on
#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/error.h"
#include "policies/llm/http_client.h"

namespace crl::llm {

ServedModels read_served_models(std::string_view body) {
  ServedModels out;
  const nlohmann::json list = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!list.is_object() || !list.contains("data") || !list["data"].is_array()) {
    out.error = "the answer is not a model list (a JSON object with a `data` array)";
    return out;
  }
  for (const nlohmann::json& entry : list["data"]) {
    if (!entry.is_object() || !entry.contains("id") || !entry["id"].is_string()) continue;
    ServedModel model;
    model.id = entry["id"].get<std::string>();
    if (const auto length = entry.find("max_model_len");
        length != entry.end() && length->is_number_integer() && length->get<int64_t>() > 0) {
      model.max_model_len = length->get<int64_t>();
    }
    if (const auto parent = entry.find("parent"); parent != entry.end() && parent->is_string())
      model.adapter = true;
    out.models.push_back(std::move(model));
  }
  return out;
}

namespace {

// One GET on its own io_context: the commands ask before they start their own loops.
HttpResponse get_once(const Endpoint& endpoint, double timeout_s) {
  boost::asio::io_context io;
  HttpClientOptions options;
  options.endpoint = endpoint;
  options.max_in_flight = 1;
  options.request_timeout_s = timeout_s;
  options.max_retries = 0;
  options.max_response_bytes = 4u << 20;  // a model list; vLLM lists each LoRA adapter, still far below
  HttpClient client(io, options);
  HttpResponse response;
  boost::asio::co_spawn(
      io,
      [&]() -> boost::asio::awaitable<void> {
        // Named locals, not temporaries in the co_await expression (GCC 12: http_client.cpp post()).
        std::string path = "/v1/models";
        std::vector<std::pair<std::string, std::string>> headers;
        response = co_await client.get(std::move(path), std::move(headers));
      },
      boost::asio::detached);
  io.run();
  return response;
}

}  // namespace

ServedModels ask_served_models(const std::string& base_url, double wait_s, const std::string& where) {
  const Endpoint endpoint = parse_base_url(base_url, where);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point give_up =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_s));
  constexpr double kTryTimeoutS = 5.0;
  while (true) {
    const HttpResponse response = get_once(endpoint, kTryTimeoutS);
    // A connection refused or a 5xx is a server not up yet: worth another try while waiting. Any other
    // answer is the server's last word.
    const bool not_up = response.outcome == HttpOutcome::kConnectionError ||
                        response.outcome == HttpOutcome::kTimeout || response.status >= 500;
    if (!not_up || Clock::now() + std::chrono::seconds(1) >= give_up) {
      ServedModels out;
      if (response.outcome == HttpOutcome::kOk) {
        out = read_served_models(response.body);
      } else {
        out.error = response.status != 0 ? "HTTP " + std::to_string(response.status) : response.error;
        // An OpenAI client's base URL habit: the calls' paths already begin with /v1.
        if (response.status == 404 && endpoint.base_path.ends_with("/v1")) {
          out.error +=
              "; the URL ends in /v1, and the calls add /v1/... themselves: give the server's root, http://" +
              endpoint.host + ":" + std::to_string(endpoint.port) +
              endpoint.base_path.substr(0, endpoint.base_path.size() - 3);
        }
      }
      out.url = base_url + "/v1/models";
      out.answered = !not_up;
      return out;
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

ServedModels wait_for_served_models(const std::string& base_url, double wait_s, const std::string& url_option,
                                    const std::string& wait_option) {
  if (!(wait_s >= 0 && wait_s <= 86400)) {
    throw Error("option " + wait_option, "",
                "value " + quote(wait_s) + " is not between 0 and 86400 seconds");
  }
  ServedModels served = ask_served_models(base_url, wait_s, "option " + url_option);
  if (wait_s > 0 && !served.answered) {
    throw Error("option " + wait_option, "",
                "value " + quote(wait_s) + ": the LLM server at " + base_url + " did not answer GET " +
                    served.url + " in that time (last: " + served.error +
                    "); start it first, or wait longer");
  }
  return served;
}

ServedModelFit check_served_model(const ServedModels& served, const ServedModelCheck& check) {
  const std::string asked = "GET " + served.url;
  if (!served.error.empty()) {
    return {"warning: could not list the LLM server's models (" + asked + ": " + served.error + "); " +
            check.capacity_option + (check.model.empty() ? "" : " and " + check.model_option) +
            " not checked against the server"};
  }
  const ServedModel* model = nullptr;
  if (!check.model.empty()) {
    const auto named = std::find_if(served.models.begin(), served.models.end(),
                                    [&](const ServedModel& entry) { return entry.id == check.model; });
    if (named == served.models.end()) {
      std::string listed;
      for (const ServedModel& entry : served.models) listed += (listed.empty() ? "" : ", ") + quote(entry.id);
      throw Error("option " + check.model_option, "",
                  "value " + quote(check.model) + " is not a model the LLM server serves (" + asked +
                      " lists " + (listed.empty() ? "none" : listed) + ")");
    }
    model = &*named;
  } else {
    // The calls name no model: the server answers with its base model (an adapter only when named).
    const auto base = std::find_if(served.models.begin(), served.models.end(),
                                   [](const ServedModel& entry) { return !entry.adapter; });
    if (base != served.models.end()) model = &*base;
  }
  if (model == nullptr)
    return {"warning: " + asked + " lists no model; " + check.capacity_option + " not checked"};
  if (model->max_model_len == 0) {
    return {"the LLM server serves " + quote(model->id) + " and does not say its context length (no " +
            "max_model_len in " + asked + "); " + check.capacity_option + " " +
            std::to_string(check.capacity) + " not checked against it"};
  }
  if (model->max_model_len < check.capacity) {
    throw Error(
        "option " + check.capacity_option, "",
        "value " + std::to_string(check.capacity) + " is more than the context of " + quote(model->id) +
            " (max_model_len " + std::to_string(model->max_model_len) + " from " + asked +
            "): a window that grew past " + std::to_string(model->max_model_len) +
            " tokens would fail at the server; lower " + check.capacity_option +
            " or serve the model with a longer context (vLLM --max-model-len, SGLang --context-length)");
  }
  return {"the LLM server serves " + quote(model->id) + " with a context of " +
              std::to_string(model->max_model_len) + " tokens; " + check.capacity_option + " " +
              std::to_string(check.capacity) + " fits",
          model->max_model_len};
}

}  // namespace crl::llm
