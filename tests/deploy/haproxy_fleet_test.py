#!/usr/bin/env python3
"""A fleet of 3 `crl serve` behind HAProxy on loopback (issue 19 item 1).

Checks: the generated configuration passes `haproxy -c`; episodes created through HAProxy without the
X-Crl-Session header are spread over the backends and every follow-up (step, state, export) reaches the one
that holds the episode (200, never 404); episodes created with the header all land on one backend and a
batch step with that header reaches it; the exports are byte-identical (episode ids aside) to the same
episodes played on one server; HAProxy's Prometheus exporter answers; after a SIGKILL of one backend, a
request for one of its episodes gets 503 session_lost naming the episode and the backend, and new episodes
go to the survivors.

Needs CRL_BIN (build/crl). Exits 77 (ctest SKIP_RETURN_CODE) with a message where haproxy is absent.
Every wait is bounded; every process started here is killed at the end, also on failure.
"""
import http.client
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time

CRL = os.environ.get("CRL_BIN", "build/crl")
HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)
procs = []


def fail(message):
    raise AssertionError(message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_serve(tag):
    args = [CRL, "serve", "--host", "127.0.0.1", "--port", "0", "--threads", "1", "--workers", "2"]
    if tag:
        args += ["--backend-tag", tag]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    procs.append(p)
    ready, _, _ = select.select([p.stdout], [], [], 20)
    if not ready:
        fail("crl serve %s did not print its address within 20 s" % tag)
    line = p.stdout.readline().decode()
    if not line.startswith("listening on "):
        fail("crl serve %s printed %r" % (tag, line))
    return int(line.strip().rsplit(":", 1)[1])


def call(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


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


def main():
    bad_input_is_refused()
    if HAPROXY is None:
        print("SKIP: haproxy is absent (apt-get install haproxy): the fleet test did not run")
        return 77
    tmp = tempfile.mkdtemp(prefix="crl_haproxy_fleet_")
    try:
        tags = ["b0", "b1", "b2"]
        ports = {tag: start_serve(tag) for tag in tags}
        single = start_serve("")
        bind, stats = free_port(), free_port()
        cfg = os.path.join(tmp, "haproxy.cfg")
        args = [CRL, "deploy", "haproxy", "--bind", "127.0.0.1:%d" % bind,
                "--stats-bind", "127.0.0.1:%d" % stats]
        for t in tags:
            args += ["--backend", "%s=127.0.0.1:%d" % (t, ports[t])]
        with open(cfg, "w") as f:
            subprocess.run(args, stdout=f, check=True, timeout=30)
        check = subprocess.run([HAPROXY, "-c", "-f", cfg], capture_output=True, text=True, timeout=30)
        if check.returncode != 0:
            fail("haproxy -c rejected the generated configuration:\n" + check.stdout + check.stderr)
        hp = subprocess.Popen([HAPROXY, "-db", "-f", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(hp)
        wait_until(lambda: call(bind, "GET", "/health")[0] == 200, 15, "HAProxy to answer /health")

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
        print("ok: %d episodes through HAProxy, byte-identical exports; spread %s; header-pinned %s"
              % (n, sorted(no_header), sorted(with_header)))
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
