#pragma once
// One gateway session: a harness's growing message list mapped onto a compacted window (PROTOCOL.md
// section 5), on the engine's Episode (harness_env.h says how).
//
// Mapping. The session keeps the key of every harness message its window holds (chat_messages.h
// message_key) and the answer it gave last. A call whose messages are
//  * the known ones, then the harness's copy of our last answer, then new messages: the answer is submitted
//    with the new messages as its observation (environment tokens, never trainable); the episode then checks
//    the trigger on the request to be sent and, when it fires, the summary request (window + instruction)
//    goes to the same upstream, its segment is recorded (fully trainable) and the window is rebuilt
//    (system + resume(summary) + newest k atomic steps, k = tail_k -> 0; copied tokens never trainable);
//    then the execution request is forwarded;
//  * exactly the known ones while an answer is held: a retry, answered with the stored answer (nothing is
//    sampled twice);
//  * exactly the known ones with no answer held (the last upstream call failed): the pending request is
//    sent again;
//  * anything else (a harness that rewrote or dropped earlier messages, changed its tools): the current
//    window is closed (its held answer kept) and a new execution segment starts from the messages as given,
//    counted in the export's metadata (history_edits); never an error.
// Plain completions (ChatTurn::prompt) map the same way on text: the prompt is the whole text so far; a
// prompt that is the last one plus our answer's text plus a suffix submits the answer with the suffix
// (ordinary text, environment tokens) as its observation; the same prompt again is a retry; anything else
// is a history edit. Such a session's window has no chat turns (completion_codec: no headers; the summary
// instruction and resume preface are written as plain text), and one session speaks one of the two APIs.
// Stop strings (ChatTurn::stop) go upstream; the recorded ids are the upstream's, the matched string
// included, and the text answered to the harness ends before it (Completion::stop_sequence names it).
// Everything forwarded is the episode's own request: the prompt ids sent upstream are the ids the export's
// segments hold, and the recorded response ids and log-probs are the upstream's, never re-tokenized.
//
// Locking (session_threads.cpp: which thread a call goes to, how it is taken and waited for). The gateway
// holds `mutex` around every call; a call releases it while it waits for the upstream (call_upstream) and
// holds only its thread's (Thread::busy) then, so that calls of different threads (a harness's parallel
// sub-agents) reach the upstream together. A call whose thread is busy (a retry that comes while its first
// try is in flight) waits for it without `mutex`, then selects again; the reward waits for every thread's
// call to end. Order: a response chain's line (response_chain.h), then a thread, then `mutex` briefly; a call
// never waits for a thread or a line while it holds `mutex`.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/budget.h"
#include "engine/trajectory.h"
#include "envs/episode.h"
#include "server/fiber_mutex.h"
#include "server/gateway/chat_messages.h"
#include "server/gateway/chat_turn.h"
#include "server/gateway/harness_env.h"
#include "server/gateway/kept_request.h"
#include "server/gateway/message_render.h"
#include "server/gateway/prompt_ids_text.h"
#include "server/gateway/reasoning_format.h"
#include "server/gateway/response_chain.h"
#include "server/gateway/template_variants.h"
#include "server/gateway/tool_call_format.h"
#include "server/gateway/upstream.h"
#include "server/metrics.h"

namespace crl::server::gateway {

// What every session of a gateway shares.
struct GatewayShared {
  // The chat template's renderer and codec as each session renders: base() with the server's variables, one
  // per distinct chat_template_kwargs that sessions started with (template_variants.h).
  std::unique_ptr<TemplateVariants> templates;
  std::shared_ptr<const Codec> completion_codec;  // make_harness_codec over a template with no turn text
  ToolCallFormat tool_format = ToolCallFormat::kHermes;       // how answers' tool calls are read
  ReasoningFormat reasoning_format = ReasoningFormat::kNone;  // how their thinking is kept out of the content
  std::unique_ptr<Upstream> upstream;
  ServerMetrics* metrics = nullptr;  // may be null (tests)
  std::string model = "crl-gateway";
};

struct SessionConfig {
  Budget budget;
  uint64_t seed = 0;
  int64_t group_index = 0, sample_index = 0;
  std::string rollout_id;  // default: the session id
  llm::SamplingParams sampling;
  std::map<std::string, std::string> metadata;  // copied into every exported segment
};

struct Completion {
  std::string id;  // chatcmpl-...
  int64_t created = 0;
  AssistantReply reply;
  std::string finish_reason;  // stop | length | tool_calls
  std::string stop_sequence;  // the stop string the sampled text ended with (cut from reply.content)
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  // Every sampled id and its log-prob, as the upstream sent them and the export records them (an
  // end-of-turn token and a matched stop string's tokens included).
  std::vector<TokenId> ids;
  std::vector<float> logprobs;
  std::vector<std::vector<llm::TopLogprob>> top;  // the alternatives per id, when the turn asked
  // The forwarded prompt's ids as JSON text ("[1,2,3]": the window the policy saw), only when the turn asked
  // (ChatTurn::prompt_ids): a copy of the context's size.
  std::string prompt_ids;
};

// The part of a completion's id after its "chatcmpl-" / "cmpl-": what the other APIs' ids ("msg_...",
// "resp_...") are made of.
inline std::string_view id_suffix(const Completion& c) {
  return std::string_view(c.id).substr(c.id.find('-') + 1);
}
// Whether an Anthropic or Responses answer shows a text part: it has text, or nothing else.
inline bool has_text_part(const Completion& c) {
  return !c.reply.content.empty() || c.reply.tool_calls.empty();
}

class GatewaySession {
 public:
  // `variant`: the template as the session renders it (its first call's chat_template_kwargs, or those of
  // POST /v1/sessions). `variant_fixed`: false for a session POST /v1/sessions made without kwargs, whose
  // first chat call may still set them (set_variant).
  GatewaySession(std::string id, const GatewayShared& shared, SessionConfig config,
                 std::shared_ptr<const TemplateVariant> variant, bool variant_fixed = true);
  const TemplateVariant& variant() const { return *variant_; }
  // Whether the session's first call may still set its template variables: none were given and no window
  // was rendered yet.
  bool variant_open() const { return !variant_fixed_ && !started(); }
  // Whether a chat or completion call has started a window (a refused first call does not).
  bool started() const;
  // Whether a call is in flight on one of the session's threads (under `mutex`: the reaper keeps the
  // session).
  bool busy() const;
  void set_variant(std::shared_ptr<const TemplateVariant> variant) {
    variant_ = std::move(variant);
    variant_fixed_ = true;
  }

  // Called with `mutex` held, which it releases while it waits (see Locking above). Throws GatewayError
  // (OpenAI-shaped) for bad input, an ended session or an upstream failure; a failure leaves everything
  // recorded as it was.
  Completion chat(const ChatTurn& turn);
  // Ends the rollout (`status`: completed | truncated | aborted | failed) once no call is in flight (with
  // `mutex` held, released while it waits); the held answers are recorded.
  void reward(double reward, const std::string& status);
  // Waits for `other` (a busy thread's lock, a lent response line's) without `mutex`, which is held again
  // when it returns; a streamed call's keep-alive beats meanwhile.
  void wait_unlocked(FiberMutex& other, StreamKeepalive* keepalive);
  bool ended() const { return ended_; }
  // The finished rollout (after reward()).
  const Trajectory& trajectory() const { return *trajectory_; }
  nlohmann::json state() const;
  const std::string& id() const { return id_; }
  // The session's kept bodies (kept_request.h): its conversations' last bodies, decoded, at most
  // kKeptBodies (the least recently used one is reused past that); dropped when the rollout ends.
  // kept_request_for() picks the one of `body`'s conversation (KeptRequest::same_conversation: its first two
  // elements' bytes, as the session's threads are told apart), else an unused one or the least recently
  // used (which `body` then replaces); never one lent to a call in flight (one more is made when all are).
  // The call gives it back with return_kept(); the reference stays valid until then.
  static constexpr size_t kKeptBodies = 4;
  KeptRequest& kept_request_for(std::string_view body);
  void return_kept(KeptRequest& kept, ChatTurn& turn);
  size_t kept_bodies() const { return kept_.size(); }
  // The Responses API's conversation as of the session's newest response (previous_response_id).
  ResponseChain& response_chain() { return response_chain_; }

  // A fiber-aware lock (server/fiber_mutex.h): a call holds it across its upstream waits, on a fiber.
  FiberMutex mutex;
  // Set (under `mutex`) when the idle reaper removed the session, or its refused first call did (the
  // gateway's forget_unstarted): a call that still holds it answers 404.
  bool reaped = false;
  // Steady-clock nanoseconds of the last call's end, read by the reaper without `mutex`.
  std::atomic<int64_t> last_used_ns{0};
  void touch();
  double idle_seconds() const;

 private:
  struct Held {
    Decision decision;
    // What the harness will copy back: reply_key (OpenAI chat, plain, and Responses, whose message and
    // function_call items decode to one assistant message) and anthropic_reply_key (Anthropic messages, whose
    // tool_use input is always an object); the same unless a call's arguments are not one.
    uint64_t key = 0, anthropic_key = 0;
    Completion completion;
  };
  struct Thread;
  // The decoder's key of the turn's tools when it computed one (kept_request.h), else computed here.
  static uint64_t tools_key_of(const ChatTurn& turn);
  // Throws for an ended session or one that speaks the other API; then fixes the session's API.
  void check_open(bool plain);
  const std::shared_ptr<const Codec>& codec(const Thread& t) const {
    return plain_.value_or(false)      ? shared_.completion_codec
           : t.system_opened_user_turn ? variant_->codec_after_opened_turn
                                       : variant_->codec;
  }
  void start_part(Thread& t, const ChatTurn& turn, std::vector<uint64_t> keys);
  void start_text_part(Thread& t, const std::string& prompt);
  Completion complete(const ChatTurn& turn);
  // A chat call on the thread select_thread chose (`extends`: its return), taken for the call.
  Completion chat_on(Thread& t, const ChatTurn& turn, std::vector<uint64_t> keys, bool extends);
  Completion complete_on(Thread& t, const ChatTurn& turn);
  // `opens_turn`: `rest` opens the first assistant turn (FirstPrompt::opens_turn).
  void make_episode(Thread& t, std::vector<TokenId> system, std::vector<TokenId> rest,
                    bool opens_turn = false);
  // Ends the thread's current part (the held answer submitted as its last turn) and keeps its trajectory.
  void close_part(Thread& t, const std::string& why);
  Completion drive(Thread& t, const ChatTurn& turn);
  // The harness's reply out of an answer's text: a plain completion's text as sampled, else
  // read_sampled_reply (sampled_reply.h) with the turn's tool_choice and the model's formats.
  AssistantReply read_answer(std::string& text, const ChatTurn& turn, const std::string& id_prefix) const;
  // Forwards the request; `mutex` is released while the upstream answers.
  UpstreamResult call_upstream(Thread& t, const Request& request, const ChatTurn& turn,
                               int64_t max_new_tokens);
  [[noreturn]] void fail_call(const UpstreamResult& result);
  // The held answer again, for a harness's retry (with the prompt's ids when the turn asks).
  Completion stored_answer(Thread& t, const ChatTurn& turn);
  // The JSON text of the ids of the prompt the held answer was sampled from.
  std::string waiting_prompt_ids(Thread& t);
  [[noreturn]] void throw_done(const Thread& t) const;

  std::string id_;
  const GatewayShared& shared_;
  std::shared_ptr<const TemplateVariant> variant_;
  bool variant_fixed_ = true;
  SessionConfig config_;
  std::optional<bool> plain_;  // which API the session speaks (set by its first call)
  std::string known_text_;     // plain completions: the last prompt
  // A Jinja template's conversation once the part's window was rebuilt: what the window holds, as messages
  // (the leading system message, the resume turn as a user message, then the harness's messages from the
  // oldest kept step's answer on), so that a call renders the window's conversation and not the harness's
  // whole history: the cost of a call is bounded by the window, whatever the history's length (gpt-oss's
  // template is quadratic in its tool calls), and the window's text is the template's text for it.
  struct WindowConversation {
    std::vector<Message> messages;
    size_t lead = 0;  // messages before the harness's kept ones: the system message (if any) and the resume
    size_t from = 0;  // the harness's index of messages[lead]
  };
  // One conversation of the session: a message list that calls extend, and its compacted window. A harness
  // may run several through one session (Claude Code's sub-agents and its side calls, each with its own
  // system prompt and task, interleaved with the main agent's calls): each is a thread with its own window,
  // so that switching between them is neither a history edit nor a render of a whole history
  // (select_thread). Every thread's parts are the session's segments, under its one reward.
  struct Thread {
    // Held by the call that uses the thread, from its selection to its answer, upstream waits included;
    // `in_call` says so under `mutex` (set after the lock is taken, cleared before it is released).
    FiberMutex busy;
    bool in_call = false;
    std::unique_ptr<Episode> episode;
    HarnessEnv* env = nullptr;  // owned by episode
    std::vector<uint64_t> known;
    // The current part's system part opened the first user turn (TemplateRenderer::first): its rebuilds'
    // resume turn continues it (Gemma with a system message).
    bool system_opened_user_turn = false;
    uint64_t tools_key = 0;
    int64_t render_now = 0;       // strftime_now() of a Jinja template: the time the window started
    ConvertedMessages converted;  // a Jinja template's values of the rendered messages, kept between calls
    std::optional<WindowConversation> window;
    std::vector<size_t> step_answers;  // the harness's index of each step's answer in the window, this part
    std::optional<Held> held;
    PromptIdsText ids_text;   // the last forwarded prompt's id text (only new ids are written)
    uint64_t generation = 0;  // set by make_episode: ids_text never outlives its arena
    int index = 0;            // the session's threads in the order of their first calls
    uint64_t last_call =
        0;  // the session's selections at its last (the least recently used is retired first)
  };
  // Past it, a thread's part is closed: the one with the fewest messages, the least recently used of those
  // (never one with a call in flight).
  static constexpr size_t kMaxThreads = 16;
  struct Selected {
    std::shared_ptr<Thread> thread;
    bool extends = false;  // the call extends the thread's messages (with its tools)
  };
  // The thread that `turn` (with message keys `keys`) belongs to, made the latest (last_): the one whose
  // messages it extends (the latest call's thread first, then the one with the most messages); else the one
  // it shares at least its first two messages with (or its one message), which it edits; else a new thread.
  Selected select_thread(const ChatTurn& turn, const std::vector<uint64_t>& keys);
  // Takes `t` for a call (false when another call has it); the Use gives it back.
  static bool take(Thread& t);
  class Use;
  // Closes the part of threads_[i] and drops the thread.
  void retire(size_t i, const std::string& why);
  // "" for the first thread, "/tN" for the others (in the upstream's rid and the episode's task id).
  static std::string thread_suffix(const Thread& t);
  std::vector<std::shared_ptr<Thread>> threads_ = {std::make_shared<Thread>()};  // thread 0 first
  std::shared_ptr<Thread> last_ = threads_.front();                              // the latest call's
  int started_threads_ = 1;  // threads started (thread 0 is the session's first)
  uint64_t selections_ = 0;
  uint64_t generations_ = 0;  // episodes made (each thread's generation is unique)
  // After a summary was submitted: t.window for the rebuilt window (a Jinja template's session).
  void note_rebuild(Thread& t, const ChatTurn& turn, const std::string& summary_text);
  std::vector<Trajectory> parts_;
  std::vector<int> part_threads_;  // the thread of each part
  std::optional<Trajectory> trajectory_;
  bool ended_ = false;
  int history_edits_ = 0;
  uint64_t calls_ = 0, retries_ = 0, failures_ = 0;
  std::string last_failure_;
  std::vector<int64_t> cached_tokens_;              // per successful upstream call, in order
  std::vector<std::unique_ptr<KeptRequest>> kept_;  // the least recently used first
  void clear_kept();                                // (those lent stay until they are returned)
  ResponseChain response_chain_;
};

}  // namespace crl::server::gateway
