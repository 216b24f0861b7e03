"""Python client of `crl serve` (step mode, PROTOCOL.md section 2), standard library only.

JSON by default (protobuf's canonical JSON mapping with the .proto field names); binary protobuf when
``binary=True`` and the generated modules ``server_pb2`` / ``trajectory_pb2`` can be imported (generate them
with ``protoc --python_out=DIR -I proto proto/*.proto`` and put DIR on sys.path or in $CRL_PROTO_PY).

    with Session("http://127.0.0.1:7411") as s:
        ep = s.create("memory_chain", task_id="chain-1", seed=7)
        while not ep.done:
            kind = "summary" if ep.kind == "compaction_request" else "assistant"
            ep.step(kind=kind, text="continue")          # or token_ids=[...], logprobs=[...]
        segments = ep.export()                            # one record per segment (a slime Sample each)
        ep.delete()

Rollout mode (the server drives the LLM itself, token in / token out):

    answer = s.rollouts([{"env": "synthetic", "split": "dev", "index": 0, "seed": 7}],
                        {"base_url": "http://127.0.0.1:30000", "api": "sglang"},
                        timeout=3600)                     # the default: a run can last long (other calls: 30 s)
    segments = answer["rollouts"][0]["segments"]

The URL may be "HOST:PORT" (as `crl serve` prints it) and may carry a path prefix (a reverse proxy's,
"http://gw/crl"); https is refused (no TLS here).

Behind a fleet (HAProxy, `crl deploy haproxy`), ``Session(url, session_key="group-7")`` sends the key as the
``X-Crl-Session`` header on every request, so a GRPO group's creates and batch steps stay on one backend.

A Session holds one keep-alive connection and is not thread-safe: use one per thread (cancel() is the exception:
it may be called from any thread). Episode.step carries the turn_id the server announced, so a step retried after
a lost answer returns the stored answer and applies nothing twice. A create is not like that (each one that
arrives makes an episode): it is retried only when it provably never reached the server (the connection could
not be made), and a lost answer raises. A server at its --max-connections answers a new connection 503
too_many_connections before reading anything; the Session then waits for a place (Retry-After, for at most
``connection_wait`` seconds, default 600) rather than failing the call.
"""

import asyncio
import concurrent.futures
import functools
import http.client
import importlib
import inspect
import json
import os
import socket
import sys
import threading
import time
import urllib.parse

JSON = "application/json"
PROTOBUF = "application/x-protobuf"


class CrlError(Exception):
    """A typed error answer: HTTP status plus the body {code, message, field, retry_after}."""

    def __init__(self, status, code, message, field="", retry_after=0.0):
        super().__init__(f"{status} {code}: {message}" + (f" (field {field})" if field else ""))
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retry_after = float(retry_after or 0.0)


def _excerpt(data, limit=160):
    """A short, printable, one-line excerpt of an answer body for an error message (a proxy's HTML page)."""
    text = bytes(data[: 4 * limit]).decode("utf-8", errors="replace")
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return text[:limit] + ("..." if len(text) > limit else "")


def _not_an_answer(status, content_type, data):
    """The CrlError of an answer body that is not crl's (an HTML error page from HAProxy, a body cut short):
    the HTTP status is kept, so a 502 / 504 from a proxy reads as one."""
    code = "http_error" if status >= 400 else "bad_answer"
    return CrlError(status, code, f"not a crl answer ({_excerpt(content_type.encode()) or 'no Content-Type'}): "
                                  f"{_excerpt(data) or 'empty body'}")


@functools.lru_cache(maxsize=4)
def _defaults_keyword(message_to_dict):
    """MessageToDict's keyword that prints fields left at their default: protobuf renamed
    including_default_value_fields to always_print_fields_with_no_presence and Python protobuf 5.26 removed the
    old name (Debian 12 ships 4.21, which has only the old one)."""
    try:
        parameters = inspect.signature(message_to_dict).parameters
    except (TypeError, ValueError):
        parameters = {}
    new = "always_print_fields_with_no_presence"
    return new if new in parameters else "including_default_value_fields"


def _message_to_dict(message):
    from google.protobuf import json_format

    keyword = _defaults_keyword(json_format.MessageToDict)
    return json_format.MessageToDict(message, preserving_proto_field_name=True, **{keyword: True})


def _peer_closed(sock):
    """Whether an idle keep-alive connection can no longer carry a request: the server closed it (its idle
    timeout) or sent something unasked. Checked before reuse, because a request that is not idempotent is not
    retried once sent."""
    timeout = sock.gettimeout()
    try:
        sock.settimeout(0)
        sock.recv(1, socket.MSG_PEEK)  # b"": closed; bytes: an answer nobody asked for
        return True
    except BlockingIOError:
        return False  # open and quiet
    except OSError:
        return True
    finally:
        try:
            sock.settimeout(timeout)
        except OSError:
            pass


def _load_protos(path=None):
    """Imports the generated protobuf modules (server_pb2), or returns None when they are unavailable."""
    for directory in (path, os.environ.get("CRL_PROTO_PY")):
        if directory and directory not in sys.path:
            sys.path.insert(0, directory)
    try:
        return importlib.import_module("server_pb2")
    except ImportError:
        return None


_pool = None
_pool_lock = threading.Lock()


def blocking_pool():
    """The threads that run this package's blocking calls for asyncio code (the trainers' adapters).

    Not asyncio's default executor: it has min(32, CPUs + 4) threads, so a trainer's concurrent rollouts were at
    most 32 requests at the server (6 on a 2-core node) and the rest waited, and a sampling function that used
    asyncio.to_thread itself could starve behind the episodes waiting for it. A call here holds a thread while
    it waits on the network, so the pool is wide: threads are made on demand, up to $CRL_CLIENT_THREADS
    (default 1024)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            raw = os.environ.get("CRL_CLIENT_THREADS", "1024")
            try:
                threads = int(raw)
            except ValueError:
                threads = 0
            if threads < 1:
                raise ValueError(f"$CRL_CLIENT_THREADS = {raw!r}: expected a positive integer (threads)")
            _pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="crl")
        return _pool


async def in_thread(fn, *args):
    """Runs the blocking fn(*args) on blocking_pool() and awaits its result."""
    return await asyncio.get_running_loop().run_in_executor(blocking_pool(), functools.partial(fn, *args))


# Which message each endpoint takes and returns, for the binary encoding.
_REQUEST_TYPES = {"episodes": "CreateEpisodeRequest", "step": "StepRequest", "batch": "BatchStepRequest",
                  "rollouts": "RolloutsRequest"}


class Session:
    """One connection to a server; creates episodes and sends batched steps."""

    def __init__(self, base_url="http://127.0.0.1:7411", binary=False, timeout=30.0, retries=3, proto_path=None,
                 session_key=None, connection_wait=600.0):
        if "://" not in base_url:
            base_url = "http://" + base_url  # "HOST:PORT", as `crl serve` prints it (urlsplit read HOST as a scheme)
        url = urllib.parse.urlsplit(base_url)
        if url.scheme == "https":
            raise ValueError(f"{base_url!r}: https is not supported (this client has no TLS; crl serve speaks plain "
                             "HTTP): use http://")
        if url.scheme != "http" or url.query or url.fragment or url.username or url.password:
            raise ValueError(f"{base_url!r}: expected http://HOST:PORT[/PREFIX] (no query, fragment or user)")
        # The fleet's affinity key (HAProxy hashes on X-Crl-Session); a header value must be one printable line.
        if session_key is not None and (not str(session_key) or not str(session_key).isprintable()):
            raise ValueError(f"session_key must be a non-empty printable string, got {session_key!r}")
        self.session_key = None if session_key is None else str(session_key)
        self.host = url.hostname or "127.0.0.1"
        self.port = url.port or 80
        # A reverse proxy's path prefix ("http://gw/crl"): every request path goes under it.
        self.prefix = url.path.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        # A 503 too_many_connections (the server at --max-connections refused the connection before reading
        # the request, so nothing was applied) is retried after its Retry-After for at most this many seconds:
        # a trainer with more samples in flight than the server has connections waits for places instead of
        # failing the extra samples. 0: raise at once.
        self.connection_wait = connection_wait
        self._cancelled = threading.Event()
        self.pb = _load_protos(proto_path) if binary else None
        if binary and self.pb is None:
            raise ImportError("binary=True needs the generated server_pb2 module (see the module docstring)")
        self._conn = None

    # -- transport ---------------------------------------------------------------------------------------
    def _connection(self):
        if self._conn is not None and self._conn.sock is not None and _peer_closed(self._conn.sock):
            self.close()  # the server closed it while idle: a request sent on it would be lost
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return self._conn

    def _set_timeout(self, timeout):
        """Changes the read timeout, for the connection open now too (kept open: no reconnect)."""
        self.timeout = timeout
        if self._conn is not None:
            self._conn.timeout = timeout
            if self._conn.sock is not None:
                try:
                    self._conn.sock.settimeout(timeout)
                except OSError:
                    self.close()  # a socket cancel() shut down: the next request opens a new one

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def cancel(self):
        """From any thread: the request in flight fails at once (its socket is shut down) and so does every
        later one (ConnectionAbortedError), including one waiting for a connection place."""
        self._cancelled.set()
        conn = self._conn
        sock = getattr(conn, "sock", None) if conn is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _encode(self, body, request_type):
        if body is None:
            return None, {}
        if self.pb is None:
            return json.dumps(body).encode(), {"Content-Type": JSON}
        from google.protobuf import json_format

        message = json_format.ParseDict(body, getattr(self.pb, request_type)())
        return message.SerializeToString(), {"Content-Type": PROTOBUF}

    def _decode(self, status, content_type, data, response_type):
        if content_type.startswith(PROTOBUF):
            name = "ErrorBody" if status >= 400 else response_type
            message = getattr(self.pb, name)()
            try:
                message.ParseFromString(data)
            except Exception:  # noqa: BLE001 (google.protobuf.message.DecodeError and the upb parser's errors)
                raise _not_an_answer(status, content_type, data) from None
            return _message_to_dict(message)
        try:
            answer = json.loads(data.decode("utf-8")) if data else {}
        except ValueError:  # JSONDecodeError, UnicodeDecodeError
            answer = None
        if not isinstance(answer, dict):
            # Not crl's (every answer is a JSON object): a proxy's HTML 502 / 504, a JSON list. A typed error that
            # keeps the HTTP status, never a JSONDecodeError or an AttributeError that loses it.
            raise _not_an_answer(status, content_type, data)
        return answer

    def request(self, method, path, body=None, request_type=None, response_type=None, retry=True,
                idempotent=True):
        """Sends one request; returns the decoded answer or raises CrlError (also for an answer that is not crl's,
        such as a proxy's HTML 502, with its HTTP status). A connection failure is retried `retries` times when
        the request is idempotent: GET, DELETE, and steps, which carry their turn_id (the server answers a repeat
        with the stored answer). A request that is not (idempotent=False: each create that arrives makes an
        episode) is retried only while it provably never left, when the connection could not be made; once it
        was sent, a failure (a lost answer) raises, since a repeat could apply it twice."""
        payload, headers = self._encode(body, request_type)
        if self.session_key is not None:
            headers["X-Crl-Session"] = self.session_key
        if self.pb is not None:
            headers["Accept"] = PROTOBUF
        attempts = self.retries + 1 if retry else 1
        place_deadline = time.monotonic() + self.connection_wait
        while True:
            for attempt in range(attempts):
                if self._cancelled.is_set():
                    raise ConnectionAbortedError("the session was cancelled")
                sent = False
                try:
                    conn = self._connection()
                    if conn.sock is None:
                        conn.connect()  # nothing of the request has left before this succeeds
                    sent = True
                    conn.request(method, self.prefix + path, body=payload, headers=headers)
                    response = conn.getresponse()
                    data = response.read()
                    if response.getheader("Connection", "").lower() == "close":
                        self.close()
                    break
                except (ConnectionError, http.client.HTTPException, OSError):
                    self.close()
                    if attempt + 1 == attempts or self._cancelled.is_set() or (sent and not idempotent):
                        raise
                    time.sleep(0.05 * (attempt + 1))
            answer = self._decode(response.status, response.getheader("Content-Type", JSON), data, response_type)
            if response.status != 503 or answer.get("code") != "too_many_connections":
                break
            pause = min(max(float(answer.get("retry_after") or 1.0), 0.05), 5.0)
            if time.monotonic() + pause > place_deadline:
                break
            self.close()
            self._cancelled.wait(pause)
        if response.status >= 400:
            raise CrlError(
                response.status,
                answer.get("code", "http_error"),
                answer.get("message", ""),
                answer.get("field", ""),
                answer.get("retry_after", 0.0),
            )
        return answer

    # -- endpoints ---------------------------------------------------------------------------------------
    def health(self):
        return self.request("GET", "/health", response_type="HealthResponse")

    def info(self):
        return self.request("GET", "/v1/info", response_type="InfoResponse")

    def create(self, env, task_id=None, split=None, index=None, seed=0, group_index=0, sample_index=0, budget=None,
               params=None, view=None, rollout_id=None, wait_for_place=0.0):
        """Creates and resets an episode. With wait_for_place > 0, a 429 (too many sessions) is retried after
        its retry_after for at most that many seconds."""
        body = {"env": env, "seed": seed, "group_index": group_index, "sample_index": sample_index}
        if task_id is not None:
            body["task_id"] = task_id
        if split is not None:
            body["split"] = split
            body["index"] = index
        if budget:
            body["budget"] = dict(budget)
        if params:
            body["params"] = {k: str(v) for k, v in params.items()}
        if view:
            body["view"] = view
        if rollout_id:
            body["rollout_id"] = rollout_id
        deadline = time.monotonic() + wait_for_place
        while True:
            try:
                # Not idempotent: a create repeated after a lost answer would make a second episode.
                answer = self.request("POST", "/v1/episodes", body, "CreateEpisodeRequest", "StepResponse",
                                      idempotent=False)
                return Episode(self, answer)
            except CrlError as e:
                if e.status != 429 or time.monotonic() + e.retry_after > deadline:
                    raise
                time.sleep(e.retry_after)

    def rollouts(self, episodes, llm, timeout=3600.0):
        """Rollout mode (POST /v1/rollouts): the server runs whole episodes against an LLM inference server itself.
        episodes: dicts with the fields of create() (env, task_id or split + index, seed, group_index,
        sample_index, budget, params, rollout_id); llm: {"base_url": "http://HOST:PORT", "api": "sglang" |
        "openai", "model", "temperature", "top_p", "top_k", "max_in_flight", "request_timeout_s",
        "max_retries"}. Returns the answer: {"rollouts": [{rollout_id, status, reason, reward, compactions,
        segments: [...]}, ...] in request order, plus request counts and latencies}. A failed LLM request fails
        its episode (status "failed" with the reason), never the call. timeout: seconds to wait for the answer,
        which comes when every episode has ended (default 3600; None: the session's timeout, which is for the
        other calls, 30 s by default). Retried only when the request never left (the connection could not be
        made): a repeat would run every episode again."""
        items = []
        for episode in episodes:
            item = {k: v for k, v in dict(episode).items() if v is not None}
            if "params" in item:
                item["params"] = {k: str(v) for k, v in item["params"].items()}
            if "budget" in item:
                item["budget"] = dict(item["budget"])
            items.append(item)
        body = {"episodes": items, "llm": {k: v for k, v in dict(llm).items() if v is not None}}
        saved = self.timeout
        if timeout is not None:
            self._set_timeout(timeout)
        try:
            return self.request("POST", "/v1/rollouts", body, "RolloutsRequest", "RolloutsResponse", idempotent=False)
        finally:
            self._set_timeout(saved)

    def batch_step(self, items):
        """items: (Episode, action dict) pairs, at most one per episode. Returns, in order, each step's answer or
        its CrlError; successful answers also advance their Episode."""
        steps = []
        for episode, action in items:
            steps.append({"episode_id": episode.id, "turn_id": episode.next_turn_id,
                          "action": episode._action(**action)})
        answer = self.request("POST", "/v1/batch/step", {"steps": steps}, "BatchStepRequest", "BatchStepResponse")
        results = []
        for (episode, action), result in zip(items, answer.get("results", [])):
            status = int(result.get("http_status", 0))
            if status == 200:
                episode._advance(result["response"], steps[len(results)]["action"])
                results.append(result["response"])
            else:
                error = result.get("error", {})
                results.append(CrlError(status, error.get("code", ""), error.get("message", ""),
                                        error.get("field", "")))
        return results


class Episode:
    """One episode in step mode. Keeps the prompt the policy must condition on (prompt_ids), rebuilt from the
    server's append_ids / prompt_ids after every step."""

    def __init__(self, session, answer):
        self.session = session
        self.id = answer["episode_id"]
        self.rollout_id = answer.get("rollout_id", "")
        self.prompt_ids = list(answer.get("prompt_ids", []))
        self.prompt_text = answer.get("prompt_text", "")
        self.last = answer

    # What the trainer must do next.
    @property
    def kind(self):
        return self.last.get("kind", "")

    @property
    def role(self):
        return self.last.get("role", "")

    @property
    def done(self):
        return self.kind == "done"

    @property
    def next_turn_id(self):
        return int(self.last.get("next_turn_id", 0))

    @property
    def max_new_tokens(self):
        return int(self.last.get("max_new_tokens", 0))

    @property
    def reward(self):
        return float(self.last.get("reward", 0.0))

    @property
    def status(self):
        return self.last.get("status", "")

    def _action(self, text=None, token_ids=None, logprobs=None, finish_reason=None, kind=None):
        action = {"kind": kind or ("summary" if self.kind == "compaction_request" else "assistant")}
        if text is not None:
            action["text"] = text
        if token_ids is not None:
            action["token_ids"] = [int(t) for t in token_ids]
        if logprobs is not None:
            action["logprobs"] = [float(x) for x in logprobs]
        if finish_reason:
            action["finish_reason"] = finish_reason
        return action

    def _advance(self, answer, action):
        sent = action.get("token_ids") or [int(t) for t in answer.get("action_ids", [])]
        if answer.get("prompt_rebuilt") and answer.get("kind") != "done":
            self.prompt_ids = [int(t) for t in answer.get("prompt_ids", [])]
        else:
            self.prompt_ids = self.prompt_ids + sent + [int(t) for t in answer.get("append_ids", [])]
        if answer.get("prompt_text"):
            self.prompt_text = answer["prompt_text"]
        self.last = answer

    def step(self, text=None, token_ids=None, logprobs=None, finish_reason=None, kind=None):
        """Sends the action for the pending request (kind defaults to what was asked: assistant, or summary after
        a compaction_request) and returns the answer."""
        action = self._action(text, token_ids, logprobs, finish_reason, kind)
        body = {"turn_id": self.next_turn_id, "action": action}
        answer = self.session.request("POST", f"/v1/episodes/{self.id}/step", body, "StepRequest", "StepResponse")
        self._advance(answer, action)
        return answer

    def state(self):
        return self.session.request("GET", f"/v1/episodes/{self.id}", response_type="EpisodeState")

    def export(self):
        """The segments of the finished episode (PROTOCOL.md section 1), one dict per segment."""
        answer = self.session.request("GET", f"/v1/episodes/{self.id}/export", response_type="ExportResponse")
        return answer.get("segments", [])

    def delete(self):
        return self.session.request("DELETE", f"/v1/episodes/{self.id}", response_type="DeleteResponse")
