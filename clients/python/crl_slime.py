"""slime adapter: run one CompactionRL episode on `crl serve` per prompt and hand slime one Sample per segment.

Use with slime's hooks:

    --custom-generate-function-path crl_slime.generate
    --custom-reward-post-process-path crl_slime.post_process_rewards

Two modes. Rollout mode (the default when an LLM server is configured, the least glue): the engine itself runs
the whole episode against the SGLang router slime already serves (or any SGLang / vLLM server) through
POST /v1/rollouts, token in / token out, and answers with the segments. Step mode: `generate(args, sample,
sampling_params)` runs one episode in step mode: the trainer's own sampling function
produces every action and every summary (token ids and log-probs as sampled, never re-tokenized), the server
keeps the budgeted context, asks for summaries when the trigger fires, and rebuilds the context after them.
It returns one Sample per exported segment (execution and summary windows); all share `rollout_id`, the
episode's reward, group_index and index, so slime's per-rollout bookkeeping holds.

Configuration, from `args` (attributes are optional):
    crl_server_url      server address (default $CRL_SERVER_URL or http://127.0.0.1:7411)
    crl_env             environment name when the sample's metadata names none (default "memory_chain")
    crl_budget          dict of budget fields (capacity, reserve, tail_k, max_compactions, per_turn_cap,
                        summary_cap)
    crl_llm_url         rollout mode: the LLM server (default: http://{sglang_router_ip}:{sglang_router_port}
                        when slime's router is configured, else $CRL_LLM_URL)
    crl_llm_api         sglang (default) | openai
    crl_sample_function a callable, or crl_sample_function_path "module.function": the sampling function
                        (step mode; used when no LLM server is configured)
Per sample, `sample.metadata` may give env, task_id (or split + index), seed, params, budget, view.

Fleet routing: every request of a prompt group carries the session key `group-<group_index>` (header
X-Crl-Session, so `crl deploy haproxy` keeps a GRPO group on one backend) and each Sample gets it as
`session_id` (slime's key for the SGLang router's consistent hashing). Partial rollouts: `abort()` (call it
where slime aborts its SGLang engines) stops every in-flight episode of this process: step-mode episodes stop
before their next call and are deleted on the server, rollout-mode calls are cut (their connection is closed);
each comes back as the input sample with status ABORTED, so slime puts it back in its buffer. `rollout_id` is a
RolloutId: the export's string id, which also converts to a stable int (`int(s.rollout_id)`). Samples carry
`weight_versions` from the export's segment metadata when the LLM server reported them.

The sampling function: `sample_fn(prompt_ids, max_new_tokens, role, sampling_params)` (plain or async)
returning a dict {"token_ids": [...], "logprobs": [...], "finish_reason": "stop" | "length" | "abort"}; `role`
is "execute" or "summarize". Use make_generate(sample_fn, ...) to build a generate function around one.
"""

import asyncio
import importlib
import inspect
import math
import os
import threading

from crl_client import CrlError, Session, in_thread
from crl_segments import RolloutId, weight_versions


def _sample_class():
    try:
        from slime.utils.types import Sample  # noqa: PLC0415

        return Sample
    except ImportError:
        return None


def _load(path):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _status(sample_cls, status):
    enum = getattr(sample_cls, "Status", None)
    if enum is None:
        return status
    try:
        return enum(status)
    except ValueError:
        return enum.FAILED if hasattr(enum, "FAILED") else status


async def _call(fn, *a):
    result = fn(*a)
    if inspect.isawaitable(result):
        result = await result
    return result


class Aborted(Exception):
    """An in-flight episode stopped by abort()."""


class _Flight:
    """One in-flight generate call, so that abort() can reach it from any thread."""

    def __init__(self, session):
        self.session = session
        self.aborted = threading.Event()

    def abort(self):
        self.aborted.set()
        # Cut a long call (rollout mode) where it waits, reading or waiting for a connection place.
        self.session.cancel()

    def check(self):
        if self.aborted.is_set():
            raise Aborted("aborted by crl_slime.abort()")


_inflight_lock = threading.Lock()
_inflight = set()


def _start_flight(session):
    flight = _Flight(session)
    with _inflight_lock:
        _inflight.add(flight)
    return flight


def _end_flight(flight):
    with _inflight_lock:
        _inflight.discard(flight)


def abort():
    """Stops every generate call of this process that is in flight (slime's partial-rollout abort); returns how
    many were reached. Each returns its input sample with status ABORTED."""
    with _inflight_lock:
        flights = list(_inflight)
    for flight in flights:
        flight.abort()
    return len(flights)


def _run_episode_blocking(session, create_kwargs, sample_fn, sampling_params, loop, flight=None):
    """Runs the episode on a worker thread; sampling (possibly async) is sent back to the trainer's loop."""
    if flight is not None:
        flight.check()
    episode = session.create(**create_kwargs, wait_for_place=60.0)
    try:
        while not episode.done:
            if flight is not None:
                flight.check()
            params = dict(sampling_params or {})
            params["max_new_tokens"] = episode.max_new_tokens
            coroutine = _call(sample_fn, list(episode.prompt_ids), episode.max_new_tokens, episode.role, params)
            out = asyncio.run_coroutine_threadsafe(coroutine, loop).result() if loop else asyncio.run(coroutine)
            if flight is not None:
                flight.check()
            episode.step(token_ids=out["token_ids"], logprobs=out.get("logprobs") or None,
                         finish_reason=out.get("finish_reason", "stop"))
        return episode.export()
    finally:
        try:
            episode.delete()
        except (CrlError, OSError):
            pass


def segments_to_samples(segments, sample, sample_cls=None):
    """Export records -> Sample-shaped objects (one per segment), copying the prompt sample's identity."""
    sample_cls = sample_cls or type(sample)
    versions = weight_versions(segments)
    out = []
    for seg in segments:
        prompt_ids = [int(t) for t in seg.get("prompt_ids", [])]
        response_ids = [int(t) for t in seg.get("response_ids", [])]
        metadata = dict(getattr(sample, "metadata", None) or {})
        metadata.update(seg.get("metadata", {}))
        for key in ("rollout_id", "segment_index", "num_segments", "kind", "n_sampled", "n_after",
                    "compaction_index", "finish_reason", "task_id", "env"):
            metadata[key] = seg.get(key)
        metadata["critic_mask"] = [int(m) for m in seg.get("critic_mask", [])]
        s = sample_cls(group_index=getattr(sample, "group_index", None), index=getattr(sample, "index", None))
        s.prompt = getattr(sample, "prompt", "")
        s.label = getattr(sample, "label", None)
        s.tokens = prompt_ids + response_ids
        s.response = seg.get("response_text", "")
        s.response_length = len(response_ids)
        s.loss_mask = [int(m) for m in seg.get("loss_mask", [])]
        s.rollout_log_probs = [float(x) for x in seg.get("rollout_log_probs", [])]
        s.reward = float(seg.get("reward", 0.0))
        s.status = _status(sample_cls, seg.get("status", "completed"))
        if seg.get("status") == "failed":
            # An episode that failed after its first answer (an LLM call failed mid-way in rollout mode): its
            # partial segments, with the reason under the key a failed input sample has it (_failed).
            metadata["crl_error"] = str(metadata.get("reason") or "failed")
        s.metadata = metadata
        s.rollout_id = RolloutId(seg.get("rollout_id") or "")
        s.session_id = session_key(sample)
        s.weight_versions = list(versions)
        out.append(s)
    return out


def session_key(sample):
    """The fleet and router affinity key of a prompt group: every sample of a group shares it."""
    return f"group-{int(getattr(sample, 'group_index', 0) or 0)}"


def _aborted(sample):
    sample.status = _status(type(sample), "aborted")
    return sample


def _server_url(args, server_url=None):
    return server_url or getattr(args, "crl_server_url", None) or os.environ.get(
        "CRL_SERVER_URL", "http://127.0.0.1:7411")


def _create_kwargs(args, sample, env=None, budget=None):
    """The episode of one prompt sample: env, task, seed, indices and budget from the sample's metadata and args."""
    meta = dict(getattr(sample, "metadata", None) or {})
    create = {
        "env": meta.get("env") or env or getattr(args, "crl_env", None) or "memory_chain",
        "seed": int(meta.get("seed", getattr(args, "seed", 0) or 0)),
        "group_index": int(getattr(sample, "group_index", 0) or 0),
        "sample_index": int(getattr(sample, "index", 0) or 0),
        "budget": meta.get("budget") or budget or getattr(args, "crl_budget", None),
        "params": meta.get("params"),
        "view": meta.get("view"),
    }
    if "split" in meta:
        create["split"], create["index"] = meta["split"], int(meta.get("index", 0))
    else:
        create["task_id"] = str(meta.get("task_id") or f"task-{create['group_index']}")
    return create


def _llm_url(args):
    url = getattr(args, "crl_llm_url", None)
    if url:
        return url
    ip, port = getattr(args, "sglang_router_ip", None), getattr(args, "sglang_router_port", None)
    if ip and port:
        return f"http://{ip}:{port}"
    return os.environ.get("CRL_LLM_URL")


def _failed(sample, error):
    sample.status = _status(type(sample), "failed")
    sample.metadata = dict(getattr(sample, "metadata", None) or {}, crl_error=str(error))
    return sample


def make_rollout_generate(llm_url=None, api=None, server_url=None, env=None, budget=None, binary=False,
                          timeout=3600.0):
    """A slime custom generate function in rollout mode: one POST /v1/rollouts per prompt sample; the engine
    samples every action and summary from the LLM server itself (token ids and log-probs as the server sent
    them) and returns the segments, which become one Sample each. slime's sampling_params (temperature, top_p,
    top_k) are passed on; max_new_tokens is the engine's (clamped to the budget)."""

    async def generate(args, sample, sampling_params):
        url = llm_url or _llm_url(args)
        if not url:
            return _failed(sample, "no LLM server: set crl_llm_url (or slime's sglang router, or $CRL_LLM_URL)")
        create = {k: v for k, v in _create_kwargs(args, sample, env, budget).items() if v is not None}
        params = dict(sampling_params or {})
        llm = {"base_url": url, "api": api or getattr(args, "crl_llm_api", None) or "sglang",
               "model": getattr(args, "crl_llm_model", None)}
        for key in ("temperature", "top_p", "top_k"):
            if params.get(key) is not None:
                llm[key] = params[key]
        session = Session(_server_url(args, server_url), binary=binary, session_key=session_key(sample))
        flight = _start_flight(session)
        try:
            flight.check()
            answer = await in_thread(session.rollouts, [create], llm, timeout)
        except Aborted:
            return _aborted(sample)
        except (CrlError, OSError) as error:
            return _aborted(sample) if flight.aborted.is_set() else _failed(sample, error)
        finally:
            _end_flight(flight)
            session.close()
        rollout = answer["rollouts"][0]
        if not rollout.get("segments"):
            # An episode that failed before its first answer has no segment: a failed sample.
            return _failed(sample, rollout.get("reason") or rollout.get("status"))
        return segments_to_samples(rollout["segments"], sample)

    return generate


def make_generate(sample_fn, server_url=None, env=None, budget=None, binary=False):
    """A slime custom generate function around `sample_fn` (see the module docstring)."""

    async def generate(args, sample, sampling_params):
        url = _server_url(args, server_url)
        create = _create_kwargs(args, sample, env, budget)
        loop = asyncio.get_running_loop()
        session = Session(url, binary=binary, session_key=session_key(sample))
        flight = _start_flight(session)
        try:
            segments = await in_thread(_run_episode_blocking, session, create, sample_fn, sampling_params,
                                               loop, flight)
        except Aborted:
            return _aborted(sample)
        except (CrlError, OSError) as error:
            # A failed episode is a failed sample, never a crashed run.
            return _aborted(sample) if flight.aborted.is_set() else _failed(sample, error)
        finally:
            _end_flight(flight)
            session.close()
        return segments_to_samples(segments, sample)

    return generate


async def generate(args, sample, sampling_params):
    """The hook for --custom-generate-function-path: rollout mode when an LLM server is configured (crl_llm_url,
    slime's sglang router, or $CRL_LLM_URL) and no sampling function is given; step mode otherwise."""
    sample_fn = getattr(args, "crl_sample_function", None)
    if sample_fn is None and not getattr(args, "crl_sample_function_path", None) and _llm_url(args):
        return await make_rollout_generate()(args, sample, sampling_params)
    if sample_fn is None:
        sample_fn = _load(args.crl_sample_function_path)
    return await make_generate(sample_fn)(args, sample, sampling_params)


def post_process_rewards(args, samples):
    """slime's reward post-process hook: normalizes ONE reward per (group_index, rollout_id) within each group
    (mean, and std unless args.grpo_std_normalization is False), then gives it to every segment of the rollout.
    A rollout with many segments therefore counts once; a failed sample (reward None) counts as one rollout with
    reward 0 in its group. Returns (raw_rewards, rewards) aligned with samples."""
    flat = [s for item in samples for s in (item if isinstance(item, (list, tuple)) else [item])]
    # A failed sample (the input sample of a failed episode, see _failed) has no reward: it scores 0, as the engine
    # scores an episode that failed after its first answer (whose segments come back with reward 0), so a group
    # whose rollouts fail is not normalised as if they had not been tried.
    raw = [0.0 if s.reward is None else float(s.reward) for s in flat]

    def rollout_key(i, s):
        meta = getattr(s, "metadata", None) or {}
        rollout = getattr(s, "rollout_id", None) or meta.get("rollout_id")
        # A sample without a rollout id (a failed one) is a rollout of its own, counted once in its own group:
        # never merged with other failed samples or with a rollout whose id is missing.
        return (getattr(s, "group_index", None), rollout if rollout else ("no rollout id", i))

    keys = [rollout_key(i, s) for i, s in enumerate(flat)]
    per_rollout = {}
    for key, r in zip(keys, raw):
        per_rollout.setdefault(key, r)
    if not getattr(args, "rewards_normalization", True):
        return raw, list(raw)
    groups = {}
    for (group, rollout), r in per_rollout.items():
        groups.setdefault(group, []).append(r)
    use_std = getattr(args, "grpo_std_normalization", True)
    stats = {}
    for group, values in groups.items():
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / max(len(values) - 1, 1)) if len(values) > 1 else 0.0
        stats[group] = (mean, std)
    normalized = []
    for key in keys:
        mean, std = stats[key[0]]
        value = per_rollout[key] - mean
        if use_std:
            value /= std + 1e-6
        normalized.append(value)
    return raw, normalized
