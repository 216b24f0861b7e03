"""Tests of the Python client and the slime adapter against a real `crl serve` on loopback (issue 6).

Run by ctest (tests/server/CMakeLists.txt) with CRL_BIN (the crl binary) and CRL_PROTO_PY (generated
protobuf modules, for the binary encoding) set; slime is not needed: a minimal stand-in for its Sample is
defined here.
"""

import asyncio
import dataclasses
import enum
import os
import re
import signal
import struct
import subprocess
import sys
import threading
import time
import types
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import crl_client  # noqa: E402
import crl_slime  # noqa: E402
from crl_client import CrlError, Session  # noqa: E402

CRL_BIN = os.environ.get("CRL_BIN", os.path.join(HERE, "..", "..", "..", "build", "crl"))
CHAIN_BUDGET = {"capacity": 2560, "reserve": 768}
LLM_BIN = os.environ.get("CRL_LLM_SERVER_BIN", os.path.join(HERE, "..", "..", "..", "build", "crl_scripted_llm_server"))
# Summaries fit without truncating observations: a keeping summary loses no fact.
SYNTHETIC_BUDGET = {"capacity": 3072, "reserve": 1024, "summary_cap": 256}


class Server:
    """`crl serve --port 0` in a subprocess; the port comes from its first stdout line."""

    def __init__(self, *extra):
        self.proc = subprocess.Popen([CRL_BIN, "serve", "--port", "0", "--threads", "2", *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"unexpected first line {line!r}: {self.proc.stderr.read()}")
        self.url = "http://" + line[len("listening on "):]

    def stop(self, timeout=10):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return code


class LlmServer:
    """The scripted LLM server (tests/policies/llm) in a subprocess: SGLang /generate and OpenAI /v1/completions."""

    def __init__(self, *extra):
        self.proc = subprocess.Popen([LLM_BIN, *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"unexpected first line {line!r}: {self.proc.stderr.read()}")
        self.url = "http://127.0.0.1:" + line[len("listening on "):]

    def stop(self):
        self.proc.stdin.close()  # the server exits when its stdin closes
        self.proc.wait(timeout=10)
        self.proc.stdout.close()
        self.proc.stderr.close()


def chain_fact(prompt_text):
    """The last "FACT <digit>" in a prompt: the step-1 observation, or the summary copied into a resume."""
    return re.findall(r"FACT (\d)", prompt_text)[-1]


def play_chain(session, task_id="chain-1", seed=7, **kw):
    """Plays a memory chain with text actions, checking the client's prompt against the server's."""
    ep = session.create("memory_chain", task_id=task_id, seed=seed, budget=CHAIN_BUDGET, **kw)
    fact = chain_fact(ep.prompt_text)
    hashes = [ep.last["state_hash"]]
    summaries = 0
    while not ep.done:
        if ep.kind == "compaction_request":
            summaries += 1
            ep.step(text=f"FACT {fact}")
        elif "QUESTION" in ep.last.get("append_text", ""):
            ep.step(text=f"answer {fact}")
        else:
            ep.step(text="continue")
        hashes.append(ep.last["state_hash"])
        if not ep.done and len(hashes) % 17 == 0:
            state = ep.state()
            assert ep.prompt_ids == [int(t) for t in state["current"]["prompt_ids"]]
    return ep, hashes, summaries


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server("--idle-timeout", "30")

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def test_health_and_info(self):
        with Session(self.server.url) as s:
            self.assertEqual(s.health()["status"], "ok")
            info = s.info()
            self.assertIn("memory_chain", [e["name"] for e in info["environments"]])
            self.assertEqual(info["tokenizer"], "byte")
            self.assertTrue(info["tokenizer_fingerprint"])

    def test_episode_with_compactions_and_export(self):
        with Session(self.server.url) as s:
            ep, hashes, summaries = play_chain(s)
            self.assertEqual(summaries, 3)
            self.assertEqual(ep.status, "completed")
            self.assertEqual(ep.reward, 1.0)
            segments = ep.export()
            self.assertEqual([seg["kind"] for seg in segments], ["execution", "summary"] * 3 + ["execution"])
            self.assertEqual(len({seg["rollout_id"] for seg in segments}), 1)
            for seg in segments:
                self.assertEqual(len(seg["loss_mask"]), len(seg["response_ids"]))
            ep.delete()
            with self.assertRaises(CrlError) as err:
                ep.state()
            self.assertEqual(err.exception.status, 404)

    def test_same_requests_give_same_hashes(self):
        with Session(self.server.url) as s:
            _, a, _ = play_chain(s, task_id="det", seed=29)
            _, b, _ = play_chain(s, task_id="det", seed=29)
            self.assertEqual(a, b)

    def test_binary_protobuf_matches_json(self):
        try:
            b = Session(self.server.url, binary=True)
        except ImportError:
            self.skipTest("generated server_pb2 not available (CRL_PROTO_PY)")
        with b, Session(self.server.url) as j:
            _, hb, _ = play_chain(b, task_id="bin", seed=3)
            _, hj, _ = play_chain(j, task_id="bin", seed=3)
            self.assertEqual(hb, hj)

    def test_typed_errors(self):
        with Session(self.server.url) as s:
            with self.assertRaises(CrlError) as err:
                s.create("no_such_env", task_id="x")
            self.assertEqual((err.exception.status, err.exception.code, err.exception.field), (400, "unknown_env", "env"))
            ep = s.create("memory_chain", task_id="e", params={"length": 3, "reset_points": ""})
            with self.assertRaises(CrlError) as err:
                ep.step(text="x", kind="summary")
            self.assertEqual((err.exception.status, err.exception.code), (409, "wrong_action_kind"))
            # A retried turn returns the stored answer byte for byte (raw JSON over urllib).
            body = b'{"turn_id":0,"action":{"kind":"assistant","text":"continue"}}'
            answers = []
            for _ in range(2):
                req = urllib.request.Request(f"{self.server.url}/v1/episodes/{ep.id}/step", data=body,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req) as r:
                    answers.append(r.read())
            self.assertEqual(answers[0], answers[1])
            req = urllib.request.Request(f"{self.server.url}/v1/episodes", data=b'{"env": "memory_chain", "task_id": 5',
                                         headers={"Content-Type": "application/json"})
            with self.assertRaises(urllib.error.HTTPError) as http_err:
                urllib.request.urlopen(req)
            self.assertEqual(http_err.exception.code, 400)
            self.assertIn(b'"bad_json"', http_err.exception.read())

    def test_batch_step(self):
        with Session(self.server.url) as s:
            eps = [s.create("memory_chain", task_id=f"b{i}", params={"length": 5, "reset_points": ""})
                   for i in range(4)]
            while not all(e.done for e in eps):
                live = [e for e in eps if not e.done]
                results = s.batch_step([(e, {"text": "continue" if e.next_turn_id < 4 else "answer 0"})
                                        for e in live])
                self.assertTrue(all(isinstance(r, dict) for r in results))
            self.assertTrue(all(e.status == "completed" for e in eps))


@dataclasses.dataclass
class StandInSample:
    """The fields of slime.utils.types.Sample that the adapter reads and writes."""

    class Status(enum.Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    group_index: int = None
    index: int = None
    prompt: str = ""
    tokens: list = dataclasses.field(default_factory=list)
    response: str = ""
    response_length: int = 0
    label: str = None
    reward: float = None
    loss_mask: list = None
    weight_versions: list = dataclasses.field(default_factory=list)
    rollout_log_probs: list = None
    status: Status = Status.PENDING
    metadata: dict = dataclasses.field(default_factory=dict)
    session_id: str = None


class SlimeAdapterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server("--max-sessions", "8")

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    @staticmethod
    async def oracle(prompt_ids, max_new_tokens, role, params):
        """A trainer's sampling function: reads its prompt (byte tokens) like an LLM would."""
        await asyncio.sleep(0)
        text = bytes(t for t in prompt_ids if t < 256).decode()
        fact = chain_fact(text)
        if role == "summarize":
            out = f"FACT {fact}"
        elif text.rstrip().endswith("assistant") and "QUESTION" in text[-120:]:
            out = f"answer {fact}"
        else:
            out = "continue"
        ids = list(out.encode()) + [258]  # <|im_end|>
        return {"token_ids": ids, "logprobs": [-0.1] * len(ids), "finish_reason": "stop"}

    def run_generate(self, group_index, index, seed):
        generate = crl_slime.make_generate(self.oracle, server_url=self.server.url, budget=CHAIN_BUDGET)
        args = types.SimpleNamespace(seed=seed)
        sample = StandInSample(group_index=group_index, index=index, prompt="chain",
                               metadata={"env": "memory_chain", "task_id": f"g{group_index}", "seed": seed})
        return asyncio.run(generate(args, sample, {"temperature": 1.0}))

    def test_generate_returns_one_sample_per_segment(self):
        samples = self.run_generate(0, 0, 7)
        self.assertEqual(len(samples), 7)
        self.assertEqual(len({s.rollout_id for s in samples}), 1)
        for i, s in enumerate(samples):
            self.assertIsInstance(s, StandInSample)
            self.assertEqual(s.status, StandInSample.Status.COMPLETED)
            self.assertEqual(s.reward, 1.0)
            self.assertEqual(s.metadata["segment_index"], i)
            self.assertEqual(len(s.tokens), len(s.loss_mask) + (len(s.tokens) - s.response_length))
            self.assertEqual(len(s.rollout_log_probs), s.response_length)
            self.assertEqual((s.group_index, s.index), (0, 0))
        summary = samples[1]
        sampled = [t for t, m in zip(summary.tokens[-summary.response_length:], summary.loss_mask) if m]
        self.assertEqual(bytes(t for t in sampled if t < 256).decode()[:5], "FACT ")
        self.assertTrue(all(abs(lp + 0.1) < 1e-6 for lp, m in zip(summary.rollout_log_probs, summary.loss_mask) if m))

    def test_failed_episode_is_a_failed_sample(self):
        generate = crl_slime.make_generate(self.oracle, server_url=self.server.url)
        sample = StandInSample(group_index=0, index=0, metadata={"env": "no_such_env", "task_id": "x"})
        out = asyncio.run(generate(types.SimpleNamespace(), sample, {}))
        self.assertIs(out, sample)
        self.assertEqual(out.status, StandInSample.Status.FAILED)

    def test_rewards_normalized_once_per_rollout(self):
        def rollout(group, rollout_id, reward, segments):
            return [StandInSample(group_index=group, reward=reward, metadata={"rollout_id": rollout_id})
                    for _ in range(segments)]
        samples = rollout(0, "a", 1.0, 7) + rollout(0, "b", 0.0, 1) + rollout(1, "c", 1.0, 3) + rollout(1, "d", 1.0, 2)
        raw, norm = crl_slime.post_process_rewards(types.SimpleNamespace(), samples)
        self.assertEqual(raw, [s.reward for s in samples])
        # Group 0: rollouts a (1.0) and b (0.0) count once each: mean 0.5, std 0.7071.
        self.assertAlmostEqual(norm[0], 0.5 / 0.70710678, places=4)
        self.assertAlmostEqual(norm[7], -0.5 / 0.70710678, places=4)
        self.assertTrue(all(v == norm[0] for v in norm[:7]))
        self.assertTrue(all(abs(v) < 1e-9 for v in norm[8:]))  # group 1: equal rewards
        raw2, plain = crl_slime.post_process_rewards(types.SimpleNamespace(rewards_normalization=False), samples)
        self.assertEqual(plain, raw2)

    def test_failed_samples_count_as_zero_in_their_own_group(self):
        """A failed sample (the input sample: reward None, no rollout id) used to raise TypeError in float()."""
        def rollout(group, rollout_id, reward, segments):
            return [StandInSample(group_index=group, reward=reward, metadata={"rollout_id": rollout_id})
                    for _ in range(segments)]
        failed = [crl_slime._failed(StandInSample(group_index=0, index=i), "llm down") for i in (1, 2)]
        samples = rollout(0, "a", 1.0, 3) + failed + rollout(1, "c", 1.0, 2) + rollout(1, "d", 0.0, 1)
        raw, norm = crl_slime.post_process_rewards(types.SimpleNamespace(), samples)
        self.assertEqual(raw, [1.0] * 3 + [0.0, 0.0] + [1.0, 1.0, 0.0])
        # Group 0: rollout a (1.0) and two failed samples, each a rollout of its own with 0: mean 1/3,
        # std sqrt(1/3).
        std = (1 / 3) ** 0.5
        self.assertTrue(all(abs(v - (2 / 3) / std) < 1e-4 for v in norm[:3]), norm)
        self.assertTrue(all(abs(v + (1 / 3) / std) < 1e-4 for v in norm[3:5]), norm)
        # Group 1 does not see them: c (1.0) and d (0.0), mean 0.5, std 0.7071.
        self.assertAlmostEqual(norm[5], 0.5 / 0.70710678, places=4)
        self.assertAlmostEqual(norm[7], -0.5 / 0.70710678, places=4)


class RolloutModeTest(unittest.TestCase):
    """POST /v1/rollouts: the server drives the scripted LLM server itself; the slime adapter in rollout mode."""

    @classmethod
    def setUpClass(cls):
        cls.llm = LlmServer("--sticky-every", "40", "--sticky-fault", "malformed")
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0
        cls.llm.stop()

    def episodes(self, n, seed=7):
        return [{"env": "synthetic", "split": "dev", "index": i, "seed": seed, "group_index": i,
                 "budget": SYNTHETIC_BUDGET} for i in range(n)]

    def test_rollouts_return_the_export_of_every_episode(self):
        try:
            Session(self.server.url, binary=True).close()
            encodings = (False, True)
        except ImportError:
            encodings = (False,)  # the generated server_pb2 is not available (CRL_PROTO_PY)
        for binary in encodings:
            for api in ("sglang", "openai"):
                with Session(self.server.url, binary=binary) as s:
                    answer = s.rollouts(self.episodes(6), {"base_url": self.llm.url, "api": api})
                rollouts = answer["rollouts"]
                self.assertEqual(len(rollouts), 6)
                # One LLM call per turn and per compaction, plus the call that failed a failed episode.
                self.assertEqual(int(answer["requests"]), sum(int(r["turns"]) + int(r["compactions"]) +
                                                              (r["status"] == "failed") for r in rollouts))
                statuses = [r["status"] for r in rollouts]
                self.assertIn("completed", statuses)
                for r in rollouts:
                    if r["status"] == "failed":
                        self.assertIn("malformed", r["reason"])  # a failed request fails its episode only
                        continue
                    self.assertEqual(r["status"], "completed")
                    self.assertEqual(r["reward"], 1.0)
                    self.assertGreater(int(r["compactions"]), 0)
                    segs = r["segments"]
                    self.assertEqual([int(g["segment_index"]) for g in segs], list(range(len(segs))))
                    self.assertTrue(all(g["rollout_id"] == r["rollout_id"] for g in segs))
                    kinds = [g["kind"] for g in segs]
                    self.assertIn("summary", kinds)
                    for g in segs:
                        self.assertEqual(len(g["loss_mask"]), len(g["response_ids"]))
                        self.assertEqual(sum(int(m) for m in g["loss_mask"]), int(g["n_sampled"]))
                        # Log-probs as the scripted server sent them: floats that are multiples of 1/1024 in [-4, 0).
                        for lp, m in zip(g["rollout_log_probs"], g["loss_mask"]):
                            if int(m):
                                lp = struct.unpack("f", struct.pack("f", lp))[0]
                                self.assertTrue(-4.0 <= lp < 0 and float(lp * 1024).is_integer(), lp)

    def test_same_seed_same_rollouts(self):
        with Session(self.server.url) as s:
            a = s.rollouts(self.episodes(3, seed=5), {"base_url": self.llm.url, "max_in_flight": 1})
            b = s.rollouts(self.episodes(3, seed=5), {"base_url": self.llm.url, "max_in_flight": 16})
        strip = lambda ans: [(r["state_hash"], r["segments"]) for r in ans["rollouts"]]  # noqa: E731
        self.assertEqual(strip(a), strip(b))

    def test_unreachable_llm_fails_episodes_not_the_call(self):
        with Session(self.server.url) as s:
            answer = s.rollouts(self.episodes(2), {"base_url": "http://127.0.0.1:9", "max_retries": 0})
            self.assertEqual([r["status"] for r in answer["rollouts"]], ["failed", "failed"])
            with self.assertRaises(CrlError) as bad:
                s.rollouts(self.episodes(1), {"base_url": "ftp://x"})
            self.assertEqual(bad.exception.field, "llm.base_url")
            with self.assertRaises(CrlError) as bad_env:
                s.rollouts([{"env": "nope", "task_id": "t"}], {"base_url": self.llm.url})
            self.assertEqual(bad_env.exception.field, "episodes[0].env")

    def test_slime_generate_in_rollout_mode(self):
        args = types.SimpleNamespace(seed=7, crl_server_url=self.server.url, crl_llm_url=self.llm.url,
                                     crl_budget=SYNTHETIC_BUDGET)
        sample = StandInSample(group_index=1, index=0, prompt="synthetic",
                               metadata={"env": "synthetic", "split": "dev", "index": 1})
        samples = asyncio.run(crl_slime.generate(args, sample, {"temperature": 1.0}))
        self.assertIsInstance(samples, list)
        self.assertGreater(len(samples), 2)
        self.assertEqual(len({s.rollout_id for s in samples}), 1)
        self.assertTrue(all(s.reward == 1.0 for s in samples))
        self.assertIn("summary", [s.metadata["kind"] for s in samples])
        for s in samples:
            self.assertEqual(len(s.loss_mask), s.response_length)
            self.assertEqual(len(s.rollout_log_probs), s.response_length)
        # An unreachable LLM server gives a failed sample, not an exception.
        args.crl_llm_url = "http://127.0.0.1:9"
        failed = StandInSample(group_index=0, index=0, metadata={"env": "synthetic", "split": "dev", "index": 0})
        out = asyncio.run(crl_slime.make_rollout_generate()(args, failed, {}))
        self.assertIs(out, failed)
        self.assertEqual(out.status, StandInSample.Status.FAILED)
        self.assertIn("connection", out.metadata["crl_error"])

    def test_slime_episode_failed_mid_way_gives_failed_segments_with_the_reason(self):
        """dev-0 (seed 7) meets the scripted server's malformed answer after its first call: the partial segments
        come back as failed Samples (reward 0) whose metadata says why, under the key of a failed sample."""
        args = types.SimpleNamespace(seed=7, crl_server_url=self.server.url, crl_llm_url=self.llm.url,
                                     crl_budget=SYNTHETIC_BUDGET)
        sample = StandInSample(group_index=0, index=0, metadata={"env": "synthetic", "split": "dev", "index": 0})
        samples = asyncio.run(crl_slime.generate(args, sample, {}))
        self.assertIsInstance(samples, list)
        self.assertGreater(len(samples), 0)
        for s in samples:
            self.assertEqual(s.status, StandInSample.Status.FAILED)
            self.assertEqual(s.reward, 0.0)
            self.assertIn("malformed", s.metadata["crl_error"])


class OperationsTest(unittest.TestCase):
    def test_session_limit_gives_429_with_retry_after(self):
        server = Server("--max-sessions", "1", "--idle-timeout", "0.5")
        try:
            with Session(server.url) as s:
                s.create("memory_chain", task_id="one")
                with self.assertRaises(CrlError) as err:
                    s.create("memory_chain", task_id="two")
                self.assertEqual((err.exception.status, err.exception.code), (429, "too_many_sessions"))
                self.assertGreater(err.exception.retry_after, 0)
                # The idle one is reaped; waiting for a place then succeeds.
                ep = s.create("memory_chain", task_id="two", wait_for_place=5.0)
                self.assertFalse(ep.done)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_a_full_server_is_waited_for_not_failed(self):
        """At --max-connections, a new connection gets 503 too_many_connections before its request is read: the
        client waits for a place (connection_wait) instead of failing the call; with no wait it fails at once."""
        server = Server("--max-connections", "1")
        try:
            holder = Session(server.url)
            holder.health()  # keeps the one connection open (keep-alive)
            with Session(server.url, connection_wait=0) as impatient:
                with self.assertRaises(CrlError) as err:
                    impatient.health()
                self.assertEqual((err.exception.status, err.exception.code), (503, "too_many_connections"))
            result = {}

            def wait_for_place():
                with Session(server.url, connection_wait=60) as patient:
                    result["answer"] = patient.health()

            waiter = threading.Thread(target=wait_for_place)
            waiter.start()
            time.sleep(1.5)  # refused at least once meanwhile (Retry-After: 1); not a timing assertion
            self.assertNotIn("answer", result)
            holder.close()  # frees the place
            waiter.join(timeout=60)
            self.assertEqual(result.get("answer", {}).get("status"), "ok")
            # cancel() ends a wait for a place at once.
            holder = Session(server.url)
            holder.health()
            waiting = Session(server.url, connection_wait=60)
            failure = {}

            def cancelled_wait():
                try:
                    waiting.health()
                except ConnectionAbortedError as e:
                    failure["error"] = e

            canceller = threading.Thread(target=cancelled_wait)
            canceller.start()
            time.sleep(0.5)
            waiting.cancel()
            canceller.join(timeout=10)
            self.assertFalse(canceller.is_alive())
            self.assertIn("error", failure)
            holder.close()
        finally:
            self.assertEqual(server.stop(), 0)

    def test_sigterm_drains_and_exits_zero(self):
        server = Server()
        stop_at = time.monotonic() + 60  # a bound only: the stop below ends the load
        errors = []
        playing = threading.Event()  # set once a chain has been played: the stop then meets live load

        def load():
            try:
                with Session(server.url) as s:
                    while time.monotonic() < stop_at:
                        play_chain(s, task_id="drain")
                        playing.set()
            except (CrlError, OSError):
                pass  # connections close during the drain
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=load) for _ in range(4)]
        for t in threads:
            t.start()
        self.assertTrue(playing.wait(timeout=30), "no chain was played within 30 s")
        self.assertEqual(server.stop(), 0)
        for t in threads:
            t.join(timeout=10)
        self.assertEqual(errors, [])


if __name__ == "__main__":
    unittest.main()
