#!/usr/bin/env python3
"""The README's "against crl's own small LM server" commands, end to end (ctest gateway_example_lm): a
tokenizer trained on the synthetic suite, an untrained `crl lm init` checkpoint whose context holds the
gateway's --capacity, `crl lm serve`, `crl serve --llm` in front of it, and agent_harness.py for one episode over
each API (chat completions, whole and streamed, and the Responses API); then the streamed loop again through a
gateway that speaks the OpenAI API to `crl lm serve` (--api openai).

What it guards that the scripted-LLM test cannot: a real model's answers. An untrained model samples stray
bytes (ill-formed UTF-8) and long commands; the harness must finish, and its copies of the answers (repaired
UTF-8) must be recognised as the gateway's own answers: no history edits, one execution segment whose
trainable tokens are exactly the sampled ones."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
CRL_BIN = os.environ.get("CRL_BIN", "build/crl")
sys.path.insert(0, HERE)
from example_e2e_test import first_line  # noqa: E402


def check(cmd, cwd):
    run = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, f"{cmd}: {run.stdout} {run.stderr}"


def check_episode(address, api, work):
    """One episode of agent_harness.py over `api` (chat | responses | responses-chained): its export has no
    history edits and trains exactly the sampled tokens."""
    run = subprocess.run([sys.executable, os.path.join(HERE, "agent_harness.py"), "--server",
                          "http://" + address, "--episodes", "1", "--max-turns", "6", "--api", api,
                          "--prefix", api, "--out", "runs"],
                         cwd=work, capture_output=True, text=True, timeout=120)
    print(run.stdout, run.stderr)
    assert run.returncode == 0, f"the {api} harness failed"
    with open(os.path.join(work, "runs", api + "-0.json")) as f:
        exported = json.load(f)
    segments = exported["segments"]
    assert segments, "no segments"
    execution = [s for s in segments if s.get("kind", "execution") == "execution"]
    assert len(execution) == 1, f"{len(execution)} execution segments: the harness's copies were taken " \
                                f"for history edits ({segments[-1]['metadata'].get('part_end')})"
    metadata = segments[0]["metadata"]
    assert metadata["history_edits"] == "0", metadata
    for s in segments:
        masks, provenance = s["loss_mask"], s["response_provenance"]
        assert len(masks) == len(s["response_ids"]) == len(provenance)
        for m, p in zip(masks, provenance):
            assert m == (1 if p == "SAMPLED" else 0), (m, p)
        assert any(masks), "a segment with nothing trainable"
    print(f"ok ({api}): {len(segments)} segment(s), no history edits")


def start_gateway(crl, lm_address, api, work, processes):
    """`crl serve --llm` in front of crl lm serve, speaking `api` to it; its address."""
    server = subprocess.Popen([crl, "serve", "--port", "0", "--llm", f"http://{lm_address}", "--api", api,
                               "--tokenizer", "tok/tokenizer.json", "--capacity", "4096", "--reserve", "1024",
                               "--summary-cap", "256", "--per-turn-cap", "64"],
                              cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    processes.append(server)
    return first_line(server, "crl serve")


def expect_live_streams(address):
    """The gateway at `address` sent streamed calls as they were sampled (its /metrics counter)."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        metrics = response.read().decode()
    live = [line for line in metrics.splitlines() if line.startswith("crl_gateway_streams_live_total ")]
    assert live and float(live[0].split()[1]) > 0, "no streamed call was sent as it was sampled: " + str(live)
    print("ok: " + live[0])


def main():
    crl = os.path.abspath(CRL_BIN)
    processes = []
    with tempfile.TemporaryDirectory() as work:
        try:
            check([crl, "tokenize", "--train", "synthetic:train", "--vocab", "512", "--out", "tok/tokenizer.json"],
                  work)
            check([crl, "lm", "init", "--out", "lm.ckpt", "--tokenizer", "tok/tokenizer.json", "--max-positions",
                   "4096"], work)
            lm = subprocess.Popen([crl, "lm", "serve", "--checkpoint", "lm.ckpt", "--tokenizer", "tok/tokenizer.json",
                                   "--port", "0"], cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
            processes.append(lm)
            lm_address = first_line(lm, "crl lm serve").split()[0]
            address = start_gateway(crl, lm_address, "sglang", work, processes)
            # (chat-stream: the gateway streams its calls to crl lm serve, SGLang's default stream of answers so
            # far, and sends the answers as they are sampled: the joined copies must still be its own.)
            for api in ("chat", "chat-stream", "responses", "responses-chained"):
                check_episode(address, api, work)
            expect_live_streams(address)
            # The same streamed loop through the OpenAI API (crl lm serve's /v1/completions chunks, as vLLM's).
            openai_address = start_gateway(crl, lm_address, "openai", work, processes)
            check_episode(openai_address, "chat-stream", work)
            expect_live_streams(openai_address)
        finally:
            for proc in reversed(processes):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=10)


if __name__ == "__main__":
    main()
