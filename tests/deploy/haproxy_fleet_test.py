#!/usr/bin/env python3
"""A fleet of 3 `crl serve` behind HAProxy on loopback (issue 19 item 1).

Checks: the generated configuration passes `haproxy -c`; episodes created through HAProxy without the
X-Crl-Session header are spread over the backends and every follow-up (step, state, export) reaches the one
that holds the episode (200, never 404); episodes created with the header all land on one backend and a
batch step with that header reaches it; the exports are byte-identical (episode ids aside) to the same
episodes played on one server; HAProxy's Prometheus exporter answers; after a SIGKILL of one backend, a
request for one of its episodes gets 503 session_lost naming the episode and the backend, and new episodes
go to the survivors.

Then a fleet with snapshots (issue 19 item 2): 3 backends sharing --snapshot-dir (--snapshot-every 5) behind
`crl deploy haproxy --snapshots`. 64 episodes are played in lock step; one backend gets SIGTERM mid-run (it
drains and snapshots its sessions): every episode completes, its export byte-identical to the same episode
on one server (retrying only the typed, retryable 503s backend_unavailable and session_held_elsewhere). Then
16 new episodes, each stepped 0 .. 7 times, and SIGKILL of another backend: its episodes with no snapshot
(fewer than 5 steps) answer 503 session_lost naming the episode, the one at exactly 5 steps continues, those
past 5 answer 409 steps_lost and resume from turn 5 (restored_from_turn 5 in their state) to byte-identical
exports; none is silently different; new episodes land on the survivor.

Needs CRL_BIN (build/crl). Exits 77 (ctest SKIP_RETURN_CODE) with a message where haproxy is absent.
Every wait is bounded; every process started here is killed at the end, also on failure.
"""
import http.client
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

CRL = os.environ.get("CRL_BIN", "build/crl")
LLM_BIN = os.environ.get("CRL_LLM_SERVER_BIN", os.path.join(os.path.dirname(CRL), "crl_scripted_llm_server"))
HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)
procs = []


def fail(message):
    raise AssertionError(message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_serve(tag, extra=()):
    args = [CRL, "serve", "--host", "127.0.0.1", "--port", "0", "--threads", "1", "--workers", "2"]
    if tag:
        args += ["--backend-tag", tag]
    args += list(extra)
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    procs.append(p)
    ready, _, _ = select.select([p.stdout], [], [], 20)
    if not ready:
        fail("crl serve %s did not print its address within 20 s" % tag)
    line = p.stdout.readline().decode()
    if not line.startswith("listening on "):
        fail("crl serve %s printed %r" % (tag, line))
    return int(line.strip().rsplit(":", 1)[1])


connections = {}


def call(port, method, path, body=None, headers=None):
    """One request on a keep-alive connection per port (a new one after any connection error)."""
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    for attempt in range(2):
        conn = connections.pop(port, None) or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=h)
            r = conn.getresponse()
            answer = r.status, r.read()
            if r.getheader("Connection", "").lower() != "close":
                connections[port] = conn
            else:
                conn.close()
            return answer
        except (http.client.HTTPException, ConnectionError):
            conn.close()
            if attempt == 1:  # a reused connection the other side had closed: once on a fresh one
                raise


def wait_until(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except OSError:
            pass
        time.sleep(0.05)
    fail("timed out after %s s waiting for %s" % (seconds, what))


def create_body(seed):
    return json.dumps({"env": "memory_chain", "task_id": "h%d" % (seed % 5), "seed": seed,
                       "params": {"length": "4", "reset_points": ""}})


def play(port, seed, headers):
    """Creates and plays one episode to its end; returns (id, export bytes)."""
    status, body = call(port, "POST", "/v1/episodes", create_body(seed), headers)
    if status != 200:
        fail("create seed %d: %d %s" % (seed, status, body[:200]))
    step = json.loads(body)
    eid = step["episode_id"]
    for i in range(40):
        if step.get("status") != "running":
            break
        kind = "summary" if step.get("kind") == "compaction_request" else "assistant"
        req = json.dumps({"turn_id": step.get("next_turn_id", 0),
                          "action": {"kind": kind, "text": "a%d-%d" % (seed, i)}})
        status, body = call(port, "POST", "/v1/episodes/%s/step" % eid, req, headers)
        if status != 200:
            fail("step %d of %s: %d %s" % (i, eid, status, body[:200]))
        step = json.loads(body)
    status, body = call(port, "GET", "/v1/episodes/" + eid, None, headers)
    if status != 200:
        fail("state of %s: %d" % (eid, status))
    status, export = call(port, "GET", "/v1/episodes/%s/export" % eid, None, headers)
    if status != 200:
        fail("export of %s: %d %s" % (eid, status, export[:200]))
    return eid, export.replace(eid.encode(), b"EPISODE_ID")


def bad_input_is_refused():
    """The generator refuses bad options with a message naming the option (no haproxy needed)."""
    for args, words in [([], "--backend"),
                        (["--backend", "127.0.0.1"], "HOST:PORT"),
                        (["--backend", "127.0.0.1:70000"], "65535"),
                        (["--backend", "B_1=127.0.0.1:7401"], "[a-z0-9]"),
                        (["--backend", "a=127.0.0.1:1", "--backend", "a=127.0.0.1:2"], "twice"),
                        (["--backend", "127.0.0.1:1", "--bind", "x y:1"], "--bind")]:
        r = subprocess.run([CRL, "deploy", "haproxy"] + args, capture_output=True, text=True, timeout=30)
        if r.returncode == 0 or words not in r.stderr or r.stdout:
            fail("crl deploy haproxy %s: rc %d, stderr %r, stdout %d bytes"
                 % (" ".join(args), r.returncode, r.stderr, len(r.stdout)))
    r = subprocess.run([CRL, "serve", "--backend-tag", "Bad-Tag"], capture_output=True, text=True, timeout=30)
    if r.returncode == 0 or "--backend-tag" not in r.stderr:
        fail("crl serve --backend-tag Bad-Tag: rc %d, %r" % (r.returncode, r.stderr))


def start_haproxy(tmp, name, ports, extra=()):
    """Generates, checks and starts a configuration for {tag: port}; returns the client port."""
    bind, stats = free_port(), free_port()
    cfg = os.path.join(tmp, name)
    args = [CRL, "deploy", "haproxy", "--bind", "127.0.0.1:%d" % bind, "--stats-bind", "127.0.0.1:%d" % stats]
    for t, port in ports.items():
        args += ["--backend", "%s=127.0.0.1:%d" % (t, port)]
    with open(cfg, "w") as f:
        subprocess.run(args + list(extra), stdout=f, check=True, timeout=30)
    check = subprocess.run([HAPROXY, "-c", "-f", cfg], capture_output=True, text=True, timeout=30)
    if check.returncode != 0:
        fail("haproxy -c rejected %s:\n%s%s" % (name, check.stdout, check.stderr))
    procs.append(subprocess.Popen([HAPROXY, "-db", "-f", cfg], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL))
    wait_until(lambda: call(bind, "GET", "/health")[0] == 200, 15, "HAProxy to answer /health")
    return bind, stats


RETRYABLE = ("backend_unavailable", "session_held_elsewhere")


def call_retrying(port, method, path, body=None, seconds=30):
    """call(), retrying the typed retryable 503s (a backend draining, or not yet marked down)."""
    deadline = time.monotonic() + seconds
    while True:
        status, answer = call(port, method, path, body)
        code = None
        if status == 503:
            try:
                code = json.loads(answer).get("code")
            except ValueError:
                pass
        if code not in RETRYABLE or time.monotonic() > deadline:
            return status, answer
        time.sleep(0.1)


class Episode:
    """One memory-chain episode played by a scripted client that keeps every answer."""

    def __init__(self, seed):
        self.seed = seed
        self.id = None
        self.answers = []

    def create(self, port):
        status, body = call(port, "POST", "/v1/episodes", chain_body(self.seed))
        if status != 200:
            fail("create seed %d: %d %s" % (self.seed, status, body[:200]))
        self.answers = [json.loads(body)]
        self.id = self.answers[0]["episode_id"]

    def running(self):
        return self.answers[-1].get("status") == "running"

    def step_body(self):
        last, i = self.answers[-1], len(self.answers) - 1
        kind = "summary" if last.get("kind") == "compaction_request" else "assistant"
        return json.dumps({"turn_id": last.get("next_turn_id", 0),
                           "action": {"kind": kind, "text": "a%d-%d" % (self.seed, i)}})

    def step(self, port):
        """One step; returns (status, body) and keeps the answer when it is a 200."""
        status, body = call_retrying(port, "POST", "/v1/episodes/%s/step" % self.id, self.step_body())
        if status == 200:
            self.answers.append(json.loads(body))
        return status, body

    def finish(self, port):
        while self.running():
            status, body = self.step(port)
            if status != 200:
                fail("step %d of %s: %d %s" % (len(self.answers) - 1, self.id, status, body[:300]))
        status, export = call_retrying(port, "GET", "/v1/episodes/%s/export" % self.id)
        if status != 200:
            fail("export of %s: %d %s" % (self.id, status, export[:200]))
        return export.replace(self.id.encode(), b"EPISODE_ID")


def chain_body(seed):
    return json.dumps({"env": "memory_chain", "task_id": "s%d" % (seed % 7), "seed": seed,
                       "params": {"length": "9", "reset_points": "5"}})


def reference_exports(port, seeds):
    out = {}
    for seed in seeds:
        e = Episode(seed)
        e.create(port)
        out[seed] = e.finish(port)
    return out


def snapshot_fleet(tmp, single):
    """SIGTERM and SIGKILL of backends of a fleet with --snapshot-dir (see the module's docstring)."""
    started = time.monotonic()
    snapdir = os.path.join(tmp, "snapshots")
    tags = ["s0", "s1", "s2"]
    extra = ["--snapshot-dir", snapdir, "--snapshot-every", "5"]
    ports = {}
    serve = {}
    for t in tags:
        ports[t] = start_serve(t, extra)
        serve[t] = procs[-1]
    bind, _ = start_haproxy(tmp, "snapshots.cfg", ports, ["--snapshots"])

    # 64 episodes in lock step; SIGTERM s1 after 3 rounds (every episode is mid-run).
    episodes = [Episode(2000 + k) for k in range(64)]
    for e in episodes:
        e.create(bind)
    on_s1 = [e for e in episodes if e.id.startswith("ep-s1-")]
    if not on_s1:
        fail("no episode was created on s1")
    for round_ in range(8):
        if round_ == 3:
            serve["s1"].send_signal(signal.SIGTERM)
        for e in episodes:
            if e.running():
                status, body = e.step(bind)
                if status != 200:
                    fail("round %d, step of %s: %d %s" % (round_, e.id, status, body[:300]))
    if serve["s1"].wait(timeout=20) != 0:
        fail("s1 did not drain cleanly")
    reference = reference_exports(single, [e.seed for e in episodes])
    for e in episodes:
        if e.finish(bind) != reference[e.seed]:
            fail("export of %s (seed %d) after the SIGTERM differs from one server's" % (e.id, e.seed))
    for e in on_s1:
        status, body = call(bind, "GET", "/v1/episodes/" + e.id)
        if status != 200 or not json.loads(body).get("restored"):
            fail("%s of the drained s1 is not reported restored: %d %s" % (e.id, status, body[:200]))
    print("ok: 64 episodes, SIGTERM of s1 mid-run: %d restored, every export byte-identical (%.1f s)"
          % (len(on_s1), time.monotonic() - started))
    started = time.monotonic()

    # SIGKILL: 16 new episodes on s0 and s2 (s1 is gone), episode k stepped k % 8 times.
    fresh = [Episode(3000 + k) for k in range(16)]
    for k, e in enumerate(fresh):
        e.create(bind)
        for _ in range(k % 8):
            status, body = e.step(bind)
            if status != 200:
                fail("step of %s before the SIGKILL: %d %s" % (e.id, status, body[:200]))
    victims = [e for e in fresh if e.id.startswith("ep-s2-")]
    if not victims:
        fail("no new episode was created on s2")
    serve["s2"].kill()
    serve["s2"].wait(timeout=10)
    reference = reference_exports(single, [e.seed for e in fresh])
    outcomes = {}
    for e in fresh:
        steps = len(e.answers) - 1
        if not e.running():
            continue
        status, body = e.step(bind)
        answer = json.loads(body)
        on_victim = e in victims
        if not on_victim or steps == 5:
            expected = (200, None)
        elif steps < 5:
            expected = (503, "session_lost")
        else:
            expected = (409, "steps_lost")
        got = (status, None if status == 200 else answer.get("code"))
        outcomes[got] = outcomes.get(got, 0) + 1
        if got != expected:
            fail("%s after %d steps (backend %s): %r, expected %r: %s"
                 % (e.id, steps, "s2 killed" if on_victim else "s0", got, expected, body[:300]))
        if got[1] == "session_lost":
            if e.id not in answer["message"] or "s2" not in answer["message"]:
                fail("session_lost does not name the episode and the backend: %s" % answer["message"])
            continue
        if got[1] == "steps_lost":
            status, body = call(bind, "GET", "/v1/episodes/" + e.id)
            state = json.loads(body)
            if status != 200 or not state.get("restored") or state.get("restored_from_turn") != 5:
                fail("state of %s after steps_lost: %d %s" % (e.id, status, body[:300]))
            e.answers = e.answers[:6]  # resume from turn 5, what the snapshot held
        if e.finish(bind) != reference[e.seed]:
            fail("export of %s after the SIGKILL differs from one server's" % e.id)
    for seed in range(6):
        status, body = call(bind, "POST", "/v1/episodes", chain_body(4000 + seed))
        if status != 200 or not json.loads(body)["episode_id"].startswith("ep-s0-"):
            fail("a create after s2 died: %d %s" % (status, body[:200]))
    print("ok: SIGKILL of s2: outcomes %s, new episodes on s0 (%.1f s)"
          % (sorted(outcomes.items(), key=str), time.monotonic() - started))


def gateway_fleet(tmp):
    """Gateway sessions behind the fleet (`crl serve --llm` backends): every call of a session reaches the one
    backend that holds it, however the harness names the session (the path, a Bearer token, the body of an
    explicit create, or an Anthropic client's x-api-key), so no backend opens a second copy of it; sessions
    are spread over the backends."""
    llm = subprocess.Popen([LLM_BIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    procs.append(llm)
    ready, _, _ = select.select([llm.stdout], [], [], 20)
    line = llm.stdout.readline().decode() if ready else ""
    if not line.startswith("listening on "):
        fail("the scripted LLM server printed %r" % line)
    url = "http://127.0.0.1:" + line.strip()[len("listening on "):]
    ports = {t: start_serve(t, ["--llm", url, "--api", "sglang", "--tokenizer", "byte"]) for t in ("g0", "g1", "g2")}
    bind, _ = start_haproxy(tmp, "gateway.cfg", ports)
    sessions = [("path", "gp-%d" % i) for i in range(6)] + [("bearer", "gb-%d" % i) for i in range(6)]
    sessions += [("create", "gc-%d" % i) for i in range(4)] + [("apikey", "ga-%d" % i) for i in range(4)]
    holders = {}
    for kind, sid in sessions:
        if kind == "create":
            status, body = call(bind, "POST", "/v1/sessions", json.dumps({"session_id": sid}))
            if status != 200:
                fail("gateway create %s: %d %s" % (sid, status, body[:200]))
        messages = [{"role": "system", "content": "You are a test agent."},
                    {"role": "user", "content": "do the task of " + sid}]
        if kind == "apikey":  # an Anthropic client: the session is its API key, the system prompt apart
            messages = messages[1:]
        for turn in range(4):
            if kind == "apikey":
                request = {"model": "m", "max_tokens": 64, "system": "You are a test agent.", "messages": messages}
                status, body = call(bind, "POST", "/v1/messages", json.dumps(request), {"x-api-key": sid})
            else:
                headers = {"Authorization": "Bearer " + sid} if kind == "bearer" else {}
                path = "/v1/chat/completions" if kind == "bearer" else "/v1/sessions/%s/v1/chat/completions" % sid
                status, body = call(bind, "POST", path, json.dumps({"model": "m", "messages": messages}), headers)
            if status != 200:
                fail("gateway call %d of %s through HAProxy: %d %s" % (turn, sid, status, body[:200]))
            answer = json.loads(body)
            if kind == "apikey":
                messages.append({"role": "assistant", "content": answer["content"]})
            else:
                messages.append(answer["choices"][0]["message"])
            messages.append({"role": "user", "content": "observation %d" % turn})
        found = []
        for tag, port in ports.items():
            status, body = call(port, "GET", "/v1/sessions/" + sid)
            if status == 200:
                found.append((tag, json.loads(body)))
        if len(found) != 1:
            fail("gateway session %s (%s) is held by %d backends: %s" % (sid, kind, len(found), found))
        tag, state = found[0]
        if state.get("history_edits") != 0 or state.get("upstream_calls", 0) < 4:
            fail("gateway session %s on %s: %s" % (sid, tag, state))
        holders[sid] = tag
    if len(set(holders.values())) < 2:
        fail("gateway sessions were not spread: all on %s" % set(holders.values()))
    print("ok: %d gateway sessions through HAProxy, each on one backend (%s)"
          % (len(sessions), sorted(set(holders.values()))))


def main():
    bad_input_is_refused()
    if HAPROXY is None:
        print("SKIP: haproxy is absent (apt-get install haproxy): the fleet test did not run")
        return 77
    started = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="crl_haproxy_fleet_")
    try:
        tags = ["b0", "b1", "b2"]
        ports = {tag: start_serve(tag) for tag in tags}
        single = start_serve("")
        bind, stats = start_haproxy(tmp, "haproxy.cfg", ports)

        n = 12
        where = {}
        for seed in range(n):
            headers = {"X-Crl-Session": "group-7"} if seed % 2 else {}
            eid, export = play(bind, 100 + seed, headers)
            _, reference = play(single, 100 + seed, {})
            if export != reference:
                fail("export of seed %d through HAProxy differs from one server's" % (100 + seed))
            tag = eid.split("-")[1]
            if tag not in tags:
                fail("episode id %s has no backend tag" % eid)
            where[seed] = (tag, eid)
        no_header = {where[s][0] for s in range(0, n, 2)}
        with_header = {where[s][0] for s in range(1, n, 2)}
        if len(no_header) < 2:
            fail("creates without a header were not balanced: all on %s" % no_header)
        if len(with_header) != 1:
            fail("creates with one X-Crl-Session landed on several backends: %s" % with_header)

        # A GRPO group: created with one session key, batch-stepped with it on the same backend.
        group = []
        for seed in range(4):
            status, body = call(bind, "POST", "/v1/episodes", create_body(500 + seed), {"X-Crl-Session": "grpo-3"})
            if status != 200:
                fail("group create: %d" % status)
            group.append(json.loads(body))
        batch = json.dumps({"steps": [{"episode_id": g["episode_id"], "turn_id": g.get("next_turn_id", 0),
                                       "action": {"kind": "assistant", "text": "b"}} for g in group]})
        status, body = call(bind, "POST", "/v1/batch/step", batch, {"X-Crl-Session": "grpo-3"})
        results = json.loads(body).get("results", [])
        codes = [r.get("http_status", r.get("httpStatus")) for r in results]
        if status != 200 or codes != [200] * 4:
            fail("batch step of a group through HAProxy: %d %s" % (status, body[:300]))

        # An unknown id of a known tag reaches that backend and gets its typed 404 (not HAProxy's page).
        status, body = call(bind, "GET", "/v1/episodes/ep-b1-" + "0" * 32)
        if status != 404 or b"unknown_episode" not in body:
            fail("unknown episode through HAProxy: %d %s" % (status, body[:200]))

        status, body = call(stats, "GET", "/metrics")
        if status != 200 or b"haproxy_server_status{" not in body:
            fail("HAProxy's Prometheus exporter: %d" % status)
        # SIGKILL one backend: a request for one of its episodes gets the typed session_lost naming the
        # episode and the backend (once HAProxy's checks mark it down), and new episodes go to the survivors.
        victim = None
        for seed in range(12):
            status, body = call(bind, "POST", "/v1/episodes", create_body(900 + seed))
            if status == 200 and json.loads(body)["episode_id"].startswith("ep-b1-"):
                victim = json.loads(body)["episode_id"]
                break
        if victim is None:
            fail("round robin never created an episode on b1")
        serve_b1 = procs[1]
        serve_b1.kill()
        serve_b1.wait(timeout=10)
        lost = {}

        def session_lost():
            status, body = call(bind, "GET", "/v1/episodes/" + victim)
            lost["answer"] = (status, body)
            return status == 503 and json.loads(body).get("code") == "session_lost"
        try:
            wait_until(session_lost, 20, "HAProxy to mark b1 down")
        except AssertionError as e:
            fail("%s; the last answer for %s: %r" % (e, victim, lost.get("answer")))
        message = json.loads(lost["answer"][1])["message"]
        if victim not in message or "b1" not in message:
            fail("session_lost does not name the episode and the backend: %s" % message)
        for seed in range(6):
            status, body = call(bind, "POST", "/v1/episodes", create_body(950 + seed))
            if status != 200 or json.loads(body)["episode_id"].split("-")[1] == "b1":
                fail("a create after b1 died: %d %s" % (status, body[:200]))
        print("ok: %d episodes through HAProxy, byte-identical exports; spread %s; header-pinned %s (%.1f s)"
              % (n, sorted(no_header), sorted(with_header), time.monotonic() - started))
        snapshot_fleet(tmp, single)
        gateway_fleet(tmp)
        return 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print("FAIL: %s" % e, file=sys.stderr)
        sys.exit(1)
