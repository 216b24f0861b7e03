"""OpenEnv compatibility (issue 18 item 5): `crl serve` speaks OpenEnv's WebSocket session protocol at /ws
(reset / step / state / close, OpenEnv's message and error shapes) and its discovery routes /schema and
/metadata. The client is Debian's python3-websockets, as an OpenEnv EnvClient uses it; the test exits 77
(ctest: skipped) with the reason where that package is absent.

Checks: a memory chain played to its end over one WebSocket gives the same state hashes and export as the
same episode over the engine's HTTP API; compaction requests arrive in the observation's metadata and a
summary action answers them; bad messages (not JSON, unknown type, extra field, step before reset, bad
action, binary frame) get OpenEnv's error codes and the session goes on; closing the socket (or sending
close) deletes the episode; a message over --max-body-bytes closes the socket with 1009 and the server
stays up; a plain GET /ws gets 426; SIGTERM closes live sessions with 1001 and the server exits 0.
"""

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request

try:
    import websockets  # noqa: F401
    from websockets.exceptions import ConnectionClosed
except ImportError:
    print("SKIP: python3-websockets is not installed (apt-get install python3-websockets)")
    sys.exit(77)

CRL_BIN = os.environ.get("CRL_BIN", "build/crl")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
from crl_client import Session  # noqa: E402

BUDGET = {"capacity": 2560, "reserve": 768}
FAILURES = []


def check(condition, what):
    if not condition:
        FAILURES.append(what)
        print("FAIL:", what)


def start_server(*extra):
    proc = subprocess.Popen([CRL_BIN, "serve", "--port", "0", "--threads", "2", "--max-body-bytes", "65536",
                             "--openenv-env", "memory_chain", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"crl serve did not start: {line!r} {proc.stderr.read()}")
    return proc, line[len("listening on "):]


def chain_action(obs, meta, fact):
    if meta["compaction_request"]:
        return {"text": f"FACT {fact}"}
    if "QUESTION" in obs.get("append_text", ""):
        return {"text": f"answer {fact}"}
    return {"text": "continue"}


async def play_over_ws(address, task_id, seed):
    async with websockets.connect(f"ws://{address}/ws", max_size=None) as ws:
        await ws.send(json.dumps({"type": "reset", "data": {"task_id": task_id, "seed": seed, "budget": BUDGET,
                                                              "episode_id": f"openenv-{task_id}"}}))
        first = json.loads(await ws.recv())
        check(first["type"] == "observation", f"reset answers an observation: {first}")
        data = first["data"]
        check(data["reward"] is None and data["done"] is False, "reset: reward null, not done")
        check(data["observation"]["prompt_rebuilt"] and data["observation"]["prompt_ids"], "reset gives the prompt")
        fact = re.findall(r"FACT (\d)", data["observation"]["prompt_text"])[-1]
        meta = data["metadata"]
        check(meta["rollout_id"] == f"openenv-{task_id}", "episode_id becomes the rollout id")
        hashes, requests, episode_id = [meta["state_hash"]], 0, meta["episode_id"]
        while not data["done"]:
            action = chain_action(data["observation"], data["metadata"], fact)
            await ws.send(json.dumps({"type": "step", "data": action}))
            answer = json.loads(await ws.recv())
            check(answer["type"] == "observation", f"step answers an observation: {answer}")
            data = answer["data"]
            requests += data["metadata"]["compaction_request"]
            hashes.append(data["metadata"]["state_hash"])
        await ws.send(json.dumps({"type": "state"}))
        state = json.loads(await ws.recv())
        check(state["type"] == "state" and state["data"]["episode_id"] == episode_id, f"state: {state}")
        check(state["data"]["step_count"] > 0 and state["data"]["step_count"] == state["data"]["current"]["turn"],
              f"state: step_count is the turn count: {state['data'].get('step_count')}")
        return hashes, requests, data["reward"], episode_id, ws


def play_over_http(url, task_id, seed):
    with Session(url) as s:
        ep = s.create("memory_chain", task_id=task_id, seed=seed, budget=BUDGET, rollout_id=f"openenv-{task_id}")
        fact = re.findall(r"FACT (\d)", ep.prompt_text)[-1]
        hashes = [ep.last["state_hash"]]
        while not ep.done:
            meta = {"compaction_request": ep.kind == "compaction_request"}
            ep.step(**chain_action({"append_text": ep.last.get("append_text", "")}, meta, fact))
            hashes.append(ep.last["state_hash"])
        ep.delete()
        return hashes, ep.reward


async def errors_keep_the_session(address):
    async with websockets.connect(f"ws://{address}/ws") as ws:
        async def ask(raw):
            await ws.send(raw)
            return json.loads(await ws.recv())

        cases = [
            ("not json", "{", "INVALID_JSON"),
            ("unknown type", json.dumps({"type": "fly"}), "UNKNOWN_TYPE"),
            ("extra field", json.dumps({"type": "state", "extra": 1}), "VALIDATION_ERROR"),
            ("data not an object", json.dumps({"type": "reset", "data": [1]}), "VALIDATION_ERROR"),
            ("step before reset", json.dumps({"type": "step", "data": {"text": "continue"}}), "SESSION_ERROR"),
            ("unknown env", json.dumps({"type": "reset", "data": {"env": "nope", "task_id": "t"}}), "VALIDATION_ERROR"),
            ("bad seed", json.dumps({"type": "reset", "data": {"task_id": "t", "seed": "x"}}), "VALIDATION_ERROR"),
        ]
        for name, raw, code in cases:
            answer = await ask(raw)
            check(answer["type"] == "error" and answer["data"]["code"] == code, f"{name}: {code} expected, got {answer}")
        await ws.send(b"\x00\x01binary")
        answer = json.loads(await ws.recv())
        check(answer["type"] == "error" and answer["data"]["code"] == "INVALID_JSON", f"binary frame: {answer}")
        answer = await ask(json.dumps({"type": "reset", "data": {"task_id": "t", "seed": 1, "budget": BUDGET}}))
        check(answer["type"] == "observation", "the session still works after bad messages")
        bad = await ask(json.dumps({"type": "step", "data": {"token_ids": [1, 2], "logprobs": [0.5]}}))
        check(bad["type"] == "error" and bad["data"]["code"] == "VALIDATION_ERROR" and bad["data"]["field"],
              f"a bad action names the field: {bad}")
        good = await ask(json.dumps({"type": "step", "data": {"text": "continue"}}))
        check(good["type"] == "observation", f"and the next good action is applied: {good}")
        episode_id = good["data"]["metadata"]["episode_id"]
        await ws.send(json.dumps({"type": "close"}))
        try:
            extra = await asyncio.wait_for(ws.recv(), 10)
            check(False, f"close is not answered: {extra}")
        except ConnectionClosed:
            pass
        return episode_id


async def oversized_message(address):
    async with websockets.connect(f"ws://{address}/ws", max_size=None) as ws:
        await ws.send(json.dumps({"type": "reset", "data": {"task_id": "big", "pad": "x" * 100000}}))
        try:
            await asyncio.wait_for(ws.recv(), 10)
            check(False, "a message over --max-body-bytes is refused")
        except ConnectionClosed as closed:
            check(closed.rcvd is not None and closed.rcvd.code == 1009, f"closed with 1009: {closed.rcvd}")


async def dropped_socket(address):
    ws = await websockets.connect(f"ws://{address}/ws")
    await ws.send(json.dumps({"type": "reset", "data": {"task_id": "dropped", "seed": 3, "budget": BUDGET}}))
    answer = json.loads(await ws.recv())
    episode_id = answer["data"]["metadata"]["episode_id"]
    ws.transport.abort()  # no closing handshake: the server must still delete the episode
    await asyncio.sleep(0.2)  # the event loop closes the socket (gone() below blocks the loop)
    return episode_id


def gone(url, episode_id, wait=10.0):
    import time
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/v1/episodes/{episode_id}")
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return True
        time.sleep(0.05)
    return False


async def main():
    proc, address = start_server()
    url = f"http://{address}"
    try:
        schema = json.load(urllib.request.urlopen(f"{url}/schema"))
        check(set(schema) == {"action", "observation", "state"}, f"/schema: {sorted(schema)}")
        metadata = json.load(urllib.request.urlopen(f"{url}/metadata"))
        check(metadata["name"] == "crl" and "memory_chain" in metadata["description"], f"/metadata: {metadata}")
        try:
            urllib.request.urlopen(f"{url}/ws")
            check(False, "plain GET /ws is refused")
        except urllib.error.HTTPError as e:
            check(e.code == 426, f"plain GET /ws: 426, got {e.code}")

        hashes, requests, reward, episode_id, _ = await play_over_ws(address, "chain-ws", 11)
        http_hashes, http_reward = play_over_http(url, "chain-ws", 11)
        check(hashes == http_hashes, "the WebSocket episode has the HTTP episode's state hashes")
        check(reward == http_reward == 1.0, f"reward {reward} / {http_reward}")
        check(requests == 3, f"3 compaction requests in the metadata, got {requests}")
        check(gone(url, episode_id), "leaving the socket deletes the episode")

        closed_id = await errors_keep_the_session(address)
        check(gone(url, closed_id), "close deletes the episode")
        dropped_id = await dropped_socket(address)
        check(gone(url, dropped_id), "a dropped socket deletes the episode")
        await oversized_message(address)
        check(json.load(urllib.request.urlopen(f"{url}/health"))["status"] == "ok", "the server is alive")

        # Several sessions at once, no cross-talk: each gets its own hashes.
        results = await asyncio.gather(*(play_over_ws(address, f"chain-{i}", 20 + i) for i in range(8)))
        for i, (h, _, r, _, _) in enumerate(results):
            check(h == play_over_http(url, f"chain-{i}", 20 + i)[0], f"concurrent session {i} matches HTTP")

        # SIGTERM with a live session: closed with 1001 (going away), exit 0.
        ws = await websockets.connect(f"ws://{address}/ws")
        await ws.send(json.dumps({"type": "reset", "data": {"task_id": "drain", "budget": BUDGET}}))
        await ws.recv()
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(ws.recv(), 15)
            check(False, "the drain closes the session")
        except ConnectionClosed as closed:
            check(closed.rcvd is not None and closed.rcvd.code == 1001, f"closed with 1001: {closed.rcvd}")
        check(proc.wait(timeout=20) == 0, "crl serve exits 0 after the drain")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


asyncio.run(main())
if FAILURES:
    print(f"{len(FAILURES)} check(s) failed")
    sys.exit(1)
print("openenv_ws: all checks passed")
