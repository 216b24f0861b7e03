"""ART adapter: a compaction-gateway session's export as an OpenPipe ART `Trajectory`.

ART (`art.Trajectory`) trains on a conversation, `messages_and_choices`: plain messages (dicts) are context,
OpenAI `Choice` objects are the model's trainable answers; `additional_histories` holds further
conversations of the same trajectory (ART's answer to agents that compact their context), each a
`History(messages_and_choices=..., tools=...)`; all of them share the trajectory's `reward`. A compacted
rollout maps onto that directly: its last segment (context window) is the trajectory's own conversation and
every earlier segment, execution windows and summary requests alike, is one additional history, in order.

Inside a segment, the sampled runs of tokens (loss mask 1: crl_segments.model_calls) become Choices whose
`logprobs.content` carries the sampled token ids as "token_id:<id>" tokens with the upstream's own log-probs
(the convention of vLLM's return_tokens_as_token_ids), so nothing trainable is re-tokenized; everything else
(the prompt, observations, copied summary and tail) is split into ChatML turns ("<|im_start|>ROLE\\n...
<|im_end|>", the chatml template and Qwen's) and becomes plain messages. Give `decode` (ids -> text: the
policy's tokenizer, e.g. `tokenizer.decode`) and the harness's `tools`.

    import art
    from crl_art import export_to_trajectory
    # after the harness's rollout through the gateway (base URL {crl}/v1/sessions/{sid}/v1):
    requests.post(f"{crl}/v1/sessions/{sid}/reward", json={"reward": r, "status": "completed"})
    exported = requests.get(f"{crl}/v1/sessions/{sid}/export").json()
    trajectory = export_to_trajectory(exported, decode=tokenizer.decode, tools=TOOLS)
    groups = [art.TrajectoryGroup([trajectory, ...])]
    await model.train(groups)

Standard library only: the real `art.Trajectory` / `History` (and openai's `Choice`) are used when importable,
else stand-ins with the same field names (pass your own with `classes=(Trajectory, History, make_choice)`, where
`make_choice` takes one dict of a Choice's fields, e.g. openai's `Choice.model_validate`).
"""

import dataclasses
import re

from crl_segments import check_rollout, floats, ints, model_calls

_TURN = re.compile(r"<\|im_start\|>([A-Za-z_]+)\n(.*?)<\|im_end\|>", re.S)
_END_OF_TURN = "<|im_end|>"


def _classes():
    trajectory = history = choice = None
    try:
        from art.trajectories import History, Trajectory  # noqa: PLC0415

        trajectory, history = Trajectory, History
    except ImportError:
        pass
    try:
        from openai.types.chat.chat_completion import Choice  # noqa: PLC0415

        choice = Choice.model_validate
    except ImportError:
        pass

    @dataclasses.dataclass
    class History:
        messages_and_choices: list
        tools: object = None

    @dataclasses.dataclass
    class Trajectory:
        messages_and_choices: list = dataclasses.field(default_factory=list)
        tools: object = None
        additional_histories: list = dataclasses.field(default_factory=list)
        reward: float = 0.0
        metrics: dict = dataclasses.field(default_factory=dict)
        metadata: dict = dataclasses.field(default_factory=dict)
        logs: list = dataclasses.field(default_factory=list)

    @dataclasses.dataclass
    class Choice:
        finish_reason: str
        index: int
        message: dict
        logprobs: dict = None

    return trajectory or Trajectory, history or History, choice or (lambda d: Choice(**d))


def _turn_messages(text):
    """The complete ChatML turns of template text, as messages (a trailing open header is the next answer's)."""
    return [{"role": role, "content": content} for role, content in _TURN.findall(text)]


def segment_messages(segment, decode, make_choice):
    """One segment's window as ART messages and Choices (see the module docstring)."""
    prompt = ints(segment.get("prompt_ids"))
    response = ints(segment.get("response_ids"))
    logprobs = floats(segment.get("rollout_log_probs"))
    out, context, at = [], list(prompt), 0
    finish = str((segment.get("metadata") or {}).get("finish_reason", "stop")) or "stop"
    for start, end in model_calls(segment):
        context += response[at:start]
        out += _turn_messages(decode(context))
        context = []
        ids = response[start:end]
        text = decode(ids)
        if text.endswith(_END_OF_TURN):
            text = text[: -len(_END_OF_TURN)]
        out.append(make_choice({
            "finish_reason": finish if end == len(response) else "stop",
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": {"content": [{"token": f"token_id:{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
                                     for t, lp in zip(ids, logprobs[start:end])]},
        }))
        at = end
    context += response[at:]
    # What follows the last answer (an observation the rollout ended on) carries nothing trainable; its complete
    # turns are kept as context all the same.
    out += _turn_messages(decode(context))
    return out


def export_to_trajectory(exported, decode, tools=None, classes=None):
    """A gateway export (GET /v1/sessions/{id}/export, after the reward) -> an ART Trajectory: the last
    segment's conversation, the earlier segments as additional_histories (in order), the rollout's reward,
    metrics (segments, summaries, compactions, sampled tokens) and metadata (the export's, scalars only)."""
    segments = check_rollout(list(exported.get("segments") or []))
    trajectory_cls, history_cls, make_choice = classes or _classes()
    conversations = [segment_messages(s, decode, make_choice) for s in segments]
    last = segments[-1]
    metadata = {k: v for k, v in (last.get("metadata") or {}).items() if isinstance(v, (str, int, float, bool))}
    # The export (ExportResponse) is episode_id + segments: the rollout's status is on its segments.
    metadata.update({"rollout_id": str(last.get("rollout_id", "")),
                     "status": str(exported.get("status") or last.get("status", ""))})
    return trajectory_cls(
        messages_and_choices=conversations[-1],
        tools=tools,
        additional_histories=[history_cls(messages_and_choices=c, tools=tools) for c in conversations[:-1]],
        reward=float(exported.get("reward", last.get("reward", 0.0))),
        metrics={"segments": len(segments),
                 "summary_segments": sum(1 for s in segments if s.get("kind") == "summary"),
                 "compactions": int((last.get("metadata") or {}).get("compactions", 0)),
                 "sampled_tokens": sum(sum(ints(s.get("loss_mask"))) for s in segments)},
        metadata=metadata,
    )
