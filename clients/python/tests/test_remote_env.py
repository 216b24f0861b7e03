"""Tests of crl_remote_env.py, the environment side of the server's step protocol (envs/remote/README.md).

The server runs in a thread of this process; requests go over loopback with http.client on one keep-alive
connection. The C++ side (envs/remote) is tested in tests/envs/remote_env_test.cpp.
"""

import http.client
import json
import os
import sys
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import crl_remote_env  # noqa: E402


class Countdown(crl_remote_env.Environment):
    """Terminates after `index` steps with reward 0.5 per step; fails on the action "raise"."""

    name = "countdown"
    description = "counts down"

    def reset(self, task, seed):
        self.left = task["index"]
        return "system %d" % seed, "start %s %s" % (task["id"], task["split"])

    def step(self, action):
        if action == "raise":
            raise ValueError("boom")
        self.left -= 1
        return {"observation": "left %d after %r" % (self.left, action), "reward": 0.5,
                "terminated": self.left <= 0, "info": "note"}


class RemoteEnvServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        ready = threading.Event()
        holder = {}

        def on_ready(server):
            holder["server"] = server
            ready.set()

        cls.thread = threading.Thread(
            target=crl_remote_env.serve, args=([crl_remote_env.GuessNumber, Countdown],),
            kwargs={"port": 0, "ready": on_ready, "max_batch": 4}, daemon=True)
        cls.thread.start()
        assert ready.wait(10)
        cls.server = holder["server"]
        cls.port = cls.server.server_address[1]

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()

    def setUp(self):
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)

    def tearDown(self):
        self.conn.close()

    def call(self, method, path, body=None, raw=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        self.conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        answer = self.conn.getresponse()
        return answer.status, json.loads(answer.read())

    def create(self, env="countdown", task_id="t", index=2, seed="18446744073709551615", split="dev"):
        status, answer = self.call("POST", "/v1/episodes",
                                   {"env": env, "task_id": task_id, "split": split, "index": index, "seed": seed})
        self.assertEqual(status, 200, answer)
        return answer

    def test_info_lists_the_environments_and_limits(self):
        status, info = self.call("GET", "/v1/info")
        self.assertEqual(status, 200)
        self.assertEqual(info["protocol_version"], "1")
        self.assertEqual([e["name"] for e in info["environments"]], ["guess_number", "countdown"])
        self.assertEqual(info["environments"][1]["views"], ["text"])
        self.assertEqual(info["limits"]["max_batch"], 4)
        status, health = self.call("GET", "/health")
        self.assertEqual((status, health["status"]), (200, "ok"))

    def test_create_and_step_fill_the_documented_fields(self):
        first = self.create()
        self.assertEqual(first["prompt_text"], "system 18446744073709551615")  # uint64 seed as a string
        self.assertEqual(first["append_text"], "start t dev")
        self.assertEqual((first["kind"], first["next_turn_id"]), ("observation", 0))
        path = "/v1/episodes/%s/step" % first["episode_id"]
        status, a = self.call("POST", path, {"turn_id": 0, "action": {"kind": "assistant", "text": "x"}})
        self.assertEqual(status, 200, a)
        self.assertEqual((a["append_text"], a["reward"], a["terminated"], a["truncated"], a["reason"], a["kind"]),
                         ("left 1 after 'x'", 0.5, False, False, "note", "observation"))
        self.assertEqual(a["next_turn_id"], 1)
        # The same step again: the stored answer, nothing applied twice.
        status, again = self.call("POST", path, {"turn_id": 0, "action": {"kind": "assistant", "text": "x"}})
        self.assertEqual((status, again), (200, a))
        status, error = self.call("POST", path, {"turn_id": 0, "action": {"text": "y"}})
        self.assertEqual((status, error["field"]), (409, "turn_id"))
        status, error = self.call("POST", path, {"turn_id": 5, "action": {"text": "y"}})
        self.assertEqual((status, error["code"]), (409, "bad_turn_id"))
        status, error = self.call("POST", path, {"turn_id": 1, "action": {"kind": "summary", "text": "y"}})
        self.assertEqual((status, error["field"]), (400, "action.kind"))
        status, last = self.call("POST", path, {"turn_id": 1, "action": {"text": "y"}})
        self.assertEqual((status, last["kind"], last["terminated"], last["status"]), (200, "done", True, "completed"))
        # An ended episode is forgotten: no DELETE needed.
        status, error = self.call("DELETE", "/v1/episodes/" + first["episode_id"])
        self.assertEqual((status, error["code"]), (404, "unknown_episode"))

    def test_batch_steps_answer_in_order_with_per_item_errors(self):
        a, b = self.create(index=3), self.create(index=3)
        items = [{"episode_id": a["episode_id"], "turn_id": 0, "action": {"text": "1"}},
                 {"episode_id": "missing", "turn_id": 0, "action": {"text": "1"}},
                 {"episode_id": b["episode_id"], "turn_id": 0, "action": {"text": "raise"}},
                 {"episode_id": b["episode_id"], "turn_id": 0, "action": {"text": "2"}}]
        status, answer = self.call("POST", "/v1/batch/step", {"steps": items})
        self.assertEqual(status, 200, answer)
        results = answer["results"]
        self.assertEqual([r["http_status"] for r in results], [200, 404, 500, 200])
        self.assertEqual(results[0]["response"]["episode_id"], a["episode_id"])
        self.assertEqual(results[2]["error"]["code"], "environment_error")
        self.assertEqual(results[3]["response"]["append_text"], "left 2 after '2'")
        status, error = self.call("POST", "/v1/batch/step", {"steps": items + items})
        self.assertEqual((status, error["code"]), (400, "batch_too_large"))
        for episode in (a, b):
            status, deleted = self.call("DELETE", "/v1/episodes/" + episode["episode_id"])
            self.assertEqual((status, deleted["deleted"]), (200, True))

    def test_bad_requests_are_typed_errors_on_a_kept_connection(self):
        status, error = self.call("POST", "/v1/episodes", {"env": "chess"})
        self.assertEqual((status, error["code"], error["field"]), (400, "unknown_env", "env"))
        status, error = self.call("POST", "/v1/episodes", raw=b"{not json")
        self.assertEqual((status, error["code"]), (400, "bad_json"))
        status, error = self.call("POST", "/v1/episodes", {"env": "countdown", "seed": -1})
        self.assertEqual((status, error["field"]), (400, "seed"))
        status, error = self.call("GET", "/v1/episodes")
        self.assertEqual((status, error["code"]), (405, "method_not_allowed"))
        status, error = self.call("GET", "/v2/nothing")
        self.assertEqual((status, error["code"]), (404, "not_found"))
        # Still the same connection (keep-alive), still answering.
        status, _ = self.call("GET", "/health")
        self.assertEqual(status, 200)

    def test_guess_number_is_deterministic_in_its_seed(self):
        def play(seed):
            e = self.create(env="guess_number", task_id="g", index=4, seed=seed, split="")
            path = "/v1/episodes/%s/step" % e["episode_id"]
            texts = [e["append_text"]]
            for turn in range(3):
                _, a = self.call("POST", path, {"turn_id": turn, "action": {"text": "guess 50"}})
                texts.append(a["append_text"])
            self.call("DELETE", "/v1/episodes/" + e["episode_id"])
            return texts

        self.assertEqual(play("7"), play("7"))
        self.assertNotEqual(play("7"), play("8"))


if __name__ == "__main__":
    unittest.main()
