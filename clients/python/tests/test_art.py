"""Tests of the ART adapter (crl_art) on a real compaction-gateway export (`crl serve --llm` against the
scripted LLM server, byte tokenizer, a budget small enough to compact) and on a hand-made export, with
stand-in classes carrying ART's field names (Trajectory: messages_and_choices, tools, additional_histories,
reward, metrics, metadata; History: messages_and_choices, tools; openai's Choice: finish_reason, index,
message, logprobs)."""

import dataclasses
import json
import os
import sys
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import crl_art  # noqa: E402
import test_client as tc  # noqa: E402

# The byte tokenizer (engine/tokenizer.h): ids 0-255 are bytes, then the special tokens.
SPECIALS = {256: "<|endoftext|>", 257: "<|im_start|>", 258: "<|im_end|>"}


def decode(ids):
    out, raw = [], bytearray()
    for t in ids:
        if t in SPECIALS:
            out.append(raw.decode(errors="replace"))
            raw = bytearray()
            out.append(SPECIALS[t])
        else:
            raw.append(t)
    out.append(raw.decode(errors="replace"))
    return "".join(out)


def encode(text):
    ids, i = [], 0
    while i < len(text):
        for t, s in SPECIALS.items():
            if text.startswith(s, i):
                ids.append(t)
                i += len(s)
                break
        else:
            ids += list(text[i].encode())
            i += 1
    return ids


@dataclasses.dataclass
class History:
    messages_and_choices: list
    tools: object = None


@dataclasses.dataclass
class Trajectory:
    messages_and_choices: list
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


CLASSES = (Trajectory, History, lambda d: Choice(**d))
TOOLS = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]


def post(url, body):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


class HandMadeExportTest(unittest.TestCase):
    def test_sampled_runs_are_choices_with_their_ids_and_the_rest_chatml_messages(self):
        prompt = encode("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\n")
        a1 = encode("A1<|im_end|>")
        obs = encode("\n<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n")
        a2 = encode("A2<|im_end|>")
        response = a1 + obs + a2
        mask = [1] * len(a1) + [0] * len(obs) + [1] * len(a2)
        lps = [-0.5 - i / 1024 for i in range(len(response))]
        summary = {"rollout_id": "r", "segment_index": 0, "kind": "summary", "prompt_ids": prompt,
                   "response_ids": encode("SUM<|im_end|>"), "loss_mask": [1] * 4,
                   "rollout_log_probs": [-1.0] * 4, "metadata": {}}
        execution = {"rollout_id": "r", "segment_index": 1, "kind": "execution", "prompt_ids": prompt,
                     "response_ids": response, "loss_mask": mask, "rollout_log_probs": lps, "reward": 0.5,
                     "metadata": {"compactions": "1", "gateway_session": "s1"}}
        t = crl_art.export_to_trajectory({"segments": [summary, execution]}, decode, tools=TOOLS, classes=CLASSES)
        self.assertIsInstance(t, Trajectory)
        self.assertEqual(t.reward, 0.5)
        self.assertEqual(t.tools, TOOLS)
        m = t.messages_and_choices
        self.assertEqual(m[0], {"role": "system", "content": "S"})
        self.assertEqual(m[1], {"role": "user", "content": "U1"})
        self.assertIsInstance(m[2], Choice)
        self.assertEqual(m[2].message, {"role": "assistant", "content": "A1"})
        self.assertEqual([c["token"] for c in m[2].logprobs["content"]], [f"token_id:{i}" for i in a1])
        self.assertEqual([c["logprob"] for c in m[2].logprobs["content"]], lps[: len(a1)])
        self.assertEqual(m[3], {"role": "user", "content": "U2"})
        self.assertEqual(m[4].message["content"], "A2")
        self.assertEqual([c["logprob"] for c in m[4].logprobs["content"]], lps[len(a1) + len(obs):])
        self.assertEqual(len(m), 5)
        self.assertEqual(len(t.additional_histories), 1)
        h = t.additional_histories[0]
        self.assertIsInstance(h, History)
        self.assertEqual(h.tools, TOOLS)
        self.assertEqual(h.messages_and_choices[-1].message["content"], "SUM")
        self.assertEqual(t.metrics["segments"], 2)
        self.assertEqual(t.metrics["summary_segments"], 1)
        self.assertEqual(t.metrics["compactions"], 1)
        self.assertEqual(t.metrics["sampled_tokens"], 4 + len(a1) + len(a2))
        self.assertEqual(t.metadata["gateway_session"], "s1")

    def test_the_default_classes_have_arts_field_names(self):
        trajectory, history, make_choice = crl_art._classes()
        names = {f.name for f in dataclasses.fields(trajectory)} if dataclasses.is_dataclass(trajectory) else set(
            trajectory.model_fields)
        self.assertTrue({"messages_and_choices", "tools", "additional_histories", "reward", "metrics",
                         "metadata"} <= names, names)
        h = history(messages_and_choices=[], tools=None)
        self.assertEqual(h.messages_and_choices, [])
        c = make_choice({"finish_reason": "stop", "index": 0, "message": {"role": "assistant", "content": "x"},
                         "logprobs": {"content": []}})
        self.assertEqual(c.finish_reason, "stop")

    def test_the_status_is_the_segments(self):
        """GET /v1/sessions/{id}/export answers episode_id and segments only: the status is on the segments."""
        segment = {"rollout_id": "r", "segment_index": 0, "prompt_ids": [], "response_ids": [65], "loss_mask": [1],
                   "rollout_log_probs": [-1.0], "reward": 0.0, "status": "truncated", "metadata": {}}
        t = crl_art.export_to_trajectory({"episode_id": "s1", "segments": [segment]}, decode, classes=CLASSES)
        self.assertEqual(t.metadata["status"], "truncated")

    def test_the_docs_name_the_choice_maker(self):
        """classes' third item is called with one dict of a Choice's fields (make_choice), as the README says."""
        self.assertIn("classes=(Trajectory, History, make_choice)", crl_art.__doc__)
        with open(os.path.join(os.path.dirname(HERE), "README.md")) as f:
            self.assertIn("classes=(Trajectory, History, make_choice)", f.read())

    def test_a_malformed_export_is_refused_with_the_field(self):
        bad = {"segments": [{"rollout_id": "r", "segment_index": 0, "response_ids": [1, 2], "loss_mask": [1],
                             "rollout_log_probs": [0.0, 0.0]}]}
        with self.assertRaisesRegex(ValueError, "loss_mask"):
            crl_art.export_to_trajectory(bad, decode, classes=CLASSES)
        with self.assertRaisesRegex(ValueError, "no segment"):
            crl_art.export_to_trajectory({"segments": []}, decode, classes=CLASSES)


class GatewayExportTest(unittest.TestCase):
    """A real session through the gateway's chat route, compacted, exported and adapted."""

    @classmethod
    def setUpClass(cls):
        cls.llm = tc.LlmServer()
        cls.server = tc.Server("--llm", cls.llm.url, "--capacity", "1200", "--reserve", "500",
                               "--summary-cap", "128", "--per-turn-cap", "64")

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0
        cls.llm.stop()

    def test_every_segment_is_a_history_and_every_sampled_token_a_choice_token(self):
        sid = "art-1"
        base = f"{self.server.url}/v1/sessions/{sid}"
        messages = [{"role": "system", "content": "You are an agent."},
                    {"role": "user", "content": "Task: read the records. " + "x" * 200}]
        for k in range(12):
            answer = post(base + "/v1/chat/completions", {"messages": messages, "max_tokens": 48})
            messages.append(answer["choices"][0]["message"])
            messages.append({"role": "user", "content": f"#{k:02d}/16 ref r{k} | NOTE key=v{k} | " + "y" * 60})
        post(base + "/reward", {"reward": 1.0, "status": "completed"})
        with urllib.request.urlopen(base + "/export", timeout=60) as response:
            exported = json.loads(response.read())
        segments = exported["segments"]
        self.assertGreater(len(segments), 1, "the budget should have compacted")
        t = crl_art.export_to_trajectory(exported, decode, tools=TOOLS, classes=CLASSES)
        self.assertEqual(len(t.additional_histories), len(segments) - 1)
        self.assertEqual(t.reward, 1.0)
        conversations = [h.messages_and_choices for h in t.additional_histories] + [t.messages_and_choices]
        for segment, conversation in zip(segments, conversations):
            sampled = [i for i, m in zip(segment["response_ids"], segment["loss_mask"]) if m]
            tokens = [int(c["token"].split(":")[1]) for x in conversation if isinstance(x, Choice)
                      for c in x.logprobs["content"]]
            self.assertEqual(tokens, sampled, "the Choices carry exactly the sampled ids, in order")
            self.assertTrue(any(isinstance(x, dict) and x["role"] == "system" for x in conversation))
        self.assertEqual(t.metrics["sampled_tokens"], sum(sum(s["loss_mask"]) for s in segments))
        self.assertEqual(t.metadata["gateway_session"], sid)
        self.assertEqual(t.metadata["status"], "completed")  # the reward's status, from the segments


if __name__ == "__main__":
    unittest.main()
