#pragma once
// What a harness is answered from an execution call's sampled text: the reasoning split off
// (reasoning_format.h), then the tool calls read out of the content in the model's format
// (tool_call_format.h), as the call's tool_choice says (tool_choice.h). gpt-oss's harmony answers are read
// whole: their channels say what is reasoning. Shared by the session (gateway_session.cpp) and the model
// reply fuzz target (tests/fuzz/model_reply_fuzz.cpp), which checks that every API's copy of the answer
// is recognised as it.
#include <nlohmann/json.hpp>
#include <string>

#include "server/gateway/chat_messages.h"
#include "server/gateway/reasoning_format.h"
#include "server/gateway/tool_call_format.h"
#include "server/gateway/tool_choice.h"

namespace crl::server::gateway {

// `text` is valid UTF-8 (the session repairs it first); it may be moved from. Tool call ids are
// "call_<id_prefix>_<i>"; `tools` is the request's list (null when none).
AssistantReply read_sampled_reply(std::string& text, ToolCallFormat tool_format, ReasoningFormat reasoning,
                                  const ToolChoice& choice, const nlohmann::ordered_json& tools,
                                  const std::string& id_prefix);

}  // namespace crl::server::gateway
