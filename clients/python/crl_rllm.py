"""rLLM adapter: a CompactionRL rollout from `crl serve` as an rLLM `Episode`.

rLLM's workflow engine trains on `Episode`s: an Episode holds `trajectories`, a Trajectory holds `steps`, a
Step holds the token ids of one model call (`prompt_ids`, `response_ids`, `logprobs`). A compacted rollout
becomes one Episode whose trajectories are its segments, in order (`name` "execution" or "summary", so rLLM's
per-role grouping can tell the summarizer from the actor), and each segment's model calls are its steps
(crl_segments.model_calls: each run of sampled tokens, prompted by everything before it in the window; the
steps of one segment are cumulative, which is what rLLM merges into one training sequence). Ids and log-probs
are the export's own. Every trajectory carries the rollout's terminal reward; the last step of the last
segment has `done = True` and the reward, earlier steps 0.

    from crl_rllm import CrlWorkflow
    workflow = CrlWorkflow(server_url="http://127.0.0.1:7411",
                           llm={"base_url": "http://127.0.0.1:30000", "api": "sglang"},
                           env="synthetic", budget={"capacity": 4096, "reserve": 1024})
    episode = await workflow.run({"split": "dev", "index": 3}, uid="dev-3:0")   # an rllm Episode
    # or convert answers you already have: rollout_to_episode(answer["rollouts"][0], uid="dev-3:0")

The real rllm classes are used when `rllm` is importable; otherwise stand-ins with the same field names
(pass your own with `classes=(Episode, Trajectory, Step)`).
"""

import dataclasses
import uuid

from crl_client import Session, in_thread
from crl_segments import call_fields, check_rollout, model_calls, rollout_int_id


def _classes():
    try:
        from rllm.agents.agent import Episode, Step, Trajectory  # noqa: PLC0415

        return Episode, Trajectory, Step
    except ImportError:
        pass

    @dataclasses.dataclass
    class Step:
        prompt_ids: list = dataclasses.field(default_factory=list)
        response_ids: list = dataclasses.field(default_factory=list)
        logprobs: list = dataclasses.field(default_factory=list)
        chat_completions: list = dataclasses.field(default_factory=list)
        model_response: str = ""
        info: dict = dataclasses.field(default_factory=dict)
        reward: float = 0.0
        done: bool = False
        mc_return: float = 0.0
        advantage: object = None

    @dataclasses.dataclass
    class Trajectory:
        uid: str = dataclasses.field(default_factory=lambda: str(uuid.uuid4()))
        name: str = "default_traj_name"
        task: object = None
        steps: list = dataclasses.field(default_factory=list)
        reward: float = None
        info: dict = dataclasses.field(default_factory=dict)

    @dataclasses.dataclass
    class Episode:
        id: str = ""
        task: object = None
        termination_reason: object = None
        is_correct: bool = False
        trajectories: list = dataclasses.field(default_factory=list)
        metrics: dict = dataclasses.field(default_factory=dict)
        info: dict = dataclasses.field(default_factory=dict)

    return Episode, Trajectory, Step


def rollout_to_episode(rollout, uid=None, task=None, classes=None):
    """One rollout answer (from POST /v1/rollouts, or {"segments": episode.export(), "reward": r, ...}) -> an
    Episode. `uid` is rLLM's "task_id:rollout_idx" (default: task id and sample index of the export).
    A rollout without segments gives an Episode without trajectories and `info["crl_status"]` saying why."""
    episode_cls, trajectory_cls, step_cls = classes or _classes()
    segments = rollout.get("segments") or []
    if segments:
        check_rollout(segments)
    first = segments[0] if segments else {}
    reward = float(rollout.get("reward", segments[-1].get("reward", 0.0) if segments else 0.0))
    uid = uid or f"{first.get('task_id', rollout.get('rollout_id', ''))}:{int(first.get('sample_index', 0))}"
    trajectories = []
    for j, seg in enumerate(segments):
        steps = []
        calls = model_calls(seg)
        for k, (start, end) in enumerate(calls):
            last = j == len(segments) - 1 and k == len(calls) - 1
            fields = call_fields(seg, start, end)
            steps.append(step_cls(prompt_ids=fields["prompt_ids"], response_ids=fields["response_ids"],
                                  logprobs=fields["logprobs"], reward=reward if last else 0.0, done=last,
                                  info={"segment_index": j, "call_index": k, "kind": seg.get("kind")}))
        trajectories.append(trajectory_cls(
            uid=f"{seg.get('rollout_id', '')}#{j}", name=seg.get("kind", "execution"), task=task, steps=steps,
            reward=reward,
            info={"segment_index": j, "num_segments": len(segments), "n_after": int(seg.get("n_after", 0)),
                  "compaction_index": int(seg.get("compaction_index", 0)),
                  "critic_mask": [int(m) for m in seg.get("critic_mask", [])],
                  "metadata": dict(seg.get("metadata") or {})}))
    status = rollout.get("status", first.get("status", "failed" if not segments else "completed"))
    info = {"crl_status": status, "crl_reason": rollout.get("reason", ""),
            "rollout_id": first.get("rollout_id", rollout.get("rollout_id", "")),
            "rollout_int_id": rollout_int_id(first.get("rollout_id", rollout.get("rollout_id", "")))}
    return episode_cls(id=uid, task=task, is_correct=reward > 0 and status == "completed",
                       trajectories=trajectories,
                       metrics={"compactions": float(rollout.get("compactions", len(segments) // 2)),
                                "segments": float(len(segments))},
                       info=info)


def _split_uid(uid):
    """rLLM's episode uid "TASK:INDEX" -> (task id, rollout index). The index follows the LAST colon, since a task id
    may contain colons ("a:b:3" is task "a:b", rollout 3); a uid without a colon is rollout 0 of task `uid`."""
    text = str(uid)
    if ":" not in text:
        return text, 0
    task, _, index = text.rpartition(":")
    if not task or not (index.isascii() and index.isdigit()):
        raise ValueError(f"uid {text!r}: expected TASK:INDEX (the rollout index after the last colon, a "
                         "non-negative integer)")
    return task, int(index)


class CrlWorkflow:
    """Runs one rollout per task on `crl serve` (rollout mode) and returns rLLM Episodes."""

    def __init__(self, server_url, llm, env="synthetic", budget=None, seed=0, timeout=3600.0, classes=None):
        self.server_url, self.llm, self.env, self.budget = server_url, dict(llm), env, budget
        self.seed, self.timeout, self.classes = seed, timeout, classes

    async def run(self, task, uid):
        """task: {split + index | task_id, seed, params, budget, env}; uid: "task_id:rollout_idx"."""
        uid_task, rollout_idx = _split_uid(uid)
        episode = {"env": task.get("env", self.env), "seed": int(task.get("seed", self.seed)),
                   "sample_index": rollout_idx, "budget": task.get("budget", self.budget),
                   "params": task.get("params"), "rollout_id": str(uid)}
        if "split" in task:
            episode["split"], episode["index"] = task["split"], int(task.get("index", 0))
        else:
            episode["task_id"] = str(task.get("task_id") or uid_task)
        episode = {k: v for k, v in episode.items() if v is not None}

        def run():
            with Session(self.server_url) as session:
                return session.rollouts([episode], self.llm, self.timeout)

        answer = await in_thread(run)
        return rollout_to_episode(answer["rollouts"][0], uid=str(uid), task=task, classes=self.classes)
