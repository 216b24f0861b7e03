"""Tests of the trainer adapters (crl_skyrl, crl_rllm, the slime adapter's routing, abort and ids) against a
real `crl serve` and the scripted LLM server on loopback, with stand-in classes carrying the real field names
(SkyRL's TrajectoryID and GeneratorOutput, rLLM's Episode / Trajectory / Step, slime's Sample)."""

import asyncio
import http.server
import json
import os
import subprocess
import sys
import threading
import time
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import crl_rllm  # noqa: E402
import crl_segments  # noqa: E402
import crl_skyrl  # noqa: E402
import crl_slime  # noqa: E402
import test_client as tc  # noqa: E402
from crl_client import Session, in_thread  # noqa: E402


def synthetic_episodes(n, seed=7):
    return [{"env": "synthetic", "split": "dev", "index": i, "seed": seed, "group_index": i, "sample_index": 0,
             "budget": tc.SYNTHETIC_BUDGET} for i in range(n)]


class RealServerTest(unittest.TestCase):
    """Adapters on the answers of a real server that compacts (the scripted LLM writes the summaries)."""

    @classmethod
    def setUpClass(cls):
        cls.llm = tc.LlmServer()
        cls.server = tc.Server()
        cls.llm_block = {"base_url": cls.llm.url, "api": "sglang"}
        with Session(cls.server.url) as s:
            cls.answer = s.rollouts(synthetic_episodes(4), cls.llm_block)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0
        cls.llm.stop()

    def test_answers_compact(self):
        for r in self.answer["rollouts"]:
            self.assertEqual(r["status"], "completed")
            self.assertGreater(int(r["compactions"]), 0)

    def test_skyrl_generator_output_is_step_wise_and_exact(self):
        TrajectoryID = crl_skyrl._trajectory_id_class()
        tids = [TrajectoryID(instance_id=f"dev-{i}", repetition_id=0) for i in range(4)]
        generator = crl_skyrl.CrlGenerator(self.server.url, self.llm_block, env="synthetic",
                                           budget=tc.SYNTHETIC_BUDGET, seed=7)
        batch = {"prompts": [[{"role": "user", "content": "task"}]] * 4, "env_classes": ["crl"] * 4,
                 "env_extras": [{"crl": {"split": "dev", "index": i, "group_index": i}} for i in range(4)],
                 "sampling_params": None, "trajectory_ids": tids}
        out = asyncio.run(generator.generate(batch))
        keys = {"prompt_token_ids", "response_ids", "rewards", "loss_masks", "stop_reasons", "rollout_logprobs",
                "trajectory_ids", "is_last_step", "rollout_metrics"}
        self.assertEqual(set(out), keys)
        # The same episodes (same seeds) in one direct call give the same tokens: one entry per segment.
        segments = [seg for r in self.answer["rollouts"] for seg in r["segments"]]
        self.assertEqual(len(out["response_ids"]), len(segments))
        for i, seg in enumerate(segments):
            self.assertEqual(out["prompt_token_ids"][i], [int(t) for t in seg["prompt_ids"]])
            self.assertEqual(out["response_ids"][i], [int(t) for t in seg["response_ids"]])
            self.assertEqual(out["loss_masks"][i], [int(m) for m in seg["loss_mask"]])
            self.assertEqual(len(out["rollout_logprobs"][i]), len(out["response_ids"][i]))
            self.assertEqual(len(out["rewards"][i]), len(out["response_ids"][i]))
        # One last step per trajectory, at its end; the reward only there.
        for tid in tids:
            idx = [i for i, t in enumerate(out["trajectory_ids"]) if t == tid]
            self.assertEqual([out["is_last_step"][i] for i in idx], [False] * (len(idx) - 1) + [True])
            self.assertEqual(sum(sum(out["rewards"][i]) for i in idx), 1.0)
            self.assertEqual(out["rewards"][idx[-1]][-1], 1.0)
        self.assertEqual(out["rollout_metrics"]["crl/rollouts"], 4.0)
        self.assertGreater(out["rollout_metrics"]["crl/compactions_per_rollout"], 0)

    def test_skyrl_repetitions_without_trajectory_ids_are_distinct(self):
        """Without trajectory_ids, the copies of one prompt were all TrajectoryID(task, 0), the same rollout."""
        generator = crl_skyrl.CrlGenerator(self.server.url, self.llm_block, env="synthetic",
                                           budget=tc.SYNTHETIC_BUDGET, seed=7)
        batch = {"prompts": [[{"role": "user", "content": "task"}]] * 2,
                 "env_extras": [{"crl": {"split": "dev", "index": 1}}] * 2}
        out = asyncio.run(generator.generate(batch))
        tids = list(dict.fromkeys(t.to_string() for t in out["trajectory_ids"]))
        self.assertEqual(tids, ["dev-1_0", "dev-1_1"])
        for tid in tids:  # one rollout each: one last step
            self.assertEqual(sum(last for t, last in zip(out["trajectory_ids"], out["is_last_step"])
                                 if t.to_string() == tid), 1)

    def test_skyrl_skips_a_rollout_without_segments(self):
        rollouts = [{"status": "failed", "reason": "llm down", "segments": []}] + self.answer["rollouts"][:1]
        out = crl_skyrl.rollouts_to_generator_output(rollouts)
        self.assertEqual(out["rollout_metrics"]["crl/failed_rollouts"], 1.0)
        self.assertEqual(len(out["response_ids"]), len(self.answer["rollouts"][0]["segments"]))

    def test_rllm_episode_steps_rebuild_every_segment(self):
        rollout = self.answer["rollouts"][0]
        episode = crl_rllm.rollout_to_episode(rollout)
        segments = rollout["segments"]
        self.assertEqual(len(episode.trajectories), len(segments))
        self.assertTrue(episode.is_correct)
        self.assertEqual(episode.id, f"{segments[0]['task_id']}:0")
        for traj, seg in zip(episode.trajectories, segments):
            self.assertEqual(traj.name, seg["kind"])
            self.assertEqual(traj.reward, 1.0)
            full = [int(t) for t in seg["prompt_ids"]] + [int(t) for t in seg["response_ids"]]
            sampled = 0
            for step in traj.steps:
                # Each step's prompt + response is a prefix of the window; the response is sampled tokens only.
                n = len(step.prompt_ids) + len(step.response_ids)
                self.assertEqual(step.prompt_ids + step.response_ids, full[:n])
                self.assertEqual(len(step.logprobs), len(step.response_ids))
                sampled += len(step.response_ids)
            self.assertEqual(sampled, int(seg["n_sampled"]))
            # Cumulative: every step's prompt extends the previous step's prompt + response.
            for a, b in zip(traj.steps, traj.steps[1:]):
                self.assertEqual(b.prompt_ids[:len(a.prompt_ids) + len(a.response_ids)], a.prompt_ids + a.response_ids)
        done = [s.done for t in episode.trajectories for s in t.steps]
        self.assertEqual(done, [False] * (len(done) - 1) + [True])

    def test_rllm_workflow_runs_a_task(self):
        workflow = crl_rllm.CrlWorkflow(self.server.url, self.llm_block, env="synthetic", budget=tc.SYNTHETIC_BUDGET,
                                        seed=7)
        episode = asyncio.run(workflow.run({"split": "dev", "index": 2}, uid="dev-2:3"))
        self.assertEqual(episode.id, "dev-2:3")
        self.assertEqual(episode.info["rollout_id"], "dev-2:3")
        self.assertGreater(len(episode.trajectories), 2)

    def test_rllm_uid_index_follows_the_last_colon(self):
        self.assertEqual(crl_rllm._split_uid("a:b:3"), ("a:b", 3))
        self.assertEqual(crl_rllm._split_uid("dev-2:0"), ("dev-2", 0))
        self.assertEqual(crl_rllm._split_uid("plain"), ("plain", 0))
        workflow = crl_rllm.CrlWorkflow(self.server.url, self.llm_block, env="synthetic", budget=tc.SYNTHETIC_BUDGET,
                                        seed=7)
        episode = asyncio.run(workflow.run({"task_id": "dev-1"}, uid="x:dev-1:1"))
        self.assertEqual(episode.info["rollout_id"], "x:dev-1:1")
        for uid in ("abc:def", "abc:", ":3", "abc:-1"):
            with self.assertRaisesRegex(ValueError, f"uid '{uid}': expected TASK:INDEX"):
                asyncio.run(workflow.run({"split": "dev", "index": 2}, uid=uid))

    def test_slime_sample_ids_and_session(self):
        args = types.SimpleNamespace(seed=7, crl_server_url=self.server.url, crl_llm_url=self.llm.url,
                                     crl_budget=tc.SYNTHETIC_BUDGET)
        sample = tc.StandInSample(group_index=5, index=0, metadata={"env": "synthetic", "split": "dev", "index": 1})
        samples = asyncio.run(crl_slime.generate(args, sample, {}))
        ids = {s.rollout_id for s in samples}
        self.assertEqual(len(ids), 1)
        rollout_id = ids.pop()
        self.assertEqual(int(rollout_id), crl_segments.rollout_int_id(str(rollout_id)))
        self.assertTrue(all(s.session_id == "group-5" for s in samples))
        # The scripted server answers SGLang's meta_info.weight_version "default"; the export carries it.
        self.assertTrue(all(s.weight_versions == ["default"] for s in samples))


class SegmentRulesTest(unittest.TestCase):
    def test_model_calls_are_the_runs_of_sampled_tokens(self):
        seg = {"prompt_ids": [1, 2], "response_ids": [3, 4, 5, 6, 7, 8, 9], "loss_mask": [0, 1, 1, 0, 0, 1, 0],
               "rollout_log_probs": [0, -0.5, -0.25, 0, 0, -1.0, 0]}
        self.assertEqual(crl_segments.model_calls(seg), [(1, 3), (5, 6)])
        self.assertEqual(crl_segments.call_fields(seg, 5, 6),
                         {"prompt_ids": [1, 2, 3, 4, 5, 6, 7], "response_ids": [8], "logprobs": [-1.0]})
        self.assertEqual(crl_segments.model_calls({"loss_mask": [1, 1]}), [(0, 2)])
        self.assertEqual(crl_segments.model_calls({"loss_mask": []}), [])

    def test_malformed_rollouts_are_refused_with_the_field(self):
        good = {"rollout_id": "r", "segment_index": 0, "response_ids": [1, 2], "loss_mask": [1, 1],
                "rollout_log_probs": [-1.0, -1.0]}
        crl_segments.check_rollout([good])
        cases = [
            ([], "no segment"),
            ([good, dict(good, rollout_id="other", segment_index=1)], "segments[1].rollout_id"),
            ([dict(good, segment_index=1)], "segments[0].segment_index"),
            ([dict(good, loss_mask=[1])], "segments[0].loss_mask"),
            ([dict(good, rollout_log_probs=[])], "segments[0].rollout_log_probs"),
        ]
        for segments, message in cases:
            with self.assertRaises(ValueError) as err:
                crl_segments.check_rollout(segments)
            self.assertIn(message, str(err.exception))
        with self.assertRaises(ValueError):
            crl_skyrl.rollouts_to_generator_output([{"segments": [dict(good, loss_mask=[1])]}])
        with self.assertRaises(ValueError):
            crl_rllm.rollout_to_episode({"segments": [dict(good, loss_mask=[1])]})

    def test_rollout_int_ids_are_stable_and_distinct(self):
        a = crl_segments.RolloutId("synthetic/dev-1/7/0")
        self.assertEqual(a, "synthetic/dev-1/7/0")
        self.assertEqual(hash(a), hash("synthetic/dev-1/7/0"))
        self.assertEqual(int(a), int(crl_segments.RolloutId("synthetic/dev-1/7/0")))
        self.assertNotEqual(int(a), int(crl_segments.RolloutId("synthetic/dev-1/7/1")))
        self.assertTrue(0 <= int(a) < 2 ** 63)
        self.assertEqual(range(2 ** 63)[a], int(a))  # usable where an int index is expected

    def test_weight_versions_in_order_of_first_use(self):
        segs = [{"metadata": {"weight_version": "3"}}, {"metadata": {}}, {"metadata": {"weight_versions": "4,5"}},
                {"metadata": {"weight_version": "3"}}]
        self.assertEqual(crl_segments.weight_versions(segs), ["3", "4", "5"])
        sample = tc.StandInSample(group_index=2, index=1)
        segments = [{"rollout_id": "r", "prompt_ids": [1], "response_ids": [2], "loss_mask": [1],
                     "rollout_log_probs": [-1.0], "metadata": {"weight_version": "7"}}]
        out = crl_slime.segments_to_samples(segments, sample)
        self.assertEqual(out[0].weight_versions, ["7"])
        self.assertEqual(out[0].session_id, "group-2")


class _StandInServer:
    """A loopback HTTP server that records request headers; /v1/rollouts waits until released (to test abort)."""

    def __init__(self, hold_until=0, llm_limit=256):
        self.headers = []
        self.bodies = []  # the JSON bodies of POSTs
        self.llm_limit = llm_limit  # GET /v1/info's limits.max_llm_in_flight
        self.release = threading.Event()
        self.entered = threading.Event()
        # hold_until > 0: POSTs wait (at most 20 s) until that many are inside at once, instead of for release.
        self.hold_until = hold_until
        self.inside = 0
        self.peak = 0
        self.reached = threading.Event()
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                outer.headers.append(dict(self.headers))
                if self.path == "/v1/info":
                    self.answer({"limits": {"max_llm_in_flight": outer.llm_limit}})
                else:
                    self.answer({"status": "ok"})

            def do_POST(self):
                outer.headers.append(dict(self.headers))
                outer.bodies.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0)))))
                outer.entered.set()
                if outer.hold_until:
                    with outer.lock:
                        outer.inside += 1
                        outer.peak = max(outer.peak, outer.inside)
                        if outer.inside >= outer.hold_until:
                            outer.reached.set()
                    outer.reached.wait(20)
                    with outer.lock:
                        outer.inside -= 1
                else:
                    outer.release.wait(30)
                self.answer({"rollouts": [{"status": "completed", "segments": []}]})

            def answer(self, body):
                data = json.dumps(body).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass

        class Server(http.server.ThreadingHTTPServer):
            request_queue_size = 256  # listen backlog: 64 connections at once (the default, 5, drops SYNs)

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


class RoutingAndAbortTest(unittest.TestCase):
    def setUp(self):
        self.stand_in = _StandInServer()

    def tearDown(self):
        self.stand_in.stop()

    def test_session_key_header(self):
        with Session(self.stand_in.url, session_key="group-3") as s:
            s.health()
        with Session(self.stand_in.url) as s:
            s.health()
        self.assertEqual(self.stand_in.headers[0].get("X-Crl-Session"), "group-3")
        self.assertNotIn("X-Crl-Session", self.stand_in.headers[1])
        for bad in ("", "a\nb", "tab\there"):
            with self.assertRaises(ValueError):
                Session(self.stand_in.url, session_key=bad)

    def test_abort_stops_an_in_flight_rollout(self):
        args = types.SimpleNamespace(seed=7, crl_server_url=self.stand_in.url, crl_llm_url="http://127.0.0.1:9")
        sample = tc.StandInSample(group_index=4, index=0, metadata={"env": "synthetic", "split": "dev", "index": 0})

        async def run():
            task = asyncio.ensure_future(crl_slime.generate(args, sample, {}))
            while not self.stand_in.entered.is_set():
                await asyncio.sleep(0.01)
            reached = crl_slime.abort()
            started = time.monotonic()
            result = await task
            return reached, result, time.monotonic() - started

        reached, result, seconds = asyncio.run(run())
        self.assertEqual(reached, 1)
        self.assertIs(result, sample)
        self.assertEqual(result.status, tc.StandInSample.Status.ABORTED)
        self.assertLess(seconds, 20)  # cut, not waited out (the stand-in holds the answer for 30 s)
        self.assertEqual(self.stand_in.headers[0].get("X-Crl-Session"), "group-4")
        self.assertEqual(crl_slime.abort(), 0)  # nothing left in flight


class ConcurrencyTest(unittest.TestCase):
    """A trainer's concurrent generate calls are concurrent requests at the server. asyncio.to_thread's default
    executor has min(32, CPUs + 4) threads: 6 of 64 rollouts reached the server on a 2-core machine."""

    def test_in_thread_is_wide(self):
        barrier = threading.Barrier(64, timeout=20)

        async def run():
            return await asyncio.gather(*(in_thread(barrier.wait) for _ in range(64)))

        self.assertEqual(sorted(asyncio.run(run())), list(range(64)))  # all 64 waited at once

    def test_slime_rollouts_reach_the_server_together(self):
        stand_in = _StandInServer(hold_until=64)
        self.addCleanup(stand_in.stop)
        args = types.SimpleNamespace(seed=7, crl_server_url=stand_in.url, crl_llm_url="http://127.0.0.1:9")
        samples = [tc.StandInSample(group_index=i, index=0, metadata={"env": "synthetic", "split": "dev",
                                                                         "index": i}) for i in range(64)]

        async def run():
            return await asyncio.gather(*(crl_slime.generate(args, s, {}) for s in samples))

        asyncio.run(run())
        self.assertEqual(stand_in.peak, 64, "rollouts at the server at once")

    def test_skyrl_sends_its_batch_at_once(self):
        """Without max_in_flight in `llm`, a SkyRL batch's LLM calls all go at once (the server's default is 64),
        up to the server's limit from GET /v1/info; a value the user gave is kept."""
        batch = {"prompts": [[{"role": "user", "content": "task"}]] * 5, "env_extras": [None] * 5}
        for limit, llm, expected in ((256, {}, 5), (3, {}, 3), (256, {"max_in_flight": 2}, 2)):
            stand_in = _StandInServer(llm_limit=limit)
            stand_in.release.set()
            self.addCleanup(stand_in.stop)
            generator = crl_skyrl.CrlGenerator(stand_in.url, dict(llm, base_url="http://127.0.0.1:9"))
            asyncio.run(generator.generate(batch))
            self.assertEqual(stand_in.bodies[0]["llm"]["max_in_flight"], expected, (limit, llm))
            # The default is per call (the next batch may differ), not written into the generator's llm.
            self.assertEqual("max_in_flight" in generator.llm, "max_in_flight" in llm)

    def test_skyrl_numbers_the_repetitions_of_a_prompt(self):
        stand_in = _StandInServer()
        stand_in.release.set()
        self.addCleanup(stand_in.stop)
        same, other = {"crl": {"split": "dev", "index": 1}}, {"crl": {"split": "dev", "index": 2}}
        batch = {"prompts": [[{"role": "user", "content": "task"}]] * 5, "env_extras": [same, other, same, same, other]}
        asyncio.run(crl_skyrl.CrlGenerator(stand_in.url, {"base_url": "http://127.0.0.1:9"}).generate(batch))
        self.assertEqual([e["sample_index"] for e in stand_in.bodies[0]["episodes"]], [0, 0, 1, 2, 1])

    def test_rllm_task_id_is_the_uid_before_its_last_colon(self):
        stand_in = _StandInServer()
        stand_in.release.set()
        self.addCleanup(stand_in.stop)
        workflow = crl_rllm.CrlWorkflow(stand_in.url, {"base_url": "http://127.0.0.1:9"})
        asyncio.run(workflow.run({}, uid="a:b:3"))
        episode = stand_in.bodies[0]["episodes"][0]
        self.assertEqual((episode["task_id"], episode["sample_index"]), ("a:b", 3))

    def test_a_bad_thread_count_is_refused_by_name(self):
        code = ("import os, crl_client; os.environ['CRL_CLIENT_THREADS'] = 'many'\n"
                "try:\n    crl_client.blocking_pool()\nexcept ValueError as e:\n    print(e)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), check=True)
        self.assertIn("$CRL_CLIENT_THREADS = 'many': expected a positive integer", out.stdout)


if __name__ == "__main__":
    unittest.main()
