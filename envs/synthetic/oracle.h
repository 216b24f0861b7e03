#pragma once
// A scripted oracle for the synthetic suite (tests, benchmarks, smoke runs). It reads the task, so it is not
// a policy that could be trained: it shows what perfect play and perfect summaries look like.
//   act():     `next` until END and the question have been shown (records + 1 turns), then `submit <answer>`;
//              with a reasoning block (envs/codec.h Reasoning), the answer follows the notes it answers from:
//              "<think>" + the summary it would write now + "</think>\nsubmit <answer>". Why: a small
//              language model copies a value after a matching context ("FACT code=") long before it learns to
//              look a value up from a question; written-out notes turn the answer into copies of both kinds
//              it has.
//   summary_*: names exactly the milestones observed so far, each once (recall 1, no invention/repetition).
#include <string>
#include <utility>
#include <vector>

#include "envs/codec.h"
#include "envs/env.h"
#include "envs/synthetic/metrics.h"
#include "envs/synthetic/symbolic.h"
#include "envs/synthetic/task.h"

namespace crl::envs::synthetic {

class Oracle {
 public:
  Oracle(const SyntheticTask& task, bool symbolic, Reasoning reasoning = {})
      : task_(&task), symbolic_(symbolic), reasoning_(std::move(reasoning)) {}

  Action act() {
    Action action;
    const bool read_all = calls_++ > static_cast<int>(task_->records.size());  // the records + END
    if (symbolic_) {
      action.symbols = read_all ? symbolic_submit(task_->type, task_->answer)
                                : std::vector<TokenId>{Vocabulary::get().next};
    } else {
      action.text = !read_all ? "next"
                    : reasoning_.enabled()
                        ? reasoning_.open + summary_text(static_cast<int>(task_->records.size())) +
                              reasoning_.close + "\nsubmit " + task_->answer
                        : "submit " + task_->answer;
    }
    return action;
  }

  std::string summary_text(int records_seen) const {
    std::string text =
        "Task: " + std::string(task_type_name(task_->type)) + " about " + task_->target + ". Kept:";
    for (int i : observed_milestones(*task_, records_seen)) {
      text += " record " + std::to_string(i + 1) + " " + task_->records[i].kind + " " +
              task_->records[i].key + "=" + task_->records[i].value + ";";
    }
    return text + " Records read: " + std::to_string(records_seen) + ".";
  }

  std::vector<TokenId> summary_symbols(int records_seen) const {
    const Vocabulary& v = Vocabulary::get();
    std::vector<TokenId> out = {v.keep_task};
    for (int i : observed_milestones(*task_, records_seen)) out.push_back(v.keep(i));
    out.push_back(v.stop);
    return out;
  }

 private:
  const SyntheticTask* task_;
  bool symbolic_;
  Reasoning reasoning_;
  int calls_ = 0;
};

}  // namespace crl::envs::synthetic
