"""SkyRL adapter: CompactionRL rollouts from `crl serve` as SkyRL's step-wise `GeneratorOutput`.

SkyRL's trainer asks a generator (`GeneratorInterface.generate(input_batch) -> GeneratorOutput`) for token
ids, loss masks, rewards and log-probs. With step-wise training (`generator.step_wise_trajectories`), one
output entry is one step and `is_last_step` marks the last step of each trajectory; the trainer computes the
advantage on the last step and gives it to every step with the same `trajectory_ids` entry. A compacted
rollout maps onto that exactly: one entry per segment (each context window, execution and summary), all
segments of a rollout share its `TrajectoryID`, and only the last segment is the last step. Token ids,
masks and log-probs are the export's own (never re-tokenized).

    from crl_skyrl import CrlGenerator
    generator = CrlGenerator(server_url="http://127.0.0.1:7411",
                             llm={"base_url": "http://127.0.0.1:30000", "api": "sglang"},
                             env="synthetic", budget={"capacity": 4096, "reserve": 1024})
    # in your trainer's entry point, instead of SkyRLGymGenerator:
    trainer = RayPPOTrainer(cfg, generator=generator, ...)

Each prompt's `env_extras` entry may carry `crl` = {env, task_id or split + index, seed, params, budget}; a
prompt without one uses the generator's defaults and its position as the task index. The batch's
`trajectory_ids` give each rollout's sample index (its repetition id); without them, the repetitions of one
prompt get 0, 1, ... in batch order, so that they are distinct rollouts and trajectories. The engine samples
every action and summary from the LLM server (POST /v1/rollouts, rollout mode), so SkyRL's own inference
engines serve the calls when `llm.base_url` is their HTTP endpoint; the batch's calls go there at once (without
`max_in_flight` in `llm`: the batch size, up to the server's `--max-llm-in-flight`, from GET /v1/info). Rewards
are token-level lists: the
rollout's terminal reward on the last response token of its last segment, 0 elsewhere.

Standard library only: the real `TrajectoryID` is used when skyrl_train is importable, else a stand-in with
the same fields (`instance_id`, `repetition_id`).
"""

import dataclasses
import json

from crl_client import Session, in_thread
from crl_segments import check_rollout, floats, ints


def _trajectory_id_class():
    try:
        from skyrl_train.generators.base import TrajectoryID  # noqa: PLC0415

        return TrajectoryID
    except ImportError:

        @dataclasses.dataclass
        class TrajectoryID:
            instance_id: str
            repetition_id: int

            def to_string(self):
                return f"{self.instance_id}_{self.repetition_id}"

        return TrajectoryID


_STOP_REASONS = {"stop": "stop", "length": "length", "abort": "abort", "": "stop"}


def rollouts_to_generator_output(rollouts, trajectory_ids=None, trajectory_id_cls=None):
    """Rollout answers (the `rollouts` list of POST /v1/rollouts, each with `segments`) -> a step-wise
    GeneratorOutput dict. `trajectory_ids[i]` is the TrajectoryID of rollout i (default: instance id = the
    rollout's task id, repetition id = its sample index). A rollout without segments (failed before its first
    answer) contributes nothing and is counted in rollout_metrics."""
    trajectory_id_cls = trajectory_id_cls or _trajectory_id_class()
    out = {"prompt_token_ids": [], "response_ids": [], "rewards": [], "loss_masks": [], "stop_reasons": [],
           "rollout_logprobs": [], "trajectory_ids": [], "is_last_step": [], "rollout_metrics": {}}
    dropped = segments_total = compactions = 0
    for i, rollout in enumerate(rollouts):
        segments = rollout.get("segments") or []
        if not segments:
            dropped += 1
            continue
        check_rollout(segments)
        if trajectory_ids is not None:
            tid = trajectory_ids[i]
        else:
            tid = trajectory_id_cls(instance_id=str(segments[0].get("task_id", i)),
                                    repetition_id=int(segments[0].get("sample_index", 0)))
        reward = float(rollout.get("reward", segments[-1].get("reward", 0.0)))
        compactions += int(rollout.get("compactions", 0))
        for j, seg in enumerate(segments):
            last = j == len(segments) - 1
            response = ints(seg.get("response_ids"))
            token_rewards = [0.0] * len(response)
            if last and token_rewards:
                token_rewards[-1] = reward
            out["prompt_token_ids"].append(ints(seg.get("prompt_ids")))
            out["response_ids"].append(response)
            out["rewards"].append(token_rewards)
            out["loss_masks"].append(ints(seg.get("loss_mask")))
            out["stop_reasons"].append(_STOP_REASONS.get(seg.get("finish_reason", ""), seg.get("finish_reason")))
            out["rollout_logprobs"].append(floats(seg.get("rollout_log_probs")))
            out["trajectory_ids"].append(tid)
            out["is_last_step"].append(last)
            segments_total += 1
    kept = len(rollouts) - dropped
    out["rollout_metrics"] = {
        "crl/rollouts": float(kept),
        "crl/failed_rollouts": float(dropped),
        "crl/segments_per_rollout": segments_total / kept if kept else 0.0,
        "crl/compactions_per_rollout": compactions / kept if kept else 0.0,
    }
    return out


class CrlGenerator:
    """A SkyRL generator (duck-types `GeneratorInterface`): `await generate(input_batch)` runs one rollout per
    prompt on `crl serve` in rollout mode and returns the step-wise GeneratorOutput."""

    def __init__(self, server_url, llm, env="synthetic", budget=None, seed=0, timeout=3600.0):
        self.server_url, self.llm, self.env, self.budget = server_url, dict(llm), env, budget
        self.seed, self.timeout = seed, timeout

    def episode(self, i, extras, trajectory_id):
        crl = dict((extras or {}).get("crl") or {})
        episode = {"env": crl.get("env", self.env), "seed": int(crl.get("seed", self.seed)),
                   "group_index": int(crl.get("group_index", i)),
                   "sample_index": int(getattr(trajectory_id, "repetition_id", 0) if trajectory_id else 0),
                   "budget": crl.get("budget", self.budget), "params": crl.get("params")}
        if "split" in crl:
            episode["split"], episode["index"] = crl["split"], int(crl.get("index", 0))
        else:
            episode["task_id"] = str(crl.get("task_id") or
                                     (trajectory_id.instance_id if trajectory_id is not None else f"task-{i}"))
        if trajectory_id is not None:
            episode["rollout_id"] = trajectory_id.to_string()
        return {k: v for k, v in episode.items() if v is not None}

    async def generate(self, input_batch):
        prompts = input_batch.get("prompts") or []
        extras = input_batch.get("env_extras") or [None] * len(prompts)
        tids = input_batch.get("trajectory_ids")
        episodes = [self.episode(i, extras[i], tids[i] if tids else None) for i in range(len(prompts))]
        if not tids:
            # Without trajectory ids every repetition of a prompt (SkyRL repeats each n_samples_per_prompt times)
            # would be sample 0 of the same task and seed: the same rollout, and one TrajectoryID(task, 0) in the
            # output. Each copy of an episode in the batch gets its own sample index instead (0, 1, ... in order),
            # which is also its repetition id in the output.
            copies = {}
            for episode in episodes:
                key = json.dumps({k: v for k, v in episode.items() if k not in ("group_index", "sample_index")},
                                 sort_keys=True, default=str)
                episode["sample_index"] = copies.get(key, 0)
                copies[key] = episode["sample_index"] + 1
        llm = dict(self.llm)
        for key in ("temperature", "top_p", "top_k"):
            value = (input_batch.get("sampling_params") or {}).get(key)
            if value is not None:
                llm[key] = value

        def run():
            with Session(self.server_url) as session:
                if not llm.get("max_in_flight") and episodes:
                    # The whole batch at the inference server at once, as SkyRL's own generator sends it (the
                    # server's default is 64), up to the server's limit.
                    limit = int((session.info().get("limits") or {}).get("max_llm_in_flight") or 0)
                    llm["max_in_flight"] = min(len(episodes), limit) if limit > 0 else len(episodes)
                return session.rollouts(episodes, llm, self.timeout)

        answer = await in_thread(run)
        return rollouts_to_generator_output(answer["rollouts"], tids)
