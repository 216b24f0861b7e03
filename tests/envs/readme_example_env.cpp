// The smallest environment of envs/README.md, compiled verbatim into the test binary: it shows that
// "copy a folder, rename, register" works, and the conformance battery drives it (its entry "echo").
// Keep it identical to the README (tests/envs/conformance_test.cpp checks).
#include "envs/registry.h"

namespace crl {
namespace {

class Echo final : public Env {
 public:
  explicit Echo(int64_t turns) : turns_(turns) {
    spec_.name = "echo";
    spec_.description = "repeats the action; ends after `turns` turns";
    spec_.params = {{"turns", ParamType::kInt, "3", "turns per episode"}};
    spec_.max_observation_bytes = 4096;
  }
  const EnvSpec& spec() const override { return spec_; }

 protected:
  Start do_reset(const Task& task, Rng&) override { return {{"Say anything.", {}}, {"task " + task.id, {}}}; }
  StepResult do_step(const Action& action) override {
    StepResult r;
    std::string said = action.text.substr(0, 4000);
    for (char& c : said) {
      if (c < ' ' || c > '~') c = '?';  // observations must be valid UTF-8 text (the battery checks)
    }
    r.observation.text = "you said: " + said;
    r.terminated = steps() + 1 >= turns_;
    r.reward = r.terminated ? 1.0 : 0.0;
    return r;
  }

 private:
  EnvSpec spec_;
  int64_t turns_;
};

const EnvRegistrar kEchoRegistrar({"echo",
                                   "repeats the action",
                                   {{"turns", ParamType::kInt, "3", "turns"}},
                                   [](const Params& p) -> std::unique_ptr<Env> {
                                     return std::make_unique<Echo>(p.get_int("turns"));
                                   }});

}  // namespace
}  // namespace crl
