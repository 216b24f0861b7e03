#include "policies/llm/streamed_answer.h"

#include <algorithm>
#include <optional>

#include "engine/json_view.h"

namespace crl::llm {

namespace {
// The message of an error event ({"error": {"message": M}} or {"error": M}), if `data` is one.
std::optional<std::string> error_message(std::string_view data) {
  try {
    const JsonDocument document = JsonDocument::parse(data, "the event");
    const JsonView root = document.root();
    const JsonView error = root.is_object() ? root.find("error") : JsonView();
    if (!error.exists()) return std::nullopt;
    if (error.is_string()) return std::string(error.string());
    if (const JsonView message = error.find("message"); message.is_string())
      return std::string(message.string());
    return std::string("(no message)");
  } catch (const JsonError&) {
    return std::nullopt;
  }
}
}  // namespace

bool StreamedAnswer::refuse(std::string why) {
  error_ = std::move(why);
  answer_.ok = false;
  return false;
}

bool StreamedAnswer::add(std::string_view data) {
  if (!error_.empty()) return false;
  GenerateResult event = parse_response(kind_, data, vocab_size_, top_logprobs_, sent_, true);
  if (kind_ == ApiKind::kOpenAi && event.ok && event.ids.empty() && event.finish_reason.empty()) {
    // (the usage chunk, after the last: its counts; or a chunk with nothing new)
    if (event.prompt_tokens > 0) answer_.prompt_tokens = event.prompt_tokens;
    if (event.completion_tokens > 0) answer_.completion_tokens = event.completion_tokens;
    if (event.cached_tokens > 0) answer_.cached_tokens = event.cached_tokens;
    ++events_;
    return true;
  }
  if (finished()) return refuse("an event came after the one that finished the answer");
  if (!event.ok) {
    if (const auto message = error_message(data))
      return refuse("the stream ended with an error: " + *message);
    return refuse("event " + std::to_string(events_) + ": " + event.error);
  }
  ++events_;
  const size_t have = answer_.ids.size(), sent = event.ids.size();
  const auto total = static_cast<size_t>(std::max<int64_t>(0, event.completion_tokens));
  size_t from = 0;                               // the first id of the event that is new
  if (sent == 0 || kind_ == ApiKind::kOpenAi) {  // (OpenAI chunks hold the new tokens only)
    from = 0;
  } else if (sent == total && sent >= have) {
    if (!std::equal(answer_.ids.begin(), answer_.ids.end(), event.ids.begin()))
      return refuse("event " + std::to_string(events_) + " repeats the answer so far with other ids");
    from = have;
  } else if (have + sent == total) {
    from = 0;
  } else {
    return refuse("event " + std::to_string(events_) + " has " + std::to_string(sent) +
                  " ids where meta_info.completion_tokens is " + std::to_string(total) + " and " +
                  std::to_string(have) + " were read before");
  }
  answer_.ids.insert(answer_.ids.end(), event.ids.begin() + from, event.ids.end());
  answer_.logprobs.insert(answer_.logprobs.end(), event.logprobs.begin() + from, event.logprobs.end());
  if (top_logprobs_ > 0)
    answer_.top.insert(answer_.top.end(), std::make_move_iterator(event.top.begin() + from),
                       std::make_move_iterator(event.top.end()));
  answer_.finish_reason = std::move(event.finish_reason);
  if (kind_ == ApiKind::kSglang) {  // (each SGLang event counts everything so far)
    answer_.prompt_tokens = event.prompt_tokens;
    answer_.completion_tokens = event.completion_tokens;
    answer_.cached_tokens = event.cached_tokens;
    answer_.weight_version = std::move(event.weight_version);
  }
  answer_.ok = finished();
  return true;
}

}  // namespace crl::llm
