// The LLM driver end to end: synthetic episodes in the text view played by the scripted model behind a real
// HTTP server on loopback, over both APIs. Checks the exported ids and log-probs against what the server
// sent, the prompts the server received against the engine's contexts, compaction and masks, failures that
// are recorded rather than fatal, clamping, cancellation and determinism.
#include "policies/llm/llm_driver.h"

#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "engine/tokenizer.h"
#include "engine/trajectory_io.h"
#include "envs/registry.h"
#include "tests/policies/llm/scripted_llm_server.h"

namespace crl::llm {
namespace {

using testing::LoggedCall;
using testing::ScriptedLlmOptions;
using testing::ScriptedLlmServer;
using testing::SummaryMode;

// A byte-tokenizer budget for the synthetic text view where a summary request always fits C - summary_cap
// without truncating observations (the scripted summaries are short), so a keeping summary loses nothing.
Budget text_budget() {
  Budget b;
  b.capacity = 3072;
  b.reserve = 1024;
  b.summary_cap = 256;
  return b;
}

struct SentRequest {
  uint64_t seed = 0;
  Role role = Role::kExecute;
  int64_t max_new_tokens = 0;
  std::vector<TokenId> prompt;
};

struct RolloutRun {
  std::vector<Trajectory> trajectories;
  DriveStats stats;
  std::vector<std::vector<SentRequest>> sent;  // per episode, in order: what the engine asked
};

LlmOptions llm_options(const ScriptedLlmServer& server, ApiKind api, size_t in_flight) {
  LlmOptions o;
  o.api = api;
  o.base_url = server.url();
  o.max_in_flight = in_flight;
  o.request_timeout_s = 20;
  o.backoff_s = 0.001;
  o.vocab_size = ByteTokenizer().vocab_size();
  o.sampling.stop_token_ids = {*ByteTokenizer().special_token("<|im_end|>")};
  return o;
}

RolloutRun run_synthetic(LlmDriver& driver, size_t episodes, uint64_t seed, Budget budget = text_budget(),
                         size_t first_task = 0) {
  const auto prototype = make_env("synthetic", {{"split", "dev"}});
  const auto codec = make_codec("text", prototype->spec());
  std::vector<std::unique_ptr<Episode>> owned;
  std::vector<Episode*> pointers;
  for (size_t i = 0; i < episodes; ++i) {
    EpisodeConfig config;
    config.budget = budget;
    config.seed = seed;
    config.sample_index = 0;
    owned.push_back(std::make_unique<Episode>(make_env("synthetic", {{"split", "dev"}}), codec, config));
    const size_t task = first_task + i;
    owned.back()->start(Task{"dev-" + std::to_string(task), task, "dev"});
    pointers.push_back(owned.back().get());
  }
  RolloutRun run;
  run.sent.resize(episodes);
  driver.before_request = [&](size_t index, const Episode& e) {
    const Request& r = e.request();
    run.sent[index].push_back(SentRequest{sampling_seed(r.stream), r.role, r.max_new_tokens, r.prompt.ids()});
  };
  run.stats = driver.run(pointers);
  for (auto& e : owned) {
    EXPECT_TRUE(e->done());
    run.trajectories.push_back(e->finish());
  }
  return run;
}

// The runs of consecutive sampled tokens of a trajectory, in order (one per policy call).
std::vector<std::pair<std::vector<TokenId>, std::vector<float>>> sampled_runs(const Trajectory& t) {
  std::vector<std::pair<std::vector<TokenId>, std::vector<float>>> runs;
  for (const Segment& s : t.segments) {
    bool open = false;
    for (size_t i = 0; i < s.response_ids.size(); ++i) {
      if (s.response_provenance[i] != Provenance::kSampled) {
        open = false;
        continue;
      }
      if (!open) runs.emplace_back();
      open = true;
      runs.back().first.push_back(s.response_ids[i]);
      runs.back().second.push_back(s.logprobs[i]);
    }
  }
  return runs;
}

std::map<uint64_t, LoggedCall> by_seed(const std::vector<LoggedCall>& calls) {
  std::map<uint64_t, LoggedCall> out;
  for (const LoggedCall& c : calls) out[c.sampling_seed] = c;
  return out;
}

class LlmDriverApis : public ::testing::TestWithParam<ApiKind> {};

TEST_P(LlmDriverApis, RecordsExactlyWhatTheServerSentAndSendsTheEngineContext) {
  ScriptedLlmServer server;
  LlmDriver driver(llm_options(server, GetParam(), 8));
  const RolloutRun run = run_synthetic(driver, 6, 7);
  const auto calls = by_seed(server.calls());
  size_t compactions = 0, calls_seen = 0;
  for (size_t e = 0; e < run.trajectories.size(); ++e) {
    const Trajectory& t = run.trajectories[e];
    EXPECT_EQ(t.status, EpisodeStatus::kCompleted) << t.reason;
    EXPECT_EQ(t.reward, 1.0) << t.task_id;  // the keeping summaries carry every fact the answer needs
    compactions += static_cast<size_t>(t.compactions);
    const auto runs = sampled_runs(t);
    ASSERT_EQ(runs.size(), run.sent[e].size());
    for (size_t i = 0; i < runs.size(); ++i) {
      const SentRequest& sent = run.sent[e][i];
      ASSERT_EQ(calls.count(sent.seed), 1u);
      const LoggedCall& call = calls.at(sent.seed);
      ++calls_seen;
      EXPECT_EQ(call.prompt, sent.prompt) << "the server got a prompt other than the engine's context";
      EXPECT_EQ(call.max_new_tokens, sent.max_new_tokens);
      EXPECT_EQ(runs[i].first, call.output) << "exported ids differ from the server's";
      EXPECT_EQ(runs[i].second, call.logprobs) << "exported log-probs differ from the server's";
    }
  }
  EXPECT_EQ(calls_seen, server.calls().size());
  EXPECT_GT(compactions, 0u) << "the budget must force compactions";
}

TEST_P(LlmDriverApis, CompactedTrajectoriesFollowTheMaskSpec) {
  ScriptedLlmServer server;
  LlmDriver driver(llm_options(server, GetParam(), 4));
  const RolloutRun run = run_synthetic(driver, 3, 11);
  bool saw_resume = false;
  for (const Trajectory& t : run.trajectories) {
    ASSERT_GT(t.compactions, 0);
    EXPECT_NO_THROW(t.validate());
    for (const Segment& s : t.segments) {
      for (size_t i = 0; i < s.response_ids.size(); ++i) {
        const bool sampled = s.response_provenance[i] == Provenance::kSampled;
        EXPECT_EQ(s.actor_mask[i], sampled ? 1 : 0);
        EXPECT_EQ(s.critic_mask[i], sampled ? 1 : 0);
        if (!sampled) {
          EXPECT_EQ(s.logprobs[i], 0.0f);
        }
      }
      if (s.kind == SegmentKind::kSummary) {
        EXPECT_EQ(s.n_sampled, static_cast<int64_t>(s.response_ids.size()));  // a summary is all sampled
        EXPECT_NE(s.text.find("facts="), std::string::npos);
      } else if (s.compaction_index > 0) {
        // A rebuilt window: the copied summary and tail are in the prompt, never in the trained response.
        const bool has_summary = std::count(s.prompt_provenance.begin(), s.prompt_provenance.end(),
                                            Provenance::kCopiedSummary) > 0;
        EXPECT_TRUE(has_summary);
        saw_resume = true;
      }
    }
  }
  EXPECT_TRUE(saw_resume);
}

INSTANTIATE_TEST_SUITE_P(Apis, LlmDriverApis, ::testing::Values(ApiKind::kSglang, ApiKind::kOpenAi),
                         [](const auto& info) { return std::string(api_kind_name(info.param)); });

TEST(LlmDriver, SummariesThatDropFactsLoseTheAnswer) {
  ScriptedLlmOptions options;
  options.summary = SummaryMode::kDrop;
  ScriptedLlmServer server(options);
  LlmDriver driver(llm_options(server, ApiKind::kSglang, 8));
  const RolloutRun run = run_synthetic(driver, 3, 7);
  // early_fact (task 0): the FACT is record 1, gone once a summary dropped it.
  ASSERT_GT(run.trajectories[0].compactions, 0);
  EXPECT_EQ(run.trajectories[0].reward, 0.0);
  EXPECT_EQ(run.trajectories[0].status, EpisodeStatus::kCompleted);
}

TEST(LlmDriver, SameSeedGivesIdenticalExportsWhateverTheConcurrency) {
  ScriptedLlmOptions options;
  options.summary = SummaryMode::kSeeded;  // outcomes depend on the request seeds
  options.faults.transient_5xx = 1;        // and every request is retried once
  ScriptedLlmServer server(options);
  LlmDriver one(llm_options(server, ApiKind::kSglang, 1));
  const RolloutRun a = run_synthetic(one, 6, 17);
  server.clear_log();
  LlmDriver many(llm_options(server, ApiKind::kSglang, 16));
  const RolloutRun b = run_synthetic(many, 6, 17);
  EXPECT_EQ(to_jsonl(a.trajectories), to_jsonl(b.trajectories));
  server.clear_log();
  LlmDriver other(llm_options(server, ApiKind::kSglang, 16));
  const RolloutRun c = run_synthetic(other, 6, 18);
  EXPECT_NE(to_jsonl(a.trajectories), to_jsonl(c.trajectories));
}

TEST(LlmDriver, FailedRequestsFailTheirEpisodeOnly) {
  for (const std::string fault : {"malformed", "5xx", "drop", "400"}) {
    ScriptedLlmOptions options;
    options.faults.sticky_every = 40;  // about one request in 40: some episodes fail, others complete
    options.faults.sticky_fault = fault;
    ScriptedLlmServer server(options);
    LlmOptions llm = llm_options(server, ApiKind::kSglang, 8);
    llm.max_retries = 1;
    LlmDriver driver(llm);
    const RolloutRun run = run_synthetic(driver, 6, 7);
    int failed = 0, completed = 0;
    for (const Trajectory& t : run.trajectories) {
      if (t.status == EpisodeStatus::kFailed) {
        ++failed;
        EXPECT_NE(t.reason.find(fault == "malformed" ? "malformed" : "LLM request"), std::string::npos)
            << t.reason;
      } else {
        EXPECT_EQ(t.status, EpisodeStatus::kCompleted) << t.reason;
        ++completed;
      }
    }
    EXPECT_GT(failed, 0) << fault;
    EXPECT_GT(completed, 0) << fault;
    size_t failed_calls = 0;
    for (const CallRecord& c : run.stats.calls) failed_calls += c.ok ? 0 : 1;
    EXPECT_EQ(failed_calls, static_cast<size_t>(failed));
  }
}

TEST(LlmDriver, TimedOutRequestsFailTheirEpisode) {
  ScriptedLlmOptions options;
  options.faults.sticky_every = 40;
  options.faults.sticky_fault = "hang";
  options.faults.hang_s = 30;
  ScriptedLlmServer server(options);
  LlmOptions llm = llm_options(server, ApiKind::kOpenAi, 8);
  llm.request_timeout_s = 0.3;
  LlmDriver driver(llm);
  const RolloutRun run = run_synthetic(driver, 6, 7);
  int failed = 0;
  for (const Trajectory& t : run.trajectories) {
    if (t.status == EpisodeStatus::kFailed) {
      ++failed;
      EXPECT_NE(t.reason.find("timeout"), std::string::npos) << t.reason;
    } else {
      EXPECT_EQ(t.status, EpisodeStatus::kCompleted) << t.reason;
    }
  }
  EXPECT_GT(failed, 0);
  EXPECT_LT(failed, 6);
}

TEST(LlmDriver, AbortedGenerationsEndTheEpisodeAsAborted) {
  ScriptedLlmOptions options;
  options.faults.sticky_every = 1;
  options.faults.sticky_fault = "abort";
  ScriptedLlmServer server(options);
  LlmDriver driver(llm_options(server, ApiKind::kSglang, 4));
  const RolloutRun run = run_synthetic(driver, 2, 7);
  for (const Trajectory& t : run.trajectories) {
    EXPECT_EQ(t.status, EpisodeStatus::kAborted);
    ASSERT_FALSE(t.segments.empty());
    EXPECT_EQ(t.segments.back().finish_reason, "abort");
  }
}

TEST(LlmDriver, ClampsMaxNewTokensToTheBudget) {
  ScriptedLlmServer server;
  LlmDriver driver(llm_options(server, ApiKind::kSglang, 4));
  Budget budget = text_budget();
  budget.per_turn_cap = 4;  // "next" + <|im_end|> is 5 byte tokens: every turn is cut at 4
  const RolloutRun run = run_synthetic(driver, 2, 7, budget);
  for (const LoggedCall& call : server.calls()) {
    EXPECT_LE(call.max_new_tokens, 256);
    EXPECT_LE(static_cast<int64_t>(call.output.size()), call.max_new_tokens);
  }
  for (size_t e = 0; e < run.sent.size(); ++e) {
    for (const SentRequest& s : run.sent[e]) {
      if (s.role == Role::kExecute) {
        EXPECT_EQ(s.max_new_tokens, 4);
      }
    }
  }
  const Segment& first = run.trajectories[0].segments.front();
  EXPECT_EQ(first.finish_reason, "length");
}

TEST(LlmDriver, CancelStopsEveryEpisodeCleanly) {
  ScriptedLlmOptions options;
  options.faults.delay_s = 30;
  ScriptedLlmServer server(options);
  LlmDriver driver(llm_options(server, ApiKind::kSglang, 2));
  // Cancels once the server has received a request (so that requests are in flight), not after a guessed
  // delay; the 10 s bound only keeps a broken server from hanging the test.
  std::thread canceller([&] {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (server.attempts() == 0 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    driver.cancel();
  });
  const auto start = std::chrono::steady_clock::now();
  const RolloutRun run = run_synthetic(driver, 4, 7);
  canceller.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20.0);
  for (const Trajectory& t : run.trajectories) {
    EXPECT_EQ(t.status, EpisodeStatus::kFailed);
    EXPECT_NE(t.reason.find("cancelled"), std::string::npos) << t.reason;
  }
}

}  // namespace
}  // namespace crl::llm
