// `crl rollout`: runs episodes of a text environment against an LLM inference server (SGLang's /generate or
// an OpenAI-compatible /v1/completions) and writes the trajectories in the export format of PROTOCOL.md
// section 1 (one JSONL line per segment) plus a metrics summary (JSON file and a report on stdout).
//
//   crl rollout --env synthetic --split dev --tasks 60 --llm http://127.0.0.1:30000 --api sglang
//               --tokenizer byte --out trajectories.jsonl [--concurrency 64] [--seed 7] [--samples 1]
//
// Every episode is its own coroutine on one I/O thread (policies/llm/llm_driver.h); --concurrency caps the
// requests in flight. A failed or timed-out request fails its episode (status "failed" with the reason, in
// the export and in the metrics file) and the run goes on. A progress line is drawn on stderr when it is a
// terminal (--progress auto|always|never). The exit code is 0 when the run finished, even with failed
// episodes (the metrics say how many), and 1 when every episode failed (the outputs are written all the
// same): that is a configuration to fix (an LLM server down, a window larger than the model's context), not a
// result.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/episode_options.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/tokenizer.h"
#include "engine/trajectory_io.h"
#include "envs/registry.h"
#include "envs/synthetic/synthetic_env.h"
#include "policies/llm/llm_driver.h"
#include "policies/llm/served_models.h"

namespace crl::cli {
namespace {

using json = nlohmann::json;
namespace syn = envs::synthetic;

// The tokenizer named by --tokenizer (make_tokenizer: byte, a tokenizer.json or a tiktoken rank file); its
// errors name the option as well as the file and field.
std::shared_ptr<const Tokenizer> rollout_tokenizer(const std::string& spec) {
  try {
    return make_tokenizer(spec);
  } catch (const Error& e) {
    throw Error("option --tokenizer " + quote(spec) + (e.where().empty() ? "" : ": " + e.where()), e.field(),
                e.message());
  }
}

// Synthetic-suite metrics of one episode (empty for other environments).
struct EpisodeReport {
  bool synthetic = false;
  syn::EpisodeMetrics metrics;
  std::vector<int> records_seen_at_summary;
};

std::string metrics_path_for(const std::string& out) {
  const std::string suffix = ".jsonl";
  if (out.size() > suffix.size() && out.compare(out.size() - suffix.size(), suffix.size(), suffix) == 0)
    return out.substr(0, out.size() - suffix.size()) + ".metrics.json";
  return out + ".metrics.json";
}

int rollout_command(const std::vector<std::string>& args) {
  // The budget is the environment's default for the text view (for the synthetic suite: 1-2 compactions per
  // episode with byte tokens, envs/synthetic), unless options replace it.
  EpisodeOptions episode;
  episode.env = "synthetic";
  std::string split = "dev", url, api = "sglang", tokenizer_spec = "byte", out_path, metrics_path;
  std::string chat_name = "chatml", chat_variables;
  bool with_reasoning = false;
  int tasks = 60, first_task = 0, samples = 1;
  llm::LlmOptions llm;
  size_t concurrency = llm.max_in_flight;
  double wait_for_llm = 0;
  std::string progress_mode = "auto";
  po::options_description options;
  episode.add_to(options);
  add_progress_option(options, progress_mode);
  options.add_options()("split", po::value(&split)->default_value(split), "task split: train | dev | test")(
      "tasks", po::value(&tasks)->default_value(tasks), "number of tasks (indices first-task ..)")(
      "first-task", po::value(&first_task)->default_value(first_task), "index of the first task")(
      "samples", po::value(&samples)->default_value(samples),
      "episodes per task (sample_index 0 ..; group_index = task index)")(
      "llm", po::value(&url), "LLM server base URL, http://HOST:PORT (required)")(
      "api", po::value(&api)->default_value(api), "sglang (POST /generate) | openai (POST /v1/completions)")(
      "tokenizer", po::value(&tokenizer_spec)->default_value(tokenizer_spec),
      "the policy's tokenizer: byte | PATH/tokenizer.json | PATH/NAME.tiktoken[#PATTERN]")(
      "chat-template", po::value(&chat_name)->default_value(chat_name),
      "how prompts are rendered: chatml (needs <|im_start|>, <|im_end|>) | plain (needs <|endoftext|>; for "
      "tokenizers without ChatML tokens, e.g. o200k_base, GPT-2) | PATH.jinja | PATH/tokenizer_config.json")(
      "default-chat-template-kwargs", po::value(&chat_variables), kTemplateKwargsHelp)(
      "reasoning", po::bool_switch(&with_reasoning),
      "the model may open its turns with a <think> ... </think> block: the environment gets the answer after "
      "it, the block stays the policy's tokens (envs/codec.h Reasoning)")(
      "model", po::value(&llm.sampling.model), "model name sent with the openai API")(
      "temperature", po::value(&llm.sampling.temperature)->default_value(llm.sampling.temperature),
      "sampling temperature")("top-p", po::value(&llm.sampling.top_p)->default_value(llm.sampling.top_p),
                              "nucleus sampling")(
      "top-k", po::value(&llm.sampling.top_k)->default_value(llm.sampling.top_k), "top-k (-1: off)")(
      "concurrency", po::value(&concurrency)->default_value(concurrency), "requests in flight at most")(
      "timeout", po::value(&llm.request_timeout_s)->default_value(llm.request_timeout_s),
      "seconds per request, retries included")("retries",
                                               po::value(&llm.max_retries)->default_value(llm.max_retries),
                                               "retries on connection errors and 5xx")(
      "wait-for-llm", po::value(&wait_for_llm)->default_value(wait_for_llm), kWaitForLlmHelp)(
      "out", po::value(&out_path), "trajectories file (.jsonl; binary protobuf otherwise)")(
      "metrics", po::value(&metrics_path), "metrics summary (JSON; default: next to --out, .metrics.json)");
  po::positional_options_description positional;
  po::variables_map vm;
  int exit_code = 0;
  if (!parse_options(
          "rollout",
          "--llm http://HOST:PORT --out trajectories.jsonl [--env synthetic --split dev --tasks N "
          "--api sglang|openai --tokenizer byte --chat-template chatml|plain|PATH --concurrency N --seed S]",
          options, positional, args, vm, exit_code))
    return exit_code;
  if (url.empty()) throw Error("option --llm", "", "is required (the LLM server, http://HOST:PORT)");
  const ProgressMode progress_choice = parse_progress_mode(progress_mode);
  if (out_path.empty()) throw Error("option --out", "", "is required (the trajectories file)");
  if (tasks < 1) throw Error("option --tasks", "", "value " + std::to_string(tasks) + " must be >= 1");
  if (samples < 1) throw Error("option --samples", "", "value " + std::to_string(samples) + " must be >= 1");
  if (first_task < 0) throw Error("option --first-task", "", "must be >= 0");
  if (concurrency < 1) throw Error("option --concurrency", "", "must be >= 1");
  if (split != "train" && split != "dev" && split != "test")
    throw Error("option --split", "", "value " + quote(split) + " is not one of train, dev, test");
  if (episode.view != "text")
    throw Error("option --view", "", "an LLM reads text: the view must be text, not " + quote(episode.view));
  if (metrics_path.empty()) metrics_path = metrics_path_for(out_path);
  llm.api = llm::parse_api_kind(api, "option --api");
  llm.base_url = url;
  llm.max_in_flight = concurrency;

  auto params = episode.param_map();
  if (!env_registry().contains(episode.env)) make_env(episode.env, params, "option --env");  // throws
  const auto& declared = env_registry().entry(episode.env).params;
  if (std::any_of(declared.begin(), declared.end(), [](const ParamSpec& p) { return p.name == "split"; })) {
    params.emplace("split", split);
  }
  const auto prototype = make_env(episode.env, params, "option --env/--param");
  if (!prototype->spec().has_text)
    throw Error("option --env", "", "environment " + quote(episode.env) + " has no text view");
  // Tasks first-task .. first-task + tasks - 1 must exist: an index past the split would alias another task.
  const uint64_t last_task = static_cast<uint64_t>(first_task) + static_cast<uint64_t>(tasks) - 1;
  if (const auto list = prototype->task_list(); list && last_task >= list->size) {
    throw Error("option --tasks", "",
                "tasks " + std::to_string(first_task) + " .. " + std::to_string(last_task) + ": " +
                    task_index_message(last_task, *list));
  }
  const ChatTemplate chat =
      load_turn_template(chat_name, "--chat-template", chat_variables);  // errors name the option
  const auto tokenizer = rollout_tokenizer(tokenizer_spec);
  TextPrompts prompts;
  if (with_reasoning) prompts.reasoning = think_reasoning();
  const auto codec = make_text_codec(tokenizer, prompts, chat);
  llm.vocab_size = tokenizer->vocab_size();
  // The model ends a turn with the template's end-of-turn token (the codec checked that it is special).
  if (const auto stop = tokenizer->special_token(chat.end_of_turn)) llm.sampling.stop_token_ids = {*stop};
  const Budget budget = episode.budget_for(prototype->spec(), vm);
  llm::LlmDriver driver(llm);

  const size_t count = static_cast<size_t>(tasks) * static_cast<size_t>(samples);
  std::vector<std::unique_ptr<Episode>> episodes;
  std::vector<Episode*> pointers;
  for (size_t i = 0; i < count; ++i) {
    const size_t task = static_cast<size_t>(first_task) + i / static_cast<size_t>(samples);
    EpisodeConfig config;
    config.budget = budget;
    config.seed = episode.seed;
    config.group_index = static_cast<int64_t>(task);
    config.sample_index = static_cast<int64_t>(i % static_cast<size_t>(samples));
    episodes.push_back(std::make_unique<Episode>(make_env(episode.env, params), codec, config));
    episodes.back()->start(Task{split + "-" + std::to_string(task), task, split});
    if (i == 0) {  // with the tokenizer of the run
      if (const int code = check_budget_fits(*episodes.back(), "rollout")) return code;
    }
    pointers.push_back(episodes.back().get());
  }

  // The options are sound; now whether the server can hold the window (policies/llm/served_models.h). A
  // window that fits is not worth a line; what could not be checked is said.
  const llm::ServedModelFit fit = llm::check_served_model(
      llm::wait_for_served_models(url, wait_for_llm, "--llm", "--wait-for-llm"),
      {llm.api == llm::ApiKind::kOpenAi ? llm.sampling.model : "", "--model", budget.capacity, "--capacity"});
  if (!fit.checked()) std::cerr << "crl rollout: " << fit.line << std::endl;

  std::vector<EpisodeReport> reports(count);
  driver.before_request = [&](size_t index, const Episode& e) {
    if (e.request().role != Role::kSummarize) return;
    if (const auto* s = dynamic_cast<const syn::SyntheticEnv*>(&e.env()))
      reports[index].records_seen_at_summary.push_back(s->records_seen());
  };
  // Progress in episodes, with the failures so far (cli/progress.h).
  ProgressReporter progress("crl rollout", progress_choice);
  progress.set_total(static_cast<int64_t>(count));
  size_t failed_so_far = 0;
  driver.on_done = [&](size_t, const Episode& e) {
    if (e.status() == EpisodeStatus::kFailed) {
      ++failed_so_far;
      progress.set_stage(std::to_string(failed_so_far) + " failed");
    }
    progress.advance(1);
  };
  const llm::DriveStats stats = driver.run(pointers);
  progress.finish();

  std::vector<Trajectory> trajectories;
  std::map<std::string, int> statuses;
  json episodes_json = json::array();
  syn::MetricsTable table;
  int64_t summaries = 0, summary_tokens = 0, compactions = 0;
  double reward_sum = 0;
  bool synthetic = false;
  for (size_t i = 0; i < count; ++i) {
    Episode& e = *episodes[i];
    Trajectory t = e.finish();
    ++statuses[std::string(episode_status_name(t.status))];
    compactions += t.compactions;
    reward_sum += t.reward;
    for (const Segment& segment : t.segments) {
      if (segment.kind != SegmentKind::kSummary) continue;
      ++summaries;
      summary_tokens += static_cast<int64_t>(segment.response_ids.size());
    }
    json item = {
        {"rollout_id", t.rollout_id},   {"task_id", t.task_id}, {"status", episode_status_name(t.status)},
        {"reason", t.reason},           {"reward", t.reward},   {"compactions", t.compactions},
        {"segments", t.segments.size()}};
    if (const auto* s = dynamic_cast<const syn::SyntheticEnv*>(&e.env())) {
      synthetic = true;
      syn::EpisodeMetrics m = s->episode_metrics();
      m.compactions = t.compactions;
      m.truncated = m.truncated || t.status == EpisodeStatus::kTruncated;
      size_t k = 0;
      for (const Segment& segment : t.segments) {
        if (segment.kind != SegmentKind::kSummary) continue;
        const int seen =
            k < reports[i].records_seen_at_summary.size() ? reports[i].records_seen_at_summary[k] : 0;
        ++k;
        syn::SummaryMetrics sm = syn::summary_metrics_text(s->task(), seen, segment.text);
        sm.length = static_cast<int>(segment.response_ids.size());  // in tokens of the policy's tokenizer
        m.summaries.push_back(sm);
      }
      item["type"] = std::string(syn::task_type_name(s->task().type));
      item["exact_match"] = m.exact_match;
      table.add(m);
    }
    episodes_json.push_back(std::move(item));
    trajectories.push_back(std::move(t));
  }
  write_trajectories(out_path, trajectories);

  const llm::CallSummary calls = llm::summarize(stats);
  json metrics = {
      {"env", episode.env},
      {"split", split},
      {"api", api},
      {"llm", url},
      {"tokenizer", tokenizer->name()},
      {"tokenizer_fingerprint", tokenizer->fingerprint()},
      {"seed", episode.seed},
      {"episodes", count},
      {"statuses", statuses},
      {"reward_mean", reward_sum / static_cast<double>(count)},
      {"compactions", compactions},
      {"compactions_per_episode", static_cast<double>(compactions) / static_cast<double>(count)},
      {"summaries", summaries},
      {"summary_tokens_mean", summaries == 0 ? 0.0 : static_cast<double>(summary_tokens) / summaries},
      {"requests", calls.calls},
      {"failed_requests", calls.failed},
      {"http_attempts", calls.attempts},
      {"connections_opened", stats.http.connections_opened},
      {"tokens_sent", calls.tokens_sent},
      {"tokens_received", calls.tokens_received},
      {"latency_s",
       {{"p50", calls.latency_p50},
        {"p90", calls.latency_p90},
        {"p99", calls.latency_p99},
        {"max", calls.latency_max}}},
      {"client_overhead_s_per_request", calls.client_mean},
      {"wall_s", calls.seconds},
      {"requests_per_s", calls.seconds > 0 ? static_cast<double>(calls.calls) / calls.seconds : 0.0},
      {"per_episode", episodes_json}};
  if (synthetic) {
    json by_type = json::object();
    auto totals_json = [](const syn::MetricsTable::Totals& t) {
      return json{{"episodes", t.episodes},
                  {"exact", t.exact},
                  {"exact_match", t.episodes == 0 ? 0.0 : static_cast<double>(t.exact) / t.episodes},
                  {"truncated", t.truncated},
                  {"invalid_commands", t.invalid_commands},
                  {"compactions", t.compactions},
                  {"summaries", t.summaries},
                  {"summary_recall_mean", t.summaries == 0 ? 0.0 : t.recall_sum / t.summaries},
                  {"summary_length_mean", t.summaries == 0 ? 0.0 : t.length_sum / t.summaries}};
    };
    for (syn::TaskType type : syn::kTaskTypes)
      by_type[std::string(syn::task_type_name(type))] = totals_json(table.totals(type));
    by_type["all"] = totals_json(table.all());
    metrics["exact_match_by_type"] = by_type;
  }
  write_file_atomic(metrics_path, metrics.dump(2) + "\n");

  // The report on stdout.
  std::printf("%zu episodes against %s (%s): ", count, url.c_str(), api.c_str());
  bool first = true;
  for (const auto& [status, n] : statuses) {
    std::printf("%s%s %d", first ? "" : ", ", status.c_str(), n);
    first = false;
  }
  std::printf("\n");
  if (synthetic) std::printf("%s", table.report().c_str());
  std::printf("mean reward %.3f, compactions %lld, summaries %lld (mean %.1f tokens)\n",
              reward_sum / static_cast<double>(count), static_cast<long long>(compactions),
              static_cast<long long>(summaries),
              summaries == 0 ? 0.0 : static_cast<double>(summary_tokens) / summaries);
  std::printf(
      "requests %llu (%llu failed), tokens sent %llu, received %llu, latency p50 %.1f ms p90 %.1f ms p99 "
      "%.1f ms, %.1f requests/s\n",
      static_cast<unsigned long long>(calls.calls), static_cast<unsigned long long>(calls.failed),
      static_cast<unsigned long long>(calls.tokens_sent),
      static_cast<unsigned long long>(calls.tokens_received), 1e3 * calls.latency_p50,
      1e3 * calls.latency_p90, 1e3 * calls.latency_p99,
      calls.seconds > 0 ? static_cast<double>(calls.calls) / calls.seconds : 0.0);
  std::printf("wrote %s and %s\n", out_path.c_str(), metrics_path.c_str());
  if (count > 0 && static_cast<size_t>(statuses["failed"]) == count) {
    std::fprintf(stderr, "crl rollout: every episode failed; the first: %s\n",
                 trajectories.empty() ? "(none recorded)" : trajectories.front().reason.c_str());
    return 1;
  }
  return 0;
}

const CommandRegistrar kRolloutCommandRegistrar(
    {"rollout", "run episodes against an LLM inference server (SGLang / OpenAI API)", rollout_command});

}  // namespace
}  // namespace crl::cli
