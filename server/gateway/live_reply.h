#pragma once
// What of an answer still being sampled can already be shown to a harness, as the upstream streams it
// (live_answer.h): the text the whole answer's reading (sampled_reply.h) will certainly begin its reasoning
// and its content with, whatever is sampled next.
//
// The harness joins a stream's deltas into the message it copies back into its history, and the session
// recognises that copy by its text (gateway_session.h). So a delta is sent only when the finished answer
// must start with it: the reasoning and the content shown live are always prefixes of the reply that
// read_sampled_reply gives for the whole text, and the rest follows when the answer is whole. What is held
// back until more text decides it:
//  * the bytes of a character not yet whole (the repair of ill-formed UTF-8, engine/utf8.h, sees them whole);
//  * a tail that may be the start of a stop string (the text ends before a matched one) or of "</think>";
//  * blanks (' ', '\n') at the end (the reasoning and content lose them when they end there);
//  * in the content, everything from where a tool call may begin: "<tool_call>" (hermes, qwen3_coder), the
//    calls block (deepseek_v3), or, for the formats whose whole answer is the calls (llama3_json,
//    pythonic), the whole answer when its first character may open one ('{', '[', '<');
//  * an answer that does not open "<think>" where thinking is read (a template that opened it in the
//    prompt): all reasoning if "</think>" comes, else all content, so nothing shows until "</think>";
//  * content that starts with a blank where tool calls are read (a reply with calls loses those blanks, one
//    without keeps them): nothing more is shown live.
// Harmony answers (their channels are read whole) and answers under a forced tool_choice (an array of
// calls) are never shown live; a plain completion's text is shown as sampled, less the two first holds.
#include <string>
#include <string_view>
#include <vector>

#include "server/gateway/reasoning_format.h"
#include "server/gateway/tool_call_format.h"
#include "server/gateway/tool_choice.h"

namespace crl::server::gateway {

struct LiveRules {
  ToolCallFormat tool_format = ToolCallFormat::kHermes;
  ReasoningFormat reasoning = ReasoningFormat::kNone;
  ToolChoice choice;
  bool plain = false;             // a plain completion: the text as sampled
  std::vector<std::string> stop;  // the call's stop strings
};

class LiveReply {
 public:
  explicit LiveReply(LiveRules rules);
  // The next sampled bytes (the decoded ids, in order; any UTF-8). Appends to `reasoning` and `content`
  // what can now be shown of each (the reasoning's before the content's: content shows only once the
  // reasoning is whole).
  void add(std::string_view bytes, std::string& reasoning, std::string& content);
  // What has been shown so far.
  const std::string& reasoning() const { return shown_reasoning_; }
  const std::string& content() const { return shown_content_; }

 private:
  enum class Phase {
    kStart,      // nothing decided yet
    kUnopened,   // thinking read, the answer did not open "<think>": wait for "</think>"
    kReasoning,  // inside "<think>"
    kContent,    // the content, from content_at_
    kText,       // the content is the text as it is (llama3_json, pythonic: an answer that opens no call)
    kOff,        // nothing more is shown live
  };
  // The text that is certain not to be cut by a stop string (text_ less a tail that may start one).
  std::string_view settled() const;
  void show_reasoning(std::string_view reasoning, std::string& out);
  void show_content(std::string_view text, std::string& out);

  LiveRules rules_;
  std::string pending_;  // bytes of a character not yet whole
  std::string text_;     // the answer so far, valid UTF-8
  Phase phase_ = Phase::kStart;
  size_t content_at_ = 0;  // where the content starts in text_ (kContent)
  // Where the next search for "</think>" (in the settled text, which only grows) and for a tool call's marker
  // (in the content) starts: each event's text is searched once, not the whole answer again.
  size_t close_from_ = 0, marker_from_ = 0;
  bool content_trimmed_ = false;  // the reply's content loses blanks at its start (after "</think>")
  std::string shown_reasoning_, shown_content_;
};

}  // namespace crl::server::gateway
