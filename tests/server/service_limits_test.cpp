// What a client may not choose (issue 14 items 3-6), without sockets: episode ids are random 128-bit, not
// sequential; server-only environment parameters (host paths, host processes, sandbox isolation) are
// refused per request and set by the operator; client timeouts are bounded by the server's limit; a task
// index past its split or an unknown task id is a 400 naming the split and its size, never another task
// under a new id; a budget that cannot reach its first compaction is a 400 with the smallest capacity that
// works, and each environment's default budget runs its text view with compactions.
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "engine/error.h"
#include "envs/registry.h"
#include "envs/synthetic/synthetic_env.h"
#include "server/episode_service.h"
#include "server/session_table.h"
#include "tests/server/expect_api_error.h"
#include "tests/temp_dir.h"
#include "wire/api_error.h"

namespace crl::server {

using namespace wire;
namespace {

using testing::expect_error;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

proto::CreateEpisodeRequest synthetic(const std::string& split, uint32_t index) {
  proto::CreateEpisodeRequest r;
  r.set_env("synthetic");
  r.set_split(split);
  r.set_index(index);
  return r;
}

proto::CreateEpisodeRequest by_id(const std::string& env, const std::string& task_id) {
  proto::CreateEpisodeRequest r;
  r.set_env(env);
  r.set_task_id(task_id);
  return r;
}

proto::StepRequest action(uint32_t turn, const std::string& kind, const std::string& text) {
  proto::StepRequest r;
  r.set_turn_id(turn);
  r.mutable_action()->set_kind(kind);
  r.mutable_action()->set_text(text);
  return r;
}

// Item 4: ids were "ep-<8 hex per server>-000001", "-000002", ...: the next one was known to anybody.
TEST(ServiceLimits, EpisodeIdsAreRandom128BitAndDoNotShapeTrajectories) {
  const std::regex form("ep-[0-9a-f]{32}");
  std::set<std::string> seen;
  for (int i = 0; i < 2000; ++i) {
    const std::string id = random_episode_id();
    ASSERT_TRUE(std::regex_match(id, form)) << id;
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 2000u);
  // Through the service: two servers, the same request -> different ids, identical episodes.
  EpisodeService a({}), b({});
  proto::CreateEpisodeRequest r = by_id("memory_chain", "chain-1");
  const proto::StepResponse ra1 = a.create(r), ra2 = a.create(r), rb = b.create(r);
  EXPECT_TRUE(std::regex_match(ra1.episode_id(), form)) << ra1.episode_id();
  EXPECT_NE(ra1.episode_id(), ra2.episode_id());
  EXPECT_NE(ra1.episode_id(), rb.episode_id());
  EXPECT_EQ(ra1.state_hash(), rb.state_hash());
  EXPECT_EQ(ra1.prompt_ids_size(), rb.prompt_ids_size());
  const proto::StepResponse sa = a.step(ra1.episode_id(), action(0, "assistant", "continue"));
  const proto::StepResponse sb = b.step(rb.episode_id(), action(0, "assistant", "continue"));
  EXPECT_EQ(sa.state_hash(), sb.state_hash());
  // A guess at the "next" id finds nothing.
  expect_error([&] { a.remove("ep-" + std::string(32, '0')); }, 404, "unknown_episode");
}

// Item 4: every parameter an environment declares server_only is refused in a request, whichever env.
TEST(ServiceLimits, ServerOnlyParametersAreRefusedPerRequest) {
  EpisodeService service({});
  int refused = 0;
  for (const std::string& name : env_registry().names()) {
    for (const ParamSpec& p : env_registry().entry(name).params) {
      if (!p.server_only) continue;
      proto::CreateEpisodeRequest r = by_id(name, "t0");
      (*r.mutable_params())[p.name] = p.default_value;  // even the default: the client may not choose
      const ApiError e = expect_error([&] { service.create(r); }, 400, "server_only_param");
      EXPECT_EQ(e.field(), "params." + p.name) << name;
      EXPECT_TRUE(contains(e.body().message(), "--env-param")) << e.body().message();
      ++refused;
    }
  }
  // The ones the incident needed: the shell's namespaces, tasks_dir, scratch_root; the remote command.
  std::map<std::string, std::set<std::string>> wanted = {
      {"shell", {"namespaces", "tasks_dir", "scratch_root", "memory_mb", "processes"}},
      {"remote", {"command", "host", "port"}},
      {"synthetic", {"data_dir"}},
      {"coding_repo", {"data_dir"}}};
  for (const auto& [env, names] : wanted) {
    if (!env_registry().contains(env)) continue;
    for (const ParamSpec& p : env_registry().entry(env).params) {
      if (names.count(p.name)) {
        EXPECT_TRUE(p.server_only) << env << "." << p.name;
      }
    }
  }
  EXPECT_GE(refused, 4);
  EXPECT_EQ(service.sessions().size(), 0u);
  const proto::InfoResponse info = service.info();
  for (const proto::EnvInfo& env : info.environments()) {
    for (const proto::ParamInfo& p : env.params()) {
      EXPECT_EQ(p.server_only(),
                p.name() == "namespaces" || p.name() == "tasks_dir" || p.name() == "scratch_root" ||
                    p.name() == "data_dir" || p.name() == "command" || p.name() == "host" ||
                    p.name() == "port" || p.name() == "cpu_seconds" || p.name() == "memory_mb" ||
                    p.name() == "file_mb" || p.name() == "processes" || p.name() == "disk_mb")
          << env.name() << "." << p.name();
    }
  }
}

// Item 4: the operator sets them (crl serve --env-param); a request may still override ordinary ones.
TEST(ServiceLimits, OperatorParametersApplyAndAreChecked) {
  ServiceOptions options;
  options.env_params["memory_chain"] = {{"length", "5"}, {"reset_points", ""}};
  EpisodeService service(options);
  const proto::StepResponse r = service.create(by_id("memory_chain", "chain-1"));
  EXPECT_TRUE(contains(r.prompt_text(), "Memory chain of 5 steps")) << r.prompt_text();
  proto::CreateEpisodeRequest longer = by_id("memory_chain", "chain-1");
  (*longer.mutable_params())["length"] = "7";
  EXPECT_TRUE(contains(service.create(longer).prompt_text(), "Memory chain of 7 steps"));
  ServiceOptions bad;
  bad.env_params["memory_chain"] = {{"lenght", "5"}, {"reset_points", ""}};
  EXPECT_THROW(EpisodeService{bad}, Error);
  bad.env_params = {{"nope", {{"x", "1"}}}};
  EXPECT_THROW(EpisodeService{bad}, Error);
}

// Item 3: llm.request_timeout_s had no upper bound (a client could hold server threads for days).
TEST(ServiceLimits, ClientTimeoutsAreBoundedByTheServer) {
  ServiceOptions options;
  options.max_client_timeout_s = 60;
  EpisodeService service(options);
  proto::RolloutsRequest r;
  *r.add_episodes() = synthetic("dev", 0);
  r.mutable_llm()->set_base_url("http://127.0.0.1:9");
  for (double value : {61.0, 1e9, std::numeric_limits<double>::infinity()}) {
    r.mutable_llm()->set_request_timeout_s(value);
    const ApiError e = expect_error([&] { service.rollouts(r); }, 400, "over_limit");
    EXPECT_EQ(e.field(), "llm.request_timeout_s");
    EXPECT_TRUE(contains(e.body().message(), "limit of 60 s")) << e.body().message();
  }
  r.mutable_llm()->set_request_timeout_s(-1);
  expect_error([&] { service.rollouts(r); }, 400, "bad_field");
  r.mutable_llm()->set_request_timeout_s(0);
  r.mutable_llm()->set_max_in_flight(1u << 30);
  EXPECT_EQ(expect_error([&] { service.rollouts(r); }, 400, "over_limit").field(), "llm.max_in_flight");
  // Duration parameters of environments: seconds and milliseconds.
  proto::CreateEpisodeRequest shell = by_id("shell", "hello-file");
  (*shell.mutable_params())["command_timeout_sec"] = "86400";
  const ApiError e = expect_error([&] { service.create(shell); }, 400, "over_limit");
  EXPECT_EQ(e.field(), "params.command_timeout_sec");
  EXPECT_TRUE(contains(e.body().message(), "86400")) << e.body().message();
  proto::CreateEpisodeRequest remote = by_id("remote", "t0");
  (*remote.mutable_params())["timeout_ms"] = "61000";
  EXPECT_EQ(expect_error([&] { service.create(remote); }, 400, "over_limit").field(), "params.timeout_ms");
  EXPECT_EQ(service.info().limits().max_client_timeout_s(), 60.0);
  EXPECT_EQ(service.info().limits().max_llm_in_flight(), ServiceOptions{}.max_llm_in_flight);
}

// Item 5: split dev has 60 tasks; index 60 ran task 0 as "dev-60", an unknown id ran task 0.
TEST(ServiceLimits, TasksOutsideTheSplitAreErrorsNotAliases) {
  ServiceOptions options;
  options.env_params["shell"] = {{"tasks_dir", std::string(CRL_SOURCE_DIR) + "/data/shell_tasks"}};
  EpisodeService service(options);
  for (uint32_t index : {60u, 1000000000u, 4294967295u}) {
    const ApiError e = expect_error([&] { service.create(synthetic("dev", index)); }, 400, "bad_task");
    EXPECT_EQ(e.field(), "index");
    EXPECT_TRUE(contains(e.body().message(), "split \"dev\"")) << e.body().message();
    EXPECT_TRUE(contains(e.body().message(), "holds 60 tasks")) << e.body().message();
  }
  const ApiError train =
      expect_error([&] { service.create(by_id("synthetic", "train-999999")); }, 400, "bad_task");
  EXPECT_EQ(train.field(), "task_id");
  EXPECT_TRUE(contains(train.body().message(), "split \"train\"")) << train.body().message();
  EXPECT_TRUE(contains(train.body().message(), "holds 240 tasks")) << train.body().message();
  const ApiError nope =
      expect_error([&] { service.create(by_id("synthetic", "nope-123")); }, 400, "bad_task");
  EXPECT_EQ(nope.field(), "task_id");
  EXPECT_TRUE(contains(nope.body().message(), "60 tasks")) << nope.body().message();
  // The last task of the split, by index and by the id the server gave it, is the same episode.
  const proto::StepResponse last = service.create(synthetic("dev", 59));
  EXPECT_EQ(last.task_id(), "dev-59");
  const proto::StepResponse again = service.create(by_id("synthetic", "dev-59"));
  EXPECT_EQ(again.prompt_text(), last.prompt_text());
  EXPECT_NE(service.create(synthetic("dev", 0)).prompt_text(), last.prompt_text());
  // A real task id of the split works; one of another split does not.
  const auto train_env = make_env("synthetic", {{"split", "train"}});
  const std::string train_id =
      static_cast<const envs::synthetic::SyntheticEnv&>(*train_env).tasks().tasks[10].task_id;
  proto::CreateEpisodeRequest real = by_id("synthetic", train_id);
  expect_error([&] { service.create(real); }, 400, "bad_task");  // the default split is dev
  (*real.mutable_params())["split"] = "train";
  EXPECT_NO_THROW(service.create(real));
  // The shell's task folders: an unknown id is not folder 0.
  const ApiError shell = expect_error([&] { service.create(by_id("shell", "nope-123")); }, 400, "bad_task");
  EXPECT_TRUE(contains(shell.body().message(), "tasks_dir")) << shell.body().message();
  EXPECT_FALSE(contains(shell.body().message(), "holds 0 tasks")) << shell.body().message();
  // Rollout mode checks the same, naming the item.
  proto::RolloutsRequest rollouts;
  *rollouts.add_episodes() = synthetic("dev", 0);
  *rollouts.add_episodes() = synthetic("dev", 60);
  rollouts.mutable_llm()->set_base_url("http://127.0.0.1:9");
  EXPECT_EQ(expect_error([&] { service.rollouts(rollouts); }, 400, "bad_task").field(), "episodes[1].index");
}

// Item 6: with the text view, C = 1024 ended every synthetic episode truncated at its first compaction.
TEST(ServiceLimits, BudgetsThatCannotCompactAreRefusedWithTheSmallestCapacity) {
  EpisodeService service({});
  proto::CreateEpisodeRequest r = synthetic("dev", 0);
  r.mutable_budget()->set_capacity(1024);
  r.mutable_budget()->set_reserve(256);
  const ApiError e = expect_error([&] { service.create(r); }, 400, "bad_budget");
  EXPECT_EQ(e.field(), "budget.capacity");
  EXPECT_TRUE(contains(e.body().message(), "smallest capacity that works is")) << e.body().message();
  const std::string message = e.body().message();
  const int64_t smallest = std::stoll(message.substr(message.rfind(' ') + 1));
  EXPECT_GT(smallest, 1024);
  r.mutable_budget()->set_capacity(static_cast<int32_t>(smallest));
  EXPECT_NO_THROW(service.create(r)) << "the capacity the error names works";
  r.mutable_budget()->set_capacity(static_cast<int32_t>(smallest - 1));
  expect_error([&] { service.create(r); }, 400, "bad_budget");
  EXPECT_EQ(service.sessions().size(), 1u);
}

// Item 6: no budget in the request -> the environment's default for the view, which compacts and completes.
TEST(ServiceLimits, DefaultBudgetRunsASyntheticTextEpisodeWithCompactions) {
  EpisodeService service({});
  proto::StepResponse r = service.create(synthetic("dev", 4));
  const std::string id = r.episode_id();
  EXPECT_EQ(service.state(id).budget().capacity(), 3072);
  int summaries = 0;
  bool end_seen = false;
  while (r.kind() != "done") {
    std::string kind = "assistant", text = end_seen ? "submit 0000" : "next";
    if (r.kind() == "compaction_request") {
      kind = "summary";
      text = "Task so far: read records with next.";
      ++summaries;
    }
    r = service.step(id, action(r.next_turn_id(), kind, text));
    end_seen = end_seen || contains(r.append_text(), "user\nEND");
  }
  EXPECT_EQ(r.status(), "completed") << r.reason();
  EXPECT_GE(summaries, 1);
  const proto::InfoResponse info = service.info();
  for (const proto::EnvInfo& env : info.environments()) {
    if (env.name() == "synthetic") {
      EXPECT_EQ(env.text_budget().capacity(), 3072);
    }
  }
}

// The text view's template and its variables (--chat-template, --default-chat-template-kwargs): /v1/info
// names them (it said "chatml" whatever the option), and a text episode's turns open with the generation
// prompt the variables give.
TEST(ServiceLimits, TheTextViewsTemplateAndVariablesAreTheOperators) {
  EXPECT_EQ(EpisodeService({}).info().chat_template(), "chatml");
  ServiceOptions plain;
  plain.chat_template = "plain";
  EXPECT_EQ(EpisodeService(plain).info().chat_template(), "plain");
  const test::TempDir dir("service_template");
  ServiceOptions quiet;
  quiet.chat_template = dir.write(
      "quiet.jinja",
      "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
      "'<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- if "
      "enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- "
      "endif %}{%- endif %}");
  quiet.chat_template_variables = R"({"enable_thinking":false})";
  EpisodeService service(quiet);
  EXPECT_EQ(service.info().chat_template(), quiet.chat_template);
  EXPECT_EQ(service.info().chat_template_variables(), quiet.chat_template_variables);
  const proto::StepResponse r = service.create(synthetic("dev", 4));
  EXPECT_TRUE(r.prompt_text().ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n")) << r.prompt_text();
  const proto::StepResponse next =
      service.step(r.episode_id(), action(r.next_turn_id(), "assistant", "next"));
  EXPECT_TRUE(next.append_text().ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"))
      << next.append_text();
}

}  // namespace
}  // namespace crl::server
