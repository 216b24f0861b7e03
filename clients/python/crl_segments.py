"""What every trainer adapter needs from an export (PROTOCOL.md section 1), standard library only.

A rollout is a list of segment dicts (one per context window, chronological). The adapters (crl_slime,
crl_skyrl, crl_rllm) reshape them; the rules they share live here so that they agree:

* `model_calls(segment)`: a segment's response interleaves the policy's sampled tokens (loss_mask 1) with
  environment observations and copied tokens (loss_mask 0). Each maximal run of sampled tokens is one model
  call, and its prompt is the segment's prompt followed by the response before the run. This is what step-wise
  trainers (rLLM's Step, SkyRL's per-step outputs) call a step; the ids and log-probs are the export's own,
  never re-tokenized.
* `rollout_int_id(rollout_id)`: a stable non-negative 63-bit integer for a rollout id string (SHA-256 of its
  UTF-8 bytes), for trainers that key rollouts by int. `RolloutId` is a str that also works as that int.
* `check_rollout(segments)`: the invariants a trainer relies on (same rollout id, indices 0..n-1, masks and
  log-probs as long as the response); a violation raises ValueError naming the segment and field, so a
  malformed export never reaches a training batch silently.
"""

import hashlib


class RolloutId(str):
    """A rollout id string (equal to, and hashed as, the string) that also converts to a stable int."""

    def __int__(self):
        return rollout_int_id(self)

    def __index__(self):
        return rollout_int_id(self)


def rollout_int_id(rollout_id):
    digest = hashlib.sha256(str(rollout_id).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)


def ints(values):
    return [int(v) for v in values or []]


def floats(values):
    return [float(v) for v in values or []]


def check_rollout(segments):
    """Raises ValueError when the segments are not one well-formed rollout; returns them."""
    if not segments:
        raise ValueError("rollout has no segment")
    rollout = segments[0].get("rollout_id")
    for i, seg in enumerate(segments):
        where = f"segments[{i}]"
        if seg.get("rollout_id") != rollout:
            raise ValueError(f"{where}.rollout_id: {seg.get('rollout_id')!r}, expected {rollout!r} (one rollout)")
        if int(seg.get("segment_index", -1)) != i:
            raise ValueError(f"{where}.segment_index: {seg.get('segment_index')!r}, expected {i}")
        n = len(seg.get("response_ids", []))
        for field in ("loss_mask", "rollout_log_probs"):
            if len(seg.get(field, [])) != n:
                raise ValueError(f"{where}.{field}: {len(seg.get(field, []))} entries, expected {n} "
                                 "(one per response token)")
    return segments


def model_calls(segment):
    """[(start, end)] of every maximal run of sampled tokens (loss_mask 1) in the segment's response."""
    mask = ints(segment.get("loss_mask"))
    runs, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    return runs


def call_fields(segment, start, end):
    """prompt_ids / response_ids / logprobs of one model call of a segment (see the module docstring)."""
    prompt = ints(segment.get("prompt_ids"))
    response = ints(segment.get("response_ids"))
    logprobs = floats(segment.get("rollout_log_probs"))
    return {"prompt_ids": prompt + response[:start], "response_ids": response[start:end],
            "logprobs": logprobs[start:end]}


def weight_versions(segments):
    """The distinct policy weight versions that sampled the rollout, in order of first use, for off-policy
    bookkeeping: the export's metadata `weight_versions` (comma-separated, written when the LLM server reports
    SGLang's meta_info.weight_version) or a single `weight_version`."""
    seen = []
    for seg in segments:
        meta = seg.get("metadata") or {}
        listed = [v for v in str(meta.get("weight_versions", "")).split(",") if v]
        for version in listed or ([meta["weight_version"]] if meta.get("weight_version") else []):
            if version not in seen:
                seen.append(version)
    return seen
