#include "envs/synthetic/oracle_episode.h"

#include <algorithm>

#include "engine/error.h"
#include "envs/synthetic/oracle.h"
#include "envs/synthetic/synthetic_env.h"

namespace crl::envs::synthetic {

Trajectory play_oracle(std::unique_ptr<Env> env, std::shared_ptr<const Codec> codec, EpisodeConfig config,
                       const Task& task) {
  const auto* synthetic = dynamic_cast<const SyntheticEnv*>(env.get());
  if (synthetic == nullptr) throw Error("oracle", "env", "the oracle plays the synthetic suite only");
  const bool symbolic = codec->view_name() == "symbolic";
  Episode episode(std::move(env), codec, std::move(config));
  episode.start(task);
  Oracle oracle(synthetic->task(), symbolic, codec->reasoning());
  while (!episode.done()) {
    Decision decision;
    if (episode.request().role == Role::kSummarize) {
      decision.tokens = symbolic ? oracle.summary_symbols(synthetic->records_seen())
                                 : codec->encode_action(oracle.summary_text(synthetic->records_seen()));
    } else {
      const Action action = oracle.act();
      decision.tokens = symbolic ? action.symbols : codec->encode_action(action.text);
    }
    const auto cap = static_cast<size_t>(std::max<int64_t>(0, episode.request().max_new_tokens));
    if (decision.tokens.size() > cap) decision.tokens.resize(cap);
    episode.submit(decision);
  }
  return episode.finish();
}

}  // namespace crl::envs::synthetic
