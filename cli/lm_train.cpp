// `crl lm train --tokenizer T --out FILE [--init FILE | sizes] [--split train --tasks N] [--steps --batch
// --lr --seed]`: SFT of the language model on oracle demonstrations (policies/lm/sft.h); writes the
// checkpoint (weights, Adam, tokenizer fingerprint) and prints the loss and teacher-forced accuracy on the
// training episodes and on dev episodes before and after.
#include "cli/lm_train.h"

#include <iomanip>
#include <iostream>

#include "cli/command.h"
#include "cli/options.h"
#include "engine/chat_template.h"
#include "engine/error.h"
#include "envs/codec.h"
#include "policies/lm/checkpoint.h"
#include "policies/lm/copy_drills.h"
#include "policies/lm/demonstrations.h"
#include "policies/lm/sft.h"
#include "scenarios/checkpoint.h"

namespace crl::cli {

std::vector<Trajectory> oracle_trajectories(const std::string& split, int first, int count,
                                            std::shared_ptr<const Tokenizer> tokenizer, const Budget& budget,
                                            const std::string& name_space, const Reasoning& reasoning) {
  TextPrompts prompts;
  prompts.reasoning = reasoning;
  const auto codec = make_text_codec(std::move(tokenizer), prompts, chatml_template());
  return lm::oracle_demonstrations({{"split", split}, {"view", "text"}, {"namespace", name_space}}, codec,
                                   budget, first, count, "--tasks");
}

namespace {

int run_train(const std::vector<std::string>& args) {
  po::options_description options;
  std::string tokenizer_spec, out, init, split = "train", name_space = "default";
  lm::LmConfig c;
  c.max_positions = 1024;
  uint64_t seed = 0;
  int tasks = 240, eval_tasks = 20, eval_every = 0;
  int64_t short_capacity = 0, short_reserve = 0;
  lm::CopyDrillStage drill;
  std::string drill_alphabet;
  float summary_weight = 1.0f, final_weight = 1.0f;
  bool with_reasoning = false, eval_only = false;
  std::string eval_namespace = "default";
  std::string backend = "cpu";
  int answer_window = 0, answer_batch = 0;
  lm::SftOptions sft;
  Budget budget;
  budget.summary_cap = 128;
  options.add_options()("tokenizer", po::value(&tokenizer_spec), "the tokenizer (crl tokenize --train)")(
      "out", po::value(&out), "the checkpoint to write")("init", po::value(&init),
                                                         "start from this checkpoint (else a fresh model)")(
      "split", po::value(&split)->default_value(split), "demonstrations: synthetic split")(
      "namespace", po::value(&name_space)->default_value(name_space),
      "demonstrations: synthetic namespace (the dev tasks: --eval-namespace)")(
      "tasks", po::value(&tasks)->default_value(tasks), "demonstrations: tasks 0 .. N-1 of the split")(
      "eval-tasks", po::value(&eval_tasks)->default_value(eval_tasks),
      "dev tasks evaluated before and after")("eval-namespace",
                                              po::value(&eval_namespace)->default_value(eval_namespace),
                                              "the synthetic namespace of the dev tasks evaluated (default: "
                                              "the 60 default-dev tasks that closed-loop "
                                              "evaluations play; phase3: 180 others)")(
      "eval-only", po::bool_switch(&eval_only),
      "evaluate the --init checkpoint on the dev tasks, print one `dev:` line and write nothing")(
      "steps", po::value(&sft.steps)->default_value(sft.steps), "Adam steps")(
      "batch", po::value(&sft.batch)->default_value(sft.batch), "segments per step")(
      "lr", po::value(&sft.lr)->default_value(sft.lr), "learning rate (the peak with a schedule)")(
      "warmup", po::value(&sft.warmup)->default_value(0), "linear warm-up steps")(
      "cosine", po::bool_switch(&sft.cosine), "cosine decay to lr/10 at the last step")(
      "threads", po::value(&sft.threads)->default_value(1), "1 or 2 (the same bits)")(
      "backend", po::value(&backend)->default_value(backend),
      "cpu | cuda: where the training passes run (copy drills and SFT; evaluation stays on the CPU)")(
      "observation-weight", po::value(&sft.observation_weight)->default_value(0.0),
      "weight of the context tokens' next-token loss (0: only the policy's tokens)")(
      "eval-every", po::value(&eval_every)->default_value(0), "also evaluate on dev every N steps (0: no)")(
      "seed", po::value(&seed)->default_value(0), "initialisation and minibatch seed")(
      "d-model", po::value(&c.d_model)->default_value(c.d_model), "fresh model: width")(
      "heads", po::value(&c.heads)->default_value(c.heads), "fresh model: heads")(
      "layers", po::value(&c.layers)->default_value(c.layers), "fresh model: blocks")(
      "d-ff", po::value(&c.d_ff)->default_value(c.d_ff), "fresh model: MLP width")(
      "rope", po::bool_switch(&c.rope), "fresh model: rotary positions instead of learned ones")(
      "capacity", po::value(&budget.capacity)->default_value(budget.capacity), "episode context C")(
      "reserve", po::value(&budget.reserve)->default_value(budget.reserve), "compaction reserve T_comp")(
      "summary-cap", po::value(&budget.summary_cap)->default_value(budget.summary_cap), "summary cap")(
      "per-turn-cap", po::value(&budget.per_turn_cap)->default_value(budget.per_turn_cap), "per-turn cap")(
      "max-compactions", po::value(&budget.max_compactions)->default_value(budget.max_compactions),
      "compactions before an episode ends truncated")(
      "reasoning", po::bool_switch(&with_reasoning),
      "the final answer follows a <think> block of the oracle's notes (envs/synthetic/oracle.h)")(
      "answer-window", po::value(&answer_window)->default_value(0),
      "with --reasoning: also train each answer after the notes on windows of N, 2N, 4N, ... tokens "
      "before the final action (policies/lm/sft.h answer_windows; 0: no windows)")(
      "answer-batch", po::value(&answer_batch)->default_value(0),
      "answer windows per step beside --batch segments (0: the windows join the segments' pool)")(
      "short-capacity", po::value(&short_capacity)->default_value(0),
      "also the same tasks' demonstrations under this capacity (policies/lm/demonstrations.h; 0: none)")(
      "short-reserve", po::value(&short_reserve)->default_value(0), "the reserve of those demonstrations")(
      "copy-drill-steps", po::value(&drill.steps)->default_value(0),
      "first, this many Adam steps on copy drills (policies/lm/copy_drills.h)")(
      "copy-drill-batch", po::value(&drill.batch)->default_value(drill.batch),
      "copy drills: drills per step")("copy-drill-lr", po::value(&drill.lr)->default_value(drill.lr),
                                      "copy drills: learning rate (constant)")(
      "copy-drill-warmup", po::value(&drill.warmup)->default_value(drill.warmup),
      "copy drills: linear warm-up steps")(
      "copy-drill-min", po::value(&drill.drills.min_half)->default_value(drill.drills.min_half),
      "copy drills: shortest run")("copy-drill-max",
                                   po::value(&drill.drills.max_half)->default_value(drill.drills.max_half),
                                   "copy drills: longest run")(
      "copy-drill-examples", po::value(&drill.drills.examples)->default_value(0),
      "copy drills: distinct drills (0: steps x batch, a fresh drill every time)")(
      "copy-drill-mix", po::value(&drill.mix)->default_value(0),
      "copy drills: this many more drills mixed into the SFT set (keeps the copying; 0: none)")(
      "summary-weight", po::value(&summary_weight)->default_value(1.0f),
      "SFT: loss weight of the summaries' tokens (actions 1)")(
      "final-weight", po::value(&final_weight)->default_value(1.0f),
      "SFT: loss weight of the final action's tokens (the answer)")(
      "copy-drill-alphabet-size", po::value(&drill.drills.alphabet_size)->default_value(0),
      "copy drills: each drill draws from its own random subset of this many tokens (0: all)")(
      "copy-drill-gap", po::value(&drill.drills.max_gap)->default_value(0),
      "copy drills: long drills have up to this many random tokens between a run and its repeat (and a "
      "lookup's table and questions)")(
      "copy-drill-long-steps", po::value(&drill.long_steps)->default_value(0),
      "copy drills: after the short repeat drills, this many steps of long drills (--copy-drill-gap, "
      "--copy-drill-lookup)")(
      "copy-drill-lookup", po::value(&drill.drills.lookup_fraction)->default_value(0.0),
      "copy drills: the fraction of the long drills (and of the mix, with long steps) that are lookups "
      "(kind key = value tables, then questions; policies/lm/copy_drills.h)")(
      "copy-drill-answer-shape", po::bool_switch(&drill.drills.lookup_answer_shape),
      "copy drills: lookup questions in the final answer's shape (`marker kind key [filler] answer` value) "
      "instead of ending in the table's separator")(
      "copy-drill-alphabet", po::value(&drill_alphabet),
      "copy drills: draw from the distinct tokens of this text (default: the whole vocabulary)");
  po::positional_options_description positional;
  po::variables_map vm;
  int exit_code = 0;
  if (!parse_options("lm train", "--tokenizer T --out FILE [--init FILE] [--steps N ...]", options,
                     positional, args, vm, exit_code)) {
    return exit_code;
  }
  if (tokenizer_spec.empty()) throw Error("--tokenizer", "tokenizer", "missing");
  if (eval_only) {
    if (init.empty())
      throw Error("--eval-only", "init", "missing: --eval-only evaluates the --init checkpoint");
    if (!out.empty()) throw Error("--out", "out", "--eval-only writes nothing: leave out --out");
  } else if (out.empty()) {
    throw Error("--out", "out", "missing: the checkpoint to write");
  }
  if (eval_tasks < 1) throw Error("--eval-tasks", std::to_string(eval_tasks), "must be >= 1");
  // Steps on no demonstrations wrote a checkpoint trained on nothing, with exit 0.
  if (tasks < 0 || (tasks == 0 && sft.steps > 0 && !eval_only)) {
    throw Error("--tasks", std::to_string(tasks), "must be >= 1: the demonstrations the --steps train on");
  }
  if (short_capacity < 0) throw Error("--short-capacity", "short-capacity", "must be >= 0 (0: none)");
  lm::check_answer_windows(answer_window, answer_batch, with_reasoning, "crl lm train (--reasoning)",
                           "--answer-window", "--answer-batch");
  if (drill.steps < 0 || drill.long_steps < 0 || drill.batch < 1 || !(drill.lr > 0) || drill.warmup < 0)
    throw Error(
        "--copy-drill-steps/--copy-drill-long-steps/--copy-drill-batch/--copy-drill-lr/"
        "--copy-drill-warmup",
        "", "out of range (steps, long steps and warm-up >= 0, batch >= 1, lr > 0)");
  if (sft.steps < 0 || sft.batch < 1 || !(sft.lr > 0) || sft.warmup < 0 || eval_every < 0)
    throw Error("--steps/--batch/--lr/--warmup/--eval-every", "", "out of range");
  budget.validate("--capacity/--reserve/--summary-cap");
  sft.backend = lm::parse_backend(backend, "--backend", "backend");
  lm::require_backend(sft.backend, "--backend", "backend");  // before minutes of rendering, not after
  const auto tokenizer = make_tokenizer(tokenizer_spec);
  lm::LmCheckpoint state;
  if (!init.empty()) {
    state = lm::load_lm_state(scenarios::read_checkpoint(init).policy(), init);
  } else {
    c.vocab = tokenizer->vocab_size();
    c.max_positions = static_cast<int>(budget.capacity);
    try {
      c.validate();
    } catch (const std::invalid_argument& e) {
      throw Error("crl lm train", "", e.what());
    }
    state.model = lm::LmModel(c);
    state.model.initialize(seed);
    state.optimizer = lm::LmOptimizer(state.model.layout());
  }
  if (tokenizer->vocab_size() > state.model.config().vocab)
    throw Error(tokenizer_spec, "--tokenizer", "more tokens than the model's vocabulary");
  sft.seed = seed;
  drill.drills.alphabet = lm::drill_alphabet(*tokenizer, drill_alphabet);
  const int max_positions = state.model.config().max_positions;
  int skipped = 0;
  const Reasoning reasoning = with_reasoning ? think_reasoning() : Reasoning{};
  const auto dev = lm::sft_examples(
      oracle_trajectories("dev", 0, eval_tasks, tokenizer, budget, eval_namespace, reasoning), max_positions);
  // Teacher-forced answers given the oracle's notes, over the whole context (the window is everything).
  const auto dev_answers = lm::answer_windows(dev, max_positions, *tokenizer, reasoning);  // none without
  auto report = [&](const char* when) {
    const lm::SftEval d = lm::evaluate_sft(state.model, dev);
    std::cout << std::fixed << std::setprecision(4) << when << ": dev loss " << d.loss << ", token accuracy "
              << d.token_accuracy << ", exact spans " << d.span_exact << " (" << d.spans << ")";
    static const char* const kinds[3] = {"actions", "summaries", "final actions"};
    for (int k = 0; k < 3; ++k) {
      std::cout << "; " << kinds[k] << " " << d.kind_token_accuracy[k] << " / " << d.kind_span_exact[k]
                << " (" << d.kind_spans[k] << ")";
    }
    if (!dev_answers.empty()) {
      const lm::SftEval a = lm::evaluate_sft(state.model, dev_answers);
      std::cout << "; answers after the notes " << a.token_accuracy << " / " << a.span_exact << " ("
                << a.spans << ")";
    }
    std::cout << std::endl;
  };
  if (eval_only) {
    report("dev");
    return 0;
  }
  const auto demos = oracle_trajectories(split, 0, tasks, tokenizer, budget, name_space, reasoning);
  lm::require_oracle_wins(demos, "--capacity/--reserve/--per-turn-cap");
  auto train = lm::sft_examples(demos, max_positions, &skipped);
  if (short_capacity > 0) {
    const Budget short_budget = lm::short_demonstration_budget(budget, short_capacity, short_reserve,
                                                               "--short-capacity/--short-reserve");
    const auto short_demos =
        oracle_trajectories(split, 0, tasks, tokenizer, short_budget, name_space, reasoning);
    lm::require_oracle_wins(short_demos, "--short-capacity/--short-reserve");
    int short_skipped = 0;
    const auto drills = lm::sft_examples(short_demos, max_positions, &short_skipped);
    skipped += short_skipped;
    std::cout << drills.size() << " short segments (capacity " << short_capacity << ")\n";
    train.insert(train.end(), drills.begin(), drills.end());
  }
  lm::weight_spans(train, summary_weight, final_weight, "--summary-weight/--final-weight");
  std::vector<lm::SftExample> answers;  // the windows' own pool (--answer-batch)
  if (answer_window > 0) {
    const auto windows = lm::answer_window_ladder(train, answer_window, max_positions, *tokenizer, reasoning);
    std::cout << windows.size() << " answer windows (" << answer_window << " tokens and doubling)\n";
    if (answer_batch > 0) {
      answers = windows;
    } else {
      train.insert(train.end(), windows.begin(), windows.end());
    }
  }
  sft.extra = &answers;
  sft.extra_batch = answer_batch;
  std::cout << train.size() << " training segments (" << skipped << " longer than " << max_positions
            << " skipped), " << dev.size() << " dev segments\n";
  // Steps on no segment wrote a checkpoint trained on nothing (an --init model of 512 positions under a 1024
  // window skipped every demonstration).
  if (train.empty() && (sft.steps > 0 || drill.steps > 0 || drill.long_steps > 0)) {
    throw Error("--tasks/--capacity", "max_positions",
                "no training segment fits the model's " + std::to_string(max_positions) + " positions (" +
                    std::to_string(skipped) +
                    " longer were skipped): give the model more positions (lm init --max-positions) or the "
                    "demonstrations a smaller window (--capacity)");
  }
  report("before");
  if (eval_every > 0) {
    sft.after_step = [&](int done) {
      if (done % eval_every == 0 && done < sft.steps) report(("step " + std::to_string(done)).c_str());
    };
  }
  if (drill.steps > 0 || drill.long_steps > 0) {
    // Copy drills first (the "pretraining" of a base that can copy). The optimizer's moments carry over
    // into SFT, as from any pretraining checkpoint (--init).
    const std::string where = "--copy-drill-*";
    lm::CopyDrillOptions held_out = drill.drills;  // other drills: the printed loss is not memorisation
    held_out.seed = seed + 0x9E3779B97F4A7C15ull;
    held_out.examples = 256;
    if (drill.long_steps == 0) {  // the held-out drills have the shape of the last stage's
      held_out.max_gap = 0;
      held_out.lookup_fraction = 0.0;
    }
    const auto check = lm::copy_drill_examples(state.model.config().vocab, max_positions, held_out, where);
    // Lookups alone too (their answers are the multi-token copy the summaries need): span exact = the
    // whole value right.
    held_out.lookup_fraction = held_out.lookup_fraction > 0 ? 1.0 : 0.0;
    const auto lookups =
        held_out.lookup_fraction > 0
            ? lm::copy_drill_examples(state.model.config().vocab, max_positions, held_out, where)
            : std::vector<lm::SftExample>{};
    const auto drill_step = [&](int done) {
      if (done % 250 == 0 || done == drill.steps + drill.long_steps) {
        const lm::SftEval e = lm::evaluate_sft(state.model, check);
        std::cout << std::fixed << std::setprecision(4) << "copy drills step " << done << ": held-out loss "
                  << e.loss << ", token accuracy " << e.token_accuracy;
        if (!lookups.empty()) {
          const lm::SftEval l = lm::evaluate_sft(state.model, lookups);
          std::cout << "; lookups: loss " << l.loss << ", value exact " << l.span_exact;
        }
        std::cout << std::endl;
      }
    };
    lm::train_copy_drills(state.model, state.optimizer, drill, seed, sft.threads, where, drill_step,
                          sft.backend);
    report("after copy drills");
  }
  const auto mixed =
      lm::copy_drill_mix(state.model.config().vocab, max_positions, drill, seed, "--copy-drill-mix");
  if (!mixed.empty()) {
    train.insert(train.end(), mixed.begin(), mixed.end());
    std::cout << mixed.size() << " copy drills mixed into the SFT set (" << train.size() << " examples)\n";
  }
  const auto losses = lm::train_sft(state.model, state.optimizer, train, sft);
  if (!losses.empty()) std::cout << "train loss " << losses.front() << " -> " << losses.back() << "\n";
  report("after");
  proto::checkpoint::Checkpoint ckpt;
  ckpt.set_seed(seed);
  lm::save_lm_state(state.model, state.optimizer, tokenizer->fingerprint(), *ckpt.mutable_policy());
  scenarios::write_checkpoint(out, ckpt);
  std::cout << "wrote " << out << "\n";
  return 0;
}

}  // namespace

int run_lm_train(const std::vector<std::string>& args) {
  return run_train(args);
}

}  // namespace crl::cli
