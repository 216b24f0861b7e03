// A harness that runs several conversations through one session (Claude Code's sub-agents and side calls,
// each with its own system prompt or task, interleaved with the main agent's calls): each conversation is
// a thread of the session with its own compacted window (gateway_session.h, select_thread), so switching
// between them is neither a history edit nor a render of a whole history; a call that keeps a thread's
// first two messages and changes a later one edits that thread; every thread's parts are the session's
// segments under its one reward, each named by `segment_threads`, token-exact against its upstream calls.
#include <fstream>
#include <map>

#include "engine/tokenizer.h"
#include "tests/server/gateway/gateway_fixture.h"
#include "tests/server/wait_helpers.h"
#include "tests/temp_dir.h"

namespace crl::server::gateway::testing {
namespace {

// The export's segments of one thread, and the upstream calls of that thread (rid <id>[/tN]/role/n).
json thread_export(const json& exported, int thread) {
  std::vector<std::string> threads;
  const std::string list = exported["segments"][0]["metadata"].value("segment_threads", "");
  for (size_t at = 0; at <= list.size() && !list.empty();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    threads.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  EXPECT_EQ(threads.size(), exported["segments"].size()) << list;
  json out = exported;
  out["segments"] = json::array();
  for (size_t i = 0; i < threads.size() && i < exported["segments"].size(); ++i) {
    if (threads[i] == std::to_string(thread)) out["segments"].push_back(exported["segments"][i]);
  }
  return out;
}

std::vector<crl::testing::LoggedCall> thread_calls(const Bench& bench, const std::string& id, int thread) {
  const std::string prefix = id + (thread > 0 ? "/t" + std::to_string(thread) : "") + "/";
  std::vector<crl::testing::LoggedCall> out;
  for (const auto& call : bench.upstream->calls()) {
    if (call.rid.rfind(prefix, 0) != 0) continue;
    if (thread == 0 && call.rid.compare(id.size(), 2, "/t") == 0) continue;
    out.push_back(call);
  }
  return out;
}

// Every call of a thread after its first continues its window: its prompt extends the thread's last prompt
// and answer, or follows a summary (a rebuilt window). Returns the thread's summaries.
size_t expect_each_call_continues(const Bench& bench, const std::string& id, int thread) {
  const auto calls = thread_calls(bench, id, thread);
  size_t summaries = 0;
  for (size_t i = 1; i < calls.size(); ++i) {
    if (calls[i - 1].rid.find("/summarize/") != std::string::npos ||
        calls[i].rid.find("/summarize/") != std::string::npos) {
      summaries += calls[i].rid.find("/summarize/") != std::string::npos;
      continue;
    }
    std::vector<TokenId> before = calls[i - 1].prompt;
    before.insert(before.end(), calls[i - 1].output.begin(), calls[i - 1].output.end());
    EXPECT_TRUE(calls[i].prompt.size() > before.size() &&
                std::equal(before.begin(), before.end(), calls[i].prompt.begin()))
        << "thread " << thread << " call " << i;
  }
  return summaries;
}

TEST(GatewayThreads, InterleavedConversationsEachKeepTheirWindow) {
  Bench bench;
  // One session, three conversations: the main agent, a sub-agent (another system prompt) and a second
  // sub-agent of the same kind (the same system prompt, another task).
  Harness main(bench.port(), "multi", "m0");
  Harness sub(bench.port(), "multi", "s1");
  sub.messages[0]["content"] = "You are a sub-agent.";
  Harness twin(bench.port(), "multi", "s2");
  twin.messages[0]["content"] = "You are a sub-agent.";
  const std::string pad(60, 'y');
  for (int t = 0; t < 20; ++t) {
    for (Harness* h : {&main, &sub, &twin}) {
      if (t) h->add("user", "turn " + std::to_string(t) + " " + pad);
      const json answer = h->turn();
      // Before its first compaction, each conversation's window holds only its own messages: the answer
      // names its task's marker and counts its own turns.
      const std::string marker = h == &main ? "m0" : h == &sub ? "s1" : "s2";
      if (t < 4) {
        EXPECT_EQ(answer["choices"][0]["message"]["content"], "ack " + marker + " " + std::to_string(t))
            << answer;
      }
    }
  }
  json state = main.state();
  EXPECT_EQ(state["history_edits"], 0) << state;
  EXPECT_EQ(state["threads"], 3) << state;
  EXPECT_EQ(state["thread"], 2) << "the last call was the twin's";
  // Every call after a thread's first continued its own window: its prompt extends the thread's last one
  // (or is a rebuilt window after a compaction's summary).
  for (int thread = 0; thread < 3; ++thread) {
    EXPECT_GE(expect_each_call_continues(bench, "multi", thread), 1u)
        << "thread " << thread << " compacted its own window";
  }
  // A retry of a parked thread's last call: its stored answer, nothing sampled.
  const size_t before = bench.upstream->calls().size();
  json retry = main.messages;
  retry.erase(retry.end() - 1);
  const auto again = main.post({{"model", "test"}, {"messages", retry}});
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(json::parse(again.body)["choices"][0]["message"], main.messages.back());
  EXPECT_EQ(bench.upstream->calls().size(), before);

  // A fourth conversation, edited after its first two messages: a new part of that thread, not a thread.
  Harness editor(bench.port(), "multi", "e3");
  editor.messages[0]["content"] = "You are an editor.";
  editor.turn();
  editor.add("user", "second");
  editor.turn();
  editor.messages[3]["content"] = "an edited turn";
  editor.add("user", "after the edit");
  editor.turn();
  state = main.state();
  EXPECT_EQ(state["history_edits"], 1) << state;
  EXPECT_EQ(state["threads"], 4) << state;
  main.add("user", "back to the main agent");
  main.turn();
  EXPECT_EQ(main.state()["thread"], 0);

  ASSERT_EQ(main.reward(1).status, 200);
  const json exported = main.export_json();
  EXPECT_EQ(thread_export(exported, 3)["segments"].size(), 2u) << "the editor's two parts";
  for (int thread = 0; thread < 4; ++thread) {
    SCOPED_TRACE("thread " + std::to_string(thread));
    const json own = thread_export(exported, thread);
    EXPECT_GE(own["segments"].size(), 2u);
    check_exact(own, thread_calls(bench, "multi", thread));
  }
  EXPECT_EQ(exported["segments"][0]["metadata"]["threads"], "4");
  for (int thread = 0; thread < 4; ++thread) {
    const json own = thread_export(exported, thread);
    for (const json& segment : own["segments"])
      EXPECT_EQ(segment["metadata"]["thread"], std::to_string(thread)) << "each segment names its thread";
  }
}

// Past kMaxThreads (16) conversations, a thread's part is closed (its answer recorded as its last turn) and
// the thread dropped: the one with the fewest messages, the least recently used of those; the session goes
// on, and every call is in the export.
TEST(GatewayThreads, TheLeastRecentlyUsedThreadIsClosedPastTheLimit) {
  Bench bench;
  std::vector<std::unique_ptr<Harness>> harnesses;
  for (int i = 0; i < 20; ++i) {
    harnesses.push_back(std::make_unique<Harness>(bench.port(), "many", "c" + std::to_string(i)));
    harnesses.back()->messages[0]["content"] = "You are side call " + std::to_string(i) + ".";
    harnesses.back()->turn();
  }
  json state = harnesses[0]->state();
  EXPECT_EQ(state["threads"], 20);
  EXPECT_EQ(state["history_edits"], 0);
  // The first conversation's thread was closed: its next call starts a new part (a new thread, as its
  // messages match no thread the session keeps).
  harnesses[0]->add("user", "again");
  harnesses[0]->turn();
  EXPECT_EQ(harnesses[0]->state()["threads"], 21);
  // The newest threads are still kept: their next calls continue them.
  harnesses[19]->add("user", "again");
  harnesses[19]->turn();
  EXPECT_EQ(harnesses[0]->state()["threads"], 21);
  ASSERT_EQ(harnesses[0]->reward(1).status, 200);
  const json exported = harnesses[0]->export_json();
  EXPECT_EQ(exported["segments"].size(), 21u) << "one part per thread, each a segment";
  size_t sampled = 0;
  for (const json& segment : exported["segments"])
    for (const json& m : segment["loss_mask"]) sampled += m.get<size_t>();
  size_t output = 0;
  for (const auto& call : bench.upstream->calls()) output += call.output.size();
  EXPECT_EQ(sampled, output) << "every sampled token is in the export";
}

// A new conversation whose first call the template refuses (400 template_error) leaves no thread behind:
// the main conversation's next call continues its own window (not a fresh one), and nothing is lost.
TEST(GatewayThreads, ARefusedFirstCallOfAConversationLeavesTheOthersAsTheyWere) {
  crl::test::TempDir dir;
  GatewayOptions options = strict_template_options(dir);
  Bench bench(llm::ApiKind::kSglang, {}, options);
  Harness main(bench.port(), "refused", "m0");
  main.turn();
  main.add("user", "second");
  main.turn();
  const auto refused = main.post(
      {{"model", "test"},
       {"messages",
        {{{"role", "system"}, {"content", "You are a sub-agent."}}, {{"role", "tool"}, {"content", "x"}}}}});
  EXPECT_EQ(refused.status, 400) << refused.body;
  main.add("user", "third");
  main.turn();
  const json state = main.state();
  EXPECT_EQ(state["thread"], 0) << state;
  EXPECT_EQ(state["history_edits"], 0) << state;
  const auto calls = bench.upstream->calls();
  ASSERT_EQ(calls.size(), 3u);
  std::vector<TokenId> before = calls[1].prompt;
  before.insert(before.end(), calls[1].output.begin(), calls[1].output.end());
  EXPECT_TRUE(std::equal(before.begin(), before.end(), calls[2].prompt.begin()))
      << "the third call continues the main window";
  ASSERT_EQ(main.reward(1).status, 200);
  EXPECT_EQ(check_exact(main.export_json(), calls), 3u);
}

// A long conversation that waits (a main agent while its sub-agent works) outlives any number of one-call
// conversations (the side calls a harness makes meanwhile): those are closed first.
TEST(GatewayThreads, ALongConversationOutlivesTheOneCallOnes) {
  Bench bench;
  Harness main(bench.port(), "waits", "m0");
  for (int t = 0; t < 6; ++t) {
    if (t) main.add("user", "step " + std::to_string(t));
    main.turn();
  }
  for (int i = 0; i < 40; ++i) {
    Harness side(bench.port(), "waits", "side" + std::to_string(i));
    side.messages[0]["content"] = "You classify commands.";
    side.turn();
  }
  main.add("user", "back");
  main.turn();
  const json state = main.state();
  EXPECT_EQ(state["thread"], 0) << "the main conversation's own thread went on: " << state;
  EXPECT_EQ(state["history_edits"], 0) << state;
  EXPECT_EQ(state["threads"], 41) << state;
}

// A harness's parallel sub-agents (Claude Code's Task tool runs several at once) call through one session
// at the same time: their calls reach the upstream together (a call waits for the upstream without the
// session's lock, holding only its thread), and each conversation still continues and compacts its own
// window, token-exact in the export. The upstream holds its answers until all four are in at once (each at
// most 5 s): first calls that waited for each other would leave it at one (and the agents stop there).
TEST(GatewayThreads, ParallelConversationsReachTheUpstreamTogether) {
  constexpr int kAgents = 4;
  crl::testing::FaultOptions faults;
  faults.hold_until_in_flight = kAgents;
  faults.hold_s = 5;
  Bench bench(llm::ApiKind::kSglang, faults);
  std::vector<std::unique_ptr<Harness>> agents;
  for (int a = 0; a < kAgents; ++a) {
    agents.push_back(std::make_unique<Harness>(bench.port(), "parallel", "p" + std::to_string(a)));
    agents.back()->messages[0]["content"] = "You are sub-agent " + std::to_string(a) + ".";
  }
  const std::string pad(60, 'y');
  std::vector<std::thread> threads;
  for (int a = 0; a < kAgents; ++a) {
    threads.emplace_back([&, a] {
      Harness& h = *agents[a];
      for (int t = 0; t < 16 && !::testing::Test::HasFailure(); ++t) {
        if (t) h.add("user", "turn " + std::to_string(t) + " " + pad);
        const json answer = h.turn();
        if (bench.upstream->peak_in_flight() < static_cast<uint64_t>(kAgents)) return;
        if (t < 4) {
          EXPECT_EQ(answer["choices"][0]["message"]["content"],
                    "ack p" + std::to_string(a) + " " + std::to_string(t))
              << answer;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(bench.upstream->peak_in_flight(), static_cast<uint64_t>(kAgents))
      << "the conversations' calls waited for each other";
  const json state = agents[0]->state();
  EXPECT_EQ(state["threads"], kAgents) << state;
  EXPECT_EQ(state["history_edits"], 0) << state;
  // Each thread's calls (its rid's), in order whatever the interleaving, continue its own window.
  for (int thread = 0; thread < kAgents; ++thread)
    EXPECT_GE(expect_each_call_continues(bench, "parallel", thread), 1u) << "thread " << thread;
  ASSERT_EQ(agents[0]->reward(1).status, 200);
  const json exported = agents[0]->export_json();
  for (int thread = 0; thread < kAgents; ++thread) {
    SCOPED_TRACE("thread " + std::to_string(thread));
    check_exact(thread_export(exported, thread), thread_calls(bench, "parallel", thread));
  }
}

// The reward waits for the calls in flight: their answers are recorded (each as its thread's last turn)
// and the harnesses get them.
TEST(GatewayThreads, TheRewardWaitsForTheCallsInFlight) {
  crl::testing::FaultOptions faults;
  faults.delay_s = 2.0;  // (the state is read meanwhile: a margin for a loaded machine)
  Bench bench(llm::ApiKind::kSglang, faults);
  Harness main(bench.port(), "ending", "m0");
  Harness sub(bench.port(), "ending", "s1");
  sub.messages[0]["content"] = "You are a sub-agent.";
  std::thread main_call([&] { main.turn(); });
  std::thread sub_call([&] { sub.turn(); });
  EXPECT_TRUE(server::testing::eventually([&] { return bench.upstream->attempts() >= 2; }));
  SessionClient trainer(bench.port(), "ending");  // (its own connection: the harnesses' are in use)
  const json during = trainer.state();            // (answered while both calls wait for the upstream)
  EXPECT_EQ(during["calls_in_flight"], 2) << during;
  const auto reward = trainer.reward(1);
  main_call.join();
  sub_call.join();
  ASSERT_EQ(reward.status, 200) << reward.body;
  EXPECT_EQ(main.last.status, 200) << main.last.body;
  EXPECT_EQ(sub.last.status, 200) << sub.last.body;
  const json exported = main.export_json();
  ASSERT_EQ(exported["segments"].size(), 2u) << exported.dump();
  for (int thread = 0; thread < 2; ++thread) {
    EXPECT_EQ(check_exact(thread_export(exported, thread), thread_calls(bench, "ending", thread)), 1u)
        << "thread " << thread;
  }
  const auto after = main.post({{"model", "test"}, {"messages", main.messages}});
  EXPECT_EQ(after.status, 409) << after.body;
}

}  // namespace
}  // namespace crl::server::gateway::testing
