// How a gateway session's calls find their conversation (gateway_session.h, "Locking" and the threads):
// the thread a call belongs to, taken for the call and waited for when another call has it, and the kept
// body (kept_request.h) its request is decoded against. The calls' work on a thread's window is
// gateway_session.cpp's.
#include <algorithm>

#include "server/gateway/gateway_error.h"
#include "server/gateway/gateway_session.h"
#include "server/gateway/stream_keepalive.h"

namespace crl::server::gateway {

uint64_t GatewaySession::tools_key_of(const ChatTurn& turn) {
  return turn.tools_key ? *turn.tools_key : tools_key(turn.tools);
}

// The thread a call has taken (take()), given back when the call ends, with `mutex` held.
class GatewaySession::Use {
 public:
  explicit Use(Thread& t) : t_(t) {}
  Use(const Use&) = delete;
  Use& operator=(const Use&) = delete;
  ~Use() {
    t_.in_call = false;
    t_.busy.unlock();
  }

 private:
  Thread& t_;
};

bool GatewaySession::take(Thread& t) {
  // (try_lock fails without in_call only while a waiter holds it for an instant: wait_unlocked)
  if (t.in_call || !t.busy.try_lock()) return false;
  t.in_call = true;
  return true;
}

void GatewaySession::wait_unlocked(FiberMutex& other, StreamKeepalive* keepalive) {
  const ScopedUnlock unlocked(mutex);
  if (keepalive != nullptr)
    other.lock(*keepalive);
  else
    other.lock();
  other.unlock();
}

bool GatewaySession::started() const {
  return std::any_of(threads_.begin(), threads_.end(), [](const auto& t) { return t->episode != nullptr; });
}

bool GatewaySession::busy() const {
  return std::any_of(threads_.begin(), threads_.end(), [](const auto& t) { return t->in_call; });
}

Completion GatewaySession::complete(const ChatTurn& turn) {
  check_open(true);
  if (turn.prompt->empty())
    throw bad_request("empty_prompt", "prompt is empty: give the text so far", "prompt");
  // A plain completions session has one thread: a call waits for the one in flight.
  for (;;) {
    const std::shared_ptr<Thread> t = threads_.front();
    if (take(*t)) {
      const Use use(*t);
      return complete_on(*t, turn);
    }
    wait_unlocked(t->busy, turn.keepalive);
    check_open(true);
  }
}

KeptRequest& GatewaySession::kept_request_for(std::string_view body) {
  // The most recently used body of the same conversation (the last one, for a one-conversation harness);
  // a body lent to a call in flight is that call's.
  size_t best = kept_.size();
  for (size_t i = kept_.size(); i-- > 0;) {
    if (!kept_[i]->lent() && kept_[i]->same_conversation(body)) {
      best = i;
      break;
    }
  }
  if (best == kept_.size()) {  // another conversation: an unused body, or the least recently used one
    for (size_t i = 0; i < kept_.size() && best == kept_.size(); ++i) {
      if (!kept_[i]->lent() && kept_[i]->elements() == 0) best = i;
    }
    for (size_t i = 0; i < kept_.size() && best == kept_.size() && kept_.size() >= kKeptBodies; ++i) {
      if (!kept_[i]->lent()) best = i;
    }
    if (best == kept_.size()) kept_.push_back(std::make_unique<KeptRequest>());
  }
  std::rotate(kept_.begin() + static_cast<ptrdiff_t>(best), kept_.begin() + static_cast<ptrdiff_t>(best) + 1,
              kept_.end());
  return *kept_.back();
}

void GatewaySession::return_kept(KeptRequest& kept, ChatTurn& turn) {
  kept.give_back(turn);
  if (ended_) {  // a call after the reward keeps nothing
    clear_kept();
    response_chain_.clear();
    return;
  }
  // More than kKeptBodies were lent at once: the least recently used ones that are back go.
  for (size_t i = 0; i < kept_.size() && kept_.size() > kKeptBodies;) {
    if (kept_[i]->lent())
      ++i;
    else
      kept_.erase(kept_.begin() + static_cast<ptrdiff_t>(i));
  }
}

void GatewaySession::clear_kept() {
  std::erase_if(kept_, [](const std::unique_ptr<KeptRequest>& kept) { return !kept->lent(); });
}

std::string GatewaySession::thread_suffix(const Thread& t) {
  return t.index > 0 ? "/t" + std::to_string(t.index) : "";
}

GatewaySession::Selected GatewaySession::select_thread(const ChatTurn& turn,
                                                       const std::vector<uint64_t>& keys) {
  const auto chosen = [&](std::shared_ptr<Thread> t, bool extends) {
    t->last_call = ++selections_;
    last_ = t;
    return Selected{std::move(t), extends};
  };
  const uint64_t tools = tools_key_of(turn);
  // (A thread without a window, its first call refused, is continued by nothing: it holds no messages.)
  const auto continued = [&](const Thread& t) {
    return t.episode && t.tools_key == tools && keys.size() >= t.known.size() &&
           std::equal(t.known.begin(), t.known.end(), keys.begin());
  };
  if (continued(*last_)) return chosen(last_, true);  // every call of a one-conversation harness
  const std::shared_ptr<Thread>* best = nullptr;
  for (const std::shared_ptr<Thread>& t : threads_) {
    if (continued(*t) && (!best || t->known.size() > (*best)->known.size())) best = &t;
  }
  if (best) return chosen(*best, true);
  // An edit of a thread: the call keeps its first two messages (or its one), as a harness that rewrites
  // its history keeps its system prompt and task; another conversation differs in one of them (a
  // sub-agent's system prompt, or its task under the same one).
  const auto shared = [&](const Thread& t) {
    const size_t lead = std::min<size_t>(2, t.known.size());
    return lead > 0 && keys.size() >= lead &&
           std::equal(t.known.begin(), t.known.begin() + lead, keys.begin());
  };
  if (shared(*last_)) return chosen(last_, false);
  for (const std::shared_ptr<Thread>& t : threads_) {
    if (shared(*t)) return chosen(t, false);
  }
  // A new conversation: a new thread (one without a window and no call, its first call refused, is reused);
  // past kMaxThreads the least recently used one's part is closed (its held answer recorded as its last
  // turn).
  for (const std::shared_ptr<Thread>& t : threads_) {
    if (!t->episode && !t->in_call) return chosen(t, false);
  }
  threads_.push_back(std::make_shared<Thread>());
  threads_.back()->index = started_threads_++;
  Selected out = chosen(threads_.back(), false);
  if (threads_.size() > kMaxThreads) {
    // The one with the fewest messages, the least recently used of those: one-call conversations (a
    // harness's side calls) go before a long one that waits (a main agent while its sub-agent works),
    // whose history may no longer fit a new window. A thread with a call in flight stays.
    size_t retired = threads_.size();
    for (size_t i = 0; i + 1 < threads_.size(); ++i) {
      const Thread& a = *threads_[i];
      if (a.in_call) continue;
      if (retired == threads_.size() ||
          std::pair(a.known.size(), a.last_call) <
              std::pair(threads_[retired]->known.size(), threads_[retired]->last_call))
        retired = i;
    }
    if (retired < threads_.size())
      retire(retired, "more threads than the session keeps (" + std::to_string(kMaxThreads) + ")");
  }
  return out;
}

void GatewaySession::retire(size_t i, const std::string& why) {
  if (threads_[i]->episode) close_part(*threads_[i], why);
  threads_.erase(threads_.begin() + static_cast<ptrdiff_t>(i));
}

Completion GatewaySession::chat(const ChatTurn& turn) {
  if (turn.prompt) return complete(turn);
  check_open(false);
  if (turn.messages.empty())
    throw bad_request("empty_messages", "messages is empty: give at least one", "messages");
  std::vector<uint64_t> keys = turn.keys;
  if (keys.size() != turn.messages.size()) {
    keys.resize(turn.messages.size());
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = message_key(turn.messages[i]);
  }
  // A thread another call has (a retry behind its first try, a call that edits a busy thread) is waited
  // for, and the call selected again: that call may have changed what this one continues.
  for (;;) {
    const Selected selected = select_thread(turn, keys);
    Thread& t = *selected.thread;
    if (take(t)) {
      const Use use(t);
      return chat_on(t, turn, std::move(keys), selected.extends);
    }
    wait_unlocked(t.busy, turn.keepalive);
    check_open(false);
  }
}

}  // namespace crl::server::gateway
