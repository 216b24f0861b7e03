#!/usr/bin/env python3
"""CPU time of one chat-template render by python3-jinja2 with Hugging Face transformers' settings (the
renderer of tests/engine/chat_template_oracle/oracle.py, what SGLang and vLLM run for every chat request), for
bench/chat_template_bench.cpp.

  jinja2_render.py CASE.json REPEATS  ->  {"cpu_s": seconds per render (best of 3 batches), "bytes": N}

The template is compiled once, as a server does; each render is timed with time.process_time()."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "engine",
                                "chat_template_oracle"))
import oracle  # noqa: E402


def main():
    case = json.load(open(sys.argv[1], encoding="utf-8"))
    repeats = int(sys.argv[2])
    render = oracle.compiled(case)
    text = render()
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(repeats):
            render()
        best = min(best, (time.process_time() - start) / repeats)
    sys.stdout.write(json.dumps({"cpu_s": best, "bytes": len(text.encode("utf-8"))}))


main()
