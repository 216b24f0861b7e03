#!/usr/bin/env python3
"""A Python environment served to crl's `remote` environment (envs/remote/README.md).

Protocol: one JSON object per line over TCP, one reply line per request, in order.
  {"op": "reset", "task": {"id": str, "index": int, "split": str}, "seed": "<u64 as text>"}
      -> {"system": str, "user": str}
  {"op": "step", "action": str}
      -> {"observation": str, "reward": float, "terminated": bool, "truncated": bool, "info": str}
Errors are answered {"error": str}. Each connection holds its own episode state.

To plug in another environment, subclass Environment (reset/step) and pass it to serve(). Standard library
only. Run `crl_remote_env.py --port 0`: the first stdout line is "PORT <n>" (logs go to stderr).
"""
import argparse
import json
import random
import socketserver
import sys


class Environment:
    """The interface: reset(task, seed) -> (system, user); step(action) -> dict of the step reply."""

    def reset(self, task, seed):
        raise NotImplementedError

    def step(self, action):
        raise NotImplementedError


class GuessNumber(Environment):
    """Find a secret number in 1..100 with `guess K` (answered higher / lower); 12 turns at most.

    Every observation carries a telemetry line (deterministic noise from the seed) so that contexts grow and
    compaction happens under small budgets.
    """

    MAX_TURNS = 12

    def reset(self, task, seed):
        self.rng = random.Random(int(seed) ^ (int(task.get("index", 0)) << 20))
        self.secret = self.rng.randint(1, 100)
        self.turns = 0
        self.invalid = 0
        system = "Find the secret number between 1 and 100. Reply `guess K`; you are told higher or lower."
        return system, "task %s: start guessing. %s" % (task.get("id", ""), self.telemetry())

    def telemetry(self):
        words = ["alpha", "bravo", "delta", "echo", "kilo", "lima", "oscar", "tango"]
        return "telemetry: " + " ".join(self.rng.choice(words) + str(self.rng.randint(0, 999)) for _ in range(8))

    def step(self, action):
        self.turns += 1
        parts = action.strip().split()
        reply = {"reward": 0.0, "terminated": False, "truncated": False, "info": ""}
        if len(parts) == 2 and parts[0] == "guess" and parts[1].lstrip("-").isdigit():
            k = int(parts[1])
            if k == self.secret:
                reply.update(observation="correct: %d" % k, reward=1.0, terminated=True)
                return reply
            reply["observation"] = "%d is too %s. %s" % (k, "low" if k < self.secret else "high", self.telemetry())
        else:
            self.invalid += 1
            reply["info"] = "invalid command"
            reply["observation"] = "ERROR: invalid command (reply `guess K`). " + self.telemetry()
        if self.turns >= self.MAX_TURNS:
            reply.update(truncated=True, info="turn limit")
        return reply


def serve(make_env, port, host="127.0.0.1"):
    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            env = make_env()
            for raw in self.rfile:
                try:
                    request = json.loads(raw)
                    if request.get("op") == "reset":
                        system, user = env.reset(request["task"], request["seed"])
                        reply = {"system": system, "user": user}
                    elif request.get("op") == "step":
                        reply = env.step(request["action"])
                    else:
                        reply = {"error": "unknown op %r (expected reset or step)" % request.get("op")}
                except Exception as e:  # a bad request is answered, never fatal
                    reply = {"error": "%s: %s" % (type(e).__name__, e)}
                self.wfile.write((json.dumps(reply, sort_keys=True) + "\n").encode("utf-8"))
                self.wfile.flush()

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    with Server((host, port), Handler) as server:
        print("PORT %d" % server.server_address[1], flush=True)
        server.serve_forever()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any free port)")
    args = parser.parse_args()
    try:
        serve(GuessNumber, args.port)
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
