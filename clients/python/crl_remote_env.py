#!/usr/bin/env python3
"""A Python environment served to crl's `remote` environment (envs/remote/README.md).

The process speaks the step protocol of `crl serve` (PROTOCOL.md section 2, proto/server.proto) as the
environment side only: HTTP/1.1 with keep-alive, the messages in protobuf's canonical JSON mapping with the
.proto field names (binary protobuf too when the generated module server_pb2 is importable, see
crl_client.py). The engine keeps the context; this process answers resets and steps:

  GET    /health                 {"status": "ok", "sessions": n, "uptime_s": s}
  GET    /v1/info                {"protocol_version": "1", "environments": [{"name", "description", "views"}],
                                  "limits": {"max_sessions", "max_body_bytes", "max_batch", ...}}
  POST   /v1/episodes            {"env", "task_id", "split", "index", "seed"}
                                 -> {"episode_id", "next_turn_id", "kind": "observation",
                                     "prompt_text": system prompt, "append_text": first observation, ...}
  POST   /v1/episodes/{id}/step  {"turn_id", "action": {"kind": "assistant", "text"}}
                                 -> {"append_text": observation, "reward": this step's reward, "terminated",
                                     "truncated", "reason": info, "kind": "observation" | "done", ...}
  POST   /v1/batch/step          {"steps": [StepRequest with episode_id, ...]}
                                 -> {"results": [{"http_status", "response" | "error"}, ...]} in order
  DELETE /v1/episodes/{id}       {"episode_id", "deleted": true}

An episode that ended (terminated or truncated) is forgotten at once. A step must carry the turn_id announced
by the previous answer; the same step sent again (same turn_id and action) gets the stored answer and is not
applied twice. Every failure is answered with an ErrorBody {"code", "message", "field"} and an HTTP status.

To plug in another environment, subclass Environment (reset/step) and pass it to serve(). Standard library
only. Run `crl_remote_env.py --port 0`: the first stdout line is "PORT <n>" (logs go to stderr).
"""
import argparse
import http.server
import importlib
import itertools
import json
import os
import random
import secrets
import socket
import sys
import threading
import time

PROTOCOL_VERSION = "1"
JSON = "application/json"
PROTOBUF = "application/x-protobuf"


class Environment:
    """The interface. One instance per episode.

    reset(task, seed) -> (system, user): task is {"id": str, "index": int, "split": str}, seed an int drawn by
    the engine from the episode's stream (same seed, same episode).
    step(action) -> {"observation": str, "reward": float (this step's), "terminated": bool,
    "truncated": bool, "info": str}; a bad action should be answered with an observation, not an exception.
    """

    name = "python_env"
    description = ""

    def reset(self, task, seed):
        raise NotImplementedError

    def step(self, action):
        raise NotImplementedError


class GuessNumber(Environment):
    """Find a secret number in 1..100 with `guess K` (answered higher / lower); 12 turns at most.

    Every observation carries a telemetry line (deterministic noise from the seed) so that contexts grow and
    compaction happens under small budgets.
    """

    name = "guess_number"
    description = "find a secret number in 1..100 with `guess K` (told higher or lower), 12 turns at most"
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


class ApiError(Exception):
    """An error answer: HTTP status and ErrorBody."""

    def __init__(self, status, code, message, field=""):
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field

    def body(self):
        return {"code": self.code, "message": self.message, "field": self.field}


def _uint(value, field, bits=32):
    """A protobuf unsigned integer from canonical JSON (a number, or a decimal string for 64-bit ones)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ApiError(400, "bad_field", "%s: expected an unsigned integer, found %r" % (field, value), field)
    try:
        number = int(value)
    except ValueError:
        raise ApiError(400, "bad_field", "%s: expected an unsigned integer, found %r" % (field, value), field)
    if number < 0 or number >= 1 << bits:
        raise ApiError(400, "bad_field", "%s: %d is out of range" % (field, number), field)
    return number


def _str(body, key, field=None):
    value = body.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ApiError(400, "bad_field", "%s: expected a string, found %r" % (field or key, value), field or key)
    return value


class _Episode:
    def __init__(self, episode_id, env, task_id):
        self.id = episode_id
        self.env = env
        self.task_id = task_id
        self.next_turn_id = 0
        self.turn = 0
        self.last = None  # (turn_id, action text, answer) of the last applied step
        self.lock = threading.Lock()


class EnvironmentService:
    """The protocol over a set of environment classes, independent of HTTP (handle(method, path, body))."""

    def __init__(self, env_classes, max_sessions=4096, max_batch=1024, max_body_bytes=64 << 20):
        self.env_classes = {cls.name: cls for cls in env_classes}
        self.order = [cls.name for cls in env_classes]
        self.max_sessions = max_sessions
        self.max_batch = max_batch
        self.max_body_bytes = max_body_bytes
        self.episodes = {}
        self.lock = threading.Lock()
        self.prefix = secrets.token_hex(4)  # ids of an earlier process are never reused
        self.counter = itertools.count(1)
        self.started = time.monotonic()

    # -- endpoints ---------------------------------------------------------------------------------------
    def health(self):
        with self.lock:
            sessions = len(self.episodes)
        return {"status": "ok", "sessions": sessions, "uptime_s": time.monotonic() - self.started}

    def info(self):
        return {
            "protocol_version": PROTOCOL_VERSION,
            "engine_version": "crl_remote_env.py",
            "environments": [
                {"name": name, "description": self.env_classes[name].description, "views": ["text"]}
                for name in self.order
            ],
            "limits": {
                "max_sessions": self.max_sessions,
                "max_body_bytes": self.max_body_bytes,
                "max_batch": self.max_batch,
            },
        }

    def create(self, body):
        name = _str(body, "env") or self.order[0]
        if name not in self.env_classes:
            raise ApiError(400, "unknown_env", "unknown environment %r (this process serves: %s)" %
                           (name, ", ".join(self.order)), "env")
        task = {"id": _str(body, "task_id"), "split": _str(body, "split"), "index": _uint(body.get("index"), "index")}
        seed = _uint(body.get("seed"), "seed", 64)
        with self.lock:
            if len(self.episodes) >= self.max_sessions:
                raise ApiError(429, "too_many_sessions", "%d episodes are open (max_sessions)" % self.max_sessions)
            episode_id = "%s-%d" % (self.prefix, next(self.counter))
        env = self.env_classes[name]()
        try:
            system, user = env.reset(task, seed)
        except ApiError:
            raise
        except Exception as e:
            raise ApiError(400, "bad_task", "reset of task %r failed: %s: %s" % (task["id"], type(e).__name__, e),
                           "task_id")
        episode = _Episode(episode_id, env, task["id"])
        with self.lock:
            self.episodes[episode_id] = episode
        return {"episode_id": episode_id, "next_turn_id": 0, "kind": "observation", "prompt_text": system,
                "append_text": user, "role": "execute", "status": "running", "task_id": task["id"]}

    def step(self, episode_id, body):
        if not isinstance(body, dict):
            raise ApiError(400, "bad_field", "a step must be an object", "")
        if body.get("episode_id") not in (None, "", episode_id):
            raise ApiError(400, "bad_field", "episode_id %r in the body differs from %r" %
                           (body.get("episode_id"), episode_id), "episode_id")
        action = body.get("action") or {}
        if not isinstance(action, dict):
            raise ApiError(400, "bad_field", "action: expected an object", "action")
        kind = _str(action, "kind", "action.kind")
        if kind not in ("", "assistant"):
            raise ApiError(400, "bad_field", "action.kind %r: an environment takes assistant actions only" % kind,
                           "action.kind")
        text = _str(action, "text", "action.text")
        turn_id = _uint(body.get("turn_id"), "turn_id")
        with self.lock:
            episode = self.episodes.get(episode_id)
        if episode is None:
            raise ApiError(404, "unknown_episode", "no episode %r (ended, deleted or never created)" % episode_id,
                           "episode_id")
        with episode.lock:
            if episode.last is not None and turn_id + 1 == episode.next_turn_id:
                if episode.last[1] != text:
                    raise ApiError(409, "turn_replayed", "turn_id %d was already applied with a different action"
                                   % turn_id, "turn_id")
                return episode.last[2]
            if turn_id != episode.next_turn_id:
                raise ApiError(409, "bad_turn_id", "turn_id %d is out of order: the next turn_id is %d" %
                               (turn_id, episode.next_turn_id), "turn_id")
            try:
                result = episode.env.step(text)
            except Exception as e:
                raise ApiError(500, "environment_error", "step failed: %s: %s" % (type(e).__name__, e), "action")
            episode.turn += 1
            episode.next_turn_id += 1
            terminated = bool(result.get("terminated", False))
            truncated = bool(result.get("truncated", False))
            done = terminated or truncated
            answer = {
                "episode_id": episode_id, "turn_id": turn_id, "next_turn_id": episode.next_turn_id,
                "kind": "done" if done else "observation", "append_text": str(result.get("observation", "")),
                "reward": float(result.get("reward", 0.0)), "terminated": terminated, "truncated": truncated,
                "status": ("completed" if terminated else "truncated") if done else "running",
                "reason": str(result.get("info", "")), "role": "" if done else "execute", "turn": episode.turn,
                "task_id": episode.task_id,
            }
            episode.last = (turn_id, text, answer)
        if done:
            with self.lock:
                self.episodes.pop(episode_id, None)
        return answer

    def batch_step(self, body):
        steps = body.get("steps") or []
        if not isinstance(steps, list):
            raise ApiError(400, "bad_field", "steps: expected an array", "steps")
        if len(steps) > self.max_batch:
            raise ApiError(400, "batch_too_large", "%d steps but at most %d are allowed in one batch" %
                           (len(steps), self.max_batch), "steps")
        results = []
        for i, item in enumerate(steps):
            try:
                if not isinstance(item, dict) or not item.get("episode_id"):
                    raise ApiError(400, "bad_field", "each batch item needs an episode_id", "episode_id")
                results.append({"http_status": 200, "response": self.step(item["episode_id"], item)})
            except ApiError as e:
                results.append({"http_status": e.status, "error": e.body()})
        return {"results": results}

    def delete(self, episode_id):
        with self.lock:
            if self.episodes.pop(episode_id, None) is None:
                raise ApiError(404, "unknown_episode", "no episode %r" % episode_id, "episode_id")
        return {"episode_id": episode_id, "deleted": True}

    def handle(self, method, path, body):
        """Routes one request; returns (status, answer dict). body is the decoded JSON (or None)."""
        parts = [p for p in path.split("?")[0].split("/") if p]

        def need(allowed):
            if method != allowed:
                raise ApiError(405, "method_not_allowed", "%s is not allowed on %s (use %s)" % (method, path, allowed))

        try:
            if body is not None and not isinstance(body, dict):
                raise ApiError(400, "bad_json", "the body must be a JSON object")
            body = body or {}
            if parts == ["health"]:
                need("GET")
                return 200, self.health()
            if parts == ["v1", "info"]:
                need("GET")
                return 200, self.info()
            if parts == ["v1", "episodes"]:
                need("POST")
                return 200, self.create(body)
            if parts == ["v1", "batch", "step"]:
                need("POST")
                return 200, self.batch_step(body)
            if len(parts) == 3 and parts[:2] == ["v1", "episodes"]:
                need("DELETE")
                return 200, self.delete(parts[2])
            if len(parts) == 4 and parts[:2] == ["v1", "episodes"] and parts[3] == "step":
                need("POST")
                return 200, self.step(parts[2], body)
            raise ApiError(404, "not_found", "no endpoint %s (endpoints: /health, /v1/info, /v1/episodes, "
                           "/v1/episodes/{id}, /v1/episodes/{id}/step, /v1/batch/step)" % path)
        except ApiError as e:
            return e.status, e.body()


def _load_protos():
    directory = os.environ.get("CRL_PROTO_PY")
    if directory and directory not in sys.path:
        sys.path.insert(0, directory)
    try:
        return importlib.import_module("server_pb2"), importlib.import_module("google.protobuf.json_format")
    except ImportError:
        return None


def _message_types(method, parts, status):
    """(request type, answer type) names of a path, for binary protobuf."""
    if status != 200:
        answer = "ErrorBody"
    elif parts == ["health"]:
        answer = "HealthResponse"
    elif parts == ["v1", "info"]:
        answer = "InfoResponse"
    elif parts == ["v1", "batch", "step"]:
        answer = "BatchStepResponse"
    elif method == "DELETE":
        answer = "DeleteResponse"
    else:
        answer = "StepResponse"
    if method != "POST":
        request = None
    elif parts == ["v1", "episodes"]:
        request = "CreateEpisodeRequest"
    elif parts == ["v1", "batch", "step"]:
        request = "BatchStepRequest"
    else:
        request = "StepRequest"
    return request, answer


def serve(env_classes, port=0, host="127.0.0.1", request_log=None, max_batch=1024, ready=None):
    """Serves `env_classes` (an Environment subclass or a list of them) until interrupted.

    Prints "PORT <n>" first (or calls ready(server) when given, for tests). request_log: a file path that
    gets one line "METHOD PATH" per request (to count requests)."""
    if isinstance(env_classes, type):
        env_classes = [env_classes]
    service = EnvironmentService(env_classes, max_batch=max_batch)
    protos = _load_protos()
    log_lock = threading.Lock()
    log_file = open(request_log, "a", encoding="utf-8") if request_log else None

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive

        def setup(self):
            super().setup()
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, *args):  # quiet: stdout carries only the PORT line
            pass

        def _answer(self, status, payload, content_type):
            head = ("HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" %
                    (status, http.server.BaseHTTPRequestHandler.responses.get(status, ("",))[0], content_type,
                     len(payload))).encode("latin-1")
            self.wfile.write(head + payload)  # one write: no Nagle / delayed-ACK stall between head and body

        def _handle(self):
            if log_file is not None:
                with log_lock:
                    log_file.write("%s %s\n" % (self.command, self.path))
                    log_file.flush()
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            media = (self.headers.get("Content-Type") or JSON).split(";")[0].strip().lower()
            binary = media == PROTOBUF
            parts = [p for p in self.path.split("?")[0].split("/") if p]
            body = None
            if binary and protos is None:
                status, answer = 415, {"code": "unsupported_media_type", "field": "",
                                       "message": "binary protobuf needs server_pb2 (set CRL_PROTO_PY); use JSON"}
            elif length > service.max_body_bytes:
                status, answer = 413, {"code": "body_too_large", "field": "", "message": "the body is too large"}
            else:
                status, answer = 0, None
                try:
                    if binary:
                        request_type, _ = _message_types(self.command, parts, 200)
                        if raw and request_type:
                            pb, json_format = protos
                            message = getattr(pb, request_type)()
                            message.ParseFromString(raw)
                            body = json_format.MessageToDict(message, preserving_proto_field_name=True)
                    elif raw.strip():
                        body = json.loads(raw.decode("utf-8"))
                except Exception as e:
                    status, answer = 400, {"code": "bad_protobuf" if binary else "bad_json", "field": "",
                                           "message": "cannot decode the body: %s" % e}
                if answer is None:
                    status, answer = service.handle(self.command, self.path, body)
            if binary and protos is not None:
                pb, json_format = protos
                _, answer_type = _message_types(self.command, parts, status)
                message = json_format.ParseDict(answer, getattr(pb, answer_type)())
                self._answer(status, message.SerializeToString(deterministic=True), PROTOBUF)
            else:
                self._answer(status, json.dumps(answer, separators=(",", ":")).encode("utf-8"), JSON)

        do_GET = do_POST = do_DELETE = do_PUT = _handle

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    server = Server((host, port), Handler)
    server.service = service
    if ready is not None:
        ready(server)
    else:
        print("PORT %d" % server.server_address[1], flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        if log_file is not None:
            log_file.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--request-log", default=None, help="append one line per request (METHOD PATH) here")
    parser.add_argument("--max-batch", type=int, default=1024, help="most steps in one POST /v1/batch/step")
    args = parser.parse_args()
    try:
        serve(GuessNumber, args.port, request_log=args.request_log, max_batch=args.max_batch)
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
