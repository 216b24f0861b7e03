// shell_solution_replay: plays a shell task's solution/solve.sh one line per turn, then `submit`. It shows
// that a sample task is solvable by a fixed command sequence through the environment (tests, conformance).
//
// Like any policy it reads only its prompt: the task is the one whose instruction.md appears in the prompt
// (or the `task=` of its own earlier summary), and the number of lines already run is the `done=` of its
// last summary plus the assistant turns after it. Summaries are one line: "NOTES task=<id> done=<n>".
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "engine/file_io.h"
#include "policies/policy.h"

namespace crl {
namespace {

class ShellSolutionReplay final : public Policy {
 public:
  ShellSolutionReplay(std::shared_ptr<const Codec> codec, std::string tasks_dir)
      : codec_(std::move(codec)), tasks_dir_(std::move(tasks_dir)) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(tasks_dir_, ec)) {
      const std::string id = entry.path().filename().string();
      const std::string folder = entry.path().string();
      if (!std::filesystem::exists(folder + "/instruction.md") ||
          !std::filesystem::exists(folder + "/solution/solve.sh"))
        continue;
      Known k{id, read_file(folder + "/instruction.md"), {}};
      std::istringstream in(read_file(folder + "/solution/solve.sh"));
      for (std::string line; std::getline(in, line);) {
        if (!line.empty() && line[0] != '#') k.lines.push_back(line);
      }
      known_.push_back(std::move(k));
    }
    std::sort(known_.begin(), known_.end(), [](const Known& a, const Known& b) { return a.id < b.id; });
  }
  std::string name() const override { return "shell_solution_replay"; }

  void act(std::span<const Request* const> requests, std::span<Decision> decisions) const override {
    for (size_t i = 0; i < requests.size(); ++i) {
      const Request& r = *requests[i];
      const std::string text = codec_->decode(r.prompt.ids());
      const Known* task = nullptr;
      int done = 0;
      size_t notes_at = 0;
      for (size_t at = text.find("NOTES task="); at != std::string::npos;
           at = text.find("NOTES task=", at + 1)) {
        const size_t end = text.find(' ', at + 11);
        const std::string id = text.substr(at + 11, end - at - 11);
        for (const auto& k : known_)
          if (k.id == id) task = &k;
        done = std::atoi(text.c_str() + text.find("done=", at) + 5);
        notes_at = at;
      }
      if (task == nullptr) {
        for (const auto& k : known_)
          if (text.find(k.instruction) != std::string::npos) task = &k;
      }
      const std::string open = "<|im_start|>assistant\n";
      for (size_t at = text.find(open, notes_at); at != std::string::npos; at = text.find(open, at + 1)) {
        if (text.compare(at + open.size(), 5, "NOTES") != 0 && at + open.size() < text.size()) ++done;
      }
      std::string reply;
      if (r.role == Role::kSummarize) {
        reply = "NOTES task=" + (task ? task->id : std::string("unknown")) + " done=" + std::to_string(done) +
                " ";
      } else if (task != nullptr && done < static_cast<int>(task->lines.size())) {
        reply = task->lines[done];
      } else {
        reply = "submit";
      }
      Decision& d = decisions[i];
      d = Decision{};
      d.tokens = codec_->encode_action(reply);
      if (static_cast<int64_t>(d.tokens.size()) > r.max_new_tokens) d.tokens.resize(r.max_new_tokens);
      d.logprobs.assign(d.tokens.size(), 0.0f);
    }
  }

 private:
  struct Known {
    std::string id, instruction;
    std::vector<std::string> lines;
  };
  std::shared_ptr<const Codec> codec_;
  std::string tasks_dir_;
  std::vector<Known> known_;
};

const PolicyRegistrar kShellSolutionReplayRegistrar(
    {"shell_solution_replay",
     "replays a shell task's solution/solve.sh line by line, then submits",
     {{"tasks_dir", ParamType::kString, "data/shell_tasks", "the shell tasks folder"}},
     [](const Params& params, const PolicyTarget& target) -> std::unique_ptr<Policy> {
       return std::make_unique<ShellSolutionReplay>(target.codec, params.get_string("tasks_dir"));
     }});

}  // namespace
}  // namespace crl
