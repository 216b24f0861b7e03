#!/usr/bin/python3
"""Baseline for bench/server_bench.cpp: an environment server written the way Python users write them today.

A ThreadingHTTPServer (standard library, one thread per connection, HTTP/1.1 keep-alive, JSON bodies) serving
the memory chain implemented in Python, with the same text protocol and compaction bookkeeping as `crl serve`
in step mode: a text history of ChatML turns, token counts in bytes, a compaction request after the reset
points (24, 48, 72), and a rebuilt context of system + resume(summary) + the newest 2 steps.

    POST /episodes                {"seed": 7, "task_id": "x"}          -> {"episode_id", "prompt", "kind", ...}
    POST /episodes/<id>/step      {"turn_id": n, "kind": ..., "text": ...} -> {"kind", "append", "prompt", ...}
    DELETE /episodes/<id>

The first stdout line is `listening on 127.0.0.1:PORT`; SIGTERM stops it.
"""

import hashlib
import json
import random
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SYSTEM = ("Memory chain of {n} steps. Step 1 shows a FACT (a value 0..1); later steps show noise. At every step "
          "reply `continue`, until the last step asks for the fact: then reply `answer <value>`.")
SUMMARY_INSTRUCTION = "Your context is full and will be compacted. Write a summary from which you can continue."
RESUME = "The earlier history of this task was compacted into the summary below.\n\nSummary:\n"


def turn(role, text):
    return f"<|im_start|>{role}\n{text}<|im_end|>\n"


class MemoryChain:
    def __init__(self, seed, task_id, length=96, reset_points=(24, 48, 72), tail_k=2):
        rng = random.Random(hashlib.sha256(f"{seed}|{task_id}".encode()).digest())
        self.length = length
        self.reset_points = set(reset_points)
        self.tail_k = tail_k
        self.values = [rng.randrange(2) for _ in range(length)]
        self.fact = self.values[0]
        self.step_index = 1
        self.system = turn("system", SYSTEM.format(n=length))
        self.prefix = self.system + turn("user", self.observe(1))
        self.steps = []  # atomic steps: assistant turn + observation
        self.pending = "execute"
        self.turn_id = 0
        self.compactions = 0
        self.reward = 0.0
        self.done = False
        self.lock = threading.Lock()
        self.last = None

    def observe(self, step):
        if step == 1:
            return f"step 1: FACT {self.values[0]}"
        if step == self.length:
            return f"step {step}: QUESTION which FACT was shown at step 1?"
        return f"step {step}: noise {self.values[step - 1]}"

    def prompt(self):
        text = self.prefix + "".join(self.steps)
        if self.pending == "summarize":
            return text + turn("user", SUMMARY_INSTRUCTION) + "<|im_start|>assistant\n"
        return text + "<|im_start|>assistant\n"

    def tokens(self):
        return len(self.prompt().encode())

    def step(self, kind, text):
        if self.done:
            raise ValueError("episode is over")
        if kind != ("summary" if self.pending == "summarize" else "assistant"):
            raise ValueError("wrong action kind")
        if kind == "summary":
            self.compactions += 1
            tail = self.steps[-self.tail_k:] if self.tail_k else []
            self.prefix = self.system + turn("user", RESUME + text)
            self.steps = list(tail)
            self.pending = "execute"
            return {"kind": "observation", "append": "", "prompt": self.prompt(), "rebuilt": True}
        observation_step = self.step_index
        if observation_step == self.length:
            answer = text.strip()
            self.reward = 1.0 if answer == f"answer {self.fact}" else 0.0
            self.done = True
            obs = turn("user", "correct" if self.reward else "wrong")
            self.steps.append("<|im_start|>assistant\n" + text + "<|im_end|>\n" + obs)
            return {"kind": "done", "append": obs, "prompt": "", "rebuilt": False}
        self.step_index += 1
        obs = turn("user", self.observe(self.step_index))
        self.steps.append("<|im_start|>assistant\n" + text + "<|im_end|>\n" + obs)
        if observation_step in self.reset_points:
            self.pending = "summarize"
            return {"kind": "compaction_request", "append": obs, "prompt": self.prompt(), "rebuilt": False}
        return {"kind": "observation", "append": obs + "<|im_start|>assistant\n", "prompt": "", "rebuilt": False}


EPISODES = {}
EPISODES_LOCK = threading.Lock()
COUNTER = [0]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The two settings a careful Python author adds: without them each answer leaves in two TCP segments
    # (headers, then body) and Nagle + delayed ACK stall every keep-alive request by ~40 ms.
    disable_nagle_algorithm = True
    wbufsize = 1 << 16

    def log_message(self, *args):
        pass

    def reply(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError as e:
            return self.reply(400, {"error": str(e)})
        parts = [p for p in self.path.split("/") if p]
        if parts == ["episodes"]:
            env = MemoryChain(body.get("seed", 0), body.get("task_id", ""))
            with EPISODES_LOCK:
                COUNTER[0] += 1
                episode_id = f"py-{COUNTER[0]}"
                EPISODES[episode_id] = env
            return self.reply(200, {"episode_id": episode_id, "prompt": env.prompt(), "kind": "observation",
                                    "next_turn_id": 0, "tokens": env.tokens()})
        if len(parts) == 3 and parts[0] == "episodes" and parts[2] == "step":
            with EPISODES_LOCK:
                env = EPISODES.get(parts[1])
            if env is None:
                return self.reply(404, {"error": "unknown episode"})
            with env.lock:
                if body.get("turn_id") == env.turn_id - 1 and env.last is not None:
                    return self.reply(200, env.last)
                if body.get("turn_id") != env.turn_id:
                    return self.reply(409, {"error": "bad turn_id"})
                try:
                    out = env.step(body.get("kind", "assistant"), body.get("text", ""))
                except ValueError as e:
                    return self.reply(409, {"error": str(e)})
                env.turn_id += 1
                out.update(next_turn_id=env.turn_id, reward=env.reward, tokens=env.tokens(),
                           compactions=env.compactions)
                env.last = out
            return self.reply(200, out)
        return self.reply(404, {"error": "no such endpoint"})

    def do_DELETE(self):
        parts = [p for p in self.path.split("/") if p]
        with EPISODES_LOCK:
            found = EPISODES.pop(parts[-1], None) if parts else None
        self.reply(200 if found else 404, {"deleted": bool(found)})


def main():
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0), Handler)
    server.daemon_threads = True
    print(f"listening on 127.0.0.1:{server.server_address[1]}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()


if __name__ == "__main__":
    main()
