#pragma once
// What an LLM server says it serves, asked once before a command relies on it: `GET /v1/models`, as vLLM
// and SGLang answer it ({"object":"list","data":[{"id":NAME,"max_model_len":N,"parent":null|BASE,...}]};
// vLLM lists LoRA adapters as further entries with a `parent`).
//
// Why ask: a window whose capacity is more than the model's context fails at the server only once a
// conversation grows past that context, which may be hours into a training run (and the failure then reads
// as the harness's, a 400 "maximum context length"); a misspelled `--llm-model` fails every call. `crl serve
// --llm` and `crl rollout --llm` ask at start and refuse both there, naming the option to change. A server
// that does not answer (not up yet, or no such route) is a warning only: the calls are what must work, and
// they report their own failures; `--wait-for-llm S` waits for it instead, and fails the command when it has
// not come up in S seconds.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace crl::llm {

struct ServedModel {
  std::string id;
  int64_t max_model_len = 0;  // 0: the entry does not say it (or says something that is not a count)
  bool adapter = false;       // a LoRA adapter of another entry (vLLM's `parent`)
};

struct ServedModels {
  std::string url;  // the route asked, for messages
  std::vector<ServedModel> models;
  std::string error;  // set when no list came back (unreachable, an error status, a body not a model list)
  bool answered = false;  // the server answered, whatever it said (not: refused, timed out, or 5xx only)
};

// Reads the body of a `GET /v1/models` answer. Entries without a string `id` are skipped; a body that is
// not a JSON object with a `data` array is an error (ServedModels::error).
ServedModels read_served_models(std::string_view body);

// Asks `base_url` (http://HOST:PORT[/PREFIX]) for GET /v1/models. With `wait_s` 0 it tries once (a few
// seconds' deadline); otherwise it tries again each second, while the server refuses connections or answers
// 5xx, until `wait_s` has passed. Throws crl::Error only for a URL that is not one (parse_base_url).
ServedModels ask_served_models(const std::string& base_url, double wait_s, const std::string& where);

// A command's `--wait-for-llm S` over ask_served_models (`url_option` names the URL's option): 0 asks once
// (a server that does not answer is the caller's warning); S > 0 waits up to S seconds for the server to
// answer, and a server that has not answered by then (connections refused, timed out, or 5xx only) is a
// crl::Error naming `wait_option`, as a launch script that waits for a service expects a failure when it
// never comes up. S outside [0, 86400] is a crl::Error naming `wait_option`.
ServedModels wait_for_served_models(const std::string& base_url, double wait_s, const std::string& url_option,
                                    const std::string& wait_option);

// What a command checks against the list (option names as the user typed them, for the messages).
struct ServedModelCheck {
  std::string model;            // the model the calls name ("" : none named, the server's own)
  std::string model_option;     // e.g. "--llm-model"
  int64_t capacity = 0;         // the most tokens a call's prompt plus its answer may take
  std::string capacity_option;  // e.g. "--capacity"
};

struct ServedModelFit {
  std::string line;           // what was checked, or why nothing could be (for stderr)
  int64_t max_model_len = 0;  // the model's context (0: not known)
  bool checked() const { return max_model_len > 0; }
};
// Throws crl::Error naming the option when the server does not serve `model`, or when the model's context
// is less than `capacity`.
ServedModelFit check_served_model(const ServedModels& served, const ServedModelCheck& check);

}  // namespace crl::llm
